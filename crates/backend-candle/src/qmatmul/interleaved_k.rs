//! A load-time layout for the 256-weight K-quant types (Q4_K, Q6_K), the counterpart of the
//! [32-weight one](super::interleaved): the decoded quants of [`GROUP`] consecutive rows, block
//! by block, interleaved in 4-weight runs as unsigned bytes, so one 512-bit byte dot product
//! (`vpdpbusd`) advances the sums of all 16 rows against a broadcast run of Q8_K activations
//! (with AVX2, `maddubs` + `madd` per half of 8 rows). The per-row kernel spends, per row and
//! block, two instructions per 32 weights plus the scales, the minimums and a conversion; here
//! the group's rows share them, and no horizontal sum is left.
//!
//! Each row keeps its block's decoded form ([`Decoded`](super::superblock::Decoded): `d`,
//! `dbias` as `f32`, 256 unsigned quants, an integer scale and an integer bias multiplier per
//! 16 weights), so the products are
//! the portable kernel's ([`superblock::rows_scalar`](super::superblock::rows_scalar)) bit for
//! bit: per block the exact integer sums `Σ_g scale_g Σ q x` and `Σ_g bias_g bsum_g`, then
//! `acc += (d·d_x)·sum − (dbias·d_x)·bias` in `f32`, unfused, blocks in order. The per-row SIMD
//! kernels sum eight lanes per row and add them at the end, so the two layouts differ by `f32`
//! rounding.
//!
//! Bytes, per group `g` (rows `16 g .. 16 g + 16`, the last group padded with zero rows) and
//! per block `b` of the row, [`block_bytes`] in all:
//! * `d` of the 16 rows, `f32` (64 bytes), then `dbias` (64 bytes);
//! * per group of 16 weights (16 groups), the 16 rows' scales as `i8` (256 bytes);
//! * per pair of those groups (8 pairs), each row's two bias multipliers as `i16` (512 bytes);
//! * per run `k` of 4 weights (64 runs), each row's 4 quants, row after row (4096 bytes; Q4_K
//!   two runs to a byte, 2048 bytes).
//!
//! A Q4_K block grows from 144 to 184 bytes per row, a Q6_K one from 210 to 312 (the quants
//! widened to 8 bits); the GGUF tensor is kept beside the copy for row lookups and rebuilding.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mtp_core::quant::{GgmlType, QuantTensor, QK_K};

use super::acts::{BlockQ8K, Quantized};
use super::interleaved::GROUP;
use super::q4_k::Q4K;
use super::q6_k::Q6K;
use super::superblock::SuperBlock;
#[cfg(target_arch = "x86_64")]
use super::ROW_CHUNK;

/// Groups of 16 weights in a block.
const GROUPS: usize = QK_K / 16;

/// Where each part of a group block starts.
const DBIAS_AT: usize = 4 * GROUP;
const SCALE_AT: usize = 8 * GROUP;
const BIAS_AT: usize = SCALE_AT + GROUPS * GROUP;
const QUANT_AT: usize = BIAS_AT + GROUPS / 2 * 4 * GROUP;

/// Bytes of one block of a group: the quants as bytes (Q6_K), or two to a byte (Q4_K, whose
/// quants are at most 15: run `2 j` in the low nibbles of pair `j`'s 64 bytes, run `2 j + 1` in
/// the high ones).
pub(super) const fn block_bytes(packed: bool) -> usize {
    QUANT_AT
        + if packed {
            QK_K * GROUP / 2
        } else {
            QK_K * GROUP
        }
}

/// Where quant `i` (`< 256`) of row `lane` sits in a block: its byte and the shift to its bits.
#[inline(always)]
fn quant_at(packed: bool, lane: usize, i: usize) -> (usize, u32) {
    let (run, at) = (i / 4, 4 * lane + i % 4);
    if packed {
        (QUANT_AT + run / 2 * 4 * GROUP + at, 4 * (run % 2) as u32)
    } else {
        (QUANT_AT + run * 4 * GROUP + at, 0)
    }
}

