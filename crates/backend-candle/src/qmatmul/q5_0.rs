//! GGUF Q5_0 weights (`block_q5_0`: an `f16` scale `d`, 4 bytes `qh` whose bit `i` is the fifth
//! bit of weight `i`, then 16 bytes of low nibbles laid out as Q4_0's; `w = d (q - 16)`).
//! candle 0.11 has no SIMD kernel for this type; the real model keeps 42 MiB of weights in it.

use super::block32::Block32;

/// The Q5_0 block type.
pub(super) struct Q5_0;

impl Block32 for Q5_0 {
    const BYTES: usize = 22;

    fn decode(block: &[u8]) -> (f32, [i8; 32]) {
        let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
        let fifth = |i: usize| (((qh >> i) & 1) as u8) << 4;
        let mut w = [0i8; 32];
        for (j, &q) in block[6..22].iter().enumerate() {
            w[j] = ((q & 0x0F) | fifth(j)) as i8 - 16;
            w[j + 16] = ((q >> 4) | fifth(j + 16)) as i8 - 16;
        }
        (super::f16_at(block, 0), w)
    }

    fn encode(d: u16, q: &[i8; 32], out: &mut [u8]) {
        // `q + 16` is the 5-bit code, `q` in -16..16.
        let code = |i: usize| (q[i] + 16) as u8;
        let qh = (0..32).fold(0u32, |qh, i| qh | (u32::from(code(i) >> 4) << i));
        out[..2].copy_from_slice(&d.to_le_bytes());
        out[2..6].copy_from_slice(&qh.to_le_bytes());
        for (j, o) in out[6..22].iter_mut().enumerate() {
            *o = (code(j) & 0x0F) | ((code(j + 16) & 0x0F) << 4);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn decode_avx2(block: &[u8]) -> (f32, std::arch::x86_64::__m256i) {
        use std::arch::x86_64::*;
        debug_assert_eq!(block.len(), Self::BYTES);
        let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
        // SAFETY: bytes 6..22 are inside the 22-byte block; the load is unaligned.
        let q = unsafe { _mm_loadu_si128(block.as_ptr().add(6).cast()) };
        let low = super::simd_x86::split_nibbles(q);
        // Byte i of the register gets byte i / 8 of `qh`, then keeps only bit i % 8 of it.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(qh as i32),
            _mm256_setr_epi64x(
                0,
                0x0101_0101_0101_0101,
                0x0202_0202_0202_0202,
                0x0303_0303_0303_0303,
            ),
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
        let high = _mm256_and_si256(set, _mm256_set1_epi8(0x10));
        (
            super::simd_x86::f16_at(block, 0),
            _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(16)),
        )
    }
}
