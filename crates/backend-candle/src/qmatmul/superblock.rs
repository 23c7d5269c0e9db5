//! The row loops shared by the 256-weight K-quant types (Q4_K, Q6_K), whose dot partner is
//! Q8_K. Each weight block is decoded once to 256 unsigned quants `q`, an integer scale per
//! group of 16, and an integer "bias" multiplier per group that accounts for the type's
//! minimums (Q4_K: `w = d·sc·q − dmin·m`) or offset (Q6_K: `w = d·sc·(q − 32)`), so that
//!
//! `Σ w·x = d_x · (d · Σ_g scale_g Σ_{i∈g} q_i x_i − dbias · Σ_g bias_g · bsum_g)`
//!
//! with the integer sums exact and `bsum_g` the Q8_K block's per-16 sums of `x`'s quants (ggml's
//! `ggml_vec_dot_q4_K_q8_K` / `ggml_vec_dot_q6_K_q8_K`, batched over rows).

use std::ops::Range;

use mtp_core::quant::QK_K;

use super::acts::{BlockQ8K, Quantized};
use super::{row_loop, ROW_CHUNK};

/// One K-quant block decoded for the portable kernel.
pub(super) struct Decoded {
    /// Scale of the quant sum.
    pub d: f32,
    /// Scale of the bias sum.
    pub dbias: f32,
    /// The unsigned quants in weight order.
    pub q: [u8; QK_K],
    /// The integer scale of each group of 16 weights.
    pub scale: [i32; QK_K / 16],
    /// The integer bias multiplier of each group of 16 weights.
    pub bias: [i32; QK_K / 16],
}

/// One K-quant block decoded into AVX2 registers.
#[cfg(target_arch = "x86_64")]
pub(super) struct DecodedAvx2 {
    /// Scale of the quant sum.
    pub d: f32,
    /// Scale of the bias sum.
    pub dbias: f32,
    /// The quants, 32 per register, in weight order (unsigned, at most 63).
    pub q: [std::arch::x86_64::__m256i; 8],
    /// Per register, 16 `i16` lanes: the scale of its first 16 weights in lanes 0..8, of the
    /// next 16 in lanes 8..16 (what `madd` multiplies the pair sums of `maddubs` by).
    pub scale: [std::arch::x86_64::__m256i; 8],
    /// The 16 bias multipliers as `i16` lanes, against the 16 `bsums` of the Q8_K block.
    pub bias: std::arch::x86_64::__m256i,
}

/// A GGUF K-quant block type.
pub(super) trait SuperBlock {
    /// Bytes per block.
    const BYTES: usize;

    /// Decode `block` (exactly [`BYTES`](Self::BYTES) long).
    fn decode(block: &[u8]) -> Decoded;

    /// Decode `block` into registers.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C, and `block` must be [`BYTES`](Self::BYTES) long.
    #[cfg(target_arch = "x86_64")]
    unsafe fn decode_avx2(block: &[u8]) -> DecodedAvx2;
}

/// The block's contribution `d_x (d · sum − dbias · Σ_g bias_g bsum_g)` from its exact
/// integer quant sum `sum` (the scalar and NEON kernels' `f32` arithmetic, in one order).
fn block_value(w: &Decoded, x: &BlockQ8K, sum: i32) -> f32 {
    let bias: i32 = w
        .bias
        .iter()
        .zip(&x.bsums)
        .map(|(&m, &s)| m * i32::from(s))
        .sum();
    (w.d * x.d) * sum as f32 - (w.dbias * x.d) * bias as f32
}

/// `out[j][i]` = weight row `rows.start + i` dotted with activation row `j`: the portable
/// kernel and the oracle of the SIMD one.
pub(super) fn rows_scalar<B: SuperBlock>(
    weights: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    acts: &Quantized<BlockQ8K>,
    out: &mut [&mut [f32]],
) {
    row_loop::each_chunk(weights, row_bytes, rows, acts, out, |w_row, xs, m| {
        let mut acc = [0f32; ROW_CHUNK];
        for (b, block) in w_row.chunks_exact(B::BYTES).enumerate() {
            let w = B::decode(block);
            for (jj, a) in acc[..m].iter_mut().enumerate() {
                let x = &xs[jj][b];
                let mut sum = 0i32;
                for (g, (q, xq)) in w.q.chunks_exact(16).zip(x.qs.chunks_exact(16)).enumerate() {
                    let group: i32 = q
                        .iter()
                        .zip(xq)
                        .map(|(&q, &x)| i32::from(q) * i32::from(x))
                        .sum();
                    sum += w.scale[g] * group;
                }
                *a += block_value(&w, x, sum);
            }
        }
        acc
    });
}

