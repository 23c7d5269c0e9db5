//! Picking the kernel for a (type, instruction set) pair and splitting the output rows into
//! tasks on the [`SpinPool`].

use std::ops::Range;
use std::sync::Arc;

use mtp_core::quant::{GgmlType, QuantTensor};

use super::acts::{quantize_q8_0, quantize_q8_k, BlockQ8K, BlockQ8_0, Quantized};
use super::block32::{self, Block32};
use super::interleaved::{Interleaved, GROUP};
use super::interleaved_k::{self, InterleavedK};
use super::interleaved_kernels;
use super::pool::SpinPool;
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

/// The least weight bytes a task streams (below this, a task costs more to hand out than run).
const MIN_TASK_BYTES: usize = 32 << 10;

/// The bytes a product reads, shared with the tasks.
pub(super) enum Weight {
    /// GGUF rows as stored.
    Rows(Arc<QuantTensor>),
    /// The interleaved copy of a 32-weight type.
    Interleaved(Arc<Interleaved>),
    /// The interleaved copy of a K-quant type.
    InterleavedK(Arc<InterleavedK>),
}

impl Weight {
    fn bytes(&self) -> &[u8] {
        match self {
            Weight::Rows(w) => w.data(),
            Weight::Interleaved(w) => w.data(),
            Weight::InterleavedK(w) => w.data(),
        }
    }
}

/// `y = x @ Wᵀ`, `y` `[n, rows]`, on `pool`; the shapes were checked by the caller.
pub(super) fn matmul(
    ty: GgmlType,
    weight: Weight,
    [rows, cols]: [usize; 2],
    x: &[f32],
    n: usize,
    simd: Simd,
    pool: &SpinPool,
) -> Result<Vec<f32>, QMatMulError> {
    if n == 0 || rows == 0 || cols == 0 {
        return Ok(vec![0f32; n * rows]);
    }
    // The kernels' second argument: bytes per GGUF row, or per interleaved group.
    let stride = match &weight {
        Weight::Rows(_) => cols / ty.block_size() * ty.block_bytes(),
        Weight::Interleaved(w) => w.group_bytes(),
        Weight::InterleavedK(w) => w.group_bytes(),
    };
    let row_bytes = match &weight {
        Weight::Rows(_) => stride,
        Weight::Interleaved(_) | Weight::InterleavedK(_) => stride / GROUP,
    };
    let per_task = rows_per_task(rows, row_bytes, pool.threads());
    let interleaved = matches!(weight, Weight::Interleaved(_));
    let interleaved_k = matches!(weight, Weight::InterleavedK(_));
    let plan = Plan {
        weight,
        stride,
        rows,
        per_task,
        n,
    };
    match ty {
        _ if interleaved => plan.run(pool, interleaved_kernel(simd), quantize_q8_0(x, n, cols)?),
        _ if interleaved_k => plan.run(pool, interleaved_k_kernel(simd), quantize_q8_k(x, cols)),
        GgmlType::Q8_0 | GgmlType::Q5_0 | GgmlType::Q4_0 => {
            plan.run(pool, block32_kernel(ty, simd), quantize_q8_0(x, n, cols)?)
        }
        GgmlType::Q4K | GgmlType::Q6K => {
            plan.run(pool, superblock_kernel(ty, simd), quantize_q8_k(x, cols))
        }
        other => Err(QMatMulError::UnsupportedFormat {
            format: format!("GGUF {other}"),
        }),
    }
}

/// How one product is split: task `t` computes weight rows `t · per_task ..` (at most
/// `per_task`, a multiple of the interleaved [`GROUP`]) for all `n` activation rows, into those
/// columns of the `[n, rows]` output.
struct Plan {
    weight: Weight,
    stride: usize,
    rows: usize,
    per_task: usize,
    n: usize,
}

impl Plan {
    /// The `[n, rows]` output.
    fn run<A: Send + Sync + 'static>(
        self,
        pool: &SpinPool,
        kernel: Kernel<A>,
        acts: Quantized<A>,
    ) -> Result<Vec<f32>, QMatMulError> {
        let (n, rows, per_task) = (self.n, self.rows, self.per_task);
        pool.run_columns(n, rows, per_task, move |start, out| {
            let len = out.first().map_or(0, |o| o.len());
            kernel(
                self.weight.bytes(),
                self.stride,
                start..start + len,
                &acts,
                out,
            );
        })
        .map_err(|_| QMatMulError::TaskPanicked)
    }
}

/// Weight rows per task: about [`TASKS_PER_THREAD`] tasks per thread of the pool, none smaller
/// than [`MIN_TASK_BYTES`] of weights, a multiple of [`GROUP`] (so no interleaved group is
/// computed twice) unless that is all the rows.
fn rows_per_task(rows: usize, row_bytes: usize, threads: usize) -> usize {
    let tasks = threads.max(1) * TASKS_PER_THREAD;
    rows.div_ceil(tasks)
        .max(MIN_TASK_BYTES.div_ceil(row_bytes.max(1)))
        .next_multiple_of(GROUP)
        .clamp(1, rows.max(1))
}

