//! # runner
//!
//! The `mtp` command and its library. Gemma 4 models, weight loading, the tokenizer and the
//! generate command land in their own issues; until then the command explains what is missing.
#![warn(missing_docs)]
