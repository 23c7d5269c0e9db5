//! Small AVX2 helpers the x86-64 kernels share.

use std::arch::x86_64::*;

/// The little-endian `f16` at byte `at` of `b`, as `f32`, by F16C (one instruction, where
/// `half`'s runtime-dispatched conversion is an out-of-line call per block).
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// The sum of the 8 lanes of `v`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn hsum(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)))
}

/// How far ahead of the block being decoded the weights are prefetched, in bytes. With
/// several activation rows a weight row takes long enough to compute that the hardware
/// prefetcher alone leaves the loop waiting on memory; a few rows ahead keeps it streaming.
pub(super) const PREFETCH_BYTES: usize = 2048;

/// Ask for the cache line [`PREFETCH_BYTES`] after the start of `block` (a hint: an address
/// past the end of the weights is never read, and a prefetch cannot fault).
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn prefetch_ahead(block: &[u8]) {
    _mm_prefetch::<_MM_HINT_T0>(block.as_ptr().wrapping_add(PREFETCH_BYTES).cast());
}

/// How far ahead the interleaved kernels prefetch: their group blocks (544 bytes, 16 rows'
/// weights) take longer per byte than a row's, so the same lead in bytes is less lead in time;
/// with the earlier 8-row groups (272-byte blocks) the head (640 → 262 144, Q8_0) at 5 rows took
/// 6.5–7.1 ms with 2 KiB and 5.0–5.6 ms with 4 KiB on the 2-core EPYC of BENCHMARKS.md (8 KiB:
/// no better); not re-tuned for 16-row groups.
pub(super) const PREFETCH_BYTES_INTERLEAVED: usize = 4096;

/// [`prefetch_ahead`] for every cache line of a block longer than one line (the K-quant super
/// blocks, the interleaved groups), `LEAD` bytes ahead: one hint per line, so the whole stream
/// is asked for.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn prefetch_block_ahead<const LEAD: usize>(block: &[u8]) {
    let ahead = block.as_ptr().wrapping_add(LEAD);
    for line in (0..block.len()).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
    }
}

/// [`hsum`] of every accumulator.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn hsums<const M: usize>(acc: [__m256; M]) -> [f32; M] {
    let mut out = [0f32; M];
    for (o, a) in out.iter_mut().zip(acc) {
        *o = hsum(a);
    }
    out
}

/// 16 bytes of nibble pairs as 32 bytes: the low nibbles in bytes 0..16, the high ones in
/// bytes 16..32 (the Q4_0 / Q5_0 layout).
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn split_nibbles(q: __m128i) -> __m256i {
    let mask = _mm_set1_epi8(0x0F);
    let low = _mm_and_si128(q, mask);
    let high = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    _mm256_set_m128i(high, low)
}
