//! The cost-aware depth controller (after ollama's HEAD `speculate_depth.go`, rewritten): the
//! depth, 0 included, with the most expected committed tokens per second of round time.

use std::sync::{Arc, Mutex, PoisonError};

use super::estimates::{AcceptanceModel, CostModel};
use super::{DraftSchedule, RoundReport};
use crate::options::MAX_DRAFT_TOKENS_LIMIT;

/// Rounds between probes right after the choice changed.
const PROBE_INTERVAL_MIN: u32 = 4;
/// Largest number of rounds between probes (the backoff's cap).
const PROBE_INTERVAL_MAX: u32 = 256;
/// The depth a probe drafts from plain decode: 2, not 1, because drafting has a fixed cost (the
/// first draft step, the wider verify) that one accepted draft may not repay while two do; a
/// probe at 2 refreshes both positions. From a drafting depth `d` the probe is `d + 1`.
const PROBE_FROM_PLAIN: usize = 2;
/// How far past the sampled positions the controller looks (the positions past them are
/// scored on the rates of measured positions, never on an optimistic guess).
const REACH_PAST_SAMPLED: usize = 4;
/// Samples every position up to the reach's base needs (see [`DepthController`]'s reach).
const SAMPLES_FOR_REACH: u64 = 2;
/// The share of time probes may cost, by the current estimates: a probe whose depth is
/// expected to lose `L` seconds against the best depth's rate waits at least
/// `L / (PROBE_BUDGET × cost(best))` rounds after the last one, so a controller that keeps
/// checking a losing depth (drafting that cannot pay, say) stays within about 1 % of the best.
const PROBE_BUDGET: f64 = 0.01;
/// A probe whose round lowered its depth's cost estimate by more than this share is probed
/// again at the same interval: that cost is still being found.
const PROBE_COST_FALL: f64 = 0.03;
/// Standard errors added to each acceptance rate for the optimistic score that decides the
/// probe backoff: a probed depth that would beat the best at these rates is probed again at the
/// same interval (a choice that early noise tipped the wrong way is re-examined until the
/// evidence settles it); one that loses even then doubles the interval.
const CONFIDENCE_Z: f64 = 2.0;

