//! GGUF Q4_0 weights (`block_q4_0`: an `f16` scale `d`, then 16 bytes of nibbles, the low
//! nibbles weights 0..16 and the high nibbles weights 16..32; `w = d (q - 8)`).

use super::block32::Block32;

/// The Q4_0 block type.
pub(super) struct Q4_0;

impl Block32 for Q4_0 {
    const BYTES: usize = 18;

    fn decode(block: &[u8]) -> (f32, [i8; 32]) {
        let mut w = [0i8; 32];
        for (j, &q) in block[2..18].iter().enumerate() {
            w[j] = (q & 0x0F) as i8 - 8;
            w[j + 16] = (q >> 4) as i8 - 8;
        }
        (super::f16_at(block, 0), w)
    }

    fn encode(d: u16, q: &[i8; 32], out: &mut [u8]) {
        // `q + 8` is the 4-bit code, `q` in -8..8.
        out[..2].copy_from_slice(&d.to_le_bytes());
        for (j, o) in out[2..18].iter_mut().enumerate() {
            *o = ((q[j] + 8) as u8) | (((q[j + 16] + 8) as u8) << 4);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn decode_avx2(block: &[u8]) -> (f32, std::arch::x86_64::__m256i) {
        use std::arch::x86_64::*;
        debug_assert_eq!(block.len(), Self::BYTES);
        // SAFETY: bytes 2..18 are inside the 18-byte block; the load is unaligned.
        let q = unsafe { _mm_loadu_si128(block.as_ptr().add(2).cast()) };
        let nibbles = super::simd_x86::split_nibbles(q);
        (
            super::simd_x86::f16_at(block, 0),
            _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8)),
        )
    }
}
