//! Attention for a few query rows (a decode step, a verify of `k + 1` tokens) on the CPU,
//! straight from the key and value caches, the mask read from its geometry: in `f32`, and in
//! `bf16` / `f16` widened exactly to `f32`, computed the same way and rounded once at the end.
//!
//! The trait's default runs two batched matmuls through `gemm` (which packs its operands: for one
//! query row against an 800-key cache that packing is most of the work — about 9 % of a decode
//! step's CPU samples on Gemma 3 270M at that context), adds the mask table and a softmax. Here
//! each query row is computed alone: its scores against the visible keys (dot products in 8
//! lanes), the softmax (`exp` of `score − max`, divided by the sum), the probability-weighted sum
//! of the values — so a row's result does not depend on how many rows the call has (a verify row
//! gets a decode row's bits). Masked keys are skipped (`exp(−∞) = 0` exactly in the default) and
//! a row that sees no key gives zeros, as the default does. The queries that share a key/value
//! head (a GQA group's heads, every row) are tasks of up to 16 queries on the quantized matmul's
//! pool; a task reads its keys and values in blocks, once for all its queries, and dots two
//! query rows with four keys at a time. `examples/attention_bench.rs` times it at Gemma 3 270M's
//! shapes (4 heads sharing one key/value head, 221 keys), one noisy 2-core VM: 1 / 5 rows
//! 58–78 / 370–380 µs before the four-key dots and the pool, 52–68 / 187–298 µs with one task
//! per head, 43–46 / 157–172 µs with the shared key blocks and paired rows (63–69 / 279–313 µs
//! for the per-head tasks in the same alternating runs).

use std::ops::Range;

use candle_core::{CpuStorage, DType, Storage, Tensor};
use mtp_core::{AttentionBias, AttentionMask};

use crate::qmatmul::pool::SpinPool;
use crate::row_scan::contiguous_f32;
use crate::{CandleBackend, Result};

/// `attention(q, k, v)` for `f32`, `bf16` or `f16` CPU tensors (all three of one dtype) `q` `[b, hq, tq, d]` (`tq ≤ max_rows`, the [`RowInvariance`](crate::RowInvariance) limit: a longer prefill chunk goes to the default's matmuls),
/// contiguous `k` `[b, hkv, tk, d]` and `v` `[b, hkv, tk, dv]`; `None` for anything else
/// (other devices, dtypes, layouts or inconsistent shapes: the default handles, or rejects,
/// those).
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: &AttentionBias<CandleBackend>,
    scale: f32,
    max_rows: usize,
) -> Result<Option<Tensor>> {
    let (&[b, hq, tq, d], &[kb, hkv, tk, kd], &[vb, vh, vt, dv]) = (q.dims(), k.dims(), v.dims())
    else {
        return Ok(None);
    };
    let consistent = b == kb && b == vb && d == kd && hkv == vh && tk == vt && hkv > 0;
    if !consistent || hq % hkv != 0 || bias.tq() != tq || bias.tk() != tk || tq > max_rows {
        return Ok(None);
    }
    let dtype = q.dtype();
    let float = matches!(dtype, DType::F32 | DType::BF16 | DType::F16);
    if !q.device().is_cpu() || !float || [k, v].iter().any(|t| t.dtype() != dtype) {
        return Ok(None);
    }
    // Half precision is widened to `f32` exactly, computed as `f32` is, and the result rounded
    // once to the dtype. The widening copies the caches on every call (one pass over what the
    // call reads anyway); the `f32` kernels read them in place — a cache's view too, whose heads
    // lie apart in its buffer (a `[b, hkv, capacity, d]` buffer narrowed to its filled keys).
    // A layout whose rows are not packed within each head is copied into one that is, so every
    // call reaches the same kernel: falling back to the default's matmuls for some cache
    // layouts would give a row different bits depending on the cache's capacity.
    let widened;
    let (q, k, v) = if dtype == DType::F32 {
        (q.contiguous()?, rows_packed(k)?, rows_packed(v)?)
    } else {
        widened = (k.to_dtype(DType::F32)?, v.to_dtype(DType::F32)?);
        (
            q.to_dtype(DType::F32)?.contiguous()?,
            rows_packed(&widened.0)?,
            rows_packed(&widened.1)?,
        )
    };
    let shape = Shape {
        batch: b,
        hq,
        groups: hq / hkv,
        tq,
        tk,
        d,
        dv,
    };
    // The caches are read in place, under their storage read guards (no candle call runs while
    // they are held).
    let out = contiguous_f32(&q, |q| {
        head_rows_f32(&k, |k, k_heads| {
            head_rows_f32(&v, |v, v_heads| {
                run(&Inputs {
                    q,
                    k,
                    v,
                    k_heads,
                    v_heads,
                    shape,
                    mask: bias.mask(),
                    scale,
                })
            })
        })
    });
    match out.flatten().flatten() {
        Some(out) => {
            let out = Tensor::from_vec(out?, (b, hq, tq, dv), q.device())?;
            Ok(Some(if dtype == DType::F32 {
                out
            } else {
                out.to_dtype(dtype)?
            }))
        }
        None => Ok(None),
    }
}

