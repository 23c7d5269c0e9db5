//! One round as the engine ran it: what the schedule asked for, what was drafted and accepted,
//! and how long the round took (for `mtp bench`'s per-round records and for diagnosis).

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
}
