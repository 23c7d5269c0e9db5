//! Attention for a few query rows (a decode step, a verify of `k + 1` tokens) on the CPU in
//! `f32`, straight from the key and value caches, the mask read from its geometry.
//!
//! The trait's default runs two batched matmuls through `gemm` (which packs its operands: for one
//! query row against an 800-key cache that packing is most of the work — about 9 % of a decode
//! step's CPU samples on Gemma 3 270M at that context), adds the mask table and a softmax. Here
//! each query row is one pass: its scores against the visible keys (dot products in 8 lanes,
//! four keys side by side), the softmax (`exp` of `score − max`, divided by the sum), the
//! probability-weighted sum of the values. Every row is computed alone, so a row's result does
//! not depend on how many rows the call has (a verify row gets a decode row's bits); masked keys
//! are skipped (`exp(−∞) = 0` exactly in the default) and a row that sees no key gives zeros, as
//! the default does. The (sequence, head) pairs are tasks on the quantized matmul's pool.
//! `examples/attention_bench.rs` times it at Gemma 3 270M's shapes (4 heads, 221 keys): 1 / 5
//! rows 58–78 / 370–380 µs before the four-key dots and the pool, 52–68 / 187–298 µs after (one
//! noisy 2-core VM).

use candle_core::{DType, Tensor};
use mtp_core::{AttentionBias, AttentionMask};

use crate::qmatmul::pool::SpinPool;
use crate::row_scan::contiguous_f32;
use crate::{CandleBackend, Result};

/// The most query rows taken here; more (a prefill chunk) go to the default's matmuls.
pub const MAX_QUERY_ROWS: usize = 64;

/// `attention(q, k, v)` for `f32` CPU tensors `q` `[b, hq, tq, d]` (`tq ≤ MAX_QUERY_ROWS`),
/// contiguous `k` `[b, hkv, tk, d]` and `v` `[b, hkv, tk, dv]`; `None` for anything else
/// (other devices, dtypes, layouts or inconsistent shapes: the default handles, or rejects,
/// those).
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: &AttentionBias<CandleBackend>,
    scale: f32,
) -> Result<Option<Tensor>> {
    let (&[b, hq, tq, d], &[kb, hkv, tk, kd], &[vb, vh, vt, dv]) = (q.dims(), k.dims(), v.dims())
    else {
        return Ok(None);
    };
    let consistent = b == kb && b == vb && d == kd && hkv == vh && tk == vt && hkv > 0;
    if !consistent || hq % hkv != 0 || bias.tq() != tq || bias.tk() != tk || tq > MAX_QUERY_ROWS {
        return Ok(None);
    }
    if !q.device().is_cpu() || [q, k, v].iter().any(|t| t.dtype() != DType::F32) {
        return Ok(None);
    }
    let q = q.contiguous()?;
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
        contiguous_f32(k, |k| {
            contiguous_f32(v, |v| {
                run(&Inputs {
                    q,
                    k,
                    v,
                    shape,
                    mask: bias.mask(),
                    scale,
                })
            })
        })
    });
    match out.flatten().flatten() {
        Some(out) => Ok(Some(Tensor::from_vec(out?, (b, hq, tq, dv), q.device())?)),
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

/// One call's operands: `q` `[batch, hq, tq, d]`, `k` `[batch, hkv, tk, d]`, `v`
/// `[batch, hkv, tk, dv]`, row-major.
struct Inputs<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    shape: Shape,
    mask: &'a AttentionMask,
    scale: f32,
}