#[derive(Clone, Copy)]
struct Shape {
    batch: usize,
    hq: usize,
    groups: usize,
    tq: usize,
    tk: usize,
    d: usize,
    dv: usize,
}

/// One call's operands: `q` `[batch, hq, tq, d]` row-major; `k` `[batch, hkv, tk, d]` and `v`
/// `[batch, hkv, tk, dv]` with each head's rows packed, the heads where `k_heads` and `v_heads`
/// place them.
struct Inputs<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    k_heads: HeadStrides,
    v_heads: HeadStrides,
    shape: Shape,
    mask: &'a AttentionMask,
    scale: f32,
}

/// Where each (sequence, head)'s packed `[t, d]` rows start in the values a
/// [`head_rows_f32`] callback gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HeadStrides {
    /// Heads per sequence.
    heads: usize,
    /// Elements from one sequence to the next.
    batch: usize,
    /// Elements from one head to the next.
    head: usize,
}

impl HeadStrides {
    /// The first element of head `index` (counted over every sequence's heads).
    fn offset(self, index: usize) -> usize {
        index / self.heads * self.batch + index % self.heads * self.head
    }
}

/// Where each head's rows start, for a `[b, h, t, d]` layout whose rows are packed within each
/// head (last axis unit-strided, rows `d` apart): a cache's view qualifies whatever its
/// buffer's capacity. `None` for any other layout.
fn head_strides(layout: &candle_core::Layout) -> Option<HeadStrides> {
    let (&[b, h, t, d], &[sb, sh, st, sd]) = (layout.dims(), layout.stride()) else {
        return None;
    };
    let packed = (d <= 1 || sd == 1) && (t <= 1 || st == d);
    (packed && b > 0 && h > 0).then_some(HeadStrides {
        heads: h,
        batch: sb,
        head: sh,
    })
}

/// `f(values, heads)` over a `[b, h, t, d]` `f32` CPU tensor with [`head_strides`], read in
/// place: `values` starts at the tensor's first element. `None` for any other tensor.
fn head_rows_f32<T>(x: &Tensor, f: impl FnOnce(&[f32], HeadStrides) -> T) -> Option<T> {
    let (storage, layout) = x.storage_and_layout();
    let Storage::Cpu(CpuStorage::F32(values)) = &*storage else {
        return None;
    };
    let heads = head_strides(layout)?;
    let &[b, h, t, d] = layout.dims() else {
        return None;
    };
    let extent = (b - 1) * heads.batch + (h - 1) * heads.head + t * d;
    let values = values.get(layout.start_offset()..)?.get(..extent)?;
    Some(f(values, heads))
}

/// `x` itself when its layout has [`head_strides`] (the kernel reads it in place), else a
/// contiguous copy (which has).
fn rows_packed(x: &Tensor) -> Result<Tensor> {
    match head_strides(x.layout()) {
        Some(_) => Ok(x.clone()),
        None => Ok(x.contiguous()?),
    }
}

