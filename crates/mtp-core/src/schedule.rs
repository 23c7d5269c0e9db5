//! Draft-depth schedules: how many drafts to propose each round.
//!
//! * [`ScheduleKind::Constant`] — always the initial depth (the seed's default).
//! * [`ScheduleKind::Heuristic`] — the seed's rule: +2 after a fully accepted round, −1 after a
//!   miss, within [1, max].
//! * [`ScheduleKind::Adaptive`] — cost-aware, like ollama's HEAD depth controller: picks the
//!   depth (0 included) that maximises expected committed tokens per second of round time.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::CoreError;

mod record;

pub use record::RoundRecord;

/// Which draft schedule to use.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleKind {
    /// Always draft the initial depth.
    #[default]
    Constant,
    /// +2 after a fully accepted round, −1 after a miss, within [1, max].
    Heuristic,
    /// Cost-aware: maximise expected committed tokens per unit of round time.
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
    /// Drafts actually proposed (0 for a plain round): `planned`, or less when the engine
    /// capped the round (the remaining token budget, or a validation that cannot draft).
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
/// `max` drafts a round.
pub fn new_schedule(kind: ScheduleKind, initial: usize, max: usize) -> Box<dyn DraftSchedule> {
    match kind {
        ScheduleKind::Constant => Box::new(ConstantSchedule::new(initial, max)),
        ScheduleKind::Heuristic => Box::new(HeuristicSchedule::new(initial, max)),
        ScheduleKind::Adaptive => Box::new(AdaptiveSchedule::new(initial, max)),
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

/// EWMA weight of one acceptance sample (after the first [`TRUST_SAMPLES`], which are averaged).
const ACCEPT_ALPHA: f64 = 0.1;
/// Samples after which a position's acceptance estimate is trusted on its own.
const TRUST_SAMPLES: u64 = 10;
/// Acceptance assumed for positions before any position is trusted.
const ACCEPT_PRIOR: f64 = 1.0;
/// EWMA weight of one cost sample.
const COST_ALPHA: f64 = 0.3;
/// Largest relative change of a cost estimate per sample.
const COST_STEP_LIMIT: f64 = 0.25;
/// Smallest cost used in the objective, in seconds (guards zero-duration reports).
const COST_FLOOR: f64 = 1e-9;
/// Rounds between probes right after a probe changed the choice.
const PROBE_INTERVAL_MIN: u32 = 4;
/// Largest number of rounds between probes.
const PROBE_INTERVAL_MAX: u32 = 512;
/// Rounds a probe may take (the first round at a never-seen depth is not measured).
const PROBE_ROUNDS_MAX: u32 = 2;

/// A running acceptance estimate for one draft position.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct AcceptEstimate {
    value: f64,
    samples: u64,
}

impl AcceptEstimate {
    fn update(&mut self, x: f64) {
        self.samples += 1;
        let weight = ACCEPT_ALPHA.max(1.0 / self.samples as f64);
        self.value += weight * (x - self.value);
    }
}

/// A running round-time estimate for one depth.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct CostEstimate {
    seconds: Option<f64>,
    seen: u64,
}

impl CostEstimate {
    fn update(&mut self, seconds: f64) {
        self.seen += 1;
        if self.seen == 1 || !seconds.is_finite() {
            // The first round at a depth pays one-off costs (e.g. compiling a new shape).
            return;
        }
        self.seconds = Some(match self.seconds {
            None => seconds,
            Some(c) => {
                let limit = COST_STEP_LIMIT * c;
                c + (COST_ALPHA * (seconds - c)).clamp(-limit, limit)
            }
        });
    }
}

/// A probe in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Probe {
    depth: usize,
    best_before: usize,
    rounds: u32,
}