/// Every (sequence, query head) on the quantized matmul's [`SpinPool`]: one task each, writing
/// its own `[tq, dv]` block of the output (a head's rows are computed as if alone, so the
/// split changes no bits).
fn run(x: &Inputs<'_>) -> Result<Vec<f32>> {
    let s = x.shape;
    let head_len = s.tq * s.dv;
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
    let out =
        SpinPool::global().run_columns(1, s.batch * s.hq * head_len, head_len, |start, out| {
            let (index, out) = (start / head_len.max(1), &mut *out[0]);
            let (bi, h) = (index / s.hq, index % s.hq);
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: AVX2 and FMA were detected above.
                #[allow(unsafe_code)]
                return unsafe { head_avx2(x, bi, h, out) };
            }
            head::<Portable>(x, bi, h, out)
        });
    Ok(out.map_err(|_| crate::qmatmul::QMatMulError::TaskPanicked)?)
}

/// [`head`] compiled with AVX2 and FMA (the value sums become 256-bit vectors; the dot products
/// are written out in [`dots_avx2`]).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(unsafe_code)]
unsafe fn head_avx2(x: &Inputs<'_>, bi: usize, h: usize, out: &mut [f32]) {
    head::<Avx2>(x, bi, h, out)
}

/// The `[tq, dv]` output of query head `h` of sequence `bi`, row by row.
#[inline(always)]
fn head<D: Dot>(x: &Inputs<'_>, bi: usize, h: usize, out: &mut [f32]) {
    let (q, k, v, s, mask, scale) = (x.q, x.k, x.v, x.shape, x.mask, x.scale);
    let hkv = s.hq / s.groups;
    let mut scores = Vec::with_capacity(s.tk);
    let mut visible = Vec::with_capacity(s.tk);
    let kv = bi * hkv + h / s.groups;
    let keys = &k[kv * s.tk * s.d..][..s.tk * s.d];
    let values = &v[kv * s.tk * s.dv..][..s.tk * s.dv];
    for (i, out) in out.chunks_exact_mut(s.dv).enumerate() {
        let row = (bi * s.hq + h) * s.tq + i;
        let query = &q[row * s.d..][..s.d];
        let qp = mask.query_start + i;
        visible.clear();
        visible.extend((0..s.tk).filter(|&j| mask.allows(qp, mask.key_start + j)));
        if visible.is_empty() {
            continue;
        }
        scores.clear();
        scores.resize(visible.len(), 0f32);
        let key = |j: usize| &keys[j * s.d..][..s.d];
        let (quads, rest) = visible.as_chunks::<KEYS_AT_ONCE>();
        let (score_quads, score_rest) = scores.as_chunks_mut::<KEYS_AT_ONCE>();
        for (quad, out) in quads.iter().zip(score_quads) {
            *out = D::dots(query, quad.map(key)).map(|v| v * scale);
        }
        for (&j, out) in rest.iter().zip(score_rest) {
            *out = D::dot(query, key(j)) * scale;
        }
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for p in scores.iter_mut() {
            *p = crate::fast_exp::exp(*p - max);
            sum += *p;
        }
        for p in scores.iter_mut() {
            *p /= sum;
        }
        weighted_sum(out, values, &visible, &scores);
    }
}

/// `dst += Σ_j weights_j · values[j]` over the visible keys `j`, keys in order for every
/// element. Done in blocks of [`VALUE_BLOCK`] elements, all keys per block, so a block's sums
/// stay in registers instead of being loaded and stored once per key; every element sees the
/// same products and sums in the same order as a loop over the keys, so the same bits.
#[inline(always)]
fn weighted_sum(dst: &mut [f32], values: &[f32], visible: &[usize], weights: &[f32]) {
    let dv = dst.len();
    let (blocks, rest) = dst.as_chunks_mut::<VALUE_BLOCK>();
    for (c, block) in blocks.iter_mut().enumerate() {
        let mut acc = *block;
        for (&j, &weight) in visible.iter().zip(weights) {
            let (row, _) = values[j * dv..][..dv].as_chunks::<VALUE_BLOCK>();
            let v = &row[c];
            acc = std::array::from_fn(|l| acc[l] + weight * v[l]);
        }
        *block = acc;
    }
    let done = dv - rest.len();
    for (&j, &weight) in visible.iter().zip(weights) {
        for (o, &x) in rest.iter_mut().zip(&values[j * dv + done..][..dv - done]) {
            *o += weight * x;
        }
    }
}

