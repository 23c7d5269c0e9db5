//! The row loops shared by the 32-weight block types (Q8_0, Q5_0, Q4_0), whose dot partner is
//! Q8_0: each weight block is decoded once to 32 signed 8-bit weights and one scale, then dotted
//! in integers with the same block of every activation row of the chunk, and the integer sum is
//! scaled by `d_w · d_x` into an `f32` accumulator per activation row (ggml's
//! `ggml_vec_dot_q*_0_q8_0`, batched over rows).

use std::ops::Range;

use super::acts::{BlockQ8_0, Quantized};
use super::{row_loop, ROW_CHUNK};

/// A GGUF block type of 32 weights with one scale and no offset (`w = d q`, `q` signed).
pub(super) trait Block32 {
    /// Bytes per block.
    const BYTES: usize;

    /// The scale and the 32 weights of `block` (exactly [`BYTES`](Self::BYTES) long).
    fn decode(block: &[u8]) -> (f32, [i8; 32]);

    /// The `f16` bits of `block`'s scale: every 32-weight GGUF type starts with it.
    fn scale_bits(block: &[u8]) -> u16 {
        u16::from_le_bytes([block[0], block[1]])
    }

    /// The block of scale bits `d` and weights `q` (each in the type's range), written to `out`
    /// ([`BYTES`](Self::BYTES) long): the inverse of [`decode`](Self::decode).
    fn encode(d: u16, q: &[i8; 32], out: &mut [u8]);

    /// The same as [`decode`](Self::decode), the weights in one 256-bit register.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C, and `block` must be [`BYTES`](Self::BYTES) long.
    #[cfg(target_arch = "x86_64")]
    unsafe fn decode_avx2(block: &[u8]) -> (f32, std::arch::x86_64::__m256i);
}

/// `out[j][i] = Σ_b d_w d_x Σ w·x` for weight rows `rows` (`i` counts from `rows.start`) and
/// every activation row `j`: the portable kernel and the oracle of the SIMD one.
pub(super) fn rows_scalar<B: Block32>(
    weights: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    acts: &Quantized<BlockQ8_0>,
    out: &mut [&mut [f32]],
) {
    row_loop::each_chunk(weights, row_bytes, rows, acts, out, |w_row, xs, m| {
        let mut acc = [0f32; ROW_CHUNK];
        for (b, block) in w_row.chunks_exact(B::BYTES).enumerate() {
            let (d, w) = B::decode(block);
            for (jj, a) in acc[..m].iter_mut().enumerate() {
                let x = &xs[jj][b];
                let sum: i32 = w
                    .iter()
                    .zip(&x.qs)
                    .map(|(&w, &x)| i32::from(w) * i32::from(x))
                    .sum();
                *a += (d * x.d) * sum as f32;
            }
        }
        acc
    });
}

/// One weight row against a chunk of `M` activation rows with AVX2: `|w|` (unsigned) times `x`
/// carrying `w`'s sign (`maddubs`, no saturation as `|w| ≤ 128` and `|x| ≤ 127`), pairs summed
/// to 8 `i32` lanes of 4 products, then one fused multiply-add by `d_w d_x` per block into 8
/// `f32` lanes per activation row, summed across lanes at the end. `M` is a constant so the
/// accumulators stay in registers.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `w_row` is whole `B::BYTES`-byte blocks, no more than
/// each activation row of `xs` has.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn chunk_avx2<B: Block32, const M: usize>(
    w_row: &[u8],
    xs: &[&[BlockQ8_0]; ROW_CHUNK],
) -> [f32; M] {
    use std::arch::x86_64::*;

    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); M];
    for (b, block) in w_row.chunks_exact(B::BYTES).enumerate() {
        // SAFETY: AVX2 is present (the caller's contract) and `block` is one whole block.
        super::simd_x86::prefetch_ahead(block);
        let (d, w) = unsafe { B::decode_avx2(block) };
        let w_abs = _mm256_sign_epi8(w, w);
        let dw = _mm256_set1_ps(d);
        for (a, x) in acc.iter_mut().zip(xs) {
            let x = &x[b];
            // SAFETY: `x.qs` is 32 bytes; the load is unaligned.
            let xq = unsafe { _mm256_loadu_si256(x.qs.as_ptr().cast()) };
            let pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(xq, w));
            let sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
            *a = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x.d)), sum, *a);
        }
    }
    super::simd_x86::hsums(acc)
}

