//! The kernels over the [interleaved layout](super::interleaved): per group of [`GROUP`] weight
//! rows and activation row, each block's 8 integer sums (one per weight row, exact), then
//! `acc_r += (d_r · d_x) · sum_r` in `f32`, blocks in order. Every instruction set computes the
//! same operations in the same order (a product then a sum, never fused), so the scalar, AVX2
//! and VNNI kernels give the same bits. The order is ggml's reference `vec_dot_q8_0_q8_0` (one
//! integer sum per block), not its AVX2 one (eight partial sums per block, summed at the end)
//! that the per-row kernels follow, so the two layouts differ by `f32` rounding.

use std::ops::Range;

use super::acts::{BlockQ8_0, Quantized};
use super::interleaved::{GROUP, GROUP_BLOCK_BYTES, SCALE_BYTES};
#[cfg(target_arch = "x86_64")]
use super::ROW_CHUNK;

// The SIMD kernels hold a group run (4 weights of every row) in one 512-bit register, or two
// 256-bit halves.
const _: () = assert!(GROUP == 16 && HALF == 8);

/// Kernel arguments: the interleaved bytes, bytes per group, the weight rows to compute (any
/// range; the groups covering it are computed and the rows inside it stored), the activations,
/// and per activation row the outputs of those weight rows.
pub(super) fn groups_scalar(
    data: &[u8],
    group_bytes: usize,
    rows: Range<usize>,
    acts: &Quantized<BlockQ8_0>,
    out: &mut [&mut [f32]],
) {
    for g in rows.start / GROUP..rows.end.div_ceil(GROUP) {
        let group = &data[g * group_bytes..][..group_bytes];
        for (j, out) in out.iter_mut().enumerate() {
            let mut acc = [0f32; GROUP];
            for (block, x) in group.chunks_exact(GROUP_BLOCK_BYTES).zip(acts.row(j)) {
                for (lane, a) in acc.iter_mut().enumerate() {
                    let d = super::f16_at(block, 2 * lane);
                    let mut sum = 0i32;
                    for (i, &q) in x.qs.iter().enumerate() {
                        let byte = block[SCALE_BYTES + (i / 4) * 4 * GROUP + 4 * lane + i % 4];
                        sum += i32::from((byte ^ 0x80) as i8) * i32::from(q);
                    }
                    *a += (d * x.d) * sum as f32;
                }
            }
            store(out, g, &rows, &acc);
        }
    }
}

/// `out[r - rows.start] = acc[lane]` for the rows of group `g` inside `rows`.
#[inline(always)]
pub(super) fn store(out: &mut [f32], g: usize, rows: &Range<usize>, acc: &[f32; GROUP]) {
    for (lane, &a) in acc.iter().enumerate() {
        let r = g * GROUP + lane;
        if rows.contains(&r) {
            out[r - rows.start] = a;
        }
    }
}

/// One group against a chunk of `M` activation rows with AVX-512 VNNI: per block, the 8 runs of
/// the group's weights (unsigned `w + 128`, all [`GROUP`] rows in one 512-bit register) each
/// dotted with a broadcast run of the activations (`vpdpbusd`, two chains), starting from
/// `−128 Σ q` so the sums are `Σ w q`.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C, AVX-512F, AVX-512VL and AVX-512 VNNI; `group` is whole
/// group blocks, no more than each activation row of `xs` has.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
#[inline]
unsafe fn chunk_vnni<const M: usize>(
    group: &[u8],
    xs: &[&[BlockQ8_0]; ROW_CHUNK],
) -> [[f32; GROUP]; M] {
    use std::arch::x86_64::*;

    let mut acc = [_mm512_setzero_ps(); M];
    for (b, block) in group.chunks_exact(GROUP_BLOCK_BYTES).enumerate() {
        super::simd_x86::prefetch_block_ahead::<{ super::simd_x86::PREFETCH_BYTES_INTERLEAVED }>(
            block,
        );
        assert!(block.len() >= GROUP_BLOCK_BYTES);
        let p = block.as_ptr();
        // SAFETY: the scales are the (checked) block's first 32 bytes, run `k < 8` its bytes
        // `32 + 64 k ..`; unaligned loads.
        let dw = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) };
        let w: [__m512i; 8] = std::array::from_fn(|k| unsafe {
            _mm512_loadu_si512(p.add(SCALE_BYTES + 64 * k).cast())
        });
        for (a, x) in acc.iter_mut().zip(xs) {
            let x = &x[b];
            let mut even = _mm512_set1_epi32(x.minus_128_sum);
            let mut odd = _mm512_setzero_si512();
            for k in (0..8).step_by(2) {
                even = _mm512_dpbusd_epi32(even, w[k], _mm512_set1_epi32(run_word(x, k)));
                odd = _mm512_dpbusd_epi32(odd, w[k + 1], _mm512_set1_epi32(run_word(x, k + 1)));
            }
            let sum = _mm512_cvtepi32_ps(_mm512_add_epi32(even, odd));
            *a = _mm512_add_ps(
                *a,
                _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(x.d)), sum),
            );
        }
    }
    lanes_512(acc)
}