/// The controller's learned state: acceptance per position, cost per depth, the probe cadence
/// and the depth planned for the next round. It outlives requests (see
/// [`ScheduleMemory`](super::ScheduleMemory)), so a request starts at the depth the previous
/// ones proved out instead of re-learning from nothing.
///
/// **Objective.** Over depths `N` in `0..=R`, choose the one maximising `E(N) / cost(N)`, where
/// `E(N) = 1 + Σ_{k=1..N} Π_{j≤k} a_j` is the expected number of tokens a round commits (the
/// accepted drafts plus the correction or bonus token), `a_j` the conditional acceptance of
/// position `j` (`AcceptanceModel`) and `cost(N)` the measured wall time of a round at depth
/// `N` (`CostModel`). Depth 0 is plain decode: `E(0) = 1`, so drafting is chosen only when it
/// beats plain decode's measured rate. Ties go to the smaller depth.
///
/// **Reach.** `R = min(limit, s + 4)`: the request's limit (its `max_draft_tokens`, clamped to
/// the context) and four past `s`, the deepest position with every position up to it sampled
/// twice or more, so the depth climbs as acceptance is measured instead of leaping deep on a
/// guess; positions with fewer than 10 samples are scored leaning on measured rates (see
/// `AcceptanceModel`).
///
/// **Exploration.** Depths 0 and 1 are played first, two rounds each, to measure their cost;
/// every other depth is judged by the straight cost line through the measured depths
/// (`CostModel::estimates`) until it is measured, and played when that line makes it the best
/// (which measures it), at most twice the deepest depth played, so a guess never leaps
/// far. **Slow start** (after TCP's congestion control): while every draft judged since the
/// controller was made has been accepted, each round that drafted asks the next for twice as
/// many (1, 2, 4, 8, … up to the limit), as long as the rough cost line through the depths
/// played so far says the doubled depth would beat the last one were every draft accepted; the
/// first rejected draft ends it for good. Text that copies its prompt (prompt lookup on a
/// quote) reaches a deep depth within a few rounds instead of one depth per two rounds, which
/// matters over a 128-token reply; a proposer that is often wrong leaves slow start within a
/// round or two. A controller read back from state stored without slow start does not resume it.
/// Until position 1's acceptance is trusted its few samples lean towards ½ (see
/// `AcceptanceModel`): two lucky first rounds do not read as certain acceptance. Afterwards
/// the controller plays the best depth and probes one round now and then, alternately above it (`best + 1`, within `R`; 2 from depth 0: the first draft
/// carries the fixed cost of drafting, so a pair where only two drafts pay is still found) and
/// below it (`best − 1`, which keeps the neighbour's cost fresh and plain decode's when the
/// best is 1). The interval starts at 4 and resets to 4 when the choice changes. After a probe
/// it doubles, up to 256, when the probed depth loses to the best even with every acceptance
/// rate at its upper confidence bound (+2 standard errors); otherwise it holds, so a choice
/// that early noise tipped the wrong way (say, to plain decode) is re-examined until the
/// evidence settles it. Whatever the interval, a probe waits until what it is expected to lose
/// (by the current estimates) fits in 1 % of the time since the last one (`PROBE_BUDGET`): on
/// simulated costs where drafting does not pay, a new controller stays within 3 % of plain
/// decoding over a single 64–512-token generation (`tests/schedule_simulation.rs`; measured
/// runs in BENCHMARKS.md). Probes go one depth above the best, or below it: to `best − 1` and,
/// from a best of 2 or more, every other time to plain decoding, whose cost is what drafting
/// must beat (a first estimate taken in cold rounds is corrected: a probe that lowers its
/// depth's estimate by more than 3 % keeps the interval). When drafting does not pay the
/// controller settles on 0 and spends at most one round in 256 re-checking depth 2.
///
/// **Proposers that draft what they have.** Prompt lookup offers only the copies it finds:
/// asked for `N`, it drafts `D = min(N, A)` with `A` its offer (often 0). The controller learns
/// the offer per position (`q_j`, see `AcceptanceModel::offers`; an assistant's `q` stays 1) and
/// scores a depth by its expectation over offers: `E(N) = 1 + Σ_{k≤N} Q_k·Π_{j≤k} a_j` and
/// `cost(N) = cost(0) + Σ_{k≤N} Q_k·(cost(k) − cost(k−1))`, `Q_k = Π_{j≤k} q_j` — so asking
/// lookup for more costs only in the rounds where it has more, and with `q = 1` this is the
/// objective above.
///
/// **What it learns from.** Acceptance from every round that drafted (positions the target
/// judged); offers from every round that asked for drafts; cost from every round, at the depth
/// it drafted (a round cut short by the token budget, or with fewer drafts from the proposer,
/// is a sample of the depth it ran, and a round with none a sample of plain decoding).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DepthController {
    accept: AcceptanceModel,
    offer: AcceptanceModel,
    cost: CostModel,
    planned: usize,
    interval: u32,
    since_probe: u32,
    best: usize,
    probed: Option<usize>,
    /// Whether the next probe goes below the best depth (probes alternate up and down).
    probe_down: bool,
    /// Whether the next down-probe from a best of 2 or more goes to plain decoding (they
    /// alternate between it and the neighbour below).
    plain_next: bool,
    /// Whether every draft judged so far was accepted (slow start; see the type's docs). State
    /// stored before this field existed reads as `false`: it has a history.
    #[serde(default)]
    streak: bool,
    /// The drafts asked for in the last round, when it drafted and every draft was accepted
    /// while the streak holds: slow start doubles it.
    #[serde(default)]
    streak_depth: Option<usize>,
}

impl Default for DepthController {
    fn default() -> Self {
        Self::new()
    }
}

/// What a [`DepthController`] believes now (for reports and benchmarks).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ControllerSnapshot {
    /// The depth planned for the next round (before the request's limit).
    pub planned: usize,
    /// The deepest trusted acceptance position.
    pub frontier: usize,
    /// The acceptance rates `a_1..` used by the objective (up to the frontier + 1).
    pub acceptance: Vec<f64>,
    /// Acceptance samples per position (same length).
    pub acceptance_samples: Vec<u64>,
    /// The proposer's offer rates `q_1..` (same length): 1 for a proposer that always drafts
    /// what it is asked for.
    pub offers: Vec<f64>,
    /// Measured round seconds per depth `0..` (up to the deepest measured; `null` where not).
    pub cost_secs: Vec<Option<f64>>,
    /// Rounds between probes now.
    pub probe_interval: u32,
}

