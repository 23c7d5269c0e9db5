//! `y = x @ Wᵀ` for the rows of a decode step, a speculative verify of `k + 1` tokens, a
//! prefill chunk or a continuous batch's packed rows (up to the
//! [`RowInvariance`](crate::RowInvariance) limit) against a dense weight `[out, in]` in `f32`,
//! `bf16` or `f16` on the CPU, each weight row read in place.
//!
//! candle's CPU matmul (the `gemm` crate) packs the transposed weight into its own panels on
//! every call with more than one row: for the default pair's verify forwards about a third of
//! all samples were that packing, so a verify of 2–5 rows cost 2.7–3.1 single-row steps. It
//! also rounds a row differently with the number of rows beside it (another kernel for one row,
//! half-precision blocks converted per panel), so a verify row could get other bits than the
//! same row decoded alone.
//!
//! Each output `y[j][i]` is one dot product whose order depends only on `in` (two 8-lane
//! fused multiply-add chains over 16-column steps, then 8, then the scalar tail: [`finish`]),
//! never on how many rows were given, where a row sits among them, or how the work was split
//! over threads: a row of a verify forward gets the bits it gets alone. Activation rows go in
//! passes of [`CHUNK`]; on a CPU with AVX-512 four weight rows at a time meet each full pass in
//! one tile (`tile512.rs`: the two chains side by side in one 16-lane register, so the same
//! bits with a quarter of the activation loads), which keeps the kernel as fast as candle's
//! packed `f32` matmul up to 128 rows and faster in half precision (`examples/dense_bench.rs`).
//! **Rounding:** half-precision weights and activations are widened to `f32` exactly, the dot
//! product is the same `f32` sum as for `f32` weights, and the result is rounded once to the
//! activations' dtype.

use std::ops::Range;
use std::sync::Arc;

use candle_core::{CpuStorage, DType as CDType, Device, Storage, Tensor};
use half::slice::HalfFloatSliceExt;

use crate::qmatmul::SpinPool;
use crate::row_scan::contiguous_f32;
use crate::Result;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod tile512;

/// Activation rows dotted per pass over a weight row.
#[cfg(target_arch = "x86_64")]
const CHUNK: usize = 4;

/// The least weight bytes a task reads (smaller products run on the calling thread alone).
const MIN_TASK_BYTES: usize = 64 << 10;

/// Tasks per pool thread.
const TASKS_PER_THREAD: usize = 4;

/// The weight element types read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    F32,
    BF16,
    F16,
}

impl Element {
    fn of(dtype: CDType) -> Option<Self> {
        match dtype {
            CDType::F32 => Some(Self::F32),
            CDType::BF16 => Some(Self::BF16),
            CDType::F16 => Some(Self::F16),
            _ => None,
        }
    }

    fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::BF16 | Self::F16 => 2,
        }
    }
}

/// `x @ wᵀ` by the few-row kernel when it applies — CPU, `x` and `w` of one dtype (`f32`,
/// `bf16` or `f16`), `w` `[out, in]` contiguous, at most `max_rows` rows of `x` (the
/// [`RowInvariance`](crate::RowInvariance) limit: above it candle's packed matmul, whose
/// packing pays for itself over a long prefill chunk), a CPU with AVX2, FMA and F16C — else
/// `None` (the caller runs the portable path).
pub(crate) fn linear(x: &Tensor, w: &Tensor, max_rows: usize) -> Option<Result<Tensor>> {
    let element = Element::of(x.dtype())?;
    if !matches!(x.device(), Device::Cpu) || w.dtype() != x.dtype() || !available() {
        return None;
    }
    let (out, cols) = w.dims2().ok()?;
    let dims = x.dims();
    if dims.last() != Some(&cols) || cols == 0 || out == 0 {
        return None;
    }
    let n: usize = dims[..dims.len() - 1].iter().product();
    if n == 0 || n > max_rows {
        return None;
    }
    // The weight must be readable in place (a contiguous CPU tensor), checked before any task
    // starts.
    weight_len(w).filter(|&len| len == out * cols)?;
    let xs = match activations(x) {
        Ok(Some(xs)) => xs,
        Ok(None) => return None,
        Err(e) => return Some(Err(e)),
    };
    let mut shape = dims.to_vec();
    shape.pop();
    shape.push(out);
    let dtype = x.dtype();
    Some(
        run(
            Arc::new(xs),
            n,
            w.clone(),
            out,
            cols,
            element,
            SpinPool::global(),
        )
        .and_then(|y| {
            let y = Tensor::from_vec(y, shape, x.device())?;
            Ok(if dtype == CDType::F32 {
                y
            } else {
                y.to_dtype(dtype)?
            })
        }),
    )
}

