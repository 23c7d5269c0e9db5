//! # runner
//!
//! The `mtp` command and its library:
//!
//! * [`models`] — the Gemma 4 text target ([`models::Gemma4Target`], a
//!   [`TargetModel`](mtp_core::model::TargetModel)) and its assistant
//!   ([`models::Gemma4Assistant`], an [`MtpDrafter`](mtp_core::model::MtpDrafter)), written once
//!   over [`Backend`](mtp_core::Backend);
//! * [`loading`] — HF model directories (config + memory-mapped safetensors) into those models.
//!
//! The tokenizer and the generate command land in their own issues.
#![warn(missing_docs)]

pub mod loading;
pub mod models;