/// The quant sums of one weight block against each of `M` activation blocks' `32 k ..` slice:
/// AVX2 `maddubs` of the unsigned quants with `x` (no saturation: `q ≤ 63`, `|x| ≤ 127`) then
/// `madd` by the group scales into 8 `i32` lanes, added up over the 8 registers.
#[cfg(target_arch = "x86_64")]
macro_rules! quant_sums {
    ($w:expr, $xs:expr, $b:expr, $m:ident, |$sum:ident, $pairs:ident, $scale:ident| $acc:expr) => {{
        // Even and odd registers in two chains, so one row's sums are not one dependent
        // chain of 8 (the latency, not the throughput, bound a single row).
        let mut sums = [[_mm256_setzero_si256(); $m]; 2];
        for (k, (&q, &$scale)) in $w.q.iter().zip(&$w.scale).enumerate() {
            for ($sum, x) in sums[k % 2].iter_mut().zip($xs) {
                // SAFETY: `x.qs` holds 256 bytes, so 32 from `32 k` (k < 8) are inside.
                let xq = unsafe { _mm256_loadu_si256(x[$b].qs.as_ptr().add(32 * k).cast()) };
                let $pairs = _mm256_maddubs_epi16(q, xq);
                *$sum = $acc;
            }
        }
        let [mut even, odd] = sums;
        for (e, o) in even.iter_mut().zip(odd) {
            *e = _mm256_add_epi32(*e, o);
        }
        even
    }};
}

/// `acc += d_x (d · sum − dbias · Σ_g bias_g bsum_g)` for block `b` of each of the `M`
/// activation rows, from the block's quant sums: the bias sum as one `madd` of the Q8_K `bsums`
/// with the multipliers, then two fused multiply-adds per row (shared by both x86 kernels).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn add_block<const M: usize>(
    acc: &mut [std::arch::x86_64::__m256; M],
    sums: [std::arch::x86_64::__m256i; M],
    w: &DecodedAvx2,
    xs: &[&[BlockQ8K]; ROW_CHUNK],
    b: usize,
) {
    use std::arch::x86_64::*;
    let (dw, dbias) = (_mm256_set1_ps(w.d), _mm256_set1_ps(w.dbias));
    for ((a, sum), x) in acc.iter_mut().zip(sums).zip(xs) {
        let x = &x[b];
        // SAFETY: `x.bsums` is 16 `i16`s, 32 bytes.
        let bsums = unsafe { _mm256_loadu_si256(x.bsums.as_ptr().cast()) };
        let bias = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, w.bias));
        let xd = _mm256_set1_ps(x.d);
        *a = _mm256_fmadd_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(sum), *a);
        *a = _mm256_fnmadd_ps(_mm256_mul_ps(dbias, xd), bias, *a);
    }
}

/// One weight row against a chunk of `M` activation rows with AVX2: per block the quant sums
/// ([`quant_sums`]), the bias sum as one `madd` of the Q8_K `bsums` with the multipliers, then
/// two fused multiply-adds per block and row. `M` is a constant so the sums stay in registers.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `w_row` is whole `B::BYTES`-byte blocks, no more than
/// each activation row of `xs` has.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn chunk_avx2<B: SuperBlock, const M: usize>(
    w_row: &[u8],
    xs: &[&[BlockQ8K]; ROW_CHUNK],
) -> [f32; M] {
    use std::arch::x86_64::*;

    let mut acc = [_mm256_setzero_ps(); M];
    for (b, block) in w_row.chunks_exact(B::BYTES).enumerate() {
        // SAFETY: AVX2 is present (the caller's contract) and `block` is one whole block.
        super::simd_x86::prefetch_block_ahead::<{ super::simd_x86::PREFETCH_BYTES }>(block);
        let w = unsafe { B::decode_avx2(block) };
        let sums = quant_sums!(w, xs, b, M, |sum, pairs, scale| {
            _mm256_add_epi32(*sum, _mm256_madd_epi16(pairs, scale))
        });
        add_block(&mut acc, sums, &w, xs, b);
    }
    super::simd_x86::hsums(acc)
}

