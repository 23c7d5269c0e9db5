//! Draft-depth schedules: how many drafts to propose each round.
//!
//! * [`ScheduleKind::Constant`] — always the initial depth (the seed's default; on request).
//! * [`ScheduleKind::Heuristic`] — the seed's rule: +2 after a fully accepted round, −1 after a
//!   miss, within [1, max].
//! * [`ScheduleKind::Adaptive`] — cost-aware, like ollama's HEAD depth controller: picks the
//!   depth (0 included) that maximises expected committed tokens per second of round time
//!   ([`DepthController`]), with its learned state kept across requests in a
//!   [`ScheduleMemory`], one controller per [`ScheduleKey`] (proposer, backend, mode, ...).
//!   The default: where drafting does not pay on a machine (a draft step costs too much of a
//!   target step for the acceptance the drafter reaches) it settles on plain decoding; the
//!   rounds it spends measuring and probing still cost a few percent on short generations
//!   (BENCHMARKS.md measures it against plain decoding and every fixed depth).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::CoreError;

mod adaptive;
mod estimates;
mod memory;
mod record;
mod verdict;

pub use adaptive::{AdaptiveSchedule, ControllerSnapshot, DepthController, SharedController};
pub use memory::{ScheduleKey, ScheduleMemory};
pub use record::{RoundPhases, RoundRecord};
pub use verdict::{chosen_depths, DraftingOff};

/// Which draft schedule to use.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleKind {
    /// Always draft the initial depth.
    Constant,
    /// +2 after a fully accepted round, −1 after a miss, within [1, max].
    Heuristic,
    /// Cost-aware: maximise expected committed tokens per unit of round time (the default).
    #[default]
    Adaptive,
}

impl ScheduleKind {
    /// The lowercase name (`constant`, `heuristic`, `adaptive`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Constant => "constant",
            Self::Heuristic => "heuristic",
            Self::Adaptive => "adaptive",
        }
    }
}

impl fmt::Display for ScheduleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ScheduleKind {
    type Err = CoreError;

    /// Parses `constant`, `heuristic` or `adaptive`, case-insensitively, ignoring surrounding
    /// whitespace.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "constant" => Ok(Self::Constant),
            "heuristic" => Ok(Self::Heuristic),
            "adaptive" => Ok(Self::Adaptive),
            _ => Err(CoreError::InvalidOption {
                name: "draft_schedule",
                value: s.to_string(),
                reason: "expected constant, heuristic or adaptive",
            }),
        }
    }
}

/// What happened in one round, reported to the schedule after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundReport {
    /// The depth the schedule chose for the round (before the engine's caps).
    pub planned: usize,
    /// Drafts the engine asked the proposer for: `planned` after the engine's caps (the
    /// remaining token budget, the request's largest depth, a validation that cannot draft);
    /// 0 when it asked for none.
    pub asked: usize,
    /// Drafts actually proposed (0 for a plain round): `asked`, or less when the proposer had
    /// fewer to offer (prompt lookup drafts only what it finds).
    pub drafted: usize,
    /// Draft positions the target judged: `drafted`, or fewer when an accepted EOS ended the
    /// round (the drafts after it were cut, not rejected).
    pub judged: usize,
    /// Drafts accepted (at most `drafted`).
    pub accepted: usize,
    /// Wall time of the round up to its verdict: drafting (also when it ran early) and
    /// verification, not the emission of its tokens.
    pub elapsed: Duration,
}

/// A draft-depth schedule. The engine asks [`depth`](Self::depth) before each round (and, with
/// the evaluation overlap, once more between a round's verdict and its emission, to draft the
/// next round early; those drafts are used only if the round then asks for the same depth), may
/// cap it further (by the token budget), and reports the round with [`observe`](Self::observe).
pub trait DraftSchedule: fmt::Debug {
    /// How many drafts to propose this round (0 allowed for the adaptive schedule).
    fn depth(&mut self) -> usize;
    /// Learns from a finished round.
    fn observe(&mut self, report: &RoundReport);
    /// The largest depth this schedule will ever return.
    fn max_depth(&self) -> usize;
}

/// Builds the schedule of `kind` starting at `initial` drafts (clamped to `max`) with at most
/// `max` drafts a round; an adaptive schedule gets a fresh controller of its own (the engine
/// uses [`ScheduleMemory::schedule`] instead, to keep what it learns across requests).
pub fn new_schedule(kind: ScheduleKind, initial: usize, max: usize) -> Box<dyn DraftSchedule> {
    match kind {
        ScheduleKind::Constant => Box::new(ConstantSchedule::new(initial, max)),
        ScheduleKind::Heuristic => Box::new(HeuristicSchedule::new(initial, max)),
        ScheduleKind::Adaptive => Box::new(AdaptiveSchedule::new(max)),
    }
}