impl DepthController {
    /// A controller that knows nothing: it starts at depth 0.
    pub fn new() -> Self {
        Self {
            accept: AcceptanceModel::new(MAX_DRAFT_TOKENS_LIMIT),
            offer: AcceptanceModel::offers(MAX_DRAFT_TOKENS_LIMIT),
            cost: CostModel::new(MAX_DRAFT_TOKENS_LIMIT),
            planned: 0,
            interval: PROBE_INTERVAL_MIN,
            since_probe: 0,
            best: 0,
            probed: None,
            probe_down: false,
            plain_next: false,
            streak: true,
            streak_depth: None,
        }
    }

    /// Whether this state is one a controller can hold: every table of the right size, rates in
    /// `[0, 1]`, finite non-negative costs, depths and probe intervals within bounds. State
    /// read back from a file (see `ScheduleMemory::import`) is checked with it.
    pub fn is_valid(&self) -> bool {
        self.accept.is_valid(MAX_DRAFT_TOKENS_LIMIT)
            && self.offer.is_valid(MAX_DRAFT_TOKENS_LIMIT)
            && self.cost.is_valid(MAX_DRAFT_TOKENS_LIMIT)
            && self.planned <= MAX_DRAFT_TOKENS_LIMIT
            && self.best <= MAX_DRAFT_TOKENS_LIMIT
            && self.probed.is_none_or(|p| p <= MAX_DRAFT_TOKENS_LIMIT)
            && self
                .streak_depth
                .is_none_or(|d| d <= MAX_DRAFT_TOKENS_LIMIT)
            && (PROBE_INTERVAL_MIN..=PROBE_INTERVAL_MAX).contains(&self.interval)
    }

    /// The depth for the next round under `limit` (at most `limit`).
    pub fn planned(&self, limit: usize) -> usize {
        self.planned.min(limit)
    }

    /// Learn from a finished round and plan the next one under `limit`.
    pub fn observe(&mut self, report: &RoundReport, limit: usize) {
        let judged = report.judged.min(report.drafted);
        if report.drafted > 0 {
            self.accept.observe(judged, report.accepted);
            self.streak &= report.accepted >= judged;
        }
        self.streak_depth = (self.streak && report.drafted > 0 && report.accepted >= judged)
            .then_some(report.asked);
        if report.asked > 0 {
            self.offer.observe(report.asked, report.drafted);
        }
        self.cost
            .observe(report.drafted, report.elapsed.as_secs_f64());
        self.planned = self.plan(limit);
    }

    /// The deepest depth considered under `limit`: four past the positions sampled twice.
    fn reach(&self, limit: usize) -> usize {
        limit
            .min(MAX_DRAFT_TOKENS_LIMIT)
            .min(self.accept.reached(SAMPLES_FOR_REACH) + REACH_PAST_SAMPLED)
    }

    /// The measured best depth within `0..=reach`, over the depths whose cost is measured
    /// (0 before depth 0 is measured).
    pub fn best_depth(&self, limit: usize) -> usize {
        let scores = self.scores(limit, &self.accept.rates());
        let mut best = 0;
        for (n, score) in scores.iter().enumerate() {
            if score.is_some_and(|s| scores[best].is_none_or(|b| s > b)) {
                best = n;
            }
        }
        best
    }

    /// The objective `E(n) / cost(n)` under acceptance `rates` for `n` in `0..=reach`, both
    /// expected over the proposer's offers (`None` where a cost is not known).
    fn scores(&self, limit: usize, rates: &[f64]) -> Vec<Option<f64>> {
        self.expectations(limit, rates)
            .into_iter()
            .map(|e| e.map(|(tokens, cost)| tokens / cost))
            .collect()
    }

    /// `(E(n), cost(n))` for `n` in `0..=reach` (see the type's docs), `None` from the first
    /// depth whose cost is not known.
    fn expectations(&self, limit: usize, rates: &[f64]) -> Vec<Option<(f64, f64)>> {
        let reach = self.reach(limit);
        let offers = self.offer.rates();
        let costs = self.cost.estimates(reach);
        let (mut tokens, mut survive, mut offered) = (1.0, 1.0, 1.0);
        let mut cost = costs[0];
        let mut previous = cost;
        (0..=reach)
            .map(|n| {
                if n > 0 {
                    offered *= offers[n - 1];
                    survive *= rates[n - 1];
                    tokens += offered * survive;
                    let here = costs[n];
                    cost = match (cost, here, previous) {
                        (Some(c), Some(h), Some(p)) => Some(c + offered * (h - p)),
                        _ => None,
                    };
                    previous = here;
                }
                cost.filter(|c| *c > 0.0).map(|c| (tokens, c))
            })
            .collect()
    }