/// Every (sequence, key/value head)'s queries — the query heads of its group, every row — on
/// the quantized matmul's [`SpinPool`], a few queries per task, each task writing its own rows
/// of the output. A task reads its group's keys and values once for all its queries (a verify of
/// 5 rows on Gemma 3 270M: 20 queries share one key/value head), and each query's result is
/// computed as if alone (the split changes no bits).
fn run(x: &Inputs<'_>) -> Result<Vec<f32>> {
    let s = x.shape;
    let per_group = s.groups * s.tq;
    let groups = s.batch * (s.hq / s.groups);
    // Enough tasks for every thread, none longer than `MAX_TASK_QUERIES` queries.
    let threads = SpinPool::global().threads();
    let pieces = threads
        .div_ceil(groups.max(1))
        .max(per_group.div_ceil(MAX_TASK_QUERIES))
        .clamp(1, per_group.max(1));
    let per_task = per_group.div_ceil(pieces);
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
    let total = s.batch * s.hq * s.tq;
    let out = SpinPool::global().run_columns(1, total * s.dv, per_task * s.dv, |start, out| {
        let out = &mut *out[0];
        let first = start / s.dv.max(1);
        let queries = first..first + out.len() / s.dv.max(1);
        // A task's queries may straddle two groups: each run within one group at a time.
        let mut done = 0;
        for piece in split_at_groups(queries, per_group) {
            let rows = &mut out[done * s.dv..][..piece.len() * s.dv];
            done += piece.len();
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: AVX2 and FMA were detected above.
                #[allow(unsafe_code)]
                unsafe {
                    queries_avx2(x, piece, rows)
                };
                continue;
            }
            queries_of_group::<Portable>(x, piece, rows);
        }
    });
    Ok(out.map_err(|_| crate::qmatmul::QMatMulError::TaskPanicked)?)
}

/// The most queries one task takes (their rows, scores and the key block it dots them with stay
/// in the level-1 cache).
const MAX_TASK_QUERIES: usize = 16;

/// `queries` cut where a group of `per_group` consecutive queries ends.
fn split_at_groups(queries: Range<usize>, per_group: usize) -> impl Iterator<Item = Range<usize>> {
    let per_group = per_group.max(1);
    let mut at = queries.start;
    std::iter::from_fn(move || {
        (at < queries.end).then(|| {
            let end = queries.end.min((at / per_group + 1) * per_group);
            let piece = at..end;
            at = end;
            piece
        })
    })
}

/// [`queries_of_group`] compiled with AVX2 and FMA (the value sums become 256-bit vectors; the
/// dot products are written out in [`dots_avx2`]).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(unsafe_code)]
unsafe fn queries_avx2(x: &Inputs<'_>, queries: Range<usize>, out: &mut [f32]) {
    queries_of_group::<Avx2>(x, queries, out)
}