/// The activations as `f32` rows (half precision widened exactly), or `None` where they cannot
/// be read.
fn activations(x: &Tensor) -> Result<Option<Vec<f32>>> {
    if x.dtype() == CDType::F32 {
        return Ok(contiguous_f32(x, |v| v.to_vec())
            .or_else(|| contiguous_f32(&x.contiguous().ok()?, |v| v.to_vec())));
    }
    let wide = x.to_dtype(CDType::F32)?;
    Ok(contiguous_f32(&wide, |v| v.to_vec()))
}

/// A contiguous CPU weight's values, in place.
enum WeightValues<'a> {
    F32(&'a [f32]),
    /// `bf16` or `f16` bits.
    Half(&'a [u16]),
}

/// `f(values)` for a contiguous `f32`, `bf16` or `f16` CPU tensor; `None` otherwise.
fn with_weight<T>(w: &Tensor, f: impl FnOnce(WeightValues<'_>) -> T) -> Option<T> {
    let (storage, layout) = w.storage_and_layout();
    let (start, end) = layout.contiguous_offsets()?;
    match &*storage {
        Storage::Cpu(CpuStorage::F32(v)) => Some(f(WeightValues::F32(v.get(start..end)?))),
        Storage::Cpu(CpuStorage::BF16(v)) => {
            Some(f(WeightValues::Half(v.get(start..end)?.reinterpret_cast())))
        }
        Storage::Cpu(CpuStorage::F16(v)) => {
            Some(f(WeightValues::Half(v.get(start..end)?.reinterpret_cast())))
        }
        _ => None,
    }
}

/// The number of values [`with_weight`] reads.
fn weight_len(w: &Tensor) -> Option<usize> {
    with_weight(w, |v| match v {
        WeightValues::F32(v) => v.len(),
        WeightValues::Half(v) => v.len(),
    })
}

/// Whether this CPU has the kernel's instruction set: AVX2, FMA and F16C (which every x86-64
/// CPU with AVX2 has).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The product on `pool`: task `t` computes weight rows `t · per_task ..` for all rows of `x`,
/// into those columns of the output.
fn run(
    x: Arc<Vec<f32>>,
    n: usize,
    w: Tensor,
    out: usize,
    cols: usize,
    element: Element,
    pool: &SpinPool,
) -> Result<Vec<f32>> {
    let tasks_wanted = pool.threads().max(1) * TASKS_PER_THREAD;
    let per_task = out
        .div_ceil(tasks_wanted)
        .max(MIN_TASK_BYTES.div_ceil(cols * element.bytes()))
        .clamp(1, out.max(1));
    let y = pool
        .run_columns(n, out, per_task, move |start, part| {
            let len = part.first().map_or(0, |p| p.len());
            // The weight was checked contiguous above; a tensor's storage does not change.
            with_weight(&w, |wv| {
                let range = start..start + len;
                match (wv, element) {
                    (WeightValues::F32(wv), _) => rows::<F32>(&x, cols, wv, range, part),
                    (WeightValues::Half(wv), Element::BF16) => {
                        rows::<Bf16>(&x, cols, wv, range, part)
                    }
                    (WeightValues::Half(wv), _) => rows::<F16>(&x, cols, wv, range, part),
                }
            });
        })
        .map_err(|_| crate::qmatmul::QMatMulError::TaskPanicked)?;
    Ok(y)
}

/// A weight element type: how its stored values widen to `f32` (exactly).
trait Widen {
    /// The stored value (`f32`, or a half's bits).
    type Item: Copy;
    /// Which type it is (the SIMD loads branch on it at compile time).
    #[cfg(target_arch = "x86_64")]
    const ELEMENT: Element;
    /// The value as `f32`.
    fn widen(x: Self::Item) -> f32;
}

struct F32;
struct Bf16;
struct F16;

impl Widen for F32 {
    type Item = f32;
    #[cfg(target_arch = "x86_64")]
    const ELEMENT: Element = Element::F32;
    fn widen(x: f32) -> f32 {
        x
    }
}

impl Widen for Bf16 {
    type Item = u16;
    #[cfg(target_arch = "x86_64")]
    const ELEMENT: Element = Element::BF16;
    fn widen(x: u16) -> f32 {
        half::bf16::from_bits(x).to_f32()
    }
}

impl Widen for F16 {
    type Item = u16;
    #[cfg(target_arch = "x86_64")]
    const ELEMENT: Element = Element::F16;
    fn widen(x: u16) -> f32 {
        half::f16::from_bits(x).to_f32()
    }
}

/// `part[j][i − rows.start] = x_j · w_i` for weight rows `rows` and every activation row `j`.
fn rows<W: Widen>(
    x: &[f32],
    cols: usize,
    w: &[W::Item],
    rows: Range<usize>,
    part: &mut [&mut [f32]],
) {
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: AVX2, FMA and F16C were detected just now; every slice access is
        // bounds-checked.
        #[allow(unsafe_code)]
        return unsafe { rows_avx2::<W>(x, cols, w, rows, part) };
    }
    for (i, r) in rows.enumerate() {
        let w_row = &w[r * cols..][..cols];
        for (j, out) in part.iter_mut().enumerate() {
            out[i] = x[j * cols..][..cols]
                .iter()
                .zip(w_row)
                .map(|(a, &b)| a * W::widen(b))
                .sum();
        }
    }
}

/// [`rows`] with AVX2 + FMA, [`CHUNK`] activation rows per pass over a weight row.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2<W: Widen>(
    x: &[f32],
    cols: usize,
    w: &[W::Item],
    rows: Range<usize>,
    part: &mut [&mut [f32]],
) {
    let n = part.len();
    // The activation rows of each pass, picked once (a short last chunk repeats its last row,
    // whose dot is computed but not stored).
    let passes: Vec<(usize, usize, [&[f32]; CHUNK])> = (0..n)
        .step_by(CHUNK)
        .map(|j0| {
            let m = CHUNK.min(n - j0);
            let xr = std::array::from_fn(|jj| &x[(j0 + jj.min(m - 1)) * cols..][..cols]);
            (j0, m, xr)
        })
        .collect();
    let count = rows.len();
    // Groups of [`tile512::TILE`] weight rows by the AVX-512 tiles where the CPU has them:
    // the same dot products in the same order (its 16-lane registers hold the two 8-lane
    // chains side by side), with each activation load shared by four weight rows.
    let mut done = 0;
    if tile512::available() {
        while done + tile512::TILE <= count {
            let first = rows.start + done;
            let ws: [&[W::Item]; tile512::TILE] =
                std::array::from_fn(|t| &w[(first + t) * cols..][..cols]);
            for (j0, m, xr) in &passes {
                if *m == CHUNK {
                    // SAFETY: AVX-512F was detected by `tile512::available`, AVX2, FMA and
                    // F16C by the caller.
                    let dots = unsafe { tile512::tile::<W>(&ws, xr) };
                    for (jj, row) in dots.iter().enumerate() {
                        part[j0 + jj][done..done + tile512::TILE].copy_from_slice(row);
                    }
                } else {
                    for (t, w_row) in ws.iter().enumerate() {
                        row_pass::<W>(part, *j0, *m, done + t, w_row, xr);
                    }
                }
            }
            done += tile512::TILE;
        }
    }
    for i in done..count {
        let w_row = &w[(rows.start + i) * cols..][..cols];
        for (j0, m, xr) in &passes {
            row_pass::<W>(part, *j0, *m, i, w_row, xr);
        }
    }
}

