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
//! * [`HiddenKeyedDrafter`] — a scripted drafter that reads its chain position from the target
//!   hidden it is given, so its drafts are right only when the engine conditions it on the
//!   hidden at the last kept position;
//! * [`SerialOnlyCache`] — a full cache that refuses speculation, to exercise serial fallback.
//! * [`TokenGrammar`] — a finite automaton over token ids, the constraint of the
//!   constrained-decoding tests (random grammars from a seed).
//!
//! [`Backend`]: crate::Backend

mod drafters;
mod keyed;
mod serial_only;
mod tiny_target;
mod token_grammar;
mod weights;

pub use drafters::{ScriptedDrafter, TinyDrafter, TinyDrafterConfig};
pub use keyed::HiddenKeyedDrafter;
pub use serial_only::SerialOnlyCache;
pub use tiny_target::{CacheFlavor, LayerKind, TinyConfig, TinyTarget, TinyWeights};
pub use token_grammar::TokenGrammar;