/// The `[queries, dv]` output of `queries` (indices into the output's `[batch, hq, tq]` rows,
/// all of one key/value head's group). Each query sees a contiguous run of keys (visibility is
/// convex in (query, key)); its scores, softmax and value sum are those of the query alone —
/// the keys are taken in blocks shared by all the queries, but every query's sums run over its
/// keys in order.
#[inline(always)]
fn queries_of_group<D: Dot>(x: &Inputs<'_>, queries: Range<usize>, out: &mut [f32]) {
    let (s, mask) = (x.shape, x.mask);
    let Some(first) = queries.clone().next() else {
        return;
    };
    let (bi, h) = (first / (s.hq * s.tq), first / s.tq % s.hq);
    let kv = bi * (s.hq / s.groups) + h / s.groups;
    let keys = &x.k[x.k_heads.offset(kv)..][..s.tk * s.d];
    let values = &x.v[x.v_heads.offset(kv)..][..s.tk * s.dv];
    let key = |j: usize| &keys[j * s.d..][..s.d];
    let query = |row: usize| &x.q[row * s.d..][..s.d];
    // Each query's visible keys `lo..hi` (empty: the row stays zero).
    let visible: Vec<Range<usize>> = queries
        .clone()
        .map(|row| {
            let qp = mask.query_start + row % s.tq;
            let sees = |j: &usize| mask.allows(qp, mask.key_start + j);
            match (0..s.tk).find(sees) {
                Some(lo) => lo..(lo..s.tk).rfind(sees).map_or(lo, |j| j + 1),
                None => 0..0,
            }
        })
        .collect();
    let (lo, hi) = visible
        .iter()
        .filter(|r| !r.is_empty())
        .fold((s.tk, 0), |(lo, hi), r| (lo.min(r.start), hi.max(r.end)));
    if lo >= hi {
        return;
    }
    // Scores, then probabilities, per query over the keys `lo..hi` (entries outside a query's
    // own run are not read).
    let span = hi - lo;
    let mut probs = vec![0f32; visible.len() * span];
    for block in (lo..hi).step_by(SCORE_KEYS) {
        let end = (block + SCORE_KEYS).min(hi);
        // Two queries at a time over the whole block (a score outside a query's own run is
        // computed and never read; the runs differ by a few keys at most).
        let mut rows = queries.clone().zip(probs.chunks_exact_mut(span));
        while let Some((r0, p0)) = rows.next() {
            let (p0, p0_rest) = p0[block - lo..end - lo].as_chunks_mut::<KEYS_AT_ONCE>();
            let at = end - p0_rest.len();
            match rows.next() {
                Some((r1, p1)) => {
                    let (p1, p1_rest) = p1[block - lo..end - lo].as_chunks_mut::<KEYS_AT_ONCE>();
                    let qs = [query(r0), query(r1)];
                    for (n, (o0, o1)) in p0.iter_mut().zip(p1).enumerate() {
                        let keys = std::array::from_fn(|i| key(block + n * KEYS_AT_ONCE + i));
                        let [d0, d1] = D::dots(qs, keys);
                        *o0 = d0.map(|v| v * x.scale);
                        *o1 = d1.map(|v| v * x.scale);
                    }
                    for (n, (o0, o1)) in p0_rest.iter_mut().zip(p1_rest).enumerate() {
                        let [[d0], [d1]] = D::dots(qs, [key(at + n)]);
                        (*o0, *o1) = (d0 * x.scale, d1 * x.scale);
                    }
                }
                None => {
                    for (n, o0) in p0.iter_mut().enumerate() {
                        let keys = std::array::from_fn(|i| key(block + n * KEYS_AT_ONCE + i));
                        let [d0] = D::dots([query(r0)], keys);
                        *o0 = d0.map(|v| v * x.scale);
                    }
                    for (n, o0) in p0_rest.iter_mut().enumerate() {
                        let [[d0]] = D::dots([query(r0)], [key(at + n)]);
                        *o0 = d0 * x.scale;
                    }
                }
            }
        }
    }
    for (seen, p) in visible.iter().zip(probs.chunks_exact_mut(span)) {
        if !seen.is_empty() {
            softmax_in_place(&mut p[seen.start - lo..seen.end - lo]);
        }
    }
    weighted_sums(out, values, &visible, &probs, lo);
}

/// `p ← exp(p − max p) / Σ exp(p − max p)`, in order.
#[inline(always)]
fn softmax_in_place(p: &mut [f32]) {
    let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for p in p.iter_mut() {
        *p = crate::fast_exp::exp(*p - max);
        sum += *p;
    }
    for p in p.iter_mut() {
        *p /= sum;
    }
}

/// For each query `q`: `out[q] += Σ_{j ∈ visible[q]} probs[q][j − lo] · values[j]`, keys in order
/// for every element. Done in blocks of [`VALUE_BLOCK`] elements and [`VALUE_KEYS`] keys, the
/// block's values read once for every query and each query's sums kept in registers over the
/// block; every element of every query sees the same products and sums in the same order as a
/// loop over its keys, so the same bits.
#[inline(always)]
fn weighted_sums(
    out: &mut [f32],
    values: &[f32],
    visible: &[Range<usize>],
    probs: &[f32],
    lo: usize,
) {
    let Some(dv) = out.len().checked_div(visible.len()) else {
        return;
    };
    if dv == 0 {
        return;
    }
    let span = probs.len() / visible.len();
    let hi = visible.iter().map(|r| r.end).max().unwrap_or(lo);
    let blocks = dv / VALUE_BLOCK;
    for c in 0..blocks {
        for key_block in (lo..hi).step_by(VALUE_KEYS) {
            let end = (key_block + VALUE_KEYS).min(hi);
            for ((dst, seen), p) in out
                .chunks_exact_mut(dv)
                .zip(visible)
                .zip(probs.chunks(span))
            {
                let (from, to) = (seen.start.max(key_block), seen.end.min(end));
                if from >= to {
                    continue;
                }
                let (dst, _) = dst.as_chunks_mut::<VALUE_BLOCK>();
                let mut acc = dst[c];
                for (j, &weight) in (from..to).zip(&p[from - lo..to - lo]) {
                    let (row, _) = values[j * dv..][..dv].as_chunks::<VALUE_BLOCK>();
                    let v = &row[c];
                    acc = std::array::from_fn(|l| acc[l] + weight * v[l]);
                }
                dst[c] = acc;
            }
        }
    }
    let done = blocks * VALUE_BLOCK;
    for ((dst, seen), p) in out
        .chunks_exact_mut(dv)
        .zip(visible)
        .zip(probs.chunks(span))
    {
        for j in seen.clone() {
            let weight = p[j - lo];
            for (o, &x) in dst[done..]
                .iter_mut()
                .zip(&values[j * dv + done..][..dv - done])
            {
                *o += weight * x;
            }
        }
    }
}