/// One weight row against one pass of `m` activation rows (from `j0`), into output column `i`.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn row_pass<W: Widen>(
    part: &mut [&mut [f32]],
    j0: usize,
    m: usize,
    i: usize,
    w_row: &[W::Item],
    xr: &[&[f32]; CHUNK],
) {
    match m {
        1 => store(part, j0, i, chunk::<1, W>(w_row, xr)),
        2 => store(part, j0, i, chunk::<2, W>(w_row, xr)),
        3 => store(part, j0, i, chunk::<3, W>(w_row, xr)),
        _ => store(part, j0, i, chunk::<4, W>(w_row, xr)),
    }
}

/// `part[j0 + jj][i] = dots[jj]`.
#[cfg(target_arch = "x86_64")]
#[inline]
fn store<const M: usize>(part: &mut [&mut [f32]], j0: usize, i: usize, dots: [f32; M]) {
    for (jj, d) in dots.into_iter().enumerate() {
        part[j0 + jj][i] = d;
    }
}

/// The 8 floats of `v` from column `c`.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx2")]
#[inline]
fn load(v: &[f32], c: usize) -> std::arch::x86_64::__m256 {
    let s = &v[c..c + 8];
    // SAFETY: `s` is 8 floats; the load is unaligned.
    unsafe { std::arch::x86_64::_mm256_loadu_ps(s.as_ptr()) }
}