/// Whether a group of `group_len` bytes holding `blocks` blocks is the packed (Q4_K) form.
#[inline(always)]
fn is_packed(group_len: usize, blocks: usize) -> bool {
    group_len == blocks * block_bytes(true)
}

/// The most bytes of interleaved K-quant copies alive at once in the process: each copy is
/// memory on top of its GGUF tensor (1.3× a Q4_K tensor's bytes, 1.5× a Q6_K one's), so large
/// models keep their rows beyond this (about the K-quant layers of a 2B-parameter Q4_K_M model).
pub(super) const COPY_BUDGET_BYTES: usize = 1 << 30;

/// Bytes of the interleaved K-quant copies alive now.
static COPY_BYTES: AtomicUsize = AtomicUsize::new(0);

/// A Q4_K or Q6_K weight in the interleaved layout, with the GGUF tensor it was made from.
/// Not `Clone`: its bytes are counted against [`COPY_BUDGET_BYTES`] until it is dropped.
#[derive(Debug)]
pub(super) struct InterleavedK {
    data: Vec<u8>,
    source: Arc<QuantTensor>,
    cols: usize,
    packed: bool,
}

impl InterleavedK {
    /// Whether GGUF type `ty` has this layout.
    pub fn supports(ty: GgmlType) -> bool {
        matches!(ty, GgmlType::Q4K | GgmlType::Q6K)
    }

    /// `tensor` (a type [`supports`](Self::supports) accepts) rearranged: `Ok(None)` for
    /// another type, `Err(bytes)` (the copy's size) if the copy would take the copies alive past
    /// [`COPY_BUDGET_BYTES`].
    pub fn new(tensor: &Arc<QuantTensor>) -> Result<Option<Self>, usize> {
        let mtp_core::quant::QuantFormat::Ggml(ty) = tensor.format() else {
            return Ok(None);
        };
        if !Self::supports(ty) {
            return Ok(None);
        }
        let [rows, cols] = tensor.shape();
        let packed = ty == GgmlType::Q4K;
        let bytes = rows.div_ceil(GROUP) * (cols / QK_K) * block_bytes(packed);
        if !reserve(&COPY_BYTES, bytes, COPY_BUDGET_BYTES) {
            return Err(bytes);
        }
        let data = match ty {
            GgmlType::Q4K => interleave::<Q4K>(tensor.data(), rows, cols, packed),
            _ => interleave::<Q6K>(tensor.data(), rows, cols, packed),
        };
        debug_assert_eq!(data.len(), bytes);
        Ok(Some(Self {
            data,
            source: tensor.clone(),
            cols,
            packed,
        }))
    }

    /// The layout's bytes (groups after groups).
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Bytes per group of [`GROUP`] rows.
    pub fn group_bytes(&self) -> usize {
        self.cols / QK_K * block_bytes(self.packed)
    }

    /// The GGUF tensor it was made from.
    pub fn source(&self) -> &Arc<QuantTensor> {
        &self.source
    }
}

/// Add `bytes` to `alive` if the sum stays within `budget`; whether it did.
fn reserve(alive: &AtomicUsize, bytes: usize, budget: usize) -> bool {
    alive
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
            now.checked_add(bytes).filter(|&total| total <= budget)
        })
        .is_ok()
}

impl Drop for InterleavedK {
    fn drop(&mut self) {
        COPY_BYTES.fetch_sub(self.data.len(), Ordering::Relaxed);
    }
}