fn interleaved_kernel(simd: Simd) -> Kernel<BlockQ8_0> {
    match simd {
        Simd::Avx2 => interleaved_avx2,
        Simd::Avx512Vnni => interleaved_vnni,
        Simd::Scalar | Simd::Neon => interleaved_kernels::groups_scalar,
    }
}

fn interleaved_k_kernel(simd: Simd) -> Kernel<BlockQ8K> {
    match simd {
        Simd::Avx2 => interleaved_k_avx2,
        Simd::Avx512Vnni => interleaved_k_vnni,
        Simd::Scalar | Simd::Neon => interleaved_k::groups_scalar,
    }
}

fn block32_kernel(ty: GgmlType, simd: Simd) -> Kernel<BlockQ8_0> {
    fn pick<B: Block32>(simd: Simd) -> Kernel<BlockQ8_0> {
        match simd {
            Simd::Scalar => block32::rows_scalar::<B>,
            Simd::Avx2 => block32_avx2::<B>,
            Simd::Avx512Vnni => block32_vnni::<B>,
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
            Simd::Avx512Vnni => superblock_vnni::<B>,
            Simd::Neon => superblock_neon::<B>,
        }
    }
    match ty {
        GgmlType::Q4K => pick::<Q4K>(simd),
        _ => pick::<Q6K>(simd),
    }
}

/// A safe entry to an instruction-set kernel: `$module::$kernel` where the CPU has `$simd`
/// (checked again here, so the function is safe whatever calls it), else the module's scalar
/// kernel (the same results within the tests' tolerance).
macro_rules! checked_kernel {
    ($name:ident<$bound:ident>($act:ty) = $module:ident::$kernel:ident on $simd:expr, $arch:literal) => {
        fn $name<B: $bound>(
            w: &[u8],
            row_bytes: usize,
            rows: Range<usize>,
            acts: &Quantized<$act>,
            out: &mut [&mut [f32]],
        ) {
            #[cfg(target_arch = $arch)]
            if $simd.is_available() {
                // SAFETY: the kernel's instruction set was detected just now; the row and block
                // sizes come from the weight's checked shape (every slice access inside is
                // bounds-checked).
                return unsafe { $module::$kernel::<B>(w, row_bytes, rows, acts, out) };
            }
            $module::rows_scalar::<B>(w, row_bytes, rows, acts, out)
        }
    };
}

/// [`checked_kernel!`] for the interleaved layout's kernels (no block-type parameter).
macro_rules! checked_group_kernel {
    ($name:ident($act:ty) = $module:ident::$kernel:ident on $simd:expr) => {
        fn $name(
            w: &[u8],
            group_bytes: usize,
            rows: Range<usize>,
            acts: &Quantized<$act>,
            out: &mut [&mut [f32]],
        ) {
            #[cfg(target_arch = "x86_64")]
            if $simd.is_available() {
                // SAFETY: the kernel's instruction set was detected just now; the group and
                // block sizes come from the weight's checked shape (every slice access inside
                // is bounds-checked).
                return unsafe { $module::$kernel(w, group_bytes, rows, acts, out) };
            }
            $module::groups_scalar(w, group_bytes, rows, acts, out)
        }
    };
}

checked_group_kernel!(interleaved_avx2(BlockQ8_0) = interleaved_kernels::groups_avx2 on Simd::Avx2);
checked_group_kernel!(interleaved_vnni(BlockQ8_0) = interleaved_kernels::groups_vnni on Simd::Avx512Vnni);
checked_group_kernel!(interleaved_k_avx2(BlockQ8K) = interleaved_k::groups_avx2 on Simd::Avx2);
checked_group_kernel!(interleaved_k_vnni(BlockQ8K) = interleaved_k::groups_vnni on Simd::Avx512Vnni);

checked_kernel!(block32_avx2<Block32>(BlockQ8_0) = block32::rows_avx2 on Simd::Avx2, "x86_64");
checked_kernel!(block32_vnni<Block32>(BlockQ8_0) = block32::rows_vnni on Simd::Avx512Vnni, "x86_64");
checked_kernel!(block32_neon<Block32>(BlockQ8_0) = block32::rows_neon on Simd::Neon, "aarch64");
checked_kernel!(superblock_avx2<SuperBlock>(BlockQ8K) = superblock::rows_avx2 on Simd::Avx2, "x86_64");
checked_kernel!(superblock_vnni<SuperBlock>(BlockQ8K) = superblock::rows_vnni on Simd::Avx512Vnni, "x86_64");
checked_kernel!(superblock_neon<SuperBlock>(BlockQ8K) = superblock::rows_neon on Simd::Neon, "aarch64");
