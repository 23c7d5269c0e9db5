//! # mtp-tests
//!
//! The cross-backend conformance suite of mtp-rs, written once and generic over
//! [`Backend`](mtp_core::Backend), in the shape of burn's `burn-backend-tests`: one crate, the
//! backend chosen by a cargo feature, one cargo alias per backend.
//!
//! Every case is a plain generic function
//!
//! ```text
//! pub fn <case><B: Backend>(backend: &B) -> Result<(), SuiteError>
//! ```
//!
//! that compares the backend with the host [`ReferenceBackend`](mtp_core::reference::ReferenceBackend)
//! on the same seeded random host inputs. [`conformance_suite!`] turns the whole list into one
//! `#[test]` per case for a backend:
//!
//! ```ignore
//! // tests/tests/reference.rs
//! mtp_tests::conformance_suite!(mtp_core::reference::ReferenceBackend::new());
//! ```
//!
//! | module | checks |
//! | --- | --- |
//! | [`ops::creation`] | `from_*`, `full`, `scalar`, host reads, `shape`, `dtype`, `cast` |
//! | [`ops::shape`] | `reshape`, `transpose`, `slice`, `concat`, `squeeze_last` |
//! | [`ops::elementwise`] | `binary`, `add`/`sub`/`mul`/`div`, `unary`, `compare`, `where_cond`, `affine` |
//! | [`ops::reduce`] | `reduce`, `argmax`, `argsort`, `cumsum` |
//! | [`ops::indexing`] | `embedding`, `take_along_axis`, `scatter` |
//! | [`ops::linalg`] | `matmul`, `linear` |
//! | [`ops::fused`] | `softmax`, `log_softmax`, `gelu_tanh`, `rms_norm`, `rope`, `attention`, `top_k` |
//! | [`ops::hooks`] | `write_slice`, `deep_copy`, `eval`, `async_eval` |
//! | [`ops::errors`] | invalid inputs return `Err` (no panic) |
//! | [`caches`] | speculation rollback and fork isolation of the KV caches |
//! | [`engine`] | greedy MTP == plain greedy; tokens and logits match the reference |
//! | [`formats`] | batched greedy MTP == plain greedy on 200 random models in f32, f16, bf16, Q8_0 and Q4_0 |
//! | [`proposers`] | drafters right a known share: exact accepted counts; prompt lookup == plain |
//! | [`invariance`] | a block's rows get the bits each row gets alone: linear, quantized linear, attention, row-wise ops |
//! | [`batch`] | a continuous batch: each sequence == itself alone; sampled χ² with speculation switching |
//!
//! The machinery: [`inputs`] (random host data, built contiguous or as transposed / sliced
//! views), [`op`] (the op catalogue applied to either backend), [`harness`] (run and compare),
//! [`tolerance`] (the float comparison rule and its presets), [`error`] (the report).

pub mod batch;
pub mod caches;
pub mod engine;
/// The engine tests' helpers (random tiny configurations, draft overrides, the exact
/// distribution of the first two sampled tokens, χ²), shared by path so that mtp-core's own
/// engine tests and this suite use one copy.
#[path = "../../crates/mtp-core/tests/common/mod.rs"]
pub(crate) mod engine_helpers;
pub mod error;
pub mod formats;
pub mod harness;
pub mod inputs;
pub mod invariance;
pub mod op;
pub mod ops;
pub mod proposers;
mod suite;
pub mod tolerance;

pub use error::{report, SuiteError};
pub use tolerance::Tolerance;

/// Re-exported so that [`conformance_suite!`] expands in crates that do not name `mtp-core`.
pub use mtp_core;

/// The case groups by the names the generated tests use (`creation::from_f32`, ...).
pub mod cases {
    pub use crate::batch;
    pub use crate::caches;
    pub use crate::engine;
    pub use crate::invariance;
    pub use crate::ops::{
        creation, elementwise, errors, fused, hooks, indexing, linalg, reduce, shape,
    };
    pub use crate::proposers;
}