/// Each 512-bit accumulator's 16 lanes (one per row of the group).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn lanes_512<const M: usize>(acc: [std::arch::x86_64::__m512; M]) -> [[f32; GROUP]; M] {
    let mut out = [[0f32; GROUP]; M];
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: `o` is 16 `f32`s; the store is unaligned.
        unsafe { std::arch::x86_64::_mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
    out
}

/// [`chunk_vnni`] with AVX2, one half of the group (8 rows, one 256-bit register) at a time: the
/// weights made signed again, `|w|` times `x` carrying `w`'s sign (`maddubs`: `|w| ≤ 128`,
/// `|x| ≤ 127`, no saturation), pairs widened to `i32`; the same exact sums, so the same bits.
/// The second half reads the group again, from the cache the first half left it in.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `group` as for [`chunk_vnni`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn chunk_avx2<const M: usize>(
    group: &[u8],
    xs: &[&[BlockQ8_0]; ROW_CHUNK],
) -> [[f32; GROUP]; M] {
    use std::arch::x86_64::*;

    let (ones, unsigned_128) = (_mm256_set1_epi16(1), _mm256_set1_epi8(i8::MIN));
    let mut out = [[0f32; GROUP]; M];
    for half in 0..2 {
        let mut acc = [_mm256_setzero_ps(); M];
        for (b, block) in group.chunks_exact(GROUP_BLOCK_BYTES).enumerate() {
            super::simd_x86::prefetch_block_ahead::<{ super::simd_x86::PREFETCH_BYTES_INTERLEAVED }>(
                block,
            );
            let (dw, mut w) = load_half_block(block, half);
            let mut w_abs = w;
            for (w, w_abs) in w.iter_mut().zip(&mut w_abs) {
                *w = _mm256_xor_si256(*w, unsigned_128);
                *w_abs = _mm256_sign_epi8(*w, *w);
            }
            for (a, x) in acc.iter_mut().zip(xs) {
                let x = &x[b];
                let (mut even, mut odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                for k in (0..8).step_by(2) {
                    let x0 = _mm256_set1_epi32(run_word(x, k));
                    let x1 = _mm256_set1_epi32(run_word(x, k + 1));
                    let p0 = _mm256_maddubs_epi16(w_abs[k], _mm256_sign_epi8(x0, w[k]));
                    let p1 = _mm256_maddubs_epi16(w_abs[k + 1], _mm256_sign_epi8(x1, w[k + 1]));
                    even = _mm256_add_epi32(even, _mm256_madd_epi16(p0, ones));
                    odd = _mm256_add_epi32(odd, _mm256_madd_epi16(p1, ones));
                }
                let sum = _mm256_cvtepi32_ps(_mm256_add_epi32(even, odd));
                *a = _mm256_add_ps(
                    *a,
                    _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x.d)), sum),
                );
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            // SAFETY: `o[8 half ..]` is 8 `f32`s; the store is unaligned.
            unsafe { _mm256_storeu_ps(o[HALF * half..].as_mut_ptr(), a) };
        }
    }
    out
}

/// Rows in one 256-bit register of a group run (half the group).
const HALF: usize = GROUP / 2;

/// Half `half` (rows `8 half .. 8 half + 8`) of a group block: its 8 scales (as `f32`) and its
/// 8 runs of weights (as stored, `w + 128`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn load_half_block(
    block: &[u8],
    half: usize,
) -> (std::arch::x86_64::__m256, [std::arch::x86_64::__m256i; 8]) {
    use std::arch::x86_64::*;
    assert!(block.len() >= GROUP_BLOCK_BYTES && half < 2);
    let p = block.as_ptr();
    let mut w = [_mm256_setzero_si256(); 8];
    for (k, w) in w.iter_mut().enumerate() {
        // SAFETY: run `k < 8` of half `half < 2` is bytes `32 + 64 k + 32 half ..` of the
        // (checked) block; unaligned.
        *w = unsafe { _mm256_loadu_si256(p.add(SCALE_BYTES + 64 * k + 32 * half).cast()) };
    }
    // SAFETY: the half's scales are bytes `16 half .. 16 half + 16`; unaligned.
    (
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.add(16 * half).cast())) },
        w,
    )
}