/// Cost-aware depth controller (after ollama's HEAD `speculate_depth.go`).
///
/// **Objective.** Choose `N` in `0..=max` maximising `E(N) / cost(N)`, where
/// `E(N) = 1 + Σ_{k=1..N} Π_{j≤k} a_j` is the expected number of tokens a round commits (the
/// accepted drafts plus the correction/bonus token) and `cost(N)` the expected wall time of a
/// round at depth `N`. Ties go to the smaller depth.
///
/// **Acceptance.** `a_j` is the conditional acceptance rate of draft position `j` given that
/// positions before it were accepted. A round that drafted `d` and accepted `m` gives a 1 to
/// positions `1..=m` and a 0 to position `m + 1` (if `m < d`); deeper positions were not
/// reached and learn nothing. Each estimate is the running mean of its first 10 samples, then
/// an EWMA with α = 0.1. A position with `n < 10` samples uses
/// `(n·â_j + (10 − n)·b) / 10`, where `b` is the rate of the deepest trusted (≥ 10 samples)
/// shallower position, or the prior 1 when none is trusted.
///
/// **Cost.** `cost(d)` is an EWMA (α = 0.3, each update clamped to ±25 % of the estimate) of
/// the wall time of rounds that actually drafted `d`. The first round ever seen at a depth is
/// not measured (it pays one-off costs such as compiling a new shape). Unmeasured depths are
/// interpolated linearly between measured neighbours; above the deepest measured depth the
/// line through the two deepest measurements is extended (slope clamped ≥ 0); below the
/// shallowest, its cost is used.
///
/// **Exploration.** Depth 0 and then the initial depth (at least 1) are played until each has
/// a cost measurement. Afterwards the controller plays the best depth, and every `interval`
/// rounds probes `best + 1` (when below `max`) until that depth is measured (at most 2
/// rounds). The interval starts at 4; it resets to 4 when a probe changes the best depth and
/// doubles (up to 512) when it does not.
#[derive(Clone, Debug, PartialEq)]
pub struct AdaptiveSchedule {
    max: usize,
    warmup: Vec<usize>,
    accept: Vec<AcceptEstimate>,
    cost: Vec<CostEstimate>,
    planned: usize,
    probe: Option<Probe>,
    rounds_since_probe: u32,
    probe_interval: u32,
}

impl AdaptiveSchedule {
    /// An adaptive schedule over depths `0..=max` that measures depth 0 and `initial` (clamped
    /// to [1, max]) first.
    pub fn new(initial: usize, max: usize) -> Self {
        let mut warmup = vec![0];
        if max > 0 {
            warmup.push(initial.max(1).min(max));
        }
        let mut schedule = Self {
            max,
            warmup,
            accept: vec![AcceptEstimate::default(); max],
            cost: vec![CostEstimate::default(); max + 1],
            planned: 0,
            probe: None,
            rounds_since_probe: 0,
            probe_interval: PROBE_INTERVAL_MIN,
        };
        schedule.planned = schedule.plan();
        schedule
    }

    /// The effective per-position acceptance rates `a_1..a_max` used by the objective.
    pub fn acceptance_rates(&self) -> Vec<f64> {
        let mut base = ACCEPT_PRIOR;
        let trust = TRUST_SAMPLES as f64;
        self.accept
            .iter()
            .map(|e| {
                if e.samples >= TRUST_SAMPLES {
                    base = e.value;
                    e.value
                } else {
                    let n = e.samples as f64;
                    (n * e.value + (trust - n) * base) / trust
                }
            })
            .collect()
    }

    /// The cost model `cost(0..=max)` in seconds (measured, interpolated or extrapolated);
    /// `None` before any depth has been measured.
    pub fn cost_curve(&self) -> Option<Vec<f64>> {
        let points: Vec<(usize, f64)> = self
            .cost
            .iter()
            .enumerate()
            .filter_map(|(d, c)| c.seconds.map(|s| (d, s)))
            .collect();
        let (&(first_d, first_c), &(last_d, last_c)) = (points.first()?, points.last()?);
        let slope = match points.len() {
            0 | 1 => 0.0,
            n => {
                let (d0, c0) = points[n - 2];
                ((last_c - c0) / (last_d - d0) as f64).max(0.0)
            }
        };
        let curve = (0..=self.max)
            .map(|d| {
                if d <= first_d {
                    return first_c;
                }
                if d >= last_d {
                    return last_c + slope * (d - last_d) as f64;
                }
                let hi = points.partition_point(|&(pd, _)| pd < d);
                let (d1, c1) = points[hi];
                if d1 == d {
                    return c1;
                }
                let (d0, c0) = points[hi - 1];
                c0 + (c1 - c0) * (d - d0) as f64 / (d1 - d0) as f64
            })
            .collect();
        Some(curve)
    }