/// `rows × cols` blocks of `B` (row-major GGUF bytes) in the interleaved layout.
fn interleave<B: SuperBlock>(weights: &[u8], rows: usize, cols: usize, packed: bool) -> Vec<u8> {
    let blocks = cols / QK_K;
    let row_bytes = blocks * B::BYTES;
    // Padding rows: every scale, multiplier and quant 0 (their sums are 0, and never stored).
    let block = block_bytes(packed);
    let mut out = vec![0u8; rows.div_ceil(GROUP) * blocks * block];
    for (g, group) in out.chunks_exact_mut(blocks * block).enumerate() {
        for (b, dst) in group.chunks_exact_mut(block).enumerate() {
            for lane in 0..GROUP.min(rows - g * GROUP) {
                let r = g * GROUP + lane;
                let w = B::decode(&weights[r * row_bytes + b * B::BYTES..][..B::BYTES]);
                dst[4 * lane..][..4].copy_from_slice(&w.d.to_le_bytes());
                dst[DBIAS_AT + 4 * lane..][..4].copy_from_slice(&w.dbias.to_le_bytes());
                for (i, (&scale, &bias)) in w.scale.iter().zip(&w.bias).enumerate() {
                    // Q4_K scales are 0..=63 and Q6_K's `i8`; the multipliers (Q4_K minimums
                    // 0..=63, Q6_K `32·scale`) fit `i16`.
                    dst[SCALE_AT + i * GROUP + lane] = scale as i8 as u8;
                    let at = BIAS_AT + (i / 2) * 4 * GROUP + 4 * lane + 2 * (i % 2);
                    dst[at..at + 2].copy_from_slice(&(bias as i16).to_le_bytes());
                }
                for (i, &q) in w.q.iter().enumerate() {
                    let (at, shift) = quant_at(packed, lane, i);
                    dst[at] |= q << shift;
                }
            }
        }
    }
    out
}

/// The `f32` at byte `at` of `b`.
fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The portable kernel over the layout (the same arguments as the 32-weight interleaved
/// kernels): per group, activation row and block, the two exact integer sums per row, then the
/// `f32` steps of [`superblock::rows_scalar`](super::superblock::rows_scalar).
pub(super) fn groups_scalar(
    data: &[u8],
    group_bytes: usize,
    rows: Range<usize>,
    acts: &Quantized<BlockQ8K>,
    out: &mut [&mut [f32]],
) {
    let packed = is_packed(group_bytes, acts.row(0).len());
    let (block_len, mask) = (block_bytes(packed), if packed { 0x0F } else { 0xFF });
    for g in rows.start / GROUP..rows.end.div_ceil(GROUP) {
        let group = &data[g * group_bytes..][..group_bytes];
        for (j, out) in out.iter_mut().enumerate() {
            let mut acc = [0f32; GROUP];
            for (block, x) in group.chunks_exact(block_len).zip(acts.row(j)) {
                for (lane, a) in acc.iter_mut().enumerate() {
                    let (mut sum, mut bias) = (0i32, 0i32);
                    for (i, (xq, &bsum)) in x.qs.chunks_exact(16).zip(&x.bsums).enumerate() {
                        let group_sum: i32 = (0..16)
                            .map(|l| {
                                let (at, shift) = quant_at(packed, lane, 16 * i + l);
                                i32::from((block[at] >> shift) & mask) * i32::from(xq[l])
                            })
                            .sum();
                        sum += i32::from(block[SCALE_AT + i * GROUP + lane] as i8) * group_sum;
                        let at = BIAS_AT + (i / 2) * 4 * GROUP + 4 * lane + 2 * (i % 2);
                        let multiplier = i16::from_le_bytes([block[at], block[at + 1]]);
                        bias += i32::from(multiplier) * i32::from(bsum);
                    }
                    let (d, dbias) = (f32_at(block, 4 * lane), f32_at(block, DBIAS_AT + 4 * lane));
                    *a += (d * x.d) * sum as f32 - (dbias * x.d) * bias as f32;
                }
            }
            super::interleaved_kernels::store(out, g, &rows, &acc);
        }
    }
}

/// Quants `4 k .. 4 k + 4` of an activation block as one little-endian word.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn run_word(x: &BlockQ8K, k: usize) -> i32 {
    let q = &x.qs[4 * k..4 * k + 4];
    i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8])
}

/// Bias sums `2 p, 2 p + 1` of an activation block as one word (the `i16` pair `madd` takes).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn bsum_pair(x: &BlockQ8K, p: usize) -> i32 {
    let [a, b] = [
        x.bsums[2 * p].to_le_bytes(),
        x.bsums[2 * p + 1].to_le_bytes(),
    ];
    i32::from_le_bytes([a[0], a[1], b[0], b[1]])
}