/// [`chunk_avx2`] with AVX-512 VNNI's word dot product (`vpdpwssd`: the `madd` by the group
/// scales and the add in one instruction). The integer sums are the same exact values and the
/// `f32` steps the same, so the results are [`chunk_avx2`]'s bit for bit.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C, AVX-512F, AVX-512VL and AVX-512 VNNI; `w_row` as for
/// [`chunk_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
#[inline]
unsafe fn chunk_vnni<B: SuperBlock, const M: usize>(
    w_row: &[u8],
    xs: &[&[BlockQ8K]; ROW_CHUNK],
) -> [f32; M] {
    use std::arch::x86_64::*;

    let mut acc = [_mm256_setzero_ps(); M];
    for (b, block) in w_row.chunks_exact(B::BYTES).enumerate() {
        // SAFETY: AVX2 is present (the caller's contract) and `block` is one whole block.
        super::simd_x86::prefetch_block_ahead::<{ super::simd_x86::PREFETCH_BYTES }>(block);
        let w = unsafe { B::decode_avx2(block) };
        let sums = quant_sums!(w, xs, b, M, |sum, pairs, scale| {
            _mm256_dpwssd_epi32(*sum, pairs, scale)
        });
        add_block(&mut acc, sums, &w, xs, b);
    }
    super::simd_x86::hsums(acc)
}

#[cfg(target_arch = "x86_64")]
super::row_loop::fixed_chunk_rows! {
    /// [`rows_scalar`] with AVX2 ([`chunk_avx2`] per weight row and chunk of rows).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C. `weights` must hold `rows.end` rows of `row_bytes`
    /// bytes, a whole number of `B::BYTES`-byte blocks, matching `acts`' blocks per row.
    pub(super) unsafe fn rows_avx2<B: SuperBlock>(BlockQ8K) = chunk_avx2, "avx2,fma,f16c"
}

#[cfg(target_arch = "x86_64")]
super::row_loop::fixed_chunk_rows! {
    /// [`rows_scalar`] with AVX-512 VNNI ([`chunk_vnni`]); the same bits as [`rows_avx2`].
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA, F16C, AVX-512F, AVX-512VL and AVX-512 VNNI. `weights` must
    /// hold `rows.end` rows of `row_bytes` bytes, a whole number of `B::BYTES`-byte blocks,
    /// matching `acts`' blocks per row.
    pub(super) unsafe fn rows_vnni<B: SuperBlock>(BlockQ8K) =
        chunk_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"
}

/// [`rows_scalar`] with NEON dot products per group of 16 (`q ≤ 63`, `|x| ≤ 127`: two products
/// fit an `i16`); the block is decoded by the portable decoder and the `f32` accumulation is
/// the scalar kernel's, so the result is the scalar kernel's bit for bit.
///
/// # Safety
/// The CPU must have NEON. `weights` must hold `rows.end` rows of `row_bytes` bytes, a whole
/// number of `B::BYTES`-byte blocks, matching `acts`' blocks per row.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
pub(super) unsafe fn rows_neon<B: SuperBlock>(
    weights: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    acts: &Quantized<BlockQ8K>,
    out: &mut [&mut [f32]],
) {
    use std::arch::aarch64::*;

    row_loop::each_chunk(weights, row_bytes, rows, acts, out, |w_row, xs, m| {
        let mut acc = [0f32; ROW_CHUNK];
        for (b, block) in w_row.chunks_exact(B::BYTES).enumerate() {
            let w = B::decode(block);
            for (jj, a) in acc[..m].iter_mut().enumerate() {
                let x = &xs[jj][b];
                let mut sum = 0i32;
                for (g, &scale) in w.scale.iter().enumerate() {
                    // SAFETY: group `g < 16` spans bytes 16 g .. 16 g + 16 of the 256-byte
                    // `w.q` and `x.qs`. The quants are at most 63, so they are valid `i8`s.
                    let (q, xq) = unsafe {
                        (
                            vreinterpretq_s8_u8(vld1q_u8(w.q.as_ptr().add(16 * g))),
                            vld1q_s8(x.qs.as_ptr().add(16 * g)),
                        )
                    };
                    let p = vmlal_high_s8(vmull_s8(vget_low_s8(q), vget_low_s8(xq)), q, xq);
                    sum += scale * vaddlvq_s16(p);
                }
                *a += block_value(&w, x, sum);
            }
        }
        acc
    });
}
