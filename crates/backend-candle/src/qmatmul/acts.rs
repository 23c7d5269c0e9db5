//! The activations, quantized once per call to the weight type's dot-product partner, as ggml
//! does: Q8_0 blocks (32 values, one scale) for Q8_0 / Q5_0 / Q4_0 weights, Q8_K blocks (256
//! values, one `f32` scale and the sums of every 16 quants, which the K-quants' minimums and
//! offsets need) for Q4_K / Q6_K.

use mtp_core::quant::{GgmlType, QuantError, QK_K};

use super::{QMatMulError, ROW_CHUNK};

/// One Q8_0 block of activations, its `f16` scale widened once to `f32`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct BlockQ8_0 {
    /// `x ≈ d q`.
    pub d: f32,
    /// The quants, `|q| ≤ 127`.
    pub qs: [i8; 32],
    /// `q + 128` as unsigned bytes: the unsigned operand of the VNNI byte dot product
    /// (`Σ (q + 128) w − 128 Σ w = Σ q w`).
    pub us: [u8; 32],
    /// `−128 Σ q`: the start of the interleaved kernels' VNNI sums, whose unsigned operand is
    /// the weight `w + 128` (`Σ (w + 128) q − 128 Σ q = Σ w q`).
    pub minus_128_sum: i32,
}

/// One Q8_K block (ggml's `block_q8_K`).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct BlockQ8K {
    /// `x ≈ d q`.
    pub d: f32,
    /// The quants, `-127 ≤ q ≤ 127`.
    pub qs: [i8; QK_K],
    /// `bsums[g]` = the sum of `qs[16 g .. 16 g + 16]`.
    pub bsums: [i16; QK_K / 16],
}

/// `n` rows of activations as blocks, row-major (`blocks_per_row` blocks per row).
#[derive(Debug, Clone)]
pub(super) struct Quantized<B> {
    blocks: Vec<B>,
    blocks_per_row: usize,
}

impl<B> Quantized<B> {
    /// The blocks of activation row `j`.
    pub fn row(&self, j: usize) -> &[B] {
        &self.blocks[j * self.blocks_per_row..][..self.blocks_per_row]
    }

    /// The rows of the first `n` as chunks of [`ROW_CHUNK`] (the last padded with its own last
    /// row, whose results are not stored): what the kernels look up per weight row.
    pub fn row_chunks(&self, n: usize) -> Vec<[&[B]; ROW_CHUNK]> {
        (0..n.div_ceil(ROW_CHUNK))
            .map(|c| std::array::from_fn(|jj| self.row((c * ROW_CHUNK + jj).min(n - 1))))
            .collect()
    }

    /// Every block, row after row.
    #[cfg(test)]
    pub fn blocks(&self) -> &[B] {
        &self.blocks
    }
}

/// `[n, cols]` activations as Q8_0 blocks, bit-identical to mtp-core's quantizer and ggml's
/// `quantize_row_q8_0_ref` (`d = max|x| / 127`, `q = roundf(x · (1 / d))`, halves away from
/// zero), written straight into the kernels' blocks; `cols` must be a multiple of 32.
pub(super) fn quantize_q8_0(
    x: &[f32],
    n: usize,
    cols: usize,
) -> Result<Quantized<BlockQ8_0>, QMatMulError> {
    // The size checks (and their errors) of mtp-core's quantizer.
    GgmlType::Q8_0.tensor_bytes(n, cols)?;
    if n.checked_mul(cols) != Some(x.len()) {
        return Err(QuantError::SizeMismatch {
            format: "GGUF Q8_0".into(),
            rows: n,
            cols,
            reason: format!("{} values to quantize", x.len()),
        }
        .into());
    }
    Ok(Quantized {
        blocks: q8_0_blocks(x),
        blocks_per_row: cols / 32,
    })
}