/// Value elements summed together in [`weighted_sum`] (8 AVX2 registers).
const VALUE_BLOCK: usize = 64;

/// Keys one query row is dotted with together ([`Dot::dots`]).
const KEYS_AT_ONCE: usize = 4;

/// How a query row is dotted with a key: every implementation gives [`dot`]'s bits.
trait Dot {
    fn dot(a: &[f32], b: &[f32]) -> f32;

    /// `a` dotted with each of [`KEYS_AT_ONCE`] keys, each [`dot`]'s bits: independent sums, so
    /// a SIMD implementation runs them side by side (one key's sum is a chain of dependent
    /// adds; four keep the adder busy) and loads `a` once for all four.
    fn dots(a: &[f32], keys: [&[f32]; KEYS_AT_ONCE]) -> [f32; KEYS_AT_ONCE] {
        keys.map(|k| Self::dot(a, k))
    }
}

/// [`dot`] as the compiler vectorises it.
struct Portable;

impl Dot for Portable {
    #[inline(always)]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        dot(a, b)
    }
}

/// [`dots_avx2`]; used only by [`head_avx2`], after AVX2 and FMA were detected.
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Dot for Avx2 {
    #[inline(always)]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: this type is only used by `head_avx2`, which runs after AVX2 and FMA were
        // detected.
        #[allow(unsafe_code)]
        unsafe {
            dots_avx2(a, [b])[0]
        }
    }

    #[inline(always)]
    fn dots(a: &[f32], keys: [&[f32]; KEYS_AT_ONCE]) -> [f32; KEYS_AT_ONCE] {
        // SAFETY: as for `dot`.
        #[allow(unsafe_code)]
        unsafe {
            dots_avx2(a, keys)
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

/// [`dot`] of `a` with each of `N` keys, one 256-bit register per key, side by side: each key's
/// products, sums and final order are [`dot`]'s, so each result has its bits. Written out
/// because the compiler, left to itself inside the attention loop, split the 8 lanes into 2-lane
/// halves and shuffles (about 60 % of this module's samples on a 200-token context, measured
/// with `perf`); `N` = 1 is one key's dot, [`KEYS_AT_ONCE`] keeps the adder busy.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn dots_avx2<const N: usize>(a: &[f32], keys: [&[f32]; N]) -> [f32; N] {
    use std::arch::x86_64::*;
    let (a8, ra) = a.as_chunks::<8>();
    let k8 = keys.map(|k| k.as_chunks::<8>().0);
    let mut lanes = [_mm256_setzero_ps(); N];
    for (c, x) in a8.iter().enumerate() {
        // SAFETY: `x` is 8 `f32`s; the load is unaligned.
        #[allow(unsafe_code)]
        let x = unsafe { _mm256_loadu_ps(x.as_ptr()) };
        for (l, k) in lanes.iter_mut().zip(&k8) {
            // Every key is `a.len()` long (the caller slices them so), so chunk `c` exists.
            let y = &k[c];
            // SAFETY: `y` is 8 `f32`s; the load is unaligned.
            #[allow(unsafe_code)]
            let y = unsafe { _mm256_loadu_ps(y.as_ptr()) };
            *l = _mm256_add_ps(*l, _mm256_mul_ps(x, y));
        }
    }
    let done = a.len() - ra.len();
    std::array::from_fn(|i| {
        let l = lanes[i];
        // h = [l0 + l4, l1 + l5, l2 + l6, l3 + l7]; then (h0 + h1) + (h2 + h3).
        let h = _mm_add_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps::<1>(l));
        let pairs = _mm_add_ps(h, _mm_movehdup_ps(h));
        let mut sum = _mm_cvtss_f32(pairs) + _mm_cvtss_f32(_mm_movehl_ps(pairs, pairs));
        for (x, y) in ra.iter().zip(&keys[i][done..]) {
            sum += x * y;
        }
        sum
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
            let b: Vec<f32> = (0..len).map(|_| rng.unit()).collect();
            // SAFETY: AVX2 and FMA were detected above.
            #[allow(unsafe_code)]
            let [fast] = unsafe { super::dots_avx2(&a, [&b[..]]) };
            assert_eq!(fast.to_bits(), super::dot(&a, &b).to_bits(), "length {len}");
            let keys: Vec<Vec<f32>> = (0..super::KEYS_AT_ONCE)
                .map(|_| (0..len).map(|_| rng.unit()).collect())
                .collect();
            // SAFETY: AVX2 and FMA were detected above.
            #[allow(unsafe_code)]
            let four: [f32; super::KEYS_AT_ONCE] =
                unsafe { super::dots_avx2(&a, std::array::from_fn(|i| &keys[i][..])) };
            for (got, key) in four.iter().zip(&keys) {
                assert_eq!(got.to_bits(), super::dot(&a, key).to_bits(), "length {len}");
            }
        }
    }

    #[test]
    fn the_blocked_value_sum_gives_a_key_by_key_loops_bits() {
        let mut rng = Rng(11);
        // 259 = four whole blocks and a remainder.
        let dv = 4 * super::VALUE_BLOCK + 3;
        let keys = 9;
        let values: Vec<f32> = (0..keys * dv).map(|_| rng.unit()).collect();
        let visible = [0, 2, 3, 5, 8];
        let weights: Vec<f32> = visible.iter().map(|_| rng.unit().abs()).collect();
        let mut blocked = vec![0f32; dv];
        super::weighted_sum(&mut blocked, &values, &visible, &weights);
        let mut looped = vec![0f32; dv];
        for (&j, &w) in visible.iter().zip(&weights) {
            for (o, &x) in looped.iter_mut().zip(&values[j * dv..][..dv]) {
                *o += w * x;
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
            for tq in [1, 2, 5] {
                for mask in masks {
                    let (tk, d) = (24, 40);
                    seed += 3;
                    let q = random(&b, &[1, hq, tq, d], seed)?;
                    let k = random(&b, &[1, hkv, tk, d], seed + 1)?;
                    let v = random(&b, &[1, hkv, tk, d], seed + 2)?;
                    let bias = AttentionBias::new(&b, mask, tq, tk, DType::F32)?;
                    let fast = super::attention(&q, &k, &v, &bias, 0.3)?.expect("fast path");
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
                        let one = super::attention(&qi, &k, &v, &bias1, 0.3)?.expect("fast");
                        let whole = b.slice(&fast, 2, i, 1)?;
                        assert_eq!(b.to_vec_f32(&one)?, b.to_vec_f32(&whole)?, "row {i}");
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn other_inputs_take_the_default() -> crate::Result<()> {
        let b = CandleBackend::from_spec("cpu")?;
        let mask = AttentionMask::causal(70, 0);
        let many = random(&b, &[1, 2, super::MAX_QUERY_ROWS + 1, 8], 3)?;
        let k = random(&b, &[1, 2, 80, 8], 4)?;
        let bias = AttentionBias::new(&b, mask, super::MAX_QUERY_ROWS + 1, 80, DType::F32)?;
        assert!(super::attention(&many, &k, &k, &bias, 1.0)?.is_none());
        let q = random(&b, &[1, 2, 1, 8], 5)?;
        let bias1 = AttentionBias::new(&b, mask, 1, 80, DType::F32)?;
        let half = b.cast(&k, DType::F16)?;
        assert!(super::attention(&b.cast(&q, DType::F16)?, &half, &half, &bias1, 1.0)?.is_none());
        // A strided key view (heads not contiguous after a transpose) is left to the default.
        let kt = b.transpose(&random(&b, &[1, 80, 2, 8], 6)?, 1, 2)?;
        assert!(super::attention(&q, &kt, &kt, &bias1, 1.0)?.is_none());
        Ok(())
    }
}
