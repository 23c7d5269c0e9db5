//! Small hand-built models for tests, examples and backend conformance checks.
//!
//! * [`TinyTarget`] — a real (tiny) decoder-only transformer written against [`Backend`]:
//!   embeddings, RMS norms, grouped-query attention with q/k norms, rotary embeddings (full and
//!   partial), sliding-window and full layers with their caches, a GeGLU MLP, an LM head with
//!   optional logit soft-capping. Random weights from a seed.
//! * [`TinyDrafter`] — an MTP head of the Gemma-assistant shape: pre-projection of
//!   `embed ++ hidden`, queries-only attention over a target layer's cache (read-only), a norm,
//!   its own LM head and a post-projection that conditions the next step.
//! * [`ScriptedDrafter`] — a drafter that proposes a known continuation, right with a chosen
//!   probability, so tests control acceptance (accept-all runs, mismatches at any depth, EOS
//!   among drafts).
//! * [`SerialOnlyCache`] — a full cache that refuses speculation, to exercise serial fallback.
//!
//! [`Backend`]: crate::Backend

mod drafters;
mod serial_only;
mod tiny_target;
mod weights;

pub use drafters::{ScriptedDrafter, TinyDrafter, TinyDrafterConfig};
pub use serial_only::SerialOnlyCache;
pub use tiny_target::{CacheFlavor, LayerKind, TinyConfig, TinyTarget};