/// Keys whose scores are computed together for all of a task's queries.
const SCORE_KEYS: usize = 16;

/// Keys whose values are summed together for all of a task's queries.
const VALUE_KEYS: usize = 32;

/// Value elements summed together in [`weighted_sums`] (8 AVX2 registers).
const VALUE_BLOCK: usize = 64;

/// Keys a pair of query rows is dotted with together ([`Dot::dots`]).
const KEYS_AT_ONCE: usize = 4;

/// How query rows are dotted with keys: every implementation gives [`dot`]'s bits.
trait Dot {
    /// Each of `Q` query rows dotted with each of `N` keys, each result [`dot`]'s bits:
    /// independent sums, so a SIMD implementation runs them side by side (one sum is a chain of
    /// dependent adds; several keep the adder busy) and loads each key once for all the rows.
    fn dots<const Q: usize, const N: usize>(
        queries: [&[f32]; Q],
        keys: [&[f32]; N],
    ) -> [[f32; N]; Q];
}

/// [`dot`] as the compiler vectorises it.
struct Portable;

impl Dot for Portable {
    #[inline(always)]
    fn dots<const Q: usize, const N: usize>(
        queries: [&[f32]; Q],
        keys: [&[f32]; N],
    ) -> [[f32; N]; Q] {
        queries.map(|q| keys.map(|k| dot(q, k)))
    }
}

/// [`dots_avx2`]; used only by [`queries_avx2`], after AVX2 and FMA were detected.
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Dot for Avx2 {
    #[inline(always)]
    fn dots<const Q: usize, const N: usize>(
        queries: [&[f32]; Q],
        keys: [&[f32]; N],
    ) -> [[f32; N]; Q] {
        // SAFETY: this type is only used by `queries_avx2`, which runs after AVX2 and FMA were
        // detected.
        #[allow(unsafe_code)]
        unsafe {
            dots_avx2(queries, keys)
        }
    }
}

/// `Σ a_i b_i` in 8 lanes (summed in a fixed order at the end).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, ra) = a.as_chunks::<8>();
    let (b8, rb) = b.as_chunks::<8>();
    for (x, y) in a8.iter().zip(b8) {
        lanes = std::array::from_fn(|l| lanes[l] + x[l] * y[l]);
    }
    let mut sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for (x, y) in ra.iter().zip(rb) {
        sum += x * y;
    }
    sum
}

