//! Structured outputs and tool calls: a grammar on the generated text, as an
//! [`mtp_core::constraint::Constraint`] the engine applies at every step, speculation included.
//!
//! * [`GrammarVocabulary`] — the model's tokenizer as llguidance sees it (every token's bytes in
//!   a token trie), built once per model; it compiles an [`OutputFormat`] into a
//!   [`GrammarConstraint`];
//! * [`OutputFormat`] — what the text must be: any JSON object, a JSON value matching a
//!   schema, a regular expression, or a Lark grammar;
//! * [`GrammarConstraint`] — a compiled grammar that a request carries
//!   ([`GrammarConstraint::source`]); each generation starts its own llguidance `Matcher`.
//!
//! llguidance (guidance-ai, MIT) is the grammar engine llama.cpp, vLLM and SGLang can use: an
//! Earley parser over a lexer whose token masks are computed from a trie of the vocabulary.
//! JSON schemas are compiled to grammars with the separators of Python's `json.dumps` (`", "`
//! and `": "`) and no other whitespace, so a small model cannot wander into endless blank
//! space and the punctuation between values is forced (drafted for free under speculation); an
//! object schema that lists `properties` and says nothing of other keys admits no other keys
//! (`additionalProperties: false`, as llama.cpp's converter — and so ollama — and XGrammar's
//! strict mode default to).

mod error;
mod format;
mod json_bounds;
mod matcher;
mod vocabulary;

pub use error::StructuredError;
pub use format::{OutputFormat, MAX_GRAMMAR_BYTES};
pub use json_bounds::{
    MAX_EXPONENT_DIGITS, MAX_FRACTION_DIGITS, MAX_INTEGER_DIGITS, MAX_WHITESPACE,
};
pub use matcher::GrammarConstraint;
pub use vocabulary::GrammarVocabulary;