/// Run `k` (quants `4 k .. 4 k + 4`) of an activation block as one little-endian word.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn run_word(x: &BlockQ8_0, k: usize) -> i32 {
    let bytes = &x.qs[4 * k..4 * k + 4];
    i32::from_le_bytes([
        bytes[0] as u8,
        bytes[1] as u8,
        bytes[2] as u8,
        bytes[3] as u8,
    ])
}

/// A group kernel whose chunk body `$chunk::<M>(group, chunk rows) -> [[f32; GROUP]; M]` is
/// monomorphised for every chunk size `M` in `1..=ROW_CHUNK`, called per group and chunk of
/// activation rows (of block type `$act`); the generated function has the chunk body's target
/// features `$features`. Shared by both interleaved layouts.
#[cfg(target_arch = "x86_64")]
macro_rules! group_kernel {
    ($(#[$doc:meta])* $vis:vis unsafe fn $name:ident($act:ty) = $chunk:ident, $features:literal) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        $vis unsafe fn $name(
            data: &[u8],
            group_bytes: usize,
            rows: std::ops::Range<usize>,
            acts: &$crate::qmatmul::acts::Quantized<$act>,
            out: &mut [&mut [f32]],
        ) {
            use $crate::qmatmul::interleaved::GROUP;
            use $crate::qmatmul::interleaved_kernels::store_chunk;
            use $crate::qmatmul::ROW_CHUNK;
            let n = out.len();
            let chunks = acts.row_chunks(n);
            for g in rows.start / GROUP..rows.end.div_ceil(GROUP) {
                let group = &data[g * group_bytes..][..group_bytes];
                for (c, xs) in chunks.iter().enumerate() {
                    let j0 = c * ROW_CHUNK;
                    let out = &mut out[j0..(j0 + ROW_CHUNK).min(n)];
                    // SAFETY: this function has the chunk body's target features, and the
                    // caller's contract covers the layout.
                    unsafe {
                        match out.len() {
                            1 => store_chunk(out, g, &rows, $chunk::<1>(group, xs)),
                            2 => store_chunk(out, g, &rows, $chunk::<2>(group, xs)),
                            3 => store_chunk(out, g, &rows, $chunk::<3>(group, xs)),
                            4 => store_chunk(out, g, &rows, $chunk::<4>(group, xs)),
                            5 => store_chunk(out, g, &rows, $chunk::<5>(group, xs)),
                            6 => store_chunk(out, g, &rows, $chunk::<6>(group, xs)),
                            7 => store_chunk(out, g, &rows, $chunk::<7>(group, xs)),
                            _ => store_chunk(out, g, &rows, $chunk::<8>(group, xs)),
                        }
                    }
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub(super) use group_kernel;

/// [`store`] for each activation row of a chunk.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn store_chunk<const M: usize>(
    out: &mut [&mut [f32]],
    g: usize,
    rows: &Range<usize>,
    acc: [[f32; GROUP]; M],
) {
    for (o, a) in out.iter_mut().zip(&acc) {
        store(o, g, rows, a);
    }
}

#[cfg(target_arch = "x86_64")]
group_kernel! {
    /// [`groups_scalar`] with AVX2 ([`chunk_avx2`]); the same bits.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C. `data` must hold every group covering `rows`
    /// (`group_bytes` each, whole group blocks), matching `acts`' blocks per row.
    pub(super) unsafe fn groups_avx2(BlockQ8_0) = chunk_avx2, "avx2,fma,f16c"
}

#[cfg(target_arch = "x86_64")]
group_kernel! {
    /// [`groups_scalar`] with AVX-512 VNNI ([`chunk_vnni`]); the same bits.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA, F16C, AVX-512F, AVX-512VL and AVX-512 VNNI. `data` as for
    /// [`groups_avx2`].
    pub(super) unsafe fn groups_vnni(BlockQ8_0) = chunk_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"
}
