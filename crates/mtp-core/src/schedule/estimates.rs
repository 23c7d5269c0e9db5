//! The adaptive schedule's two estimates: per-position acceptance and per-depth round cost.

/// EWMA weight of one acceptance sample in the estimate the objective uses (after the first
/// `1/α` samples, which are averaged): a long memory, because a few percent of acceptance
/// decide between neighbouring depths.
const ACCEPT_ALPHA: f64 = 0.01;
/// EWMA weight of the fast estimate that detects drift.
const DRIFT_ALPHA: f64 = 0.05;
/// Standard deviations (of the fast estimate's noise) by which the fast estimate must leave
/// the slow one before the slow one jumps to it: a real change of acceptance (another kind of
/// text) is followed within tens of rounds, noise almost never triggers it.
const DRIFT_Z: f64 = 3.5;
/// Samples after which a position's acceptance estimate is trusted on its own.
pub(super) const TRUST_SAMPLES: u64 = 10;
/// EWMA weight of one cost sample in a depth's base.
const COST_ALPHA: f64 = 0.2;
/// Largest relative innovation of one cost sample (before [`COST_ALPHA`]): one sample moves a
/// base by at most `COST_ALPHA * COST_CLAMP` = 5 %.
const COST_CLAMP: f64 = 0.25;
/// Samples a depth needs before its cost is used; the first estimate is their minimum, so one
/// stalled or one-off round (compiling a new shape) does not set it.
pub(super) const COST_MIN_SAMPLES: u32 = 2;
/// A round slower than this multiple of its depth's estimate is a host stall (a page-fault
/// storm, another process, the OS) and is not fed to the estimate...
const STALL_RATIO: f64 = 1.5;
/// ...unless it is the third such round in a row at that depth: then the cost really changed.
const STALL_RUN: u32 = 3;
/// EWMA weight of the machine's load factor (see [`CostModel`]): faster than the per-depth
/// bases, so a change that hits every depth lands mostly in the load.
const LOAD_ALPHA: f64 = 0.3;

/// A running mean that turns into a slow EWMA, with a fast EWMA beside it: when the fast one
/// leaves the slow one by more than noise explains, the slow one jumps to it (drift).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Rate {
    value: f64,
    fast: f64,
    samples: u64,
}

impl Rate {
    fn update(&mut self, x: f64) {
        self.samples += 1;
        let n = self.samples as f64;
        self.value += ACCEPT_ALPHA.max(1.0 / n) * (x - self.value);
        self.fast += DRIFT_ALPHA.max(1.0 / n) * (x - self.fast);
        if n * DRIFT_ALPHA >= 1.0 {
            let p = self.fast.clamp(0.05, 0.95);
            let noise = (p * (1.0 - p) * DRIFT_ALPHA / (2.0 - DRIFT_ALPHA)).sqrt();
            if (self.fast - self.value).abs() > DRIFT_Z * noise {
                self.value = self.fast;
            }
        }
    }
}

/// Conditional acceptance per draft position: `a_j` = P(draft `j` accepted | drafts `1..j`
/// accepted), for `j` in `1..=depths`.
///
/// A round that drafted `d`, had `judged ≤ d` positions judged by the target and accepted `m`
/// gives a 1 to positions `1..=m` and a 0 to position `m + 1` (when `m < judged`); deeper
/// positions were not reached and learn nothing. (`judged < d` when an accepted EOS ended the
/// round: the drafts after it were cut, not rejected.)
///
/// **Trust and priors.** A position is trusted once it has [`TRUST_SAMPLES`] samples. An
/// untrusted position with `n` samples and mean `â` uses `(n·â + (T − n)·b) / T`, where the
/// prior `b` is a measurement: the rate of the deepest trusted shallower position, else the
/// rate just computed for the position before (itself leaning on its few samples), or for
/// position 1 `min(â, ½)` (0 with no sample at all): a new controller's first lucky rounds do
/// not read as certain acceptance. The controller looks at most four positions past
/// [`reached(2)`](Self::reached) — the deepest position with every position up to it sampled
/// twice — so the prior of a position with no sample matters a few positions deep at most.
///
/// The same model counts *offers* (see [`AcceptanceModel::offers`]): `q_j` = P(the proposer
/// had a draft for position `j` | it had one for `1..j` and was asked for `j`), from
/// `observe(asked, drafted)`. An assistant always offers what it is asked for (`q = 1`);
/// prompt lookup drafts only what it finds.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct AcceptanceModel {
    positions: Vec<Rate>,
    /// The rate of a position with no sample and nothing before it to lean on.
    empty: f64,
    /// The most the first position's prior may be: its own few samples are shrunk towards
    /// this (or their mean, when lower) until trusted.
    ceiling: f64,
}

