//! # mtp-core
//!
//! The backend-neutral core of mtp-rs, multi-token-prediction (MTP) speculative decoding:
//!
//! * [`Backend`] — the array contract every backend implements, with fused ops that have
//!   portable default bodies (override one to add a kernel);
//! * [`reference::ReferenceBackend`] — plain Rust over `Vec<f32>`, the oracle of every parity test;
//! * [`attention`] — attention masks, prepared once per forward and left out when every key is
//!   visible;
//! * [`rotary`] — rotary-embedding tables built once per model;
//! * [`cache`] — full and sliding-window KV caches with an exact speculation transaction
//!   (begin → write → commit(n)), isolated forks and read-only views;
//! * [`model`] — the target and MTP drafter traits that models implement once over a backend;
//! * [`proposer`] — where drafts come from: an MTP head chain, n-gram prompt lookup, a small
//!   draft model;
//! * [`quant`] — quantized weights: GGUF block formats and MLX affine groups, their exact
//!   dequantization, and the load-time quantizer;
//! * [`experts`] — mixture-of-experts products over quantized expert stacks: the rows routed to
//!   each expert gathered, one quantized product per used expert, the results put back in order;
//! * [`sampling`] — the sampler (temperature, top-k, top-p, min-p, penalties, seed) whose
//!   speculative calls never mutate state, and the log-probabilities reported for emitted tokens
//!   ([`sampling::logprobs`]);
//! * [`constraint`] — constrained decoding (structured outputs, tool calls): allowed-token
//!   masks applied per verification row, drafts cut where a mask forbids them, forced tokens
//!   drafted for free;
//! * [`acceptance`] — the verification rules of speculative decoding as pure functions;
//! * [`schedule`] — draft-depth schedules (constant, heuristic, cost-aware adaptive);
//! * [`options`] — MTP options from model defaults, environment and request, and eligibility;
//! * [`engine`] — the decode engine: plain, greedy MTP and sampled MTP, with batched, serial and
//!   compare-serial validation, streaming, cancellation, statistics and per-token
//!   log-probabilities read from the verification rows;
//! * [`testing`] — small hand-built models for tests and examples.
//!
//! Nothing here depends on an ML framework.
#![warn(missing_docs)]

pub mod acceptance;
pub mod attention;
pub mod attention_blocked;
pub mod backend;
pub mod cache;
pub mod constraint;
mod dtype;
pub mod engine;
mod error;
pub mod experts;
pub mod model;
pub mod options;
pub mod proposer;
pub mod quant;
pub mod reference;
pub mod rotary;
pub mod sampling;
pub mod schedule;
pub mod testing;

pub use attention::{AttentionBias, ForwardMasks};
pub use backend::{
    AttentionMask, Backend, BinaryOp, Causality, CompareOp, Execution, ReduceOp, RopeTables,
    SortOrder, UnaryOp,
};
pub use dtype::DType;
pub use error::{CoreError, CoreResult};
pub use rotary::RopeCache;
