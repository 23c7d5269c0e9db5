//! Four weight rows by four activation rows at a time with AVX-512: the dense kernel's dot
//! products, bit for bit, with a quarter of its activation loads.
//!
//! Each 512-bit accumulator holds one dot product's two 8-lane chains side by side (lanes 0–7
//! columns `16 s .. 16 s + 8`, lanes 8–15 the next 8), so one 16-column fused multiply-add does
//! what the 256-bit kernel does in two, lane for lane; the halves then go to the shared
//! [`finish`](super::finish). Fused multiply-add rounds each lane once whatever the register
//! width, so a row computed here, by the 256-bit kernel, or alone gets the same bits.

use std::arch::x86_64::*;

use super::{finish, Element, Widen, CHUNK};

/// Weight rows per tile.
pub(super) const TILE: usize = 4;

/// Whether this CPU has AVX-512F (the caller checked AVX2, FMA and F16C).
pub(super) fn available() -> bool {
    std::is_x86_feature_detected!("avx512f")
}

/// The 16 floats of `v` from column `c`.
#[target_feature(enable = "avx512f")]
#[inline]
fn load16(v: &[f32], c: usize) -> __m512 {
    let s = &v[c..c + 16];
    // SAFETY: `s` is 16 floats; the load is unaligned.
    unsafe { _mm512_loadu_ps(s.as_ptr()) }
}

/// The 16 weights of `w` from column `c`, widened to `f32` exactly.
#[target_feature(enable = "avx512f")]
#[inline]
fn load16_weights<W: Widen>(w: &[W::Item], c: usize) -> __m512 {
    let s = &w[c..c + 16];
    match W::ELEMENT {
        // SAFETY: `s` is 16 `f32`s (the element type is `f32`); the load is unaligned.
        Element::F32 => unsafe { _mm512_loadu_ps(s.as_ptr().cast::<f32>()) },
        Element::BF16 => {
            // SAFETY: `s` is 16 `u16`s, 32 bytes; the load is unaligned.
            let bits = unsafe { _mm256_loadu_si256(s.as_ptr().cast::<__m256i>()) };
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16))
        }
        Element::F16 => {
            // SAFETY: as above.
            let bits = unsafe { _mm256_loadu_si256(s.as_ptr().cast::<__m256i>()) };
            _mm512_cvtph_ps(bits)
        }
    }
}

/// `out[jj][t] = xs[jj] · ws[t]` for four activation rows and four weight rows.
///
/// # Safety
/// The CPU must have AVX-512F, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(super) unsafe fn tile<W: Widen>(
    ws: &[&[W::Item]; TILE],
    xs: &[&[f32]; CHUNK],
) -> [[f32; TILE]; CHUNK] {
    let cols = ws[0].len();
    let mut acc = [[_mm512_setzero_ps(); TILE]; CHUNK];
    let mut c = 0;
    while c + 16 <= cols {
        let mut wv = [_mm512_setzero_ps(); TILE];
        for t in 0..TILE {
            wv[t] = load16_weights::<W>(ws[t], c);
        }
        for jj in 0..CHUNK {
            let xv = load16(xs[jj], c);
            for t in 0..TILE {
                acc[jj][t] = _mm512_fmadd_ps(xv, wv[t], acc[jj][t]);
            }
        }
        c += 16;
    }
    let mut out = [[0f32; TILE]; CHUNK];
    for jj in 0..CHUNK {
        for t in 0..TILE {
            let a = acc[jj][t];
            let low = _mm512_castps512_ps256(a);
            let high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
            out[jj][t] = finish::<W>([low, high], c, ws[t], xs[jj]);
        }
    }
    out
}