    /// Slow start (after TCP's): while every draft so far was accepted, the next round asks for
    /// twice the last round's drafts, as long as the cost line says that depth would beat the
    /// last one if every draft were accepted. The first rejection ends it for good, and the
    /// objective takes over with the samples it gathered.
    fn slow_start_depth(&self, limit: usize) -> Option<usize> {
        let last = self.streak_depth?;
        let next = last
            .saturating_mul(2)
            .min(limit)
            .min(MAX_DRAFT_TOKENS_LIMIT);
        if next <= last {
            return None;
        }
        let costs = self.cost.rough_estimates(next);
        match (costs[last], costs[next]) {
            (Some(shallow), Some(deep)) => {
                ((next + 1) as f64 / deep > (last + 1) as f64 / shallow).then_some(next)
            }
            // One depth played: nothing to draw a line through yet, double blind once.
            _ => Some(next),
        }
    }

    /// Rounds a probe at `probe` must wait under [`PROBE_BUDGET`]: the time it is expected
    /// to lose against `best`'s rate, over the budget's share of a round at `best`.
    fn budget_interval(&self, limit: usize, probe: usize, best: usize) -> u32 {
        let expected = self.expectations(limit, &self.accept.rates());
        let (Some(Some((tokens_p, cost_p))), Some(Some((tokens_b, cost_b)))) =
            (expected.get(probe), expected.get(best))
        else {
            return 0;
        };
        // The probe's expected tokens, made at the best's rate, would take
        // `tokens_p · cost_b / tokens_b`; the probe takes `cost_p`.
        let lost = cost_p - tokens_p * cost_b / tokens_b;
        if lost <= 0.0 || *cost_b <= 0.0 {
            return 0;
        }
        (lost / (PROBE_BUDGET * cost_b))
            .ceil()
            .min(f64::from(u32::MAX)) as u32
    }

    /// The next round's depth: depth 0 or 1 while fewer than two depths are measured, else the
    /// best depth by the estimates when it is unplayed, else a probe when one is due, else the
    /// best depth.
    fn plan(&mut self, limit: usize) -> usize {
        if let Some(next) = self.slow_start_depth(limit) {
            return next;
        }
        let reach = self.reach(limit);
        // Until two depths are measured no line judges the others: play them, shallowest first.
        if self.cost.measured() < 2 {
            if let Some(unmeasured) = (0..=reach).find(|&d| self.cost.get(d).is_none()) {
                return unmeasured;
            }
        }
        let best = self.best_depth(limit);
        if self.cost.get(best).is_none() {
            // The line says an unmeasured depth is best: play it, which measures it — but climb
            // to at most twice the deepest depth played, so a guess never leaps far.
            let deepest = (0..=reach)
                .rev()
                .find(|&d| self.cost.played(d))
                .unwrap_or(0);
            return best.min((2 * deepest).max(deepest + 1));
        }
        if best != self.best {
            self.best = best;
            self.interval = PROBE_INTERVAL_MIN;
            self.since_probe = 0;
        } else if let Some(probe) = self.probed.take() {
            // Back off only when the probe's depth loses even on optimistic acceptance: while
            // it might still win, probe it again soon.
            let optimistic = self.scores(limit, &self.accept.optimistic_rates(CONFIDENCE_Z));
            let best_score = self.scores(limit, &self.accept.rates())[best];
            let might_win = match (optimistic.get(probe).copied().flatten(), best_score) {
                (Some(p), Some(b)) => p >= b,
                _ => false,
            } || self.cost.just_fell(probe, PROBE_COST_FALL);
            self.interval = if might_win {
                self.interval
            } else {
                (self.interval * 2).min(PROBE_INTERVAL_MAX)
            };
        }
        self.since_probe += 1;
        let down = !self.probe_down;
        let up = match best {
            0 => PROBE_FROM_PLAIN,
            d => d + 1,
        }
        .min(reach);
        // Down-probes from a best of 2 or more alternate between the neighbour below and
        // plain decoding, so plain decoding's cost (what drafting must beat) stays measured.
        let below = match best.checked_sub(1) {
            Some(b) if b > 0 && self.plain_next => Some(0),
            other => other,
        };
        let probe = match below {
            Some(below) if down || up == best => below,
            _ => up,
        };
        let due = self.interval.max(self.budget_interval(limit, probe, best));
        if self.since_probe >= due {
            self.since_probe = 0;
            self.probe_down = down;
            if probe < best && best >= 2 {
                self.plain_next = probe != 0;
            }
            if probe != best {
                self.probed = Some(probe);
                return probe;
            }
        }
        best
    }