/// The 8 weights of `w` from column `c`, widened to `f32` (exactly: `bf16` by a 16-bit shift,
/// `f16` by F16C's conversion).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn load_weights<W: Widen>(w: &[W::Item], c: usize) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let s = &w[c..c + 8];
    match W::ELEMENT {
        // SAFETY: `s` is 8 `f32`s (the element type is `f32`); the load is unaligned.
        Element::F32 => unsafe { _mm256_loadu_ps(s.as_ptr().cast::<f32>()) },
        Element::BF16 => {
            // SAFETY: `s` is 8 `u16`s, 16 bytes; the load is unaligned.
            let bits = unsafe { _mm_loadu_si128(s.as_ptr().cast::<__m128i>()) };
            _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16))
        }
        Element::F16 => {
            // SAFETY: as above.
            let bits = unsafe { _mm_loadu_si128(s.as_ptr().cast::<__m128i>()) };
            _mm256_cvtph_ps(bits)
        }
    }
}

/// One weight row dotted with `M` activation rows: per row two 8-lane chains (columns
/// `16 s .. 16 s + 8` and `16 s + 8 .. 16 s + 16`), then [`finish`].
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn chunk<const M: usize, W: Widen>(w: &[W::Item], xs: &[&[f32]; CHUNK]) -> [f32; M] {
    use std::arch::x86_64::*;
    let cols = w.len();
    let (mut a0, mut a1) = ([_mm256_setzero_ps(); M], [_mm256_setzero_ps(); M]);
    let mut c = 0;
    while c + 16 <= cols {
        let (w0, w1) = (load_weights::<W>(w, c), load_weights::<W>(w, c + 8));
        for jj in 0..M {
            a0[jj] = _mm256_fmadd_ps(load(xs[jj], c), w0, a0[jj]);
            a1[jj] = _mm256_fmadd_ps(load(xs[jj], c + 8), w1, a1[jj]);
        }
        c += 16;
    }
    let mut out = [0f32; M];
    for jj in 0..M {
        out[jj] = finish::<W>([a0[jj], a1[jj]], c, w, xs[jj]);
    }
    out
}