/// Every 32 values of `x` as a Q8_0 block: compiled for AVX2 where the CPU has it (the same
/// code, vectorised 8 lanes wide; the portable build is SSE2 and spent about 3 ns a value),
/// else portable. The same bits either way.
fn q8_0_blocks(x: &[f32]) -> Vec<BlockQ8_0> {
    #[cfg(target_arch = "x86_64")]
    if super::Simd::Avx2.is_available() {
        // SAFETY: AVX2, FMA and F16C were detected just now.
        #[allow(unsafe_code)]
        return unsafe { q8_0_blocks_avx2(x) };
    }
    x.chunks_exact(32).map(block_q8_0).collect()
}

/// [`q8_0_blocks`] compiled with AVX2, the `f16` rounding of the scale by F16C.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_blocks_avx2(x: &[f32]) -> Vec<BlockQ8_0> {
    // A loop here, not `map(..).collect()`: the iterator's code is compiled outside this
    // function's target features, and the block quantizer would be inlined into it without
    // AVX2.
    let mut blocks = Vec::with_capacity(x.len() / 32);
    for block in x.as_chunks::<32>().0 {
        blocks.push(block_q8_0_avx2(block));
    }
    blocks
}

/// [`block_q8_0`] in AVX2 registers, the same bits: the largest magnitude by `max` (whose
/// second operand wins over a NaN, so NaN never enters), `q = t + [f ≥ ½] − [f ≤ −½]` with
/// `t` the truncation and `f` the fraction, a NaN product giving 0 as Rust's `as` does, and the
/// 32 quants packed to bytes in order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn block_q8_0_avx2(x: &[f32; 32]) -> BlockQ8_0 {
    use std::arch::x86_64::*;
    // SAFETY: `x` is 32 `f32`s, four unaligned loads of 8.
    #[allow(unsafe_code)]
    let v: [__m256; 4] = std::array::from_fn(|i| unsafe { _mm256_loadu_ps(x[8 * i..].as_ptr()) });
    let sign = _mm256_set1_ps(-0.0);
    let mut m = _mm256_setzero_ps();
    for v in v {
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v), m);
    }
    let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
    let d = amax / 127.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let (half, minus_half) = (_mm256_set1_ps(0.5), _mm256_set1_ps(-0.5));
    let q: [__m256i; 4] = v.map(|v| {
        let y = _mm256_mul_ps(v, _mm256_set1_ps(id));
        let t = _mm256_cvttps_epi32(y);
        let f = _mm256_sub_ps(y, _mm256_cvtepi32_ps(t));
        // The comparison masks are −1 where they hold.
        let up = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GE_OQ>(f, half));
        let down = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(f, minus_half));
        let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(y, y));
        _mm256_andnot_si256(nan, _mm256_add_epi32(_mm256_sub_epi32(t, up), down))
    });
    let sums = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    let s4 = _mm_add_epi32(
        _mm256_castsi256_si128(sums),
        _mm256_extracti128_si256::<1>(sums),
    );
    let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    let sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2)));
    // Packing works within 128-bit lanes: 4-quant runs come out as q0 q1 q2 q3 (first halves)
    // then the second halves; the permutation puts them back in order.
    let bytes = _mm256_packs_epi16(
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    );
    let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    let unsigned = _mm256_xor_si256(bytes, _mm256_set1_epi8(i8::MIN));
    let (mut qs, mut us) = ([0i8; 32], [0u8; 32]);
    // SAFETY: both are 32 bytes; unaligned stores.
    #[allow(unsafe_code)]
    unsafe {
        _mm256_storeu_si256(qs.as_mut_ptr().cast(), bytes);
        _mm256_storeu_si256(us.as_mut_ptr().cast(), unsigned);
    }
    BlockQ8_0 {
        d: f16_round_f16c(d),
        minus_128_sum: -128 * sum,
        qs,
        us,
    }
}