    /// What the controller believes now.
    pub fn snapshot(&self) -> ControllerSnapshot {
        let frontier = self.accept.frontier();
        let shown = (frontier + 1).min(MAX_DRAFT_TOKENS_LIMIT);
        let mut cost_secs = self.cost.curve();
        let measured = cost_secs
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |d| d + 1);
        cost_secs.truncate(measured);
        ControllerSnapshot {
            planned: self.planned,
            frontier,
            acceptance: self.accept.rates()[..shown].to_vec(),
            acceptance_samples: self.accept.samples()[..shown].to_vec(),
            offers: self.offer.rates()[..shown].to_vec(),
            cost_secs,
            probe_interval: self.interval,
        }
    }
}

/// A controller shared by the requests of one [`ScheduleKey`](super::ScheduleKey).
pub type SharedController = Arc<Mutex<DepthController>>;

/// The adaptive [`DraftSchedule`] of one request: a handle on a (possibly shared)
/// [`DepthController`] and the request's depth limit.
#[derive(Clone, Debug)]
pub struct AdaptiveSchedule {
    controller: SharedController,
    limit: usize,
}

impl AdaptiveSchedule {
    /// A schedule with a fresh controller of its own, at most `max` drafts a round.
    pub fn new(max: usize) -> Self {
        Self::with_controller(SharedController::default(), max)
    }

    /// A schedule on `controller` (learned state shared with other requests), at most `max`
    /// drafts a round.
    pub fn with_controller(controller: SharedController, max: usize) -> Self {
        Self {
            controller,
            limit: max.min(MAX_DRAFT_TOKENS_LIMIT),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut DepthController) -> T) -> T {
        // A panic elsewhere while holding the lock leaves estimates that are still numbers.
        let mut guard = self
            .controller
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }

    /// What the controller believes now.
    pub fn snapshot(&self) -> ControllerSnapshot {
        self.with(|c| c.snapshot())
    }

    /// The best depth under the current estimates (no probe, no warm-up).
    pub fn best_depth(&self) -> usize {
        let limit = self.limit;
        self.with(|c| c.best_depth(limit))
    }
}

impl DraftSchedule for AdaptiveSchedule {
    fn depth(&mut self) -> usize {
        let limit = self.limit;
        self.with(|c| c.planned(limit))
    }

    fn observe(&mut self, report: &RoundReport) {
        let limit = self.limit;
        self.with(|c| c.observe(report, limit));
    }

