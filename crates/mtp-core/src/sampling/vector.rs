//! Vectorised passes over one `f32` row of a 262k-token vocabulary: its maximum, its softmax
//! weights with blocked totals, and the selection of its largest values.
//!
//! # Rounding contract
//!
//! Every pass is `f32` / `f64` arithmetic written as fixed-width lanes ([`LANES`]), never
//! reassociated, its multiply-adds fused only where the source says so ([`f32::mul_add`]: one
//! rounding, the same bits in hardware or in software) — so the same row gives the same bits
//! on every machine, whether the loop runs scalar or under the AVX2 / AVX-512 code the runtime
//! dispatch ([`pulp::Arch`]) picks (x86-64 without FMA, older than AVX2, computes those fused
//! products in software: the same bits, slowly). A token's softmax weight is [`exp_neg`]`((l − max) · (1/T))` in
//! `f32` (about 2 ulp from `exp`; weights below `e^-87` relative to the largest are 0 and leave
//! the support); each block of [`BLOCK`] weights is summed in `f64` over its lanes, and the
//! blocks in id order give the row's total.

use super::best_k;
use super::spare_rows::{give_row, take_row};

/// Tokens per block of a [`SoftmaxRow`]'s partial sums.
pub(crate) const BLOCK: usize = 1024;

/// Lanes of every vectorised loop: sixteen `f32` (two AVX2 registers, one AVX-512 register).
const LANES: usize = 16;

/// Tokens per chunk of [`largest`]'s first pass (one maximum per chunk).
const CHUNK: usize = 64;

/// Arguments below this give a weight of 0 (`e^-87` is near `f32`'s smallest normal number).
const EXP_FLOOR: f32 = -87.0;

/// One whole-row loop. Its [`run`](Pass::run) is `#[inline(always)]`, so [`vectorised`]
/// compiles it inside a function built for the CPU's best instruction set (a closure would stay
/// a separate, baseline-compiled function).
trait Pass {
    type Output;
    fn run(self) -> Self::Output;
}

/// Adapts a [`Pass`] to [`pulp`]'s dispatch.
struct Dispatched<P>(P);

impl<P: Pass> pulp::WithSimd for Dispatched<P> {
    type Output = P::Output;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) -> P::Output {
        self.0.run()
    }
}

/// Runs `pass` compiled for the best instruction set this CPU has (AVX2 + FMA where present;
/// the arithmetic is the same either way, see the module docs).
fn vectorised<P: Pass>(pass: P) -> P::Output {
    pulp::Arch::new().dispatch(Dispatched(pass))
}

/// What one pass over a row finds: its largest value (NaN ignored; `-∞` for an all-`-∞` or
/// all-NaN row) and whether it holds a NaN.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Screened {
    /// The largest value, NaN ignored.
    pub(crate) max: f32,
    /// Whether some value is NaN.
    pub(crate) nan: bool,
}

impl Screened {
    /// Whether the row holds a NaN or `+∞`.
    pub(crate) fn bad(&self) -> bool {
        self.nan || self.max == f32::INFINITY
    }

    /// Whether the row holds a finite value (when it is not [`bad`](Self::bad)).
    pub(crate) fn any_finite(&self) -> bool {
        self.max > f32::NEG_INFINITY && self.max < f32::INFINITY
    }
}

/// [`Screened`] of a row: a maximum and a NaN flag per lane, the lanes' maxima folded in order.
struct Screen<'a>(&'a [f32]);

impl Pass for Screen<'_> {
    type Output = Screened;

    #[inline(always)]
    fn run(self) -> Screened {
        let mut lanes = [f32::NEG_INFINITY; LANES];
        let mut nan = [false; LANES];
        let chunks = self.0.chunks_exact(LANES);
        let tail = chunks.remainder();
        for chunk in chunks {
            for j in 0..LANES {
                let v = chunk[j];
                lanes[j] = if v > lanes[j] { v } else { lanes[j] };
                nan[j] |= v.is_nan();
            }
        }
        for (j, &v) in tail.iter().enumerate() {
            lanes[j] = if v > lanes[j] { v } else { lanes[j] };
            nan[j] |= v.is_nan();
        }
        Screened {
            max: lanes.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
            nan: nan.iter().any(|&b| b),
        }
    }
}