/// One group against a chunk of `M` activation rows with AVX-512 VNNI: per block and group of
/// 16 weights, four `vpdpbusd` (unsigned quants, all 16 rows in one register, against a
/// broadcast run of activations) times the rows' scales; the bias sums by `vpdpwssd` of the
/// multiplier pairs with the activations' `bsums` pairs; then the unfused `f32` steps.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C, AVX-512F, AVX-512VL and AVX-512 VNNI; `group` is whole
/// group blocks, no more than each activation row of `xs` has.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
#[inline]
unsafe fn chunk_vnni<const M: usize>(
    group: &[u8],
    xs: &[&[BlockQ8K]; ROW_CHUNK],
) -> [[f32; GROUP]; M] {
    // SAFETY: the caller's contract.
    unsafe {
        if is_packed(group.len(), xs[0].len()) {
            chunk_vnni_in::<true, M>(group, xs)
        } else {
            chunk_vnni_in::<false, M>(group, xs)
        }
    }
}

/// [`chunk_vnni`] for one quant form (`PACKED`: Q4_K's nibbles, unpacked once per group of 16
/// weights for all the activation rows).
///
/// # Safety
/// As for [`chunk_vnni`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
#[inline]
unsafe fn chunk_vnni_in<const PACKED: bool, const M: usize>(
    group: &[u8],
    xs: &[&[BlockQ8K]; ROW_CHUNK],
) -> [[f32; GROUP]; M] {
    use std::arch::x86_64::*;

    let low = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); M];
    for (b, block) in group.chunks_exact(block_bytes(PACKED)).enumerate() {
        super::simd_x86::prefetch_block_ahead::<{ super::simd_x86::PREFETCH_BYTES_INTERLEAVED }>(
            block,
        );
        assert!(block.len() >= block_bytes(PACKED));
        let p = block.as_ptr();
        let mut sums = [_mm512_setzero_si512(); M];
        for i in 0..GROUPS {
            // SAFETY: group `i < 16`'s scales are bytes `SCALE_AT + 16 i ..` (16) and its runs
            // `4 i .. 4 i + 4` bytes `QUANT_AT + 64 k ..` (64 each; packed, run pairs `2 i`,
            // `2 i + 1`) of the (checked) block.
            let (scale, w) = unsafe {
                let run = |k: usize| _mm512_loadu_si512(p.add(QUANT_AT + 64 * k).cast());
                let w = if PACKED {
                    let (a, c) = (run(2 * i), run(2 * i + 1));
                    let high = |v| _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                    [
                        _mm512_and_si512(a, low),
                        high(a),
                        _mm512_and_si512(c, low),
                        high(c),
                    ]
                } else {
                    [0, 1, 2, 3].map(|r| run(4 * i + r))
                };
                (
                    _mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(SCALE_AT + GROUP * i).cast())),
                    w,
                )
            };
            for (sum, x) in sums.iter_mut().zip(xs) {
                let x = &x[b];
                let mut dot = _mm512_setzero_si512();
                for (r, &w) in w.iter().enumerate() {
                    dot = _mm512_dpbusd_epi32(dot, w, _mm512_set1_epi32(run_word(x, 4 * i + r)));
                }
                *sum = _mm512_add_epi32(*sum, _mm512_mullo_epi32(dot, scale));
            }
        }
        let mut biases = [_mm512_setzero_si512(); M];
        for pair in 0..GROUPS / 2 {
            // SAFETY: pair `< 8`'s multipliers are bytes `BIAS_AT + 64 pair ..` (64).
            let m = unsafe { _mm512_loadu_si512(p.add(BIAS_AT + 4 * GROUP * pair).cast()) };
            for (bias, x) in biases.iter_mut().zip(xs) {
                let pair = _mm512_set1_epi32(bsum_pair(&x[b], pair));
                *bias = _mm512_dpwssd_epi32(*bias, m, pair);
            }
        }
        // SAFETY: `d` and `dbias` are bytes `0 .. 64` and `64 .. 128`; unaligned loads.
        let (d, dbias) = unsafe {
            (
                _mm512_loadu_ps(p.cast()),
                _mm512_loadu_ps(p.add(DBIAS_AT).cast()),
            )
        };
        for (((a, x), sum), bias) in acc.iter_mut().zip(xs).zip(sums).zip(biases) {
            let xd = _mm512_set1_ps(x[b].d);
            let quant = _mm512_mul_ps(_mm512_mul_ps(d, xd), _mm512_cvtepi32_ps(sum));
            let offset = _mm512_mul_ps(_mm512_mul_ps(dbias, xd), _mm512_cvtepi32_ps(bias));
            *a = _mm512_add_ps(*a, _mm512_sub_ps(quant, offset));
        }
    }
    super::interleaved_kernels::lanes_512(acc)
}