/// The largest `|v|` of `x` (0 for none; a NaN never counts, as `f32::max` skips it): per lane
/// of 8, then across the lanes. A maximum is exact in any order, so this is the sequential
/// fold's value; the compiler cannot reorder that fold into vectors itself (without fast-math
/// it keeps the order of a floating-point reduction), but keeps these 8 independent ones
/// in one register.
#[inline(always)]
fn max_abs(x: &[f32]) -> f32 {
    let larger = |m: f32, v: f32| if v > m { v } else { m };
    let (chunks, rest) = x.as_chunks::<8>();
    let mut lanes = [0f32; 8];
    for c in chunks {
        lanes = std::array::from_fn(|l| larger(lanes[l], c[l].abs()));
    }
    let m = lanes.into_iter().fold(0f32, larger);
    rest.iter().fold(m, |m, v| larger(m, v.abs()))
}

/// `v` rounded to `f16` and back by F16C (round to nearest, ties to even: `half`'s bits, where
/// `half`'s runtime-dispatched conversion is an out-of-line call per block).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "f16c")]
#[inline]
fn f16_round_f16c(v: f32) -> f32 {
    use std::arch::x86_64::*;
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
        _mm_set_ss(v),
    )))
}

/// One Q8_0 block of activations. `roundf` by integers (no libm call, so the loop vectorises):
/// `t = trunc(y)`, `f = y − t` (exact for `|y| < 2²³`; here `|y| ≤ 127`), then one step away
/// from zero when `|f| ≥ ½`. A NaN gives 0, as `roundf(NaN) as i8` does.
#[inline(always)]
fn block_q8_0(x: &[f32]) -> BlockQ8_0 {
    let amax = max_abs(x);
    let d = amax / 127.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut qs = [0i8; 32];
    for (q, &v) in qs.iter_mut().zip(x) {
        let y = v * id;
        let t = y as i32;
        let f = y - t as f32;
        *q = (t + i32::from(f >= 0.5) - i32::from(f <= -0.5)) as i8;
    }
    let mut us = [0u8; 32];
    for (u, &q) in us.iter_mut().zip(&qs) {
        *u = (q as u8) ^ 0x80;
    }
    BlockQ8_0 {
        d: half::f16::from_f32(d).to_f32(),
        minus_128_sum: -128 * qs.iter().map(|&q| i32::from(q)).sum::<i32>(),
        qs,
        us,
    }
}

/// `[n, cols]` activations as Q8_K blocks; `cols` must be a multiple of 256 (the caller checks
/// the weight's shape, whose rows have the same length).
pub(super) fn quantize_q8_k(x: &[f32], cols: usize) -> Quantized<BlockQ8K> {
    Quantized {
        blocks: q8_k_blocks(x),
        blocks_per_row: cols / QK_K,
    }
}

/// Every 256 values of `x` as a Q8_K block, compiled for AVX2 where the CPU has it (as
/// [`q8_0_blocks`]); the same bits either way.
fn q8_k_blocks(x: &[f32]) -> Vec<BlockQ8K> {
    #[cfg(target_arch = "x86_64")]
    if super::Simd::Avx2.is_available() {
        // SAFETY: AVX2, FMA and F16C were detected just now.
        #[allow(unsafe_code)]
        return unsafe { q8_k_blocks_avx2(x) };
    }
    x.chunks_exact(QK_K).map(block_q8_k).collect()
}

/// [`q8_k_blocks`] compiled with AVX2.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_k_blocks_avx2(x: &[f32]) -> Vec<BlockQ8K> {
    // A loop, as in `q8_0_blocks_avx2`, so `block_q8_k` is inlined here, with AVX2.
    let mut blocks = Vec::with_capacity(x.len() / QK_K);
    for block in x.chunks_exact(QK_K) {
        blocks.push(block_q8_k(block));
    }
    blocks
}

/// 1.5 · 2²³: a float this large has no fraction bits, so `(y + M) − M` is `y` rounded to an
/// integer, half to even, for `|y| < 2²²`.
const ROUNDING_MAGIC: f32 = 12_582_912.0;