/// A row's maximum and whether it holds a NaN, in one vectorised pass.
pub(crate) fn screen(row: &[f32]) -> Screened {
    vectorised(Screen(row))
}

/// The weights `exp_neg((l − max) · inv_temperature)` of `row`, block by block: each block's
/// lane sum and positive count, its weights written to `out` when given (else into a scratch
/// block).
struct Weigh<'a> {
    row: &'a [f32],
    max: f32,
    inv_temperature: f32,
    out: Option<&'a mut [f32]>,
}

impl Pass for Weigh<'_> {
    type Output = (Vec<f64>, usize);

    #[inline(always)]
    fn run(self) -> (Vec<f64>, usize) {
        let Weigh {
            row,
            max,
            inv_temperature,
            out,
        } = self;
        let mut scratch = [0.0f32; BLOCK];
        let mut blocks = Vec::with_capacity(row.len().div_ceil(BLOCK));
        let mut positive = 0;
        match out {
            Some(out) => {
                for (out, logits) in out.chunks_mut(BLOCK).zip(row.chunks(BLOCK)) {
                    let (sum, count) = weigh_block(out, logits, max, inv_temperature);
                    blocks.push(sum);
                    positive += count;
                }
            }
            None => {
                for logits in row.chunks(BLOCK) {
                    let out = &mut scratch[..logits.len()];
                    let (sum, count) = weigh_block(out, logits, max, inv_temperature);
                    blocks.push(sum);
                    positive += count;
                }
            }
        }
        (blocks, positive)
    }
}

/// Writes one block's weights and returns their lane sum and positive count.
#[inline(always)]
fn weigh_block(out: &mut [f32], logits: &[f32], max: f32, inv_temperature: f32) -> (f64, usize) {
    for (w, &l) in out.iter_mut().zip(logits) {
        *w = exp_neg((l - max) * inv_temperature);
    }
    lane_sum(out)
}

/// Every [`BLOCK`]'s lane sum of `weights`, and how many weights are positive.
struct BlockSums<'a>(&'a [f32]);

impl Pass for BlockSums<'_> {
    type Output = (Vec<f64>, usize);

    #[inline(always)]
    fn run(self) -> (Vec<f64>, usize) {
        let mut positive = 0;
        let mut blocks = Vec::with_capacity(self.0.len().div_ceil(BLOCK));
        for block in self.0.chunks(BLOCK) {
            let (sum, count) = lane_sum(block);
            blocks.push(sum);
            positive += count;
        }
        (blocks, positive)
    }
}

/// `out = max(p − q · ratio, 0)`, element by element.
struct Lowered<'a> {
    p: &'a [f32],
    q: &'a [f32],
    ratio: f32,
    out: &'a mut [f32],
}

impl Pass for Lowered<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        for ((r, &p), &q) in self.out.iter_mut().zip(self.p).zip(self.q) {
            let d = p - q * self.ratio;
            *r = if d > 0.0 { d } else { 0.0 };
        }
    }
}

/// The maximum of every [`CHUNK`] values of a row, NaN ignored.
struct ChunkMaxima<'a>(&'a [f32]);

impl Pass for ChunkMaxima<'_> {
    type Output = Vec<f32>;

    #[inline(always)]
    fn run(self) -> Vec<f32> {
        let mut maxima = Vec::with_capacity(self.0.len().div_ceil(CHUNK));
        for chunk in self.0.chunks(CHUNK) {
            let mut lanes = [f32::NEG_INFINITY; LANES];
            let parts = chunk.chunks_exact(LANES);
            let tail = parts.remainder();
            for part in parts {
                for j in 0..LANES {
                    lanes[j] = if part[j] > lanes[j] {
                        part[j]
                    } else {
                        lanes[j]
                    };
                }
            }
            for (m, &v) in lanes.iter_mut().zip(tail) {
                *m = if v > *m { v } else { *m };
            }
            let mut best = f32::NEG_INFINITY;
            for &m in &lanes {
                best = if m > best { m } else { best };
            }
            maxima.push(best);
        }
        maxima
    }
}

