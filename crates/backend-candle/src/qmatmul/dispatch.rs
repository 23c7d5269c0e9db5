//! Picking the kernel for a (type, instruction set) pair and splitting the output rows into
//! tasks on rayon's global pool.

use std::ops::Range;

use mtp_core::quant::GgmlType;
use rayon::prelude::*;

use super::acts::{quantize_q8_0, quantize_q8_k, BlockQ8K, BlockQ8_0, Quantized};
use super::block32::{self, Block32};
use super::q4_0::Q4_0;
use super::q4_k::Q4K;
use super::q5_0::Q5_0;
use super::q6_k::Q6K;
use super::q8_0::Q8_0;
use super::superblock::{self, SuperBlock};
use super::{QMatMulError, Simd};

/// A row kernel: weights, bytes per weight row, the weight rows to compute, the quantized
/// activations, and per activation row the outputs of those weight rows.
type Kernel<A> = fn(&[u8], usize, Range<usize>, &Quantized<A>, &mut [&mut [f32]]);

/// Tasks per pool thread (load balance against the other work of a shared machine).
const TASKS_PER_THREAD: usize = 4;

/// The least weight bytes a task streams (below this, a task costs more to schedule than run).
const MIN_TASK_BYTES: usize = 32 << 10;

/// `y = x @ Wᵀ`, `y` `[n, rows]`; the shapes were checked by the caller.
pub(super) fn matmul(
    ty: GgmlType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    simd: Simd,
) -> Result<Vec<f32>, QMatMulError> {
    let row_bytes = cols / ty.block_size() * ty.block_bytes();
    let mut y = vec![0f32; n * rows];
    if n == 0 || rows == 0 || cols == 0 {
        return Ok(y);
    }
    let per_task = rows_per_task(rows, row_bytes);
    let mut tasks: Vec<Vec<&mut [f32]>> = (0..rows.div_ceil(per_task))
        .map(|_| Vec::with_capacity(n))
        .collect();
    for y_row in y.chunks_mut(rows) {
        for (task, part) in tasks.iter_mut().zip(y_row.chunks_mut(per_task)) {
            task.push(part);
        }
    }
    match ty {
        GgmlType::Q8_0 | GgmlType::Q5_0 | GgmlType::Q4_0 => {
            let acts = quantize_q8_0(x, n, cols)?;
            let kernel = block32_kernel(ty, simd);
            run(tasks, per_task, |r, out| {
                kernel(weights, row_bytes, r, &acts, out)
            });
        }
        GgmlType::Q4K | GgmlType::Q6K => {
            let acts = quantize_q8_k(x, cols);
            let kernel = superblock_kernel(ty, simd);
            run(tasks, per_task, |r, out| {
                kernel(weights, row_bytes, r, &acts, out)
            });
        }
        other => {
            return Err(QMatMulError::UnsupportedFormat {
                format: format!("GGUF {other}"),
            })
        }
    }
    Ok(y)
}

/// Weight rows per task: about [`TASKS_PER_THREAD`] tasks per thread of the global pool, none
/// smaller than [`MIN_TASK_BYTES`] of weights.
fn rows_per_task(rows: usize, row_bytes: usize) -> usize {
    let tasks = rayon::current_num_threads().max(1) * TASKS_PER_THREAD;
    rows.div_ceil(tasks)
        .max(MIN_TASK_BYTES.div_ceil(row_bytes.max(1)))
        .clamp(1, rows.max(1))
}

/// Run `f(weight rows, outputs)` for every task, on the pool when there is more than one.
fn run(
    tasks: Vec<Vec<&mut [f32]>>,
    per_task: usize,
    f: impl Fn(Range<usize>, &mut [&mut [f32]]) + Sync,
) {
    let go = |(t, mut out): (usize, Vec<&mut [f32]>)| {
        let start = t * per_task;
        let len = out.first().map_or(0, |o| o.len());
        f(start..start + len, &mut out);
    };
    if tasks.len() == 1 {
        tasks.into_iter().enumerate().for_each(go);
    } else {
        tasks.into_par_iter().enumerate().for_each(go);
    }
}