/// [`dot`] of each of `Q` query rows with each of `N` keys, one 256-bit register per pair, side
/// by side: each pair's products, sums and final order are [`dot`]'s, so each result has its
/// bits. Written out because the compiler, left to itself inside the attention loop, split the
/// 8 lanes into 2-lane halves and shuffles (about 60 % of this module's samples on a 200-token
/// context, measured with `perf`); 2 rows × [`KEYS_AT_ONCE`] keys keep the adders busy and
/// load each key chunk once for both rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn dots_avx2<const Q: usize, const N: usize>(
    queries: [&[f32]; Q],
    keys: [&[f32]; N],
) -> [[f32; N]; Q] {
    use std::arch::x86_64::*;
    let len = queries.first().map_or(0, |q| q.len());
    let chunks = len / 8;
    let mut lanes = [[_mm256_setzero_ps(); N]; Q];
    for c in 0..chunks {
        // SAFETY: every query and key is `len` long (the caller slices them so), so the 8
        // `f32`s from `8 c` (c < len / 8) are inside each; the loads are unaligned.
        #[allow(unsafe_code)]
        let (xs, ys) = unsafe {
            (
                queries.map(|q| _mm256_loadu_ps(q.as_ptr().add(8 * c))),
                keys.map(|k| _mm256_loadu_ps(k.as_ptr().add(8 * c))),
            )
        };
        for (row, x) in lanes.iter_mut().zip(xs) {
            for (l, y) in row.iter_mut().zip(ys) {
                *l = _mm256_add_ps(*l, _mm256_mul_ps(x, y));
            }
        }
    }
    let done = 8 * chunks;
    std::array::from_fn(|r| {
        std::array::from_fn(|i| {
            let l = lanes[r][i];
            // h = [l0 + l4, l1 + l5, l2 + l6, l3 + l7]; then (h0 + h1) + (h2 + h3).
            let h = _mm_add_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps::<1>(l));
            let pairs = _mm_add_ps(h, _mm_movehdup_ps(h));
            let mut sum = _mm_cvtss_f32(pairs) + _mm_cvtss_f32(_mm_movehl_ps(pairs, pairs));
            for (x, y) in queries[r][done..].iter().zip(&keys[i][done..]) {
                sum += x * y;
            }
            sum
        })
    })
}

#[cfg(test)]
mod tests {
    use mtp_core::{AttentionBias, AttentionMask, Backend, Causality, DType};

    use crate::quantized_tests::Rng;
    use crate::CandleBackend;

