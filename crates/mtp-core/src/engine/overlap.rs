//! Evaluation overlap: keeping a lazy backend's device busy while the host works.

use crate::{Backend, Execution};

/// Whether the engine overlaps a lazy backend's evaluation with host work.
///
/// On a lazy backend ([`Execution::Lazy`], MLX) nothing runs until a host read forces the graph,
/// so a round that only builds graphs and then reads leaves the device idle while the host
/// builds and the host idle while the device computes. With the overlap
///
/// * the greedy MTP loop starts each draft step's evaluation ([`Backend::async_eval`]) as soon
///   as the step's graph is built, so the device computes drafts while the host builds the next
///   step and the verify forward (a drafter that reads the host inside its step would sync
///   there; the Gemma 4 assistant does not, ordered embeddings included);
/// * it builds (and starts) the next round's drafts right after a verdict, *before* it emits
///   the round's tokens to the sink, so detokenizing and printing run beside the drafter. The
///   early drafts have no side effects (drafters only read the target caches): when emission
///   ends the generation (an EOS, the budget or a sink that stops) they are dropped;
/// * greedy plain decode runs one token ahead (as mlx-lm does): the forward of the next token
///   is built on its still-lazy argmax before that token is read and emitted, inside a
///   one-position cache transaction that is rolled back when the token ends the generation.
///
/// None of it changes what a caller sees: the tokens, the stream, the acceptance counts and the
/// caches left behind are those of the loop without the overlap (tested with the constant and
/// heuristic schedules, every validation mode, EOS, budget, sink stop and cancellation; the
/// property test adds the adaptive schedule for tokens and caches). Timings differ, and with
/// them the adaptive schedule's timing-driven depths. Sampled decoding reads logits on the host
/// (the seeded host sampler) and is not reordered.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum EvalOverlap {
    /// Overlap on lazy backends; eager backends (whose ops already ran) keep the plain order,
    /// so their tokens reach the sink as early as possible.
    #[default]
    Auto,
    /// Overlap on every backend (tests use it to run the reordered loop on the reference
    /// backend).
    Always,
    /// Never: each round's graph is evaluated at its host read (the baseline that benchmarks
    /// compare the overlap with).
    Never,
}

impl EvalOverlap {
    /// Whether the overlap is on for `backend`.
    pub fn is_active<B: Backend>(self, backend: &B) -> bool {
        match self {
            EvalOverlap::Auto => backend.execution() == Execution::Lazy,
            EvalOverlap::Always => true,
            EvalOverlap::Never => false,
        }
    }
}