/// [`chunk_vnni`] with AVX2, one half of the group (8 rows) at a time: per run `maddubs` of the
/// unsigned quants with the broadcast activations (`q ≤ 63`, `|x| ≤ 128`: a pair fits `i16`, and
/// so do two runs' pairs added), widened by `madd` with ones; the scales by `mullo`, the bias
/// sums by `madd` of the multiplier pairs. The same exact sums and `f32` steps: the same bits.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `group` as for [`chunk_vnni`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn chunk_avx2<const M: usize>(
    group: &[u8],
    xs: &[&[BlockQ8K]; ROW_CHUNK],
) -> [[f32; GROUP]; M] {
    // SAFETY: the caller's contract.
    unsafe {
        if is_packed(group.len(), xs[0].len()) {
            chunk_avx2_in::<true, M>(group, xs)
        } else {
            chunk_avx2_in::<false, M>(group, xs)
        }
    }
}

/// [`chunk_avx2`] for one quant form (as [`chunk_vnni_in`]).
///
/// # Safety
/// As for [`chunk_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn chunk_avx2_in<const PACKED: bool, const M: usize>(
    group: &[u8],
    xs: &[&[BlockQ8K]; ROW_CHUNK],
) -> [[f32; GROUP]; M] {
    use std::arch::x86_64::*;

    let (ones, low) = (_mm256_set1_epi16(1), _mm256_set1_epi8(0x0F));
    let mut out = [[0f32; GROUP]; M];
    for half in 0..2 {
        let mut acc = [_mm256_setzero_ps(); M];
        for (b, block) in group.chunks_exact(block_bytes(PACKED)).enumerate() {
            super::simd_x86::prefetch_block_ahead::<{ super::simd_x86::PREFETCH_BYTES_INTERLEAVED }>(
                block,
            );
            assert!(block.len() >= block_bytes(PACKED) && half < 2);
            let p = block.as_ptr();
            let mut sums = [_mm256_setzero_si256(); M];
            for i in 0..GROUPS {
                // SAFETY: the half's 8 scales of group `i < 16` are bytes `SCALE_AT + 16 i +
                // 8 half ..`, its half of run `k` bytes `QUANT_AT + 64 k + 32 half ..` (32;
                // packed, of run pairs `2 i`, `2 i + 1`) of the (checked) block.
                let (scale, w) = unsafe {
                    let run =
                        |k: usize| _mm256_loadu_si256(p.add(QUANT_AT + 64 * k + 32 * half).cast());
                    let w = if PACKED {
                        let (a, c) = (run(2 * i), run(2 * i + 1));
                        let high = |v| _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                        [
                            _mm256_and_si256(a, low),
                            high(a),
                            _mm256_and_si256(c, low),
                            high(c),
                        ]
                    } else {
                        [0, 1, 2, 3].map(|r| run(4 * i + r))
                    };
                    (
                        _mm256_cvtepi8_epi32(_mm_loadl_epi64(
                            p.add(SCALE_AT + GROUP * i + 8 * half).cast(),
                        )),
                        w,
                    )
                };
                for (sum, x) in sums.iter_mut().zip(xs) {
                    let x = &x[b];
                    let run = |r: usize| {
                        _mm256_maddubs_epi16(w[r], _mm256_set1_epi32(run_word(x, 4 * i + r)))
                    };
                    let low = _mm256_madd_epi16(_mm256_add_epi16(run(0), run(1)), ones);
                    let high = _mm256_madd_epi16(_mm256_add_epi16(run(2), run(3)), ones);
                    let dot = _mm256_add_epi32(low, high);
                    *sum = _mm256_add_epi32(*sum, _mm256_mullo_epi32(dot, scale));
                }
            }
            let mut biases = [_mm256_setzero_si256(); M];
            for pair in 0..GROUPS / 2 {
                // SAFETY: the half's multipliers of pair `< 8` are bytes `BIAS_AT + 64 pair +
                // 32 half ..` (32).
                let m = unsafe {
                    _mm256_loadu_si256(p.add(BIAS_AT + 4 * GROUP * pair + 32 * half).cast())
                };
                for (bias, x) in biases.iter_mut().zip(xs) {
                    let pair = _mm256_set1_epi32(bsum_pair(&x[b], pair));
                    *bias = _mm256_add_epi32(*bias, _mm256_madd_epi16(m, pair));
                }
            }
            // SAFETY: the half's `d` and `dbias` are bytes `32 half ..` and `64 + 32 half ..`.
            let (d, dbias) = unsafe {
                (
                    _mm256_loadu_ps(p.add(32 * half).cast()),
                    _mm256_loadu_ps(p.add(DBIAS_AT + 32 * half).cast()),
                )
            };
            for (((a, x), sum), bias) in acc.iter_mut().zip(xs).zip(sums).zip(biases) {
                let xd = _mm256_set1_ps(x[b].d);
                let quant = _mm256_mul_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(sum));
                let offset = _mm256_mul_ps(_mm256_mul_ps(dbias, xd), _mm256_cvtepi32_ps(bias));
                *a = _mm256_add_ps(*a, _mm256_sub_ps(quant, offset));
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            // SAFETY: `o[8 half ..]` is 8 `f32`s; the store is unaligned.
            unsafe { _mm256_storeu_ps(o[8 * half..].as_mut_ptr(), a) };
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
super::interleaved_kernels::group_kernel! {
    /// [`groups_scalar`] with AVX2 ([`chunk_avx2`]); the same bits.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C. `data` must hold every group covering `rows`
    /// (`group_bytes` each, whole group blocks), matching `acts`' blocks per row.
    pub(super) unsafe fn groups_avx2(BlockQ8K) = chunk_avx2, "avx2,fma,f16c"
}

#[cfg(target_arch = "x86_64")]
super::interleaved_kernels::group_kernel! {
    /// [`groups_scalar`] with AVX-512 VNNI ([`chunk_vnni`]); the same bits.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA, F16C, AVX-512F, AVX-512VL and AVX-512 VNNI. `data` as for
    /// [`groups_avx2`].
    pub(super) unsafe fn groups_vnni(BlockQ8K) = chunk_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn copies_are_reserved_within_the_budget_only() {
        let alive = AtomicUsize::new(0);
        assert!(super::reserve(&alive, 600, 1000));
        assert!(!super::reserve(&alive, 600, 1000), "past the budget");
        assert!(super::reserve(&alive, 400, 1000), "exactly the budget");
        assert!(
            !super::reserve(&alive, usize::MAX, usize::MAX),
            "no overflow"
        );
        assert_eq!(alive.load(Ordering::Relaxed), 1000);
    }

    #[test]
    fn a_copy_is_counted_while_alive() {
        use mtp_core::quant::{GgmlType, QuantTensor, QK_K};
        let (rows, cols) = (20, 2 * QK_K);
        let blocks = vec![0u8; rows * 2 * 144];
        let w = std::sync::Arc::new(
            QuantTensor::ggml(GgmlType::Q4K, rows, cols, blocks).expect("tensor"),
        );
        let copy = super::InterleavedK::new(&w)
            .expect("within budget")
            .expect("Q4_K");
        // Other tests may hold copies too: this one's bytes are at least counted.
        assert!(super::COPY_BYTES.load(Ordering::Relaxed) >= copy.data().len());
        assert_eq!(copy.data().len(), 2 * 2 * super::block_bytes(true));
    }
}
