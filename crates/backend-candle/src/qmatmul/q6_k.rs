//! GGUF Q6_K weights (`block_q6_K`: 128 bytes `ql` of low nibbles, 64 bytes `qh` of 2-bit high
//! parts, 16 signed 8-bit group scales, an `f16` `d`; sixteen groups of 16 weights,
//! `w = d·sc·(q − 32)`). Each half of 128 weights takes 64 bytes of `ql` and 32 of `qh`: weight
//! `l + 32 t` (`l < 32`, `t < 4`) has its low nibble in `ql[l + 32 (t % 2)]` (low nibble for
//! `t < 2`, high for `t ≥ 2`) and its high bits at bits `2 t, 2 t + 1` of `qh[l]`.

use super::superblock::{Decoded, SuperBlock};

/// The Q6_K block type.
pub(super) struct Q6K;

impl SuperBlock for Q6K {
    const BYTES: usize = 210;

    fn decode(block: &[u8]) -> Decoded {
        let (ql, qh, sc) = (&block[..128], &block[128..192], &block[192..208]);
        let mut q = [0u8; 256];
        for half in 0..2 {
            let (ql, qh) = (&ql[64 * half..], &qh[32 * half..]);
            for l in 0..32 {
                let at = 128 * half + l;
                q[at] = (ql[l] & 0x0F) | ((qh[l] & 3) << 4);
                q[at + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
                q[at + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                q[at + 96] = (ql[l + 32] >> 4) | ((qh[l] >> 6) << 4);
            }
        }
        let d = super::f16_at(block, 208);
        Decoded {
            d,
            dbias: d,
            q,
            scale: std::array::from_fn(|g| i32::from(sc[g] as i8)),
            bias: std::array::from_fn(|g| 32 * i32::from(sc[g] as i8)),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn decode_avx2(block: &[u8]) -> super::superblock::DecodedAvx2 {
        use std::arch::x86_64::*;
        debug_assert_eq!(block.len(), Self::BYTES);
        let p = block.as_ptr();
        let (low, top) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        let mut q = [_mm256_setzero_si256(); 8];
        for half in 0..2 {
            // SAFETY: `ql` bytes 64 h .. 64 h + 64 and `qh` bytes 128 + 32 h .. 160 + 32 h
            // (h < 2) are inside the 210-byte block; the loads are unaligned.
            let (l0, l1, h) = unsafe {
                (
                    _mm256_loadu_si256(p.add(64 * half).cast()),
                    _mm256_loadu_si256(p.add(64 * half + 32).cast()),
                    _mm256_loadu_si256(p.add(128 + 32 * half).cast()),
                )
            };
            // The shifts are 16-bit; masking afterwards drops what crossed a byte. (No closure
            // for the mask: a closure does not take this function's target features.)
            q[4 * half] = _mm256_or_si256(
                _mm256_and_si256(l0, low),
                _mm256_and_si256(_mm256_slli_epi16(h, 4), top),
            );
            q[4 * half + 1] = _mm256_or_si256(
                _mm256_and_si256(l1, low),
                _mm256_and_si256(_mm256_slli_epi16(h, 2), top),
            );
            q[4 * half + 2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), low),
                _mm256_and_si256(h, top),
            );
            q[4 * half + 3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), low),
                _mm256_and_si256(_mm256_srli_epi16(h, 2), top),
            );
        }
        let sc = |g: usize| i16::from(block[192 + g] as i8);
        // SAFETY: the 16 scale bytes 192..208 are inside the block.
        let scales16 = unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192).cast())) };
        let d = super::simd_x86::f16_at(block, 208);
        let mut scale = [_mm256_setzero_si256(); 8];
        for (k, scale) in scale.iter_mut().enumerate() {
            *scale = _mm256_set_m128i(_mm_set1_epi16(sc(2 * k + 1)), _mm_set1_epi16(sc(2 * k)));
        }
        super::superblock::DecodedAvx2 {
            d,
            dbias: d,
            q,
            scale,
            bias: _mm256_slli_epi16(scales16, 5),
        }
    }
}