/// The end of one dot product whose two 8-lane chains ran over columns `..c` (a multiple of
/// 16): a last 8 columns into the first chain, the two chains summed and reduced across lanes,
/// then the scalar tail added in order. Every kernel ends its dot products here, so they agree
/// to the bit.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn finish<W: Widen>(
    [mut a0, a1]: [std::arch::x86_64::__m256; 2],
    mut c: usize,
    w: &[W::Item],
    x: &[f32],
) -> f32 {
    use std::arch::x86_64::*;
    let cols = w.len();
    if c + 8 <= cols {
        a0 = _mm256_fmadd_ps(load(x, c), load_weights::<W>(w, c), a0);
        c += 8;
    }
    let v = _mm256_add_ps(a0, a1);
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    let mut sum = _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
    for k in c..cols {
        sum += x[k] * W::widen(w[k]);
    }
    sum
}

#[cfg(test)]
mod tests {
    use mtp_core::Backend;

    use crate::quantized_tests::{rel_err, Rng};
    use crate::CandleBackend;

    fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng(seed | 1);
        (0..len).map(|_| rng.unit()).collect()
    }

    /// Rows tried (the kernel's limit in the test).
    const ROWS: usize = 16;

    #[test]
    fn few_rows_match_candles_matmul_and_each_row_gets_its_bits_alone() -> crate::Result<()> {
        let b = CandleBackend::cpu();
        // Columns: a multiple of 16, of 8 only, and a scalar tail; rows split into several
        // tasks for the wide one.
        for (k, &(out, cols)) in [(37, 64), (300, 200), (5000, 37)].iter().enumerate() {
            let w = b.from_f32(
                &random(out * cols, 10 + k as u64),
                &[out, cols],
                mtp_core::DType::F32,
            )?;
            let all = random(ROWS * cols, 20 + k as u64);
            let alone: Vec<Vec<f32>> = (0..ROWS)
                .map(|j| {
                    let x =
                        b.from_f32(&all[j * cols..][..cols], &[1, cols], mtp_core::DType::F32)?;
                    b.to_vec_f32(&b.linear(&x, &w)?)
                })
                .collect::<crate::Result<_>>()?;
            for n in [1, 2, 3, 4, 5, 9, ROWS] {
                let x = b.from_f32(&all[..n * cols], &[1, n, cols], mtp_core::DType::F32)?;
                assert!(super::linear(&x, &w, ROWS).is_some() || !super::available());
                let got = b.to_vec_f32(&b.linear(&x, &w)?)?;
                let want = b.to_vec_f32(&mtp_core::backend::default_linear(&b, &x, &w)?)?;
                assert!(rel_err(&got, &want) < 1e-5, "[{out}, {cols}] n={n}");
                for (j, row) in got.chunks_exact(out).enumerate() {
                    assert_eq!(row, &alone[j][..], "[{out}, {cols}] n={n} row {j}");
                }
            }
            // Above the row limit, and a transposed (non-contiguous) input, still correct.
            let n = ROWS + 1;
            let x = b.from_f32(&random(n * cols, 30), &[n, cols], mtp_core::DType::F32)?;
            assert!(super::linear(&x, &w, ROWS).is_none());
            let xt = b.transpose(
                &b.from_f32(&all[..4 * cols], &[cols, 4], mtp_core::DType::F32)?,
                0,
                1,
            )?;
            let got = b.to_vec_f32(&b.linear(&xt, &w)?)?;
            let want = b.to_vec_f32(&mtp_core::backend::default_linear(&b, &xt, &w)?)?;
            assert!(rel_err(&got, &want) < 1e-5, "[{out}, {cols}] transposed x");
        }
        Ok(())
    }
}
