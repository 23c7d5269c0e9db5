//! # runner
//!
//! The `mtp` command and its library:
//!
//! * [`Pipeline`] — load a target + drafter pair and its tokenizer on any
//!   [`Backend`](mtp_core::Backend), generate with a text callback or a token sink (closure or
//!   channel), and read the response with its MTP statistics;
//! * [`models`] — the Gemma 4 text target ([`models::Gemma4Target`], a
//!   [`TargetModel`](mtp_core::model::TargetModel)) and its assistant
//!   ([`models::Gemma4Assistant`], an [`MtpDrafter`](mtp_core::model::MtpDrafter)), and the
//!   Gemma 3 family, each written once over [`Backend`](mtp_core::Backend);
//! * [`loading`] — HF model directories (config + memory-mapped safetensors, MLX affine
//!   checkpoints) and GGUF files into those models;
//! * [`tokenizer`] — `tokenizer.json` with its special tokens, Gemma chat prompts and the
//!   streaming [`Detokenizer`](tokenizer::Detokenizer);
//! * [`proposers`] — what drafts: an assistant's MTP head, prompt lookup, a small draft model,
//!   detected from a draft directory's `model_type` or chosen;
//! * [`logprobs`] — each emitted token's log-probability and alternatives with their text;
//! * [`defaults`] — where the default model pair lives;
//! * `server` (cargo feature `server`, on by default) — `mtp serve`: the ollama and OpenAI
//!   HTTP APIs over a worker thread that owns the models;
//! * [`hub`] — models named by Hugging Face repo id, from the local HF cache (downloaded with the
//!   `hf-hub` feature);
//! * [`sampling_defaults`] — a model's default sampling settings (`generation_config.json`);
//! * [`thinking`] — Gemma 4's reasoning channel split from the answer as it streams;
//! * [`tools`] — tool calls in the Gemma conventions: the syntax a chat template renders, calls
//!   parsed from generated text as it streams, the grammar of a forced call;
//! * `structured` (cargo feature `structured`, on by default) — structured outputs and tool
//!   calls: JSON schemas, regular expressions and Lark grammars as constraints on the
//!   generated text (llguidance over the model's tokenizer).
//!
//! Cargo features: `candle` (default) adds the candle backend (re-exported as
//! [`backend_candle`] when enabled), with `metal`, `cuda`, `accelerate` and `mkl` passed
//! through; `mlx` adds the MLX backend (re-exported as `backend_mlx`; see the workspace README
//! for the Linux build); `cli` (default) builds the `mtp` program; `hf-hub` downloads models named
//! by repo id that are not in the local HF cache. With `default-features = false` the library
//! computes on mtp-core's reference backend only (no candle backend, no kernels); `candle-core`
//! itself stays linked, because GGUF headers are read with its maintained parser on every
//! backend.
#![warn(missing_docs)]

pub mod defaults;
#[cfg(feature = "embedded-model")]
pub mod embedded_pair;
pub mod hub;
pub mod loading;
pub mod logprobs;
pub mod models;
pub mod pipeline;
pub mod proposers;
pub mod sampling_defaults;
pub mod schedule_store;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "structured")]
pub mod structured;
pub mod thinking;
pub mod tokenizer;
pub mod tools;

#[cfg(feature = "candle")]
pub use backend_candle;
#[cfg(feature = "mlx")]
pub use backend_mlx;
pub use defaults::ModelPaths;
pub use pipeline::{Generation, LoadStage, ModelRole, Pipeline, PipelineError};
pub use tokenizer::{PromptFormat, Tokenizer};