/// Always the same depth: `min(initial, max)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConstantSchedule {
    depth: usize,
    max: usize,
}

impl ConstantSchedule {
    /// A constant schedule at `min(initial, max)`.
    pub fn new(initial: usize, max: usize) -> Self {
        Self {
            depth: initial.min(max),
            max,
        }
    }
}

impl DraftSchedule for ConstantSchedule {
    fn depth(&mut self) -> usize {
        self.depth
    }

    fn observe(&mut self, _report: &RoundReport) {}

    fn max_depth(&self) -> usize {
        self.max
    }
}

/// The seed's heuristic: start at `initial`; after a round that drafted and accepted
/// everything, `min(max, d + 2)`; after a miss, `max(1, d − 1)`; rounds that drafted nothing
/// leave `d` alone. The depth stays within [1, max] (0 only when `max` is 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeuristicSchedule {
    depth: usize,
    max: usize,
}

impl HeuristicSchedule {
    /// A heuristic schedule starting at `initial` clamped to [1, max].
    pub fn new(initial: usize, max: usize) -> Self {
        Self {
            depth: initial.max(1).min(max),
            max,
        }
    }
}

impl DraftSchedule for HeuristicSchedule {
    fn depth(&mut self) -> usize {
        self.depth
    }

    fn observe(&mut self, report: &RoundReport) {
        if report.drafted == 0 {
            return;
        }
        self.depth = if report.accepted >= report.drafted {
            (self.depth + 2).min(self.max)
        } else {
            self.depth.saturating_sub(1).max(1).min(self.max)
        };
    }

    fn max_depth(&self) -> usize {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(drafted: usize, accepted: usize) -> RoundReport {
        RoundReport {
            planned: drafted,
            asked: drafted,
            drafted,
            judged: drafted,
            accepted,
            elapsed: Duration::from_millis(10),
        }
    }

    #[test]
    fn kind_parsing_and_display() {
        assert_eq!(
            " Heuristic\n".parse::<ScheduleKind>().unwrap(),
            ScheduleKind::Heuristic
        );
        assert_eq!(
            "ADAPTIVE".parse::<ScheduleKind>().unwrap(),
            ScheduleKind::Adaptive
        );
        assert_eq!(
            "constant".parse::<ScheduleKind>().unwrap(),
            ScheduleKind::Constant
        );
        assert!(matches!(
            "fast".parse::<ScheduleKind>(),
            Err(CoreError::InvalidOption {
                name: "draft_schedule",
                ..
            })
        ));
        assert!("".parse::<ScheduleKind>().is_err());
        assert_eq!(ScheduleKind::Adaptive.to_string(), "adaptive");
        assert_eq!(ScheduleKind::default(), ScheduleKind::Adaptive);
    }

    #[test]
    fn constant_never_moves() {
        let mut s = new_schedule(ScheduleKind::Constant, 4, 16);
        for r in [report(4, 4), report(4, 0), report(0, 0), report(2, 1)] {
            assert_eq!(s.depth(), 4);
            s.observe(&r);
        }
        assert_eq!(s.depth(), 4);
        assert_eq!(s.max_depth(), 16);
        assert_eq!(new_schedule(ScheduleKind::Constant, 20, 16).depth(), 16);
    }

    #[test]
    fn heuristic_exact() {
        let mut s = new_schedule(ScheduleKind::Heuristic, 4, 9);
        let mut seen = vec![s.depth()];
        let rounds = [
            report(4, 4), // → 6
            report(6, 6), // → 8
            report(8, 8), // → 9 (capped)
            report(9, 9), // → 9
            report(0, 0), // unchanged
            report(9, 3), // → 8
            report(5, 5), // budget-capped but all accepted → 10 → 9
            report(9, 0), // → 8
        ];
        for r in rounds {
            s.observe(&r);
            seen.push(s.depth());
        }
        assert_eq!(seen, vec![4, 6, 8, 9, 9, 9, 8, 9, 8]);
        let mut s = new_schedule(ScheduleKind::Heuristic, 2, 16);
        for _ in 0..5 {
            s.observe(&report(2, 0));
        }
        assert_eq!(s.depth(), 1);
        assert_eq!(new_schedule(ScheduleKind::Heuristic, 0, 16).depth(), 1);
        assert_eq!(new_schedule(ScheduleKind::Heuristic, 3, 0).depth(), 0);
    }
}