/// [`chunk_avx2`] with AVX-512 VNNI's byte dot product (`vpdpbusd`, 256-bit): the activations'
/// unsigned form `x + 128` times `w`, accumulated onto `−128 Σ w` (computed once per weight
/// block), gives each lane's `Σ x w` in one instruction per block and row where AVX2 takes
/// three. The integer lanes are the same exact sums and the `f32` steps the same operations in
/// the same order, so the results are [`chunk_avx2`]'s bit for bit.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C, AVX-512F, AVX-512VL and AVX-512 VNNI; `w_row` as for
/// [`chunk_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
#[inline]
unsafe fn chunk_vnni<B: Block32, const M: usize>(
    w_row: &[u8],
    xs: &[&[BlockQ8_0]; ROW_CHUNK],
) -> [f32; M] {
    use std::arch::x86_64::*;

    let zero = _mm256_setzero_si256();
    let unsigned_128 = _mm256_set1_epi8(i8::MIN);
    let mut acc = [_mm256_setzero_ps(); M];
    for (b, block) in w_row.chunks_exact(B::BYTES).enumerate() {
        // SAFETY: AVX2 is present (the caller's contract) and `block` is one whole block.
        super::simd_x86::prefetch_ahead(block);
        let (d, w) = unsafe { B::decode_avx2(block) };
        let offset = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, unsigned_128, w));
        let dw = _mm256_set1_ps(d);
        for (a, x) in acc.iter_mut().zip(xs) {
            let x = &x[b];
            // SAFETY: `x.us` is 32 bytes; the load is unaligned.
            let xu = unsafe { _mm256_loadu_si256(x.us.as_ptr().cast()) };
            let sum = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(offset, xu, w));
            *a = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x.d)), sum, *a);
        }
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
    pub(super) unsafe fn rows_avx2<B: Block32>(BlockQ8_0) = chunk_avx2, "avx2,fma,f16c"
}

#[cfg(target_arch = "x86_64")]
super::row_loop::fixed_chunk_rows! {
    /// [`rows_scalar`] with AVX-512 VNNI ([`chunk_vnni`]); the same bits as [`rows_avx2`].
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA, F16C, AVX-512F, AVX-512VL and AVX-512 VNNI. `weights` must
    /// hold `rows.end` rows of `row_bytes` bytes, a whole number of `B::BYTES`-byte blocks,
    /// matching `acts`' blocks per row.
    pub(super) unsafe fn rows_vnni<B: Block32>(BlockQ8_0) =
        chunk_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"
}

/// [`rows_scalar`] with NEON dot products: the block is decoded by the portable decoder, the
/// 32 products summed in `i16` pairs (`|w x| ≤ 128 · 127`, two fit) then widened, and the
/// `f32` accumulation is the scalar kernel's, so the result is the scalar kernel's bit for bit.
///
/// # Safety
/// The CPU must have NEON. `weights` must hold `rows.end` rows of `row_bytes` bytes, a whole
/// number of `B::BYTES`-byte blocks, matching `acts`' blocks per row.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
pub(super) unsafe fn rows_neon<B: Block32>(
    weights: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    acts: &Quantized<BlockQ8_0>,
    out: &mut [&mut [f32]],
) {
    use std::arch::aarch64::*;

    row_loop::each_chunk(weights, row_bytes, rows, acts, out, |w_row, xs, m| {
        let mut acc = [0f32; ROW_CHUNK];
        for (b, block) in w_row.chunks_exact(B::BYTES).enumerate() {
            let (d, w) = B::decode(block);
            // SAFETY: `w` is 32 bytes: two 16-byte loads.
            let (w0, w1) = unsafe { (vld1q_s8(w.as_ptr()), vld1q_s8(w.as_ptr().add(16))) };
            for (jj, a) in acc[..m].iter_mut().enumerate() {
                let x = &xs[jj][b];
                // SAFETY: `x.qs` is 32 bytes: two 16-byte loads.
                let (x0, x1) =
                    unsafe { (vld1q_s8(x.qs.as_ptr()), vld1q_s8(x.qs.as_ptr().add(16))) };
                let p0 = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), w0, x0);
                let p1 = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), w1, x1);
                let sum = vaddvq_s32(vaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1)));
                *a += (d * x.d) * sum as f32;
            }
        }
        acc
    });
}