/// `e^x` for `x ≤ 0` (or `-∞`; never NaN, which the sampler rejects first) in `f32`:
/// Cody–Waite reduction `x = n·ln 2 + r`, `|r| ≤ ln 2 / 2`, in fused multiply-adds,
/// then Cephes' degree-6 polynomial for `e^r` (Moshier, *Methods and Programs for Mathematical
/// Functions*, 1989), scaled by `2^n` built from its bits. 0 below [`EXP_FLOOR`]. Branch-free,
/// so it vectorises.
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // 1.5 · 2^23: adding it rounds to an integer held in the low mantissa bits.
    const ROUNDER: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let flushed = x < EXP_FLOOR;
    let x = if flushed { EXP_FLOOR } else { x };
    let t = x.mul_add(LOG2_E, ROUNDER);
    let n = t - ROUNDER;
    let r = (-n).mul_add(LN2_HI, x);
    let r = (-n).mul_add(LN2_LO, r);
    let mut p = 1.987_569_1e-4f32;
    p = p.mul_add(r, 1.398_2e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 0.5);
    let e = p.mul_add(r * r, r) + 1.0;
    // `t`'s bits are ROUNDER's plus n (n in [-126, 0] here).
    let exponent = (t.to_bits() as i32).wrapping_sub(ROUNDER.to_bits() as i32) + 127;
    let scale = f32::from_bits((exponent.max(0) as u32) << 23);
    if flushed {
        0.0
    } else {
        e * scale
    }
}

/// The largest value of `row`, NaN ignored (`-∞` for an empty or all-NaN row).
pub(crate) fn row_max(row: &[f32]) -> f32 {
    screen(row).max
}

/// The `f64` sum of non-negative `weights` over [`LANES`] lanes (lane `j` takes every
/// `LANES`-th weight from `j`, the lanes then summed in order), and how many are positive.
#[inline(always)]
fn lane_sum(weights: &[f32]) -> (f64, usize) {
    let mut sums = [0.0f64; LANES];
    let mut positive = [0u32; LANES];
    let chunks = weights.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for j in 0..LANES {
            sums[j] += f64::from(chunk[j]);
            positive[j] += u32::from(chunk[j] > 0.0);
        }
    }
    for (j, &w) in tail.iter().enumerate() {
        sums[j] += f64::from(w);
        positive[j] += u32::from(w > 0.0);
    }
    let total = sums.iter().fold(0.0, |a, &b| a + b);
    (total, positive.iter().map(|&c| c as usize).sum())
}

/// A row's softmax weights (see the module docs) with their [`BLOCK`] sums.
#[derive(Clone, Debug)]
pub(crate) struct SoftmaxRow {
    /// Unnormalised weights, indexed by token id, each in `[0, 1]`.
    pub(crate) weights: Vec<f32>,
    /// `blocks[b]` is the sum of `weights[b·BLOCK ..][.. BLOCK]`.
    pub(crate) blocks: Vec<f64>,
    /// The blocks' sum, in order.
    pub(crate) total: f64,
    /// How many weights are positive.
    pub(crate) positive: usize,
}

impl Drop for SoftmaxRow {
    /// The weights' row goes back to this thread's spare rows.
    fn drop(&mut self) {
        give_row(std::mem::take(&mut self.weights));
    }
}

impl SoftmaxRow {
    /// The weights `exp_neg((l − max) · inv_temperature)` of `row`, `max` its largest value.
    pub(crate) fn of_logits(row: &[f32], inv_temperature: f32) -> Self {
        Self::of_logits_below(row, row_max(row), inv_temperature)
    }

    /// [`of_logits`](Self::of_logits) of a row whose largest value (NaN ignored) is `max`,
    /// already known from a [`screen`].
    pub(crate) fn of_logits_below(row: &[f32], max: f32, inv_temperature: f32) -> Self {
        let mut weights = take_row(row.len());
        let (blocks, positive) = vectorised(Weigh {
            row,
            max,
            inv_temperature,
            out: Some(&mut weights),
        });
        Self::assemble(weights, blocks, positive)
    }

