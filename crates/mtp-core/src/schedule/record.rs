//! One round as the engine ran it: what the schedule asked for, what was drafted and accepted,
//! and how long the round took and where that time went (for `mtp bench`'s per-round records
//! and for diagnosis).

/// One speculative round.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct RoundRecord {
    /// The depth the schedule chose.
    pub chosen: usize,
    /// The depth drafted (the chosen depth, or less when the engine capped it).
    pub drafted: usize,
    /// Drafts accepted.
    pub accepted: usize,
    /// The round's wall time up to its verdict (what the schedule was told), in seconds.
    pub secs: f64,
    /// Whether the engine drafted less than chosen (the remaining token budget, or a
    /// validation that cannot draft).
    pub capped: bool,
    /// Where the round's time went, emission included.
    pub phases: RoundPhases,
}

/// Where one round's time went, in seconds: the parts add up to [`wall`](Self::wall).
///
/// Timed by the engine's clock around each part; on a backend that evaluates lazily (MLX), a
/// part that only enqueues work is short and the work is paid where the values are read
/// (`host`). Drafting done ahead of the round (the evaluation overlap) is this round's
/// `draft`, not the previous round's.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct RoundPhases {
    /// The proposer's drafting (drafter steps, their embeddings, host reads of the drafts and
    /// the drafter's distributions).
    pub draft: f64,
    /// The target's forward over the verified tokens.
    pub forward: f64,
    /// Their unembedding (the output projection, soft-cap included).
    pub unembed: f64,
    /// Host work of verification: reading rows, masks, the sampler's distributions, the
    /// acceptance rule, the penalty history.
    pub host: f64,
    /// Committing the accepted positions to the caches (rolling back the rest) and keeping
    /// the next draft's hidden state.
    pub commit: f64,
    /// Emitting the round's tokens (the sink: detokenisation, streaming).
    pub emit: f64,
    /// Everything else: the schedule's choice, proposer selection, the constraint's checks.
    pub other: f64,
    /// The round from its start to its last token emitted.
    pub wall: f64,
}