/// The acceptance model's prior ceiling for the first position: a coin's. Two lucky rounds
/// of a new controller (2 of 2 accepted) then read as 0.6, not 1.0, and do not send it deep
/// on a guess; a proposer that really is accepted more climbs as its samples become trusted.
const ACCEPTANCE_PRIOR_CEILING: f64 = 0.5;

impl AcceptanceModel {
    /// No samples for positions `1..=depths` (acceptance: nothing assumed, 0).
    pub fn new(depths: usize) -> Self {
        Self {
            positions: vec![Rate::default(); depths],
            empty: 0.0,
            ceiling: ACCEPTANCE_PRIOR_CEILING,
        }
    }

    /// An offer model for positions `1..=depths`: until a proposer has been asked, it is
    /// taken to offer everything (1), as an MTP head does.
    pub fn offers(depths: usize) -> Self {
        Self {
            positions: vec![Rate::default(); depths],
            empty: 1.0,
            ceiling: 1.0,
        }
    }

    /// Learn from a round that judged `judged` draft positions and accepted `accepted`.
    pub fn observe(&mut self, judged: usize, accepted: usize) {
        let judged = judged.min(self.positions.len());
        let accepted = accepted.min(judged);
        for rate in &mut self.positions[..accepted] {
            rate.update(1.0);
        }
        if accepted < judged {
            self.positions[accepted].update(0.0);
        }
    }

    /// The deepest position `f` such that positions `1..=f` are all trusted (0 when position
    /// 1 is not).
    pub fn frontier(&self) -> usize {
        self.positions
            .iter()
            .take_while(|r| r.samples >= TRUST_SAMPLES)
            .count()
    }

    /// The deepest position `f` such that positions `1..=f` all have `samples` samples or more.
    pub fn reached(&self, samples: u64) -> usize {
        self.positions
            .iter()
            .take_while(|r| r.samples >= samples)
            .count()
    }

    /// The rates `a_1..a_depths` the objective uses (with the priors above).
    pub fn rates(&self) -> Vec<f64> {
        let trust = TRUST_SAMPLES as f64;
        let mut trusted: Option<f64> = None;
        let mut previous: Option<f64> = None;
        self.positions
            .iter()
            .map(|r| {
                if r.samples >= TRUST_SAMPLES {
                    trusted = Some(r.value);
                    previous = Some(r.value);
                    return r.value;
                }
                let own = if r.samples == 0 {
                    self.empty
                } else {
                    r.value.min(self.ceiling)
                };
                let prior = trusted.or(previous).unwrap_or(own);
                let n = r.samples as f64;
                let rate = (n * r.value + (trust - n) * prior) / trust;
                previous = Some(rate);
                rate
            })
            .collect()
    }

    /// Upper confidence bounds on [`rates`](Self::rates): each rate plus `z` standard errors
    /// of a mean of `n` Bernoulli samples (`n` capped at the EWMA's effective memory,
    /// `2/α − 1`), at most 1. A position with few samples is close to 1.
    pub fn optimistic_rates(&self, z: f64) -> Vec<f64> {
        let memory = 2.0 / ACCEPT_ALPHA - 1.0;
        self.rates()
            .into_iter()
            .zip(&self.positions)
            .map(|(rate, r)| {
                let n = (r.samples as f64).min(memory);
                let variance = (rate * (1.0 - rate)).max(1.0 / (n + 1.0));
                (rate + z * (variance / (n + 1.0)).sqrt()).min(1.0)
            })
            .collect()
    }