    fn random(b: &CandleBackend, shape: &[usize], seed: u64) -> crate::Result<candle_core::Tensor> {
        let mut rng = Rng(seed | 1);
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|_| rng.unit()).collect();
        b.from_f32(&values, shape, DType::F32)
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_dot_gives_the_portable_dots_bits() {
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
            eprintln!("skipped: this CPU has no AVX2 + FMA");
            return;
        }
        let mut rng = Rng(7);
        for len in [0, 1, 7, 8, 9, 63, 64, 255, 256, 257] {
            let a: Vec<f32> = (0..len).map(|_| rng.unit()).collect();
            let a2: Vec<f32> = (0..len).map(|_| rng.unit()).collect();
            let b: Vec<f32> = (0..len).map(|_| rng.unit()).collect();
            // SAFETY: AVX2 and FMA were detected above.
            #[allow(unsafe_code)]
            let [[fast]] = unsafe { super::dots_avx2([&a[..]], [&b[..]]) };
            assert_eq!(fast.to_bits(), super::dot(&a, &b).to_bits(), "length {len}");
            let keys: Vec<Vec<f32>> = (0..super::KEYS_AT_ONCE)
                .map(|_| (0..len).map(|_| rng.unit()).collect())
                .collect();
            // SAFETY: AVX2 and FMA were detected above.
            #[allow(unsafe_code)]
            let pairs: [[f32; super::KEYS_AT_ONCE]; 2] = unsafe {
                super::dots_avx2([&a[..], &a2[..]], std::array::from_fn(|i| &keys[i][..]))
            };
            for (got, query) in pairs.iter().zip([&a, &a2]) {
                for (got, key) in got.iter().zip(&keys) {
                    assert_eq!(
                        got.to_bits(),
                        super::dot(query, key).to_bits(),
                        "length {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_blocked_value_sums_give_a_key_by_key_loops_bits() {
        let mut rng = Rng(11);
        // 259 = four whole blocks and a remainder; 75 keys = more than two key blocks.
        let dv = 4 * super::VALUE_BLOCK + 3;
        let keys = 2 * super::VALUE_KEYS + 11;
        let values: Vec<f32> = (0..keys * dv).map(|_| rng.unit()).collect();
        // Runs starting, ending and lying inside key blocks; one query sees nothing.
        let visible = [3..70, 0..75, 33..34, 0..0, 40..75];
        let lo = 0;
        let span = 75;
        let probs: Vec<f32> = (0..visible.len() * span)
            .map(|_| rng.unit().abs())
            .collect();
        let mut blocked = vec![0f32; visible.len() * dv];
        super::weighted_sums(&mut blocked, &values, &visible, &probs, lo);
        let mut looped = vec![0f32; visible.len() * dv];
        for (q, seen) in visible.iter().enumerate() {
            let dst = &mut looped[q * dv..][..dv];
            for j in seen.clone() {
                let w = probs[q * span + j - lo];
                for (o, &x) in dst.iter_mut().zip(&values[j * dv..][..dv]) {
                    *o += w * x;
                }
            }
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&blocked), bits(&looped));
    }

    #[test]
    fn few_rows_match_the_default_matmuls_and_each_row_alone() -> crate::Result<()> {
        let b = CandleBackend::from_spec("cpu")?;
        let masks = [
            AttentionMask::causal(20, 0),
            AttentionMask::causal(20, 3).with_window(Some(6)),
            AttentionMask {
                query_start: 0,
                key_start: 0,
                causality: Causality::Bidirectional,
                window: None,
            },
            // Every row blind: the keys all lie after the queries.
            AttentionMask::causal(0, 40),
        ];
        let mut seed = 1;
        for (hq, hkv) in [(4, 1), (4, 2), (2, 2)] {
            // 17 rows of 2 groups: tasks straddle a group's end.
            for tq in [1, 2, 5, 17] {
                for mask in masks {
                    let (tk, d) = (24, 40);
                    seed += 3;
                    let q = random(&b, &[1, hq, tq, d], seed)?;
                    let k = random(&b, &[1, hkv, tk, d], seed + 1)?;
                    let v = random(&b, &[1, hkv, tk, d], seed + 2)?;
                    let bias = AttentionBias::new(&b, mask, tq, tk, DType::F32)?;
                    let fast = super::attention(&q, &k, &v, &bias, 0.3, ROWS)?.expect("fast path");
                    let slow =
                        mtp_core::backend::default_attention_with_bias(&b, &q, &k, &v, &bias, 0.3)?;
                    let (f, s) = (b.to_vec_f32(&fast)?, b.to_vec_f32(&slow)?);
                    let worst = f
                        .iter()
                        .zip(&s)
                        .map(|(x, y)| (x - y).abs())
                        .fold(0f32, f32::max);
                    assert!(worst < 1e-5, "hq {hq} hkv {hkv} tq {tq} {mask:?}: {worst}");
                    // Row i alone (its own mask geometry) gets the same bits as inside the call.
                    for i in 0..tq {
                        let mut alone_mask = mask;
                        alone_mask.query_start += i;
                        let qi = b.slice(&q, 2, i, 1)?;
                        let bias1 = AttentionBias::new(&b, alone_mask, 1, tk, DType::F32)?;
                        let one = super::attention(&qi, &k, &v, &bias1, 0.3, ROWS)?.expect("fast");
                        let whole = b.slice(&fast, 2, i, 1)?;
                        assert_eq!(b.to_vec_f32(&one)?, b.to_vec_f32(&whole)?, "row {i}");
                    }
                }
            }
        }
        Ok(())
    }

    /// What a verify block meets in the engine: keys and values that are a cache's view (its
    /// `[1, hkv, capacity, d]` buffer narrowed to the filled keys: with several key/value heads
    /// the heads lie apart), while a decode row alone meets a view of another length — narrowed
    /// or, at a full buffer, contiguous. Each row gets the same bits either way.
    #[test]
    fn cache_views_of_any_capacity_give_a_row_the_same_bits() -> crate::Result<()> {
        let b = CandleBackend::from_spec("cpu")?;
        let mut seed = 101;
        for (hq, hkv, d) in [(8, 2, 64), (4, 2, 40), (6, 3, 16), (4, 1, 32)] {
            for dtype in [DType::F32, DType::BF16] {
                let (start, tq, capacity) = (15, 5, 32);
                seed += 5;
                let cast = |x: candle_core::Tensor| b.cast(&x, dtype);
                let q = cast(random(&b, &[1, hq, tq, d], seed)?)?;
                let k_buf = cast(random(&b, &[1, hkv, capacity, d], seed + 1)?)?;
                let v_buf = cast(random(&b, &[1, hkv, capacity, d], seed + 2)?)?;
                let tk = start + tq;
                let (k, v) = (b.slice(&k_buf, 2, 0, tk)?, b.slice(&v_buf, 2, 0, tk)?);
                let mask = AttentionMask::causal(start, 0).with_window(Some(12));
                let bias = AttentionBias::new(&b, mask, tq, tk, dtype)?;
                let block = b.attention_with_bias(&q, &k, &v, &bias, 1.0)?;
                let bits = |x: &candle_core::Tensor| -> crate::Result<Vec<u32>> {
                    let x = b.cast(x, DType::F32)?;
                    Ok(b.to_vec_f32(&x)?.iter().map(|v| v.to_bits()).collect())
                };
                for i in 0..tq {
                    let seen = start + i + 1;
                    let qi = b.slice(&q, 2, i, 1)?;
                    let bias1 = AttentionBias::new(
                        &b,
                        AttentionMask {
                            query_start: start + i,
                            ..mask
                        },
                        1,
                        seen,
                        dtype,
                    )?;
                    let want = bits(&b.slice(&block, 2, i, 1)?)?;
                    let narrowed = (b.slice(&k_buf, 2, 0, seen)?, b.slice(&v_buf, 2, 0, seen)?);
                    let packed = (narrowed.0.contiguous()?, narrowed.1.contiguous()?);
                    for (label, (k1, v1)) in [("narrowed", &narrowed), ("contiguous", &packed)] {
                        let one = b.attention_with_bias(&qi, k1, v1, &bias1, 1.0)?;
                        assert_eq!(
                            bits(&one)?,
                            want,
                            "hq {hq} hkv {hkv} {dtype:?} row {i} {label}"
                        );
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn task_ranges_are_cut_at_group_ends() {
        let pieces: Vec<_> = super::split_at_groups(7..25, 10).collect();
        assert_eq!(pieces, [7..10, 10..20, 20..25]);
        let whole: Vec<_> = super::split_at_groups(0..10, 10).collect();
        assert_eq!(whole, vec![0..10]);
        assert_eq!(super::split_at_groups(4..4, 10).count(), 0);
    }

    /// The row limit the tests pass.
    const ROWS: usize = 64;

    #[test]
    fn other_inputs_take_the_default() -> crate::Result<()> {
        let b = CandleBackend::from_spec("cpu")?;
        let mask = AttentionMask::causal(70, 0);
        let many = random(&b, &[1, 2, ROWS + 1, 8], 3)?;
        let k = random(&b, &[1, 2, 80, 8], 4)?;
        let bias = AttentionBias::new(&b, mask, ROWS + 1, 80, DType::F32)?;
        assert!(super::attention(&many, &k, &k, &bias, 1.0, ROWS)?.is_none());
        let q = random(&b, &[1, 2, 1, 8], 5)?;
        let bias1 = AttentionBias::new(&b, mask, 1, 80, DType::F32)?;
        let int_keys = b.cast(&k, DType::I32)?;
        assert!(super::attention(&q, &int_keys, &int_keys, &bias1, 1.0, ROWS)?.is_none());
        Ok(())
    }

    /// A key view whose rows are not packed within a head (a transpose) is copied into one that
    /// is, not left to the default: its result has the bits of the contiguous keys'.
    #[test]
    fn unpacked_key_layouts_are_copied_not_left_to_the_default() -> crate::Result<()> {
        let b = CandleBackend::from_spec("cpu")?;
        let mask = AttentionMask::causal(70, 0);
        let q = random(&b, &[1, 2, 1, 8], 5)?;
        let bias1 = AttentionBias::new(&b, mask, 1, 80, DType::F32)?;
        let kt = b.transpose(&random(&b, &[1, 80, 2, 8], 6)?, 1, 2)?;
        assert!(!kt.is_contiguous() && super::head_rows_f32(&kt, |_, _| ()).is_none());
        let strided = super::attention(&q, &kt, &kt, &bias1, 1.0, ROWS)?.expect("fast path");
        let packed = kt.contiguous()?;
        let copied = super::attention(&q, &packed, &packed, &bias1, 1.0, ROWS)?.expect("fast");
        assert_eq!(b.to_vec_f32(&strided)?, b.to_vec_f32(&copied)?);
        Ok(())
    }
}
