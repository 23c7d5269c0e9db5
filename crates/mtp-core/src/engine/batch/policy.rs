//! Whether speculation pays at the current batch size, from a cost model fitted to the batch's
//! own rounds.
//!
//! Speculation trades extra verify rows for fewer rounds. Alone on a machine that wins when a
//! verify of `k + 1` rows costs little more than one row; in a batch every sequence's rows
//! already share one pass, so the spare capacity speculation lives on shrinks as the batch grows
//! (mlx-vlm reports batched MTP from 1.38x down to 0.61x as the batch grows). The policy models a
//! round of `n` sequences (Leviathan et al. 2023, §3.4, with the verify cost measured rather than
//! assumed constant):
//!
//! ```text
//! rate(n, mode) = n · y / (T(n, n · r) + n · h)
//! ```
//!
//! * `T(n, rows)`, the target's time in a round (its batched forward and unembedding), fitted
//!   by least squares as `a + b·n + c·rows` over every round of either mode (forgetting old
//!   rounds slowly), so a batch size never run with speculation is still predicted;
//! * `y` and `r`, the tokens committed and rows forwarded per sequence per round in that mode
//!   (plain: 1 and 1; speculating: what the proposers' acceptance gives), and `h`, the
//!   sequence's own time per round (sampling, and drafting when speculating) — per sequence,
//!   so measured at any size they hold at every size.
//!
//! Each batch size runs windows of [`WINDOW_FIRINGS`] rounds in one mode, and at a window's end
//! picks the mode the model predicts faster, giving the other a window when that keeps its share
//! of the time within [`EXPLORE_SHARE`] (the two predictions close) or [`EXPLORE_FAR_SHARE`]
//! (far apart), so a change in the load (prompt kinds, acceptance) still reaches the model. A
//! mode never measured is tried first (speculation before plain); until the fit has rounds of
//! both modes, each size compares its own measured rates.

use std::collections::BTreeMap;

use serde::Serialize;

/// Rounds per measurement window.
pub const WINDOW_FIRINGS: usize = 24;
/// The share of the time the worse choice gets (re-tries) while the two are close (the worse
/// within 85 % of the better): a re-try then costs little and may well change the choice.
pub const EXPLORE_SHARE: f64 = 0.10;
/// The same when the worse choice is far behind: a re-try then costs more and is less likely
/// to change the choice.
pub const EXPLORE_FAR_SHARE: f64 = 0.02;
/// Rates within this ratio count as close.
const CLOSE: f64 = 0.85;
/// Weight of the newest window in a running mean.
const RATE_WEIGHT: f64 = 0.5;
/// Each round's weight in the target-cost fit decays by this factor per later round (a memory
/// of about a thousand rounds).
const FIT_FORGET: f64 = 0.999;
/// Ridge on the fit's per-sequence and per-row slopes, relative to their scale: it only
/// decides how a cost is split between them while every round has as many rows as sequences.
const FIT_RIDGE: f64 = 1e-6;

/// How a batch decides whether its sequences draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeculationPolicy {
    /// Predict both at each batch size from the cost model and run the better (see the module
    /// docs).
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
    /// Committed tokens per second measured with speculation on (running rate), if measured.
    pub speculate_rate: Option<f64>,
    /// The same with speculation off.
    pub plain_rate: Option<f64>,
    /// The cost model's rate with speculation on at this size.
    pub predicted_speculate_rate: Option<f64>,
    /// The cost model's rate with speculation off at this size.
    pub predicted_plain_rate: Option<f64>,
    /// Windows run with speculation on.
    pub speculate_windows: usize,
    /// Windows run with it off.
    pub plain_windows: usize,
}

/// One round of a batch as the scheduler saw it: from the end of one batched forward to the
/// end of the next.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Round {
    /// Sequences in the round's forward.
    pub batch: usize,
    /// Rows that forward ran (every sequence's tokens, prompt chunks included).
    pub rows: usize,
    /// Whether the round's sequences could draft.
    pub speculative: bool,
    /// Seconds in batched target calls (the forward, and any unembedding since the last round).
    pub target_secs: f64,
    /// Seconds the sequences ran their own code (sampling, judging, drafting).
    pub member_secs: f64,
    /// Tokens the sequences committed.
    pub tokens: usize,
    /// Decoding forwards among the round's (prompt chunks are not), and their rows.
    pub decode_forwards: usize,
    pub decode_rows: usize,
}

/// A running mean that weights the newest value by [`RATE_WEIGHT`].
#[derive(Debug, Clone, Copy, Default)]
struct Running(Option<f64>);

impl Running {
    fn observe(&mut self, value: f64) {
        self.0 = Some(match self.0 {
            Some(old) => old + RATE_WEIGHT * (value - old),
            None => value,
        });
    }
}

/// `secs ≈ a + b·n + c·rows` by weighted least squares with forgetting.
#[derive(Debug, Clone, Copy, Default)]
struct TargetFit {
    xtx: [[f64; 3]; 3],
    xty: [f64; 3],
    rounds: usize,
    /// Whether rounds with more rows than sequences were seen (the slopes are then separable).
    rows_vary: bool,
}