    /// Whether this is a model of `depths` positions holding rates in `[0, 1]` (a check for
    /// state read back from a file).
    pub fn is_valid(&self, depths: usize) -> bool {
        self.positions.len() == depths
            && (0.0..=1.0).contains(&self.empty)
            && (0.0..=1.0).contains(&self.ceiling)
            && self
                .positions
                .iter()
                .all(|r| (0.0..=1.0).contains(&r.value) && (0.0..=1.0).contains(&r.fast))
    }

    /// Samples seen at each position.
    pub fn samples(&self) -> Vec<u64> {
        self.positions.iter().map(|r| r.samples).collect()
    }
}

/// One depth's round-cost estimate, in seconds at the reference load.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Cost {
    seconds: f64,
    samples: u32,
    /// Consecutive stalled samples.
    stalls: u32,
}

/// Round cost per depth `0..=depths`: the wall time of a round that drafted exactly the depth
/// the controller chose, from the round's start to its verdict (drafting — also when it ran
/// early —, the verify forward and acceptance; not the emission of its tokens).
///
/// **Load.** On a shared machine every depth gets slower or faster together (another process,
/// frequency scaling), while only the depths being played are measured: per-depth estimates
/// alone would leave the unplayed depths at an old load and make them look cheap or dear. So
/// a round's time is modelled as `load × base(depth)`: `load` is an EWMA (α = 0.3) of
/// `time ÷ base` over every measured round, `base` a slower estimate per depth of
/// `time ÷ load`. The objective's argmax is the same at any load, so the controller compares
/// `base` values.
///
/// **Per depth.** A depth's first base is the minimum of its first [`COST_MIN_SAMPLES`]
/// samples. Up to its fifth sample a base is the running mean from there; after that each
/// sample `x` (as `time ÷ load`) moves it by `0.2·clamp(x − c, ±25 % of c)` (at most 5 %;
/// symmetric, so that the depth played most is not the one that looks cheapest). A round
/// slower than 1.5 × `load × base` is taken for a host stall and ignored, unless three come in
/// a row (then the cost really changed). An unmeasured depth is
/// judged by [`estimates`](Self::estimates)' straight line through the measured ones.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct CostModel {
    depths: Vec<Cost>,
    load: f64,
    /// The depth of the last sample.
    last: Option<usize>,
    /// The relative change of the last sample's base (negative: it got cheaper).
    last_move: f64,
}

impl CostModel {
    /// No samples for depths `0..=depths`.
    pub fn new(depths: usize) -> Self {
        Self {
            depths: vec![Cost::default(); depths + 1],
            load: 1.0,
            last: None,
            last_move: 0.0,
        }
    }

    /// Learn that a round at `depth` took `seconds` (ignored when not finite and positive).
    pub fn observe(&mut self, depth: usize, seconds: f64) {
        if !seconds.is_finite() || seconds <= 0.0 {
            return;
        }
        let load = self.load;
        let Some(cost) = self.depths.get_mut(depth) else {
            return;
        };
        self.last = Some(depth);
        self.last_move = 0.0;
        if cost.samples < COST_MIN_SAMPLES {
            let base = seconds / load;
            cost.seconds = if cost.samples == 0 {
                base
            } else {
                cost.seconds.min(base)
            };
            cost.samples += 1;
            return;
        }
        if seconds > STALL_RATIO * load * cost.seconds {
            cost.stalls += 1;
            if cost.stalls < STALL_RUN {
                return;
            }
        } else {
            cost.stalls = 0;
        }
        cost.samples = cost.samples.saturating_add(1);
        let ratio = seconds / cost.seconds;
        self.load += LOAD_ALPHA * (ratio - self.load);
        let base = seconds / self.load;
        let n = f64::from(cost.samples);
        let before = cost.seconds;
        if n * COST_ALPHA < 1.0 {
            // Still a running mean (from the first estimate): a depth played rarely (plain
            // decoding probed from a drafting best) corrects a first estimate taken in cold
            // rounds within a few samples instead of 5 % at a time.
            cost.seconds += (base - cost.seconds) / n;
        } else {
            let limit = COST_CLAMP * cost.seconds;
            cost.seconds += COST_ALPHA * (base - cost.seconds).clamp(-limit, limit);
        }
        self.last_move = cost.seconds / before - 1.0;
    }

