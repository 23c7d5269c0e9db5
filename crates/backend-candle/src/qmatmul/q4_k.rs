//! GGUF Q4_K weights (`block_q4_K`: `f16` `d` and `dmin`, 12 bytes packing eight 6-bit scales
//! and eight 6-bit minimums, then 128 bytes of nibbles; eight groups of 32 weights,
//! `w = d·sc·q − dmin·m`; bytes `32 k .. 32 k + 32` hold group `2k` in their low nibbles and
//! group `2k + 1` in their high nibbles).

use super::superblock::{Decoded, SuperBlock};

/// The Q4_K block type.
pub(super) struct Q4K;

/// The 6-bit (scale, minimum) of each group of 32 (ggml's `get_scale_min_k4`): groups 0..4 in
/// the low 6 bits of bytes 0..4 / 4..8; groups 4..8 in the nibbles of bytes 8..12 with their top
/// two bits in the top bits of bytes 0..8.
fn scales_and_mins(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut m) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
        m[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    (sc, m)
}

/// [`scales_and_mins`] as two little-endian words of 8 bytes each (scales, minimums), by
/// 32-bit masks and shifts over the 12 packed bytes (ggml's `utmp` trick) instead of byte by
/// byte.
#[cfg(target_arch = "x86_64")]
fn packed_scales_and_mins(s: &[u8]) -> (u64, u64) {
    const SIX: u32 = 0x3f3f_3f3f;
    const LOW: u32 = 0x0f0f_0f0f;
    const TWO: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (a, b, c) = (word(0), word(1), word(2));
    let sc = u64::from(a & SIX) | u64::from((c & LOW) | (((a >> 6) & TWO) << 4)) << 32;
    let m = u64::from(b & SIX) | u64::from(((c >> 4) & LOW) | (((b >> 6) & TWO) << 4)) << 32;
    (sc, m)
}

impl SuperBlock for Q4K {
    const BYTES: usize = 144;

    fn decode(block: &[u8]) -> Decoded {
        let (sc, m) = scales_and_mins(&block[4..16]);
        let mut q = [0u8; 256];
        for (k, bytes) in block[16..144].chunks_exact(32).enumerate() {
            for (l, &b) in bytes.iter().enumerate() {
                q[64 * k + l] = b & 0x0F;
                q[64 * k + 32 + l] = b >> 4;
            }
        }
        Decoded {
            d: super::f16_at(block, 0),
            dbias: super::f16_at(block, 2),
            q,
            scale: std::array::from_fn(|g| i32::from(sc[g / 2])),
            bias: std::array::from_fn(|g| i32::from(m[g / 2])),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn decode_avx2(block: &[u8]) -> super::superblock::DecodedAvx2 {
        use std::arch::x86_64::*;
        debug_assert_eq!(block.len(), Self::BYTES);
        let (sc, m) = packed_scales_and_mins(&block[4..16]);
        let low = _mm256_set1_epi8(0x0F);
        let mut q = [_mm256_setzero_si256(); 8];
        for k in 0..4 {
            // SAFETY: bytes 16 + 32 k .. 48 + 32 k (k < 4) are inside the 144-byte block.
            let bytes = unsafe { _mm256_loadu_si256(block.as_ptr().add(16 + 32 * k).cast()) };
            q[2 * k] = _mm256_and_si256(bytes, low);
            q[2 * k + 1] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
        }
        // Group g's minimum in lanes 2g and 2g + 1 (against the Q8_K sums of 16).
        let m = _mm_cvtsi64_si128(m as i64);
        let bias = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
        // The 8 scales as `i16`, in both halves; register k takes lane k everywhere.
        let scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
        let mut scale = [_mm256_setzero_si256(); 8];
        for (k, scale) in scale.iter_mut().enumerate() {
            let pick = (2 * k as i16) | ((2 * k as i16 + 1) << 8);
            *scale = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(pick));
        }
        super::superblock::DecodedAvx2 {
            d: super::simd_x86::f16_at(block, 0),
            dbias: super::simd_x86::f16_at(block, 2),
            q,
            scale,
            bias,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn packed_scales_and_mins_equal_the_byte_by_byte_ones() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let s: [u8; 12] = std::array::from_fn(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            });
            let (sc, m) = scales_and_mins(&s);
            let (psc, pm) = packed_scales_and_mins(&s);
            assert_eq!(psc.to_le_bytes(), sc, "{s:?}");
            assert_eq!(pm.to_le_bytes(), m, "{s:?}");
        }
    }
}