    /// The depth that maximises expected committed tokens per second under the current
    /// estimates (ignoring warm-up and probes).
    pub fn best_depth(&self) -> usize {
        let rates = self.acceptance_rates();
        let costs = self.cost_curve().unwrap_or_else(|| vec![1.0; self.max + 1]);
        let mut best = 0;
        let mut best_score = 1.0 / costs[0].max(COST_FLOOR);
        let mut expected = 1.0;
        let mut reach = 1.0;
        for n in 1..=self.max {
            reach *= rates[n - 1];
            expected += reach;
            let score = expected / costs[n].max(COST_FLOOR);
            if score > best_score {
                best = n;
                best_score = score;
            }
        }
        best
    }

    /// The depth for the next round: warm-up, then an active probe, then a new probe when due,
    /// then the best depth.
    fn plan(&mut self) -> usize {
        if let Some(&d) = self
            .warmup
            .iter()
            .find(|&&d| self.cost[d].seconds.is_none())
        {
            return d;
        }
        if let Some(probe) = self.probe {
            return probe.depth;
        }
        let best = self.best_depth();
        if self.rounds_since_probe >= self.probe_interval && best < self.max {
            self.probe = Some(Probe {
                depth: best + 1,
                best_before: best,
                rounds: 0,
            });
            return best + 1;
        }
        best
    }

    fn finish_probe(&mut self) {
        let Some(mut probe) = self.probe else {
            self.rounds_since_probe = self.rounds_since_probe.saturating_add(1);
            return;
        };
        probe.rounds += 1;
        if self.cost[probe.depth].seconds.is_none() && probe.rounds < PROBE_ROUNDS_MAX {
            self.probe = Some(probe);
            return;
        }
        self.probe = None;
        self.rounds_since_probe = 0;
        self.probe_interval = if self.best_depth() != probe.best_before {
            PROBE_INTERVAL_MIN
        } else {
            (self.probe_interval * 2).min(PROBE_INTERVAL_MAX)
        };
    }
}

impl DraftSchedule for AdaptiveSchedule {
    fn depth(&mut self) -> usize {
        self.planned
    }

    fn observe(&mut self, report: &RoundReport) {
        let drafted = report.drafted.min(self.max);
        let accepted = report.accepted.min(drafted);
        for estimate in &mut self.accept[..accepted] {
            estimate.update(1.0);
        }
        if accepted < drafted {
            self.accept[accepted].update(0.0);
        }
        self.cost[drafted].update(report.elapsed.as_secs_f64());
        self.finish_probe();
        self.planned = self.plan();
    }