    /// Whether the last sample was at `depth` and made its base cheaper by more than
    /// `share` (its estimate is still moving down: probing it again soon is worth it).
    pub fn just_fell(&self, depth: usize, share: f64) -> bool {
        self.last == Some(depth) && self.last_move < -share
    }

    /// The base estimate at `depth` (seconds at the reference load), once it has
    /// [`COST_MIN_SAMPLES`] samples.
    pub fn get(&self, depth: usize) -> Option<f64> {
        self.depths
            .get(depth)
            .filter(|c| c.samples >= COST_MIN_SAMPLES)
            .map(|c| c.seconds)
    }

    /// The costs of depths `0..=upto` for the objective: each depth's measured base, else a
    /// straight line through the measured depths (between two measured depths, their
    /// interpolation; past the deepest, its base plus the slope of the two deepest, never
    /// negative). `None` while fewer than two depths are measured, and for a depth below every
    /// measured one. A round's cost is nearly linear in its depth (a draft step and a verify
    /// row per draft), so an unplayed depth is judged by that line instead of being played
    /// blind; it is measured when it is played.
    pub fn estimates(&self, upto: usize) -> Vec<Option<f64>> {
        self.line_through(upto, |d| self.get(d))
    }

    /// [`estimates`](Self::estimates) through every depth played at least once, each at its
    /// first sample (before [`COST_MIN_SAMPLES`] confirm it): a rough curve for slow start,
    /// which must decide before anything is measured twice.
    pub fn rough_estimates(&self, upto: usize) -> Vec<Option<f64>> {
        self.line_through(upto, |d| {
            self.depths
                .get(d)
                .filter(|c| c.samples > 0)
                .map(|c| c.seconds)
        })
    }

    /// Costs of depths `0..=upto` from `known`, with the straight line of
    /// [`estimates`](Self::estimates) through the known depths elsewhere.
    fn line_through(&self, upto: usize, known: impl Fn(usize) -> Option<f64>) -> Vec<Option<f64>> {
        let measured: Vec<(usize, f64)> = (0..self.depths.len())
            .filter_map(|d| known(d).map(|c| (d, c)))
            .collect();
        let line = |depth: usize| -> Option<f64> {
            if measured.len() < 2 {
                return None;
            }
            let below = measured.iter().rev().find(|(d, _)| *d < depth);
            let above = measured.iter().find(|(d, _)| *d > depth);
            match (below, above) {
                (Some(below), Some(above)) => {
                    let t = (depth - below.0) as f64 / (above.0 - below.0) as f64;
                    Some(below.1 + t * (above.1 - below.1))
                }
                (Some(_), None) => {
                    let [(d0, c0), (d1, c1)] =
                        [measured[measured.len() - 2], measured[measured.len() - 1]];
                    let slope = ((c1 - c0) / (d1 - d0) as f64).max(0.0);
                    Some(c1 + slope * (depth - d1) as f64)
                }
                _ => None,
            }
        };
        (0..=upto).map(|d| known(d).or_else(|| line(d))).collect()
    }

    /// Whether `depth` has at least one sample (measured or not yet).
    pub fn played(&self, depth: usize) -> bool {
        self.depths.get(depth).is_some_and(|c| c.samples > 0)
    }

    /// Whether this is a model of depths `0..=depths` holding finite, non-negative costs and a
    /// positive load (a check for state read back from a file).
    pub fn is_valid(&self, depths: usize) -> bool {
        self.depths.len() == depths + 1
            && self.load.is_finite()
            && self.load > 0.0
            && self
                .depths
                .iter()
                .all(|c| c.seconds.is_finite() && c.seconds >= 0.0)
    }

    /// Depths with a measured base.
    pub fn measured(&self) -> usize {
        (0..self.depths.len())
            .filter(|&d| self.get(d).is_some())
            .count()
    }

