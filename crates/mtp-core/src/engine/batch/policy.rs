//! Whether speculation pays at the current batch size, learned from the batch's own throughput.
//!
//! Speculation trades extra verify rows for fewer target passes. Alone on a machine that wins
//! when a verify of `k + 1` rows costs little more than one row; in a batch, every sequence's
//! rows already share one pass, so the spare capacity speculation lives on shrinks as the batch
//! grows (mlx-vlm reports batched MTP from 1.38x down to 0.61x as the batch grows). Rather than
//! a cost model, the policy measures: for each batch size it runs windows of
//! [`WINDOW_FIRINGS`] batched passes with speculation on and off, keeps a running rate
//! (committed tokens per second) for each, and then runs the better one, giving the other
//! [`EXPLORE_SHARE`] of the time while the two are close and [`EXPLORE_FAR_SHARE`] when it is
//! far behind (a re-try of a much worse choice costs more), so a change in the load (prompt
//! kinds, depths) is noticed while re-tries cost at most a few percent.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

/// Batched forwards per measurement window.
pub const WINDOW_FIRINGS: usize = 24;
/// The share of a batch size's time the worse choice gets (re-tries), while the two are close
/// (the worse within 85 % of the better): a re-try then costs little and may well change
/// the choice.
pub const EXPLORE_SHARE: f64 = 0.10;
/// The same when the worse choice is far behind: a re-try then costs more and is less likely
/// to change the choice.
pub const EXPLORE_FAR_SHARE: f64 = 0.02;
/// Rates within this ratio count as close.
const CLOSE: f64 = 0.85;
/// Weight of the newest window in a running rate.
const RATE_WEIGHT: f64 = 0.5;

/// How a batch decides whether its sequences draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeculationPolicy {
    /// Measure both at each batch size and run the better (see the module docs).
    #[default]
    Measured,
    /// Every round may draft (each sequence's own schedule decides how deep).
    Always,
    /// No round drafts: plain steps only.
    Never,
}

/// What the policy learned at one batch size.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct SizeReport {
    /// Sequences in the batch.
    pub batch: usize,
    /// Committed tokens per second with speculation on (running rate), if measured.
    pub speculate_rate: Option<f64>,
    /// The same with speculation off.
    pub plain_rate: Option<f64>,
    /// Windows run with speculation on.
    pub speculate_windows: usize,
    /// Windows run with it off.
    pub plain_windows: usize,
}

#[derive(Debug, Clone, Copy, Default)]
struct Rate {
    value: Option<f64>,
    windows: usize,
}

impl Rate {
    fn observe(&mut self, rate: f64) {
        self.value = Some(match self.value {
            Some(old) => old + RATE_WEIGHT * (rate - old),
            None => rate,
        });
        self.windows += 1;
    }
}

#[derive(Debug, Clone, Copy)]
struct SizeStats {
    speculate: Rate,
    plain: Rate,
    /// Time spent in finished windows with speculation on, and off.
    speculate_secs: f64,
    plain_secs: f64,
    /// The choice of the window being measured.
    current: bool,
    /// The window so far: batched forwards at this size, the tokens committed before them and
    /// the time since the forward before each.
    firings: usize,
    tokens: usize,
    secs: f64,
}

impl Default for SizeStats {
    fn default() -> Self {
        Self {
            speculate: Rate::default(),
            plain: Rate::default(),
            speculate_secs: 0.0,
            plain_secs: 0.0,
            // An untried size speculates first.
            current: true,
            firings: 0,
            tokens: 0,
            secs: 0.0,
        }
    }
}

/// Rates (speculation on, off) measured at some other batch size: what a size that lacks a
/// measurement assumes in the meantime (their ratio).
type Prior = Option<(f64, f64)>;

impl SizeStats {
    /// A size seen for the first time: it starts with what `prior` (the nearest measured size)
    /// says is better, or, with nothing measured anywhere yet, with speculation.
    fn new(prior: Prior) -> Self {
        Self {
            current: prior.is_none_or(|(on, off)| on >= off),
            ..Self::default()
        }
    }

    /// Count one pass at this size; at a window's end, record its rate and choose again.
    fn observe(&mut self, tokens: usize, secs: f64, prior: Prior) {
        self.firings += 1;
        self.tokens += tokens;
        self.secs += secs;
        if self.firings < WINDOW_FIRINGS {
            return;
        }
        let window = self.secs;
        if window > 0.0 {
            let rate = self.tokens as f64 / window;
            match self.current {
                true => {
                    self.speculate.observe(rate);
                    self.speculate_secs += window;
                }
                false => {
                    self.plain.observe(rate);
                    self.plain_secs += window;
                }
            }
        }
        self.current = self.next_choice(prior, window);
        (self.firings, self.tokens, self.secs) = (0, 0, 0.0);
    }

    /// The choice for the next window at this size (`window`: how long the last one took).
    /// The better measured choice runs; the worse gets a window when that keeps its time within
    /// its share ([`EXPLORE_SHARE`] while close, [`EXPLORE_FAR_SHARE`] when far behind; time,
    /// not windows, since a window of the slower choice lasts longer). A choice not measured
    /// at this size yet is judged by `prior`'s ratio, or, without one, tried next.
    fn next_choice(&self, prior: Prior, window: f64) -> bool {
        let (on, off) = match (self.speculate.value, self.plain.value, prior) {
            (Some(on), Some(off), _) => (on, off),
            (Some(on), None, Some((p_on, p_off))) => (on, on * p_off / p_on.max(1e-12)),
            (None, Some(off), Some((p_on, p_off))) => (off * p_on / p_off.max(1e-12), off),
            (Some(_), None, None) => return false,
            (None, Some(_), None) => return true,
            (None, None, p) => return p.is_none_or(|(on, off)| on >= off),
        };
        let better = on >= off;
        let share = if on.min(off) >= CLOSE * on.max(off) {
            EXPLORE_SHARE
        } else {
            EXPLORE_FAR_SHARE
        };
        let worse_secs = if better {
            self.plain_secs
        } else {
            self.speculate_secs
        };
        let total = self.speculate_secs + self.plain_secs;
        if worse_secs + window <= share * (total + window) {
            !better
        } else {
            better
        }
    }
}