    /// The total [`of_logits_below`](Self::of_logits_below) would give, without storing the
    /// weights.
    pub(crate) fn total_of_logits_below(row: &[f32], max: f32, inv_temperature: f32) -> f64 {
        let (blocks, _) = vectorised(Weigh {
            row,
            max,
            inv_temperature,
            out: None,
        });
        blocks.iter().fold(0.0, |a, &b| a + b)
    }

    /// Wraps weights already in `[0, 1]`, summing their blocks.
    pub(crate) fn of_weights(weights: Vec<f32>) -> Self {
        let (blocks, positive) = vectorised(BlockSums(&weights));
        Self::assemble(weights, blocks, positive)
    }

    /// The row of these weights and block sums, totalled in block order.
    fn assemble(weights: Vec<f32>, blocks: Vec<f64>, positive: usize) -> Self {
        let total = blocks.iter().fold(0.0, |a, &b| a + b);
        Self {
            weights,
            blocks,
            total,
            positive,
        }
    }

    /// Replaces the weights of some ids (each new weight in `[0, 1]`; ids outside the row are
    /// ignored) and re-sums only the blocks they touch.
    pub(crate) fn with_overrides(mut self, overrides: &[(u32, f32)]) -> Self {
        let len = self.weights.len();
        let mut touched: Vec<usize> = overrides
            .iter()
            .map(|&(id, _)| id as usize)
            .filter(|&id| id < len)
            .map(|id| id / BLOCK)
            .collect();
        touched.sort_unstable();
        touched.dedup();
        let range = |b: usize| b * BLOCK..((b + 1) * BLOCK).min(len);
        // A few blocks: plain code sums them to the same bits as the vectorised pass.
        for &b in &touched {
            self.positive -= lane_sum(&self.weights[range(b)]).1;
        }
        for &(id, w) in overrides {
            if let Some(slot) = self.weights.get_mut(id as usize) {
                *slot = w;
            }
        }
        for &b in &touched {
            let (sum, count) = lane_sum(&self.weights[range(b)]);
            self.blocks[b] = sum;
            self.positive += count;
        }
        self.total = self.blocks.iter().fold(0.0, |a, &b| a + b);
        self
    }

    /// The residual `max(p − q, 0)` of this row `p` against another `q` of the same length,
    /// as weights on this row's scale: `max(w_p − w_q · (total_p / total_q), 0)`.
    pub(crate) fn residual(&self, q: &SoftmaxRow) -> Self {
        // A recycled row holds old values: every one is written only when q is as long.
        let mut weights = if q.weights.len() == self.weights.len() {
            take_row(self.weights.len())
        } else {
            vec![0.0f32; self.weights.len()]
        };
        vectorised(Lowered {
            p: &self.weights,
            q: &q.weights,
            ratio: (self.total / q.total) as f32,
            out: &mut weights,
        });
        Self::of_weights(weights)
    }

    /// The first id of the largest weight.
    pub(crate) fn argmax(&self) -> u32 {
        let mut best = 0usize;
        for (i, &w) in self.weights.iter().enumerate() {
            if w > self.weights[best] {
                best = i;
            }
        }
        best as u32
    }

    /// Inverse-CDF sampling at `target ∈ [0, total]`: the block whose running sum passes
    /// `target`, then the token inside it whose running sum does; only positive weights are
    /// returned (rounding between the block's lane sum and its running sum falls back to the
    /// block's last positive token, a target past the total to the row's last one).
    pub(crate) fn sample_at(&self, target: f64) -> u32 {
        let mut before = 0.0;
        for (b, &sum) in self.blocks.iter().enumerate() {
            if sum > 0.0 && target < before + sum {
                let start = b * BLOCK;
                let block = &self.weights[start..(start + BLOCK).min(self.weights.len())];
                let mut cumulative = before;
                for (i, &w) in block.iter().enumerate() {
                    cumulative += f64::from(w);
                    if w > 0.0 && target < cumulative {
                        return (start + i) as u32;
                    }
                }
                return last_positive(block).map_or(0, |i| (start + i) as u32);
            }
            before += sum;
        }
        last_positive(&self.weights).map_or(0, |i| i as u32)
    }
}