/// ggml's `quantize_row_q8_K_ref` for one block: the value of largest magnitude `max` (the first
/// on ties) maps to `-127`, `q = min(127, round_half_even(-127 x / max))`, `d = 1 / (-127 / max)`.
#[inline(always)]
pub(super) fn block_q8_k(x: &[f32]) -> BlockQ8K {
    // The largest magnitude (a pass that vectorises), then the first value that has it.
    let amax = max_abs(x);
    let max = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(0.0);
    let mut block = BlockQ8K {
        d: 0.0,
        qs: [0; QK_K],
        bsums: [0; QK_K / 16],
    };
    if amax == 0.0 {
        return block;
    }
    let iscale = -127.0 / max;
    for (q, &v) in block.qs.iter_mut().zip(x) {
        // ggml's `nearest_int`: adding and removing 1.5·2²³ rounds half to even (the product
        // is within ±127 + rounding, far inside the trick's range), with no libm call.
        *q = ((((iscale * v) + ROUNDING_MAGIC) - ROUNDING_MAGIC) as i32).min(127) as i8;
    }
    for (sum, group) in block.bsums.iter_mut().zip(block.qs.chunks_exact(16)) {
        *sum = group.iter().map(|&q| i16::from(q)).sum();
    }
    block.d = 1.0 / iscale;
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values that stress the rules: ordinary ones, exact halves after scaling, ties of
    /// magnitude with opposite signs, ±0, subnormals, infinities and NaN.
    fn awkward_values(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed | 1;
        (0..len)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                match (state % 40, i % 97) {
                    (_, 0) => 127.0,
                    (_, 1) => -127.0,
                    (0, _) => f32::NAN,
                    (1, _) => f32::INFINITY,
                    (2, _) => f32::NEG_INFINITY,
                    (3, _) => -0.0,
                    (4, _) => 1e-41,
                    (5..=15, _) => (state % 9) as f32 - 4.5,
                    _ => ((state >> 11) as f32 / (1u64 << 53) as f32 - 0.5) * 300.0,
                }
            })
            .collect()
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_quantizers_give_the_portable_blocks() {
        if !super::super::Simd::Avx2.is_available() {
            eprintln!("skipped: this CPU has no AVX2 + FMA + F16C");
            return;
        }
        for seed in 1..20 {
            let x = awkward_values(4 * QK_K, seed);
            // SAFETY: AVX2, FMA and F16C were detected above.
            #[allow(unsafe_code)]
            let (fast0, fast_k) = unsafe { (q8_0_blocks_avx2(&x), q8_k_blocks_avx2(&x)) };
            let slow0: Vec<BlockQ8_0> = x.chunks_exact(32).map(block_q8_0).collect();
            for (f, s) in fast0.iter().zip(&slow0) {
                assert_eq!(f.d.to_bits(), s.d.to_bits(), "seed {seed}");
                assert_eq!((f.qs, f.us, f.minus_128_sum), (s.qs, s.us, s.minus_128_sum));
            }
            let slow_k: Vec<BlockQ8K> = x.chunks_exact(QK_K).map(block_q8_k).collect();
            for (f, s) in fast_k.iter().zip(&slow_k) {
                assert_eq!(f.d.to_bits(), s.d.to_bits(), "seed {seed}");
                assert_eq!((f.qs, f.bsums), (s.qs, s.bsums), "seed {seed}");
            }
        }
        // The scale's `f16` rounding, every kind of value.
        for bits in (0..=u32::MAX).step_by(65_537) {
            let v = f32::from_bits(bits);
            // SAFETY: F16C was detected above (with AVX2).
            #[allow(unsafe_code)]
            let fast = unsafe { f16_round_f16c(v) };
            assert_eq!(
                fast.to_bits(),
                half::f16::from_f32(v).to_f32().to_bits(),
                "{v:e}"
            );
        }
    }

    #[test]
    fn the_largest_magnitude_is_the_first_on_ties_and_keeps_its_sign() {
        let mut x = vec![0.5f32; QK_K];
        x[3] = -2.0;
        x[7] = 2.0;
        let b = block_q8_k(&x);
        // The first of -2 and 2 is `max`: iscale = -127 / -2, so -2 maps to -127 and 2 to 127
        // (had 2 come first, the signs would be swapped).
        assert_eq!((b.qs[3], b.qs[7]), (-127, 127));
    }
}