/// The policy's state in a running batch (kept under the batch's lock). Each batch size keeps
/// its own window, so a batch whose size changes between passes (jobs arriving and ending)
/// still completes windows at every size it spends time at: each pass's interval (since the
/// pass before) and the tokens committed in it count toward the size of that pass.
#[derive(Debug, Clone)]
pub(super) struct PolicyState {
    policy: SpeculationPolicy,
    sizes: BTreeMap<usize, SizeStats>,
    /// The batch size of the latest pass (whose choice rounds follow now).
    size: usize,
    /// Tokens committed since the latest pass.
    tokens: usize,
    last_pass: Option<Instant>,
}

impl PolicyState {
    pub fn new(policy: SpeculationPolicy) -> Self {
        Self {
            policy,
            sizes: BTreeMap::new(),
            size: 0,
            tokens: 0,
            last_pass: None,
        }
    }

    /// Whether rounds may draft now.
    pub fn speculate(&self) -> bool {
        match self.policy {
            SpeculationPolicy::Always => true,
            SpeculationPolicy::Never => false,
            SpeculationPolicy::Measured => self.sizes.get(&self.size).is_none_or(|s| s.current),
        }
    }

    /// The batch is empty: the time until the next pass is idle, not a pass's interval.
    pub fn idle(&mut self) {
        self.last_pass = None;
        self.tokens = 0;
    }

    /// `tokens` committed by some sequence.
    pub fn committed(&mut self, tokens: usize) {
        self.tokens += tokens;
    }

    /// A batched forward of `batch` sequences ran and ended at `now`.
    pub fn fired(&mut self, batch: usize, now: Instant) {
        if self.policy != SpeculationPolicy::Measured || batch == 0 {
            return;
        }
        let secs = self
            .last_pass
            .map_or(0.0, |t| now.duration_since(t).as_secs_f64());
        self.last_pass = Some(now);
        let tokens = std::mem::take(&mut self.tokens);
        let prior = self.prior(batch);
        self.sizes
            .entry(batch)
            .or_insert_with(|| SizeStats::new(prior))
            .observe(tokens, secs, prior);
        self.size = batch;
    }

    /// The rates of the nearest other size with both choices measured.
    fn prior(&self, batch: usize) -> Prior {
        self.sizes
            .iter()
            .filter(|(&size, _)| size != batch)
            .filter_map(|(&size, s)| {
                Some((size.abs_diff(batch), (s.speculate.value?, s.plain.value?)))
            })
            .min_by_key(|(distance, _)| *distance)
            .map(|(_, rates)| rates)
    }

    /// What was learned, per batch size.
    pub fn report(&self) -> Vec<SizeReport> {
        self.sizes
            .iter()
            .map(|(&batch, s)| SizeReport {
                batch,
                speculate_rate: s.speculate.value,
                plain_rate: s.plain.value,
                speculate_windows: s.speculate.windows,
                plain_windows: s.plain.windows,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Feed windows where speculation commits `on` tokens per firing and plain `off`.
    fn run(on: usize, off: usize, windows: usize) -> PolicyState {
        let mut p = PolicyState::new(SpeculationPolicy::Measured);
        let mut now = Instant::now();
        p.fired(4, now);
        for _ in 0..windows * WINDOW_FIRINGS {
            let tokens = if p.speculate() { on } else { off };
            p.committed(tokens);
            now += Duration::from_millis(10);
            p.fired(4, now);
        }
        p
    }

    #[test]
    fn runs_the_better_choice_and_retries_the_other() {
        // Far apart: the worse gets about 2 % of the windows (all windows last as long here).
        let p = run(3, 4, 200);
        let r = p.report()[0];
        assert!(r.plain_windows > 20 * r.speculate_windows, "{r:?}");
        assert!(r.speculate_windows >= 3, "{r:?}");
        let p = run(6, 4, 200);
        let r = p.report()[0];
        assert!(r.speculate_windows > 20 * r.plain_windows, "{r:?}");
        assert!(r.plain_windows >= 3, "{r:?}");
        // Close: about 10 %.
        let p = run(19, 20, 200);
        let r = p.report()[0];
        assert!(r.plain_windows > 5 * r.speculate_windows, "{r:?}");
        assert!(r.speculate_windows >= 15, "{r:?}");
    }

    #[test]
    fn fixed_policies_never_switch() {
        let p = PolicyState::new(SpeculationPolicy::Never);
        assert!(!p.speculate());
        let p = PolicyState::new(SpeculationPolicy::Always);
        assert!(p.speculate());
    }

    #[test]
    fn a_new_batch_size_starts_from_the_nearest_measured_one() {
        let mut p = run(3, 4, 4);
        assert!(!p.speculate(), "plain is better at size 4");
        let now = Instant::now() + Duration::from_secs(10);
        p.fired(3, now);
        assert!(!p.speculate(), "size 3 starts with size 4's choice");
        assert_eq!(p.report().len(), 2);
        p.fired(4, now + Duration::from_millis(10));
        assert!(!p.speculate(), "size 4 keeps what it learned");
        let fresh = PolicyState::new(SpeculationPolicy::Measured);
        assert!(
            fresh.speculate(),
            "with nothing measured, speculation is tried first"
        );
    }
}