/// The index of the last positive weight.
fn last_positive(weights: &[f32]) -> Option<usize> {
    weights.iter().rposition(|&w| w > 0.0)
}

/// The `k` largest values of `row` with their ids, ordered as [`best_k`] orders them (larger
/// first, NaN as `-∞`, lower id on ties) and bit for bit its answer.
///
/// One pass takes the maximum of every 64 tokens; the `k`-th largest of those maxima is
/// a lower bound `τ` of the row's `k`-th largest value (`k` chunks hold a value ≥ `τ`), so only
/// the values ≥ `τ` of chunks whose maximum reaches `τ` can be among the `k` best, and
/// [`best_k`] ranks just those. Rows too short to gain, or whose bound is `-∞` (mostly masked
/// rows), are ranked whole.
pub fn largest(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let whole = |row: &[f32]| {
        best_k(
            row.iter()
                .enumerate()
                .map(|(i, &v)| (i as u32, f64::from(v))),
            k,
        )
    };
    let chunks = row.len().div_ceil(CHUNK);
    let ranked = if k == 0 || k.saturating_mul(4) > chunks {
        whole(row)
    } else {
        let mut maxima = vectorised(ChunkMaxima(row));
        let order = maxima.clone();
        let (_, &mut tau, _) = maxima.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        if tau == f32::NEG_INFINITY || tau.is_nan() {
            whole(row)
        } else {
            let candidates = order
                .iter()
                .enumerate()
                .filter(|&(_, &m)| m >= tau)
                .flat_map(|(c, _)| {
                    let start = c * CHUNK;
                    row[start..(start + CHUNK).min(row.len())]
                        .iter()
                        .enumerate()
                        .filter(|&(_, &v)| v >= tau)
                        .map(move |(i, &v)| ((start + i) as u32, f64::from(v)))
                });
            best_k(candidates, k)
        }
    };
    // f32 → f64 → f32 is exact.
    ranked.into_iter().map(|(id, v)| (id, v as f32)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn exp_neg_is_within_a_few_ulp_of_exp() {
        let mut worst = 0.0f64;
        let mut x = 0.0f32;
        while x > -87.0 {
            let want = f64::from(x).exp();
            let got = f64::from(exp_neg(x));
            worst = worst.max(((got - want) / want).abs());
            x -= 0.001_37;
        }
        assert!(worst < 3.0 * f64::from(f32::EPSILON), "{worst}");
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(-87.5), 0.0);
        assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn screen_tells_nan_infinity_and_all_masked_rows() {
        let mut row = masked_row(3, 1000, 5, -9.0..9.0);
        assert!(!screen(&row).bad() && screen(&row).any_finite());
        for (at, bad) in [(0, f32::NAN), (999, f32::NAN), (517, f32::INFINITY)] {
            let mut spoiled = row.clone();
            spoiled[at] = bad;
            assert!(screen(&spoiled).bad(), "{bad} at {at}");
        }
        row.iter_mut().for_each(|v| *v = f32::NEG_INFINITY);
        let masked = screen(&row);
        assert!(!masked.bad() && !masked.any_finite());
        assert!(screen(&[f32::NAN]).bad());
    }

    /// `len` logits drawn uniformly from `range` (seeded), every `every`-th one −∞.
    fn masked_row(seed: u64, len: usize, every: usize, range: std::ops::Range<f32>) -> Vec<f32> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..len)
            .map(|i| {
                if i % every == 0 {
                    f32::NEG_INFINITY
                } else {
                    rng.random_range(range.clone())
                }
            })
            .collect()
    }

    #[test]
    fn softmax_row_sums_its_blocks_and_samples_positive_weights() {
        let row = masked_row(7, 5000, 7, -20.0..5.0);
        let s = SoftmaxRow::of_logits(&row, 1.0 / 0.8);
        let direct: f64 = s.weights.iter().map(|&w| f64::from(w)).sum();
        let max = row_max(&row);
        assert_eq!(
            s.total,
            SoftmaxRow::total_of_logits_below(&row, max, 1.0 / 0.8)
        );
        assert_eq!(screen(&row), Screened { max, nan: false });
        assert!((s.total - direct).abs() < 1e-9 * direct);
        assert_eq!(s.blocks.len(), 5);
        assert_eq!(s.positive, s.weights.iter().filter(|&&w| w > 0.0).count());
        for u in 0..1000 {
            let id = s.sample_at(f64::from(u) / 1000.0 * s.total);
            assert!(s.weights[id as usize] > 0.0);
        }
        assert!(s.weights[s.sample_at(s.total) as usize] > 0.0);
        let max_id = s.argmax() as usize;
        assert_eq!(s.weights[max_id], 1.0);
    }

    #[test]
    fn overrides_resum_the_blocks_they_touch() {
        let row: Vec<f32> = (0..3000).map(|i| (i % 17) as f32 * 0.1).collect();
        let s = SoftmaxRow::of_logits(&row, 1.0);
        let changed = s
            .clone()
            .with_overrides(&[(3, 0.0), (1500, 0.25), (2999, 0.0)]);
        let mut weights = s.weights.clone();
        weights[3] = 0.0;
        weights[1500] = 0.25;
        weights[2999] = 0.0;
        let fresh = SoftmaxRow::of_weights(weights);
        assert_eq!(changed.blocks, fresh.blocks);
        assert_eq!(changed.total, fresh.total);
        assert_eq!(changed.positive, fresh.positive);
    }

    /// The rounding contract: the dispatched (vectorised) passes give the baseline-compiled
    /// loops' bits.
    #[test]
    fn vectorised_passes_match_the_plain_loops_bit_for_bit() {
        let row = masked_row(13, 70_001, 11, -60.0..12.0);
        let max = Screen(&row).run().max;
        assert_eq!(max.to_bits(), row_max(&row).to_bits());
        let inv_temperature = 1.0 / 0.7;
        let mut plain = vec![0.0f32; row.len()];
        let mut fast = vec![0.0f32; row.len()];
        let plain_blocks = Weigh {
            row: &row,
            max,
            inv_temperature,
            out: Some(&mut plain),
        }
        .run();
        let fast_blocks = vectorised(Weigh {
            row: &row,
            max,
            inv_temperature,
            out: Some(&mut fast),
        });
        assert_eq!(plain_blocks, fast_blocks);
        assert!(plain
            .iter()
            .zip(&fast)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        let total = |out| Weigh {
            row: &row,
            max,
            inv_temperature,
            out,
        };
        assert_eq!(total(None).run(), vectorised(total(None)));
        assert_eq!(BlockSums(&plain).run(), vectorised(BlockSums(&plain)));
        assert_eq!(ChunkMaxima(&row).run(), vectorised(ChunkMaxima(&row)));
        assert_eq!(Screen(&row).run(), screen(&row));
    }

    #[test]
    fn largest_is_best_k_bit_for_bit() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for case in 0..40 {
            let n = rng.random_range(1..20_000);
            let row: Vec<f32> = (0..n)
                .map(|_| match rng.random_range(0..50) {
                    0 => f32::NAN,
                    1 => f32::NEG_INFINITY,
                    2 => 3.0,
                    _ => (rng.random_range(-50..50) as f32) * 0.25,
                })
                .collect();
            for k in [1, 2, 40, 64, 300, n] {
                let want = best_k(
                    row.iter()
                        .enumerate()
                        .map(|(i, &v)| (i as u32, f64::from(v))),
                    k,
                );
                let got = largest(&row, k);
                assert_eq!(got.len(), want.len(), "case {case} k {k}");
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(g.0, w.0, "case {case} k {k}");
                    assert_eq!(g.1.to_bits(), (w.1 as f32).to_bits());
                }
            }
        }
    }
}