    fn max_depth(&self) -> usize {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn report(drafted: usize, accepted: usize) -> RoundReport {
        RoundReport {
            planned: drafted,
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
        assert_eq!(ScheduleKind::default(), ScheduleKind::Constant);
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

    /// Runs `rounds` rounds of a synthetic environment: each draft position is accepted with
    /// probability `rate` (given the earlier ones were), a round at depth `n` takes `cost(n)`
    /// seconds ±3 %. Returns the depths played.
    fn simulate(
        schedule: &mut dyn DraftSchedule,
        rounds: usize,
        rate: f64,
        cost: impl Fn(usize) -> f64,
        seed: u64,
    ) -> Vec<usize> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut played = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let d = schedule.depth();
            assert!(d <= schedule.max_depth());
            let accepted = (0..d).take_while(|_| rng.random::<f64>() < rate).count();
            let noise = 1.0 + 0.06 * (rng.random::<f64>() - 0.5);
            let elapsed = Duration::from_secs_f64(cost(d) * noise * 0.01);
            schedule.observe(&RoundReport {
                planned: d,
                drafted: d,
                judged: d,
                accepted,
                elapsed,
            });
            played.push(d);
        }
        played
    }

    fn median(xs: &[usize]) -> usize {
        let mut v = xs.to_vec();
        v.sort_unstable();
        v[v.len() / 2]
    }

    #[test]
    fn adaptive_warms_up_on_zero_then_initial() {
        let mut s = AdaptiveSchedule::new(4, 16);
        let played = simulate(&mut s, 4, 0.9, |n| 1.0 + 0.01 * n as f64, 1);
        assert_eq!(played, vec![0, 0, 4, 4]);
    }

    #[test]
    fn adaptive_flat_cost_high_acceptance_goes_deep() {
        for seed in [1, 2, 3] {
            let mut s = AdaptiveSchedule::new(4, 16);
            let played = simulate(&mut s, 600, 0.9, |n| 1.0 + 0.01 * n as f64, seed);
            let tail = &played[400..];
            assert!(median(tail) >= 6, "seed {seed}: {tail:?}");
            assert!(s.best_depth() >= 6, "seed {seed}: {}", s.best_depth());
        }
    }

    #[test]
    fn adaptive_steep_cost_stays_shallow() {
        for seed in [1, 2, 3] {
            let mut s = AdaptiveSchedule::new(4, 16);
            let played = simulate(&mut s, 600, 0.9, |n| 1.0 + 0.8 * n as f64, seed);
            let tail = &played[400..];
            assert!(median(tail) <= 2, "seed {seed}: {tail:?}");
            assert!(s.best_depth() <= 2, "seed {seed}: {}", s.best_depth());
        }
    }

    #[test]
    fn adaptive_zero_acceptance_stops_drafting() {
        let mut s = AdaptiveSchedule::new(4, 16);
        let played = simulate(&mut s, 600, 0.0, |n| 1.0 + 0.01 * n as f64, 5);
        let tail = &played[400..];
        let zeros = tail.iter().filter(|&&d| d == 0).count();
        assert!(zeros * 10 >= tail.len() * 9, "{tail:?}");
        assert_eq!(s.best_depth(), 0);
    }

    #[test]
    fn adaptive_cost_curve_interpolates_and_extrapolates() {
        let mut s = AdaptiveSchedule::new(2, 6);
        assert!(s.cost_curve().is_none());
        for (d, ms) in [(0, 10), (0, 10), (2, 14), (2, 14), (4, 30), (4, 30)] {
            s.observe(&RoundReport {
                planned: d,
                drafted: d,
                judged: d,
                accepted: 0,
                elapsed: Duration::from_millis(ms),
            });
        }
        let curve = s.cost_curve().unwrap();
        let expect = [0.010, 0.012, 0.014, 0.022, 0.030, 0.038, 0.046];
        for (c, e) in curve.iter().zip(expect) {
            assert!((c - e).abs() < 1e-9, "{curve:?}");
        }
    }

    #[test]
    fn adaptive_acceptance_inherits_until_trusted() {
        let mut s = AdaptiveSchedule::new(3, 3);
        // Position 1 accepted 10 times → trusted at 1; position 2 rejected twice of those
        // rounds... feed rounds (3 drafted, 1 accepted): pos 1 ← 1, pos 2 ← 0.
        for _ in 0..10 {
            s.observe(&report(3, 1));
        }
        let rates = s.acceptance_rates();
        assert!((rates[0] - 1.0).abs() < 1e-12);
        assert!(rates[1].abs() < 1e-12);
        // Position 3 never reached: inherits the deepest trusted rate (position 2, 0).
        assert!(rates[2].abs() < 1e-12);
        let mut s = AdaptiveSchedule::new(3, 3);
        s.observe(&report(3, 0)); // position 1: one 0 → (0 + 9·1)/10
        let rates = s.acceptance_rates();
        assert!((rates[0] - 0.9).abs() < 1e-12);
        assert!((rates[1] - 1.0).abs() < 1e-12);
    }

    #[test]
    fn adaptive_max_zero_is_always_zero() {
        let mut s = new_schedule(ScheduleKind::Adaptive, 4, 0);
        for _ in 0..10 {
            assert_eq!(s.depth(), 0);
            s.observe(&report(0, 0));
        }
    }
}