impl TargetFit {
    fn add(&mut self, n: f64, rows: f64, secs: f64) {
        let x = [1.0, n, rows];
        for i in 0..3 {
            self.xty[i] = self.xty[i] * FIT_FORGET + x[i] * secs;
            for j in 0..3 {
                self.xtx[i][j] = self.xtx[i][j] * FIT_FORGET + x[i] * x[j];
            }
        }
        self.rounds += 1;
        self.rows_vary |= rows > n;
    }

    /// `(a, b, c)`, once two batch sizes or row counts have been seen.
    fn coefficients(&self) -> Option<[f64; 3]> {
        if self.rounds < 3 {
            return None;
        }
        let mut m = self.xtx;
        let ridge = FIT_RIDGE * (m[1][1] + m[2][2]) / 2.0;
        m[1][1] += ridge;
        m[2][2] += ridge;
        solve3(m, self.xty)
    }

    fn predict(&self, n: f64, rows: f64) -> Option<f64> {
        let [a, b, c] = self.coefficients()?;
        Some((a + b * n + c * rows).max(1e-9))
    }
}

/// Solve `m · x = v` (Gaussian elimination with partial pivoting); `None` when singular.
fn solve3(mut m: [[f64; 3]; 3], mut v: [f64; 3]) -> Option<[f64; 3]> {
    let scale = m.iter().flatten().fold(0.0f64, |s, x| s.max(x.abs()));
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        if m[pivot][col].abs() <= 1e-12 * scale.max(1e-300) {
            return None;
        }
        m.swap(col, pivot);
        v.swap(col, pivot);
        let pivot_row = m[col];
        for row in col + 1..3 {
            let f = m[row][col] / pivot_row[col];
            for (value, above) in m[row].iter_mut().zip(pivot_row).skip(col) {
                *value -= f * above;
            }
            v[row] -= f * v[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let tail: f64 = (row + 1..3).map(|k| m[row][k] * x[k]).sum();
        x[row] = (v[row] - tail) / m[row][row];
    }
    x.iter().all(|c| c.is_finite()).then_some(x)
}

/// What one mode does per sequence per round, at any batch size.
#[derive(Debug, Clone, Copy, Default)]
struct ModeStats {
    /// The sequence's own seconds per round (`h`).
    member_secs: Running,
    /// Tokens committed per decoding forward (`y`).
    tokens: Running,
    /// Rows per decoding forward (`r`).
    rows: Running,
    /// Seconds of finished windows in this mode (every size).
    secs: f64,
}

impl ModeStats {
    fn measured(&self) -> bool {
        self.tokens.0.is_some()
    }
}

/// A window in progress at one size.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    rounds: usize,
    sequences: usize,
    tokens: usize,
    target_secs: f64,
    member_secs: f64,
    decode_forwards: usize,
    decode_rows: usize,
}

impl Window {
    fn add(&mut self, r: &Round) {
        self.rounds += 1;
        self.sequences += r.batch;
        self.tokens += r.tokens;
        self.target_secs += r.target_secs;
        self.member_secs += r.member_secs;
        self.decode_forwards += r.decode_forwards;
        self.decode_rows += r.decode_rows;
    }