fn block32_kernel(ty: GgmlType, simd: Simd) -> Kernel<BlockQ8_0> {
    fn pick<B: Block32>(simd: Simd) -> Kernel<BlockQ8_0> {
        match simd {
            Simd::Scalar => block32::rows_scalar::<B>,
            Simd::Avx2 => block32_avx2::<B>,
            Simd::Neon => block32_neon::<B>,
        }
    }
    match ty {
        GgmlType::Q8_0 => pick::<Q8_0>(simd),
        GgmlType::Q5_0 => pick::<Q5_0>(simd),
        _ => pick::<Q4_0>(simd),
    }
}

fn superblock_kernel(ty: GgmlType, simd: Simd) -> Kernel<BlockQ8K> {
    fn pick<B: SuperBlock>(simd: Simd) -> Kernel<BlockQ8K> {
        match simd {
            Simd::Scalar => superblock::rows_scalar::<B>,
            Simd::Avx2 => superblock_avx2::<B>,
            Simd::Neon => superblock_neon::<B>,
        }
    }
    match ty {
        GgmlType::Q4K => pick::<Q4K>(simd),
        _ => pick::<Q6K>(simd),
    }
}

/// The AVX2 kernel where the CPU has it, else the scalar one (so the function is safe).
fn block32_avx2<B: Block32>(
    w: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    acts: &Quantized<BlockQ8_0>,
    out: &mut [&mut [f32]],
) {
    #[cfg(target_arch = "x86_64")]
    if Simd::Avx2.is_available() {
        // SAFETY: AVX2 and FMA were detected just now; the row and block sizes come from the
        // weight's checked shape (every slice access inside is bounds-checked).
        return unsafe { block32::rows_avx2::<B>(w, row_bytes, rows, acts, out) };
    }
    block32::rows_scalar::<B>(w, row_bytes, rows, acts, out)
}

/// The AVX2 kernel where the CPU has it, else the scalar one (so the function is safe).
fn superblock_avx2<B: SuperBlock>(
    w: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    acts: &Quantized<BlockQ8K>,
    out: &mut [&mut [f32]],
) {
    #[cfg(target_arch = "x86_64")]
    if Simd::Avx2.is_available() {
        // SAFETY: AVX2 and FMA were detected just now; the row and block sizes come from the
        // weight's checked shape (every slice access inside is bounds-checked).
        return unsafe { superblock::rows_avx2::<B>(w, row_bytes, rows, acts, out) };
    }
    superblock::rows_scalar::<B>(w, row_bytes, rows, acts, out)
}

/// The NEON kernel where the CPU has it, else the scalar one (so the function is safe).
fn block32_neon<B: Block32>(
    w: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    acts: &Quantized<BlockQ8_0>,
    out: &mut [&mut [f32]],
) {
    #[cfg(target_arch = "aarch64")]
    if Simd::Neon.is_available() {
        // SAFETY: NEON was detected just now; the row and block sizes come from the weight's
        // checked shape (every slice access inside is bounds-checked).
        return unsafe { block32::rows_neon::<B>(w, row_bytes, rows, acts, out) };
    }
    block32::rows_scalar::<B>(w, row_bytes, rows, acts, out)
}

/// The NEON kernel where the CPU has it, else the scalar one (so the function is safe).
fn superblock_neon<B: SuperBlock>(
    w: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    acts: &Quantized<BlockQ8K>,
    out: &mut [&mut [f32]],
) {
    #[cfg(target_arch = "aarch64")]
    if Simd::Neon.is_available() {
        // SAFETY: NEON was detected just now; the row and block sizes come from the weight's
        // checked shape (every slice access inside is bounds-checked).
        return unsafe { superblock::rows_neon::<B>(w, row_bytes, rows, acts, out) };
    }
    superblock::rows_scalar::<B>(w, row_bytes, rows, acts, out)
}