    /// Every depth's estimate at the current load, in seconds (`None` where not yet measured).
    pub fn curve(&self) -> Vec<Option<f64>> {
        (0..self.depths.len())
            .map(|d| self.get(d).map(|c| c * self.load))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acceptance_learns_reached_positions_only() {
        let mut a = AcceptanceModel::new(4);
        a.observe(4, 1); // position 1 accepted, 2 rejected, 3 and 4 unreached
        assert_eq!(a.samples(), vec![1, 1, 0, 0]);
        a.observe(4, 4);
        assert_eq!(a.samples(), vec![2, 2, 1, 1]);
        a.observe(2, 2); // an accepted EOS at position 2: nothing is rejected
        assert_eq!(a.samples(), vec![3, 3, 1, 1]);
        a.observe(0, 0);
        assert_eq!(a.samples(), vec![3, 3, 1, 1]);
        a.observe(9, 9); // clamped to the table
        assert_eq!(a.samples(), vec![4, 4, 2, 2]);
    }

    #[test]
    fn untrusted_positions_lean_on_measurements_not_on_one() {
        let mut a = AcceptanceModel::new(3);
        assert_eq!(a.rates(), vec![0.0; 3], "nothing measured: nothing assumed");
        a.observe(3, 0); // position 1: one 0
        assert_eq!(a.rates()[0], 0.0);
        let mut a = AcceptanceModel::new(3);
        for _ in 0..10 {
            a.observe(3, 1); // position 1: ten 1s; position 2: ten 0s
        }
        assert_eq!(a.frontier(), 2);
        let rates = a.rates();
        assert!((rates[0] - 1.0).abs() < 1e-12 && rates[1].abs() < 1e-12);
        assert!(rates[2].abs() < 1e-12, "inherits position 2's 0: {rates:?}");
        let mut a = AcceptanceModel::new(2);
        for i in 0..10 {
            a.observe(1, usize::from(i % 2 == 0)); // position 1 at 0.5
        }
        a.observe(2, 2); // position 2: one 1
        let r = a.rates();
        assert!((r[1] - (1.0 + 9.0 * r[0]) / 10.0).abs() < 1e-12, "{r:?}");
        assert_eq!(a.frontier(), 1);
    }

    #[test]
    fn cost_starts_at_the_smaller_sample_and_clamps_stalls() {
        let mut c = CostModel::new(2);
        c.observe(1, 0.050); // a one-off first round
        assert_eq!(c.get(1), None);
        c.observe(1, 0.010);
        assert_eq!(c.get(1), Some(0.010));
        c.observe(1, 0.100); // a 10x stall: ignored
        c.observe(1, 0.100); // twice
        assert_eq!(c.get(1), Some(0.010));
        assert_eq!(c.curve()[1], Some(0.010));
        c.observe(1, f64::NAN);
        c.observe(1, 0.0);
        c.observe(7, 1.0);
        assert_eq!(c.get(1), Some(0.010));
        let curve = c.curve();
        assert!(curve[0].is_none() && curve[2].is_none(), "{curve:?}");
        // A real change converges.
        for _ in 0..60 {
            c.observe(1, 0.020);
        }
        assert!(
            (c.curve()[1].unwrap() - 0.020).abs() < 1e-4,
            "{:?}",
            c.curve()
        );
    }

    #[test]
    fn a_load_change_moves_every_depth_alike() {
        let mut c = CostModel::new(2);
        for (d, secs) in [(0, 0.010), (0, 0.010), (2, 0.020), (2, 0.020)] {
            c.observe(d, secs);
        }
        // The machine slows down by half while only depth 2 is played.
        for _ in 0..100 {
            c.observe(2, 0.030);
        }
        let curve = c.curve();
        assert!((curve[2].unwrap() - 0.030).abs() < 1e-4, "{curve:?}");
        // Depth 0, never played at the new load, follows most of the way (the split between
        // load and base is a prior: a change seen at one depth is taken to be the machine's).
        assert!(curve[0].unwrap() > 0.0125, "depth 0 follows: {curve:?}");
        let (base0, base2) = (c.get(0).unwrap(), c.get(2).unwrap());
        assert!((2.0..2.5).contains(&(base2 / base0)), "{base0} {base2}");
    }
}