    fn max_depth(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn round(planned: usize, drafted: usize, accepted: usize, ms: u64) -> RoundReport {
        RoundReport {
            planned,
            asked: drafted,
            drafted,
            judged: drafted,
            accepted,
            elapsed: Duration::from_millis(ms),
        }
    }

    #[test]
    fn starts_at_zero_then_slow_starts_while_every_draft_is_accepted() {
        let mut s = AdaptiveSchedule::new(16);
        let mut played = Vec::new();
        for _ in 0..7 {
            let d = s.depth();
            played.push(d);
            s.observe(&round(d, d, d, 10));
        }
        // Depth 0 twice (its cost), then 1, doubling while every draft is accepted at a flat
        // cost, up to the limit.
        assert_eq!(played, vec![0, 0, 1, 2, 4, 8, 16]);
    }

    #[test]
    fn a_rejection_ends_slow_start_for_good() {
        let mut c = DepthController::new();
        let mut played = Vec::new();
        for i in 0..4 {
            let d = c.planned(16);
            played.push(d);
            // The first round at depth 1 is rejected: depth 1 is measured once more, as before
            // slow start existed.
            let accepted = if i == 2 { 0 } else { d };
            c.observe(&round(d, d, accepted, 10), 16);
        }
        assert_eq!(played, vec![0, 0, 1, 1]);
        for _ in 0..20 {
            let d = c.planned(16);
            c.observe(&round(d, d, d, 10), 16);
            assert_eq!(
                c.streak_depth, None,
                "all-accepted rounds after a rejection"
            );
        }
    }

    #[test]
    fn state_stored_before_slow_start_reads_without_it() {
        let mut value = serde_json::to_value(DepthController::new()).unwrap();
        let fields = value.as_object_mut().unwrap();
        fields.remove("streak");
        fields.remove("streak_depth");
        let read: DepthController = serde_json::from_value(value).unwrap();
        assert!(read.is_valid());
        assert!(!read.streak && read.streak_depth.is_none());
    }

    #[test]
    fn slow_start_stops_where_the_cost_line_says_doubling_loses() {
        let mut c = DepthController::new();
        // Plain 10 ms; each draft costs 12 ms more (a drafter step dearer than a target step):
        // even with every draft accepted, 2 drafts make 3 tokens in 34 ms against 2 in 22 ms.
        let mut played = Vec::new();
        for _ in 0..4 {
            let d = c.planned(16);
            played.push(d);
            c.observe(&round(d, d, d, 10 + 12 * d as u64), 16);
        }
        assert_eq!(played[..3], [0, 0, 1]);
        assert_ne!(played[3], 2, "{played:?}");
    }

    #[test]
    fn capped_rounds_teach_the_depth_they_ran() {
        let mut c = DepthController::new();
        c.observe(&round(0, 0, 0, 10), 8);
        c.observe(&round(0, 0, 0, 10), 8);
        assert_eq!(c.planned(8), 1);
        // Planned 1, but the budget left room for none: a plain round, a sample of depth 0.
        c.observe(&round(1, 0, 0, 10), 8);
        let snap = c.snapshot();
        assert_eq!(snap.cost_secs, vec![Some(0.010)]);
        assert_eq!(snap.acceptance_samples, vec![0]);
        // Planned 4, asked 4, the proposer had 2: depth 2's cost, acceptance of 1 and 2, and
        // an offer that stopped after position 2.
        let short = RoundReport {
            planned: 4,
            asked: 4,
            drafted: 2,
            judged: 2,
            accepted: 2,
            elapsed: Duration::from_millis(14),
        };
        c.observe(&short, 8);
        c.observe(&short, 8);
        let snap = c.snapshot();
        assert_eq!(snap.cost_secs, vec![Some(0.010), None, Some(0.014)]);
        assert_eq!(c.accept.samples()[..3], [2, 2, 0]);
        let offers = c.offer.rates();
        assert_eq!(offers[..2], [1.0, 1.0]);
        assert!(offers[2] < 1.0, "{offers:?}");
    }

    #[test]
    fn a_proposer_that_rarely_offers_costs_only_when_it_does() {
        let mut c = DepthController::new();
        // Plain rounds cost 10 ms; a round with 4 drafts 13 ms, all accepted; the proposer
        // has drafts in one round of 10.
        for i in 0..400 {
            let planned = c.planned(8);
            let drafted = if i % 10 == 0 { planned.min(4) } else { 0 };
            let ms = 10 + 3 * u64::from(drafted > 0) * drafted as u64 / 4;
            c.observe(
                &RoundReport {
                    planned,
                    asked: planned,
                    drafted,
                    judged: drafted,
                    accepted: drafted,
                    elapsed: Duration::from_millis(ms),
                },
                8,
            );
        }
        assert!(c.best_depth(8) >= 4, "{:?}", c.snapshot());
    }

    #[test]
    fn the_limit_bounds_every_depth() {
        let mut s = AdaptiveSchedule::new(2);
        for _ in 0..200 {
            let d = s.depth();
            assert!(d <= 2);
            s.observe(&round(d, d, d, 10));
        }
        assert_eq!(
            s.best_depth(),
            2,
            "all accepted at a flat cost: as deep as allowed"
        );
        assert_eq!(
            AdaptiveSchedule::new(usize::MAX).max_depth(),
            MAX_DRAFT_TOKENS_LIMIT
        );
        let mut zero = AdaptiveSchedule::new(0);
        for _ in 0..10 {
            assert_eq!(zero.depth(), 0);
            zero.observe(&round(0, 0, 0, 10));
        }
    }

    #[test]
    fn state_is_shared_through_the_controller() {
        let shared = SharedController::default();
        let mut first = AdaptiveSchedule::with_controller(shared.clone(), 8);
        for _ in 0..100 {
            let d = first.depth();
            first.observe(&round(d, d, d, 10));
        }
        let learned = first.depth();
        assert!(learned > 1);
        let mut second = AdaptiveSchedule::with_controller(shared, 8);
        assert_eq!(
            second.depth(),
            learned,
            "a new request starts where the last one left off"
        );
        let mut fresh = AdaptiveSchedule::new(8);
        assert_eq!(fresh.depth(), 0);
    }
}