    fn secs(&self) -> f64 {
        self.target_secs + self.member_secs
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct SizeStats {
    speculate: Running,
    plain: Running,
    speculate_windows: usize,
    plain_windows: usize,
    /// The mode of the window being measured.
    current: bool,
    window: Window,
}

/// The policy's state in a running batch (and, through [`super::PolicyMemory`], between
/// batches).
#[derive(Debug, Clone)]
pub(super) struct PolicyState {
    policy: SpeculationPolicy,
    fit: TargetFit,
    speculating: ModeStats,
    plain: ModeStats,
    sizes: BTreeMap<usize, SizeStats>,
    /// The batch size of the latest round (whose choice rounds follow now).
    size: usize,
}

impl PolicyState {
    pub fn new(policy: SpeculationPolicy) -> Self {
        Self {
            policy,
            fit: TargetFit::default(),
            speculating: ModeStats::default(),
            plain: ModeStats::default(),
            sizes: BTreeMap::new(),
            size: 0,
        }
    }

    /// Whether rounds may draft now.
    pub fn speculate(&self) -> bool {
        match self.policy {
            SpeculationPolicy::Always => true,
            SpeculationPolicy::Never => false,
            SpeculationPolicy::Measured => match self.sizes.get(&self.size) {
                Some(s) => s.current,
                None => self.choose(self.size.max(1), None),
            },
        }
    }

    /// A round ended.
    pub fn round(&mut self, round: Round) {
        if round.batch == 0 {
            return;
        }
        // The target's cost model is fitted under every policy: it also splits each pass
        // between its members ([`Self::pass_shares`]).
        if round.target_secs > 0.0 {
            self.fit
                .add(round.batch as f64, round.rows as f64, round.target_secs);
        }
        if self.policy != SpeculationPolicy::Measured {
            return;
        }
        self.size = round.batch;
        if !self.sizes.contains_key(&round.batch) {
            // A size seen for the first time starts with the mode the model predicts faster.
            let first = SizeStats {
                current: self.choose(round.batch, None),
                ..SizeStats::default()
            };
            self.sizes.insert(round.batch, first);
        }
        let Some(size) = self.sizes.get_mut(&round.batch) else {
            return;
        };
        // A round begun under another size's choice does not count toward this size's window.
        if round.speculative != size.current {
            return;
        }
        size.window.add(&round);
        if size.window.rounds < WINDOW_FIRINGS {
            return;
        }
        let window = std::mem::take(&mut size.window);
        let speculative = size.current;
        let secs = window.secs();
        if secs > 0.0 {
            let rate = window.tokens as f64 / secs;
            let (size_rate, mode) = match speculative {
                true => {
                    size.speculate_windows += 1;
                    (&mut size.speculate, &mut self.speculating)
                }
                false => {
                    size.plain_windows += 1;
                    (&mut size.plain, &mut self.plain)
                }
            };
            size_rate.observe(rate);
            mode.secs += secs;
            mode.member_secs
                .observe(window.member_secs / window.sequences.max(1) as f64);
            if window.decode_forwards > 0 {
                let forwards = window.decode_forwards as f64;
                mode.tokens.observe(window.tokens as f64 / forwards);
                mode.rows.observe(window.decode_rows as f64 / forwards);
            }
        }
        let next = self.choose(round.batch, Some(secs));
        if let Some(size) = self.sizes.get_mut(&round.batch) {
            size.current = next;
        }
    }

    /// Each item's share of a pass whose items run `rows` rows each (shares sum to 1): by the
    /// target's cost model `a + b·n + c·rows`, an item's marginal cost `b + c·rows_i` plus an
    /// equal part of the fixed `a` (negative coefficients count as 0); by rows until the model
    /// is fitted. So a member's drafts are charged what they add to a batched pass, as a
    /// sequence alone pays what its drafts add to its verify forward.
    pub fn pass_shares(&self, rows: &[usize]) -> Vec<f64> {
        let n = rows.len().max(1) as f64;
        let weights: Vec<f64> = match self.fit.coefficients() {
            Some([a, b, c]) if a.max(0.0) + b.max(0.0) + c.max(0.0) > 0.0 => rows
                .iter()
                .map(|&r| a.max(0.0) / n + b.max(0.0) + c.max(0.0) * r as f64)
                .collect(),
            _ => rows.iter().map(|&r| r.max(1) as f64).collect(),
        };
        let total: f64 = weights.iter().sum();
        if total > 0.0 {
            weights.iter().map(|w| w / total).collect()
        } else {
            vec![1.0 / n; rows.len()]
        }
    }

    /// The cost model's rate (tokens per second) at `n` sequences in one mode.
    fn predicted(&self, n: usize, speculative: bool) -> Option<f64> {
        let mode = if speculative {
            &self.speculating
        } else {
            &self.plain
        };
        if !self.fit.rows_vary {
            return None;
        }
        let (y, r, h) = (mode.tokens.0?, mode.rows.0?, mode.member_secs.0?);
        let n = n as f64;
        let secs = self.fit.predict(n, n * r)? + n * h;
        Some(n * y / secs)
    }

    /// The mode of the next window at `n` sequences. At a window's end (`explore`: how long it
    /// took) the worse mode may get the next window; otherwise the better one runs.
    fn choose(&self, n: usize, explore: Option<f64>) -> bool {
        if !self.speculating.measured() {
            return true;
        }
        if !self.plain.measured() {
            return false;
        }
        let size = self.sizes.get(&n);
        let (on, off) = match (self.predicted(n, true), self.predicted(n, false)) {
            (Some(on), Some(off)) => (on, off),
            _ => match size.map(|s| (s.speculate.0, s.plain.0)) {
                Some((Some(on), Some(off))) => (on, off),
                Some((Some(_), None)) => return false,
                _ => return true,
            },
        };
        let better = on >= off;
        let Some(window) = explore else {
            return better;
        };
        let share = if on.min(off) >= CLOSE * on.max(off) {
            EXPLORE_SHARE
        } else {
            EXPLORE_FAR_SHARE
        };
        let worse_secs = if better {
            self.plain.secs
        } else {
            self.speculating.secs
        };
        let total = self.speculating.secs + self.plain.secs;
        if worse_secs + window <= share * (total + window) {
            !better
        } else {
            better
        }
    }

    /// What was learned, per batch size.
    pub fn report(&self) -> Vec<SizeReport> {
        self.sizes
            .iter()
            .map(|(&batch, s)| SizeReport {
                batch,
                speculate_rate: s.speculate.0,
                plain_rate: s.plain.0,
                predicted_speculate_rate: self.predicted(batch, true),
                predicted_plain_rate: self.predicted(batch, false),
                speculate_windows: s.speculate_windows,
                plain_windows: s.plain_windows,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
