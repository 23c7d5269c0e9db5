//! GGUF Q8_0 weights (`block_q8_0`: an `f16` scale `d`, then 32 signed bytes; `w = d q`).

use super::block32::Block32;

/// The Q8_0 block type.
pub(super) struct Q8_0;

impl Block32 for Q8_0 {
    const BYTES: usize = 34;

    fn decode(block: &[u8]) -> (f32, [i8; 32]) {
        let mut w = [0i8; 32];
        for (w, &q) in w.iter_mut().zip(&block[2..34]) {
            *w = q as i8;
        }
        (super::f16_at(block, 0), w)
    }

    fn encode(d: u16, q: &[i8; 32], out: &mut [u8]) {
        out[..2].copy_from_slice(&d.to_le_bytes());
        for (o, &q) in out[2..34].iter_mut().zip(q) {
            *o = q as u8;
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn decode_avx2(block: &[u8]) -> (f32, std::arch::x86_64::__m256i) {
        use std::arch::x86_64::*;
        debug_assert_eq!(block.len(), Self::BYTES);
        // SAFETY: bytes 2..34 are inside the 34-byte block; the load is unaligned.
        let w = unsafe { _mm256_loadu_si256(block.as_ptr().add(2).cast()) };
        (super::simd_x86::f16_at(block, 0), w)
    }
}
