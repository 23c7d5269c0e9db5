//! A batched quantized matmul for the CPU: `y = x @ Wᵀ` for a few activation rows (a decode
//! step, a speculative verify of `k + 1` tokens, a prefill chunk) against a GGUF block weight,
//! read straight from its GGUF bytes.
//!
//! candle 0.11's CPU `QMatMul` runs one weight-row × activation-row dot product at a time, so
//! `n` rows cost about `n` single-row products, and it has no SIMD kernel for Q5_0. Here each
//! weight block is read and decoded once per chunk of [`ROW_CHUNK`] activation rows and dotted
//! with all of them while it sits in registers; the weight row stays in L1 for the next chunk.
//! While the product is bandwidth-bound (a few rows), `n` rows cost little more than one.
//!
//! Numerics are ggml's, so results agree with llama.cpp: the activations are quantized once
//! per call to the weight type's dot partner — Q8_0 for Q8_0 / Q5_0 / Q4_0 weights, Q8_K
//! (with its per-16 quant sums) for Q4_K / Q6_K — the block dot products are exact integer
//! sums, and each is scaled by the two block scales into an `f32` accumulator.
//!
//! * Types: [`QuantMatMul::supports`] — Q8_0, Q5_0, Q4_0, Q4_K, Q6_K. Other GGUF types keep
//!   candle's `QMatMul` (the backend says so once per type).
//! * Layout: [`Layout`] — Q8_0, Q5_0, Q4_K and Q6_K are rearranged at load on x86-64 into
//!   groups of 16 interleaved rows (one 512-bit byte dot product advances 16 rows' sums, one
//!   256-bit one 8: about a third of the per-row kernel's instructions); Q4_0 (and every type on
//!   other CPUs) runs on its GGUF rows as stored.
//! * Instruction set: [`Simd::best`], detected at run time — AVX-512 VNNI, else AVX2 + FMA on
//!   x86-64, NEON on aarch64, else the portable scalar kernels (which are also the tests'
//!   oracle for the SIMD ones).
//! * Threads: output rows are split into tasks on the [`SpinPool`] (the caller and workers
//!   that poll for the next product; sized like rayon's global pool, which `--threads` sets),
//!   a few tasks per thread.

// The modules allowed `unsafe` hold the SIMD kernels (or, in `dispatch`, the one call into them
// after the CPU check); `pool` allows it on the one function that hands its tasks disjoint
// columns of one output. Every unsafe block says why it is sound.
mod acts;
#[allow(unsafe_code)]
mod block32;
mod cpu;
#[allow(unsafe_code)]
mod dispatch;
mod interleaved;
#[allow(unsafe_code)]
mod interleaved_k;
#[allow(unsafe_code)]
mod interleaved_kernels;
pub mod pool;
#[allow(unsafe_code)]
mod q4_0;
#[allow(unsafe_code)]
mod q4_k;
#[allow(unsafe_code)]
mod q5_0;
#[allow(unsafe_code)]
mod q6_k;
#[allow(unsafe_code)]
mod q8_0;
mod row_loop;
#[cfg(target_arch = "x86_64")]
mod simd_x86;
#[allow(unsafe_code)]
mod superblock;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use mtp_core::quant::{GgmlType, QuantError, QuantFormat, QuantTensor};

pub use cpu::Simd;
pub use pool::SpinPool;

/// Activation rows processed together per weight row (the accumulators of one chunk stay in
/// registers; the weight row is re-read from L1 for the next chunk).
pub const ROW_CHUNK: usize = 8;

/// Why the batched quantized matmul cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QMatMulError {
    /// The weight is not in a GGUF block format this kernel implements.
    #[error(
        "no batched CPU kernel for {format} weights (supported: Q8_0, Q5_0, Q4_0, Q4_K, Q6_K)"
    )]
    UnsupportedFormat {
        /// The format, in words.
        format: String,
    },
    /// `x` does not hold `rows` rows of the weight's `cols` columns.
    #[error("quantized matmul: {len} activation values are not {rows} rows of {cols}")]
    InputSize {
        /// Values given.
        len: usize,
        /// Activation rows asked for.
        rows: usize,
        /// Columns of the weight (the contracted axis).
        cols: usize,
    },
    /// The instruction set asked for is not available on this CPU.
    #[error("quantized matmul: {simd} is not available on this CPU")]
    SimdUnavailable {
        /// The instruction set asked for.
        simd: Simd,
    },
    /// The interleaved K-quant copy would take the copies alive past their budget.
    #[error(
        "quantized matmul: an interleaved copy of {bytes} bytes would exceed the {budget}-byte budget of such copies"
    )]
    CopyBudget {
        /// Bytes the copy would take.
        bytes: usize,
        /// The budget of all such copies at once.
        budget: usize,
    },
    /// A kernel task panicked (a bug; reported rather than left to hang the caller).
    #[error("quantized matmul: a kernel task panicked")]
    TaskPanicked,
    /// The activations could not be quantized (a size the block type rejects).
    #[error(transparent)]
    Quant(#[from] QuantError),
}

/// How a weight's bytes are arranged for the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// The GGUF rows as stored, shared with the loaded tensor (every supported type).
    Rows,
    /// Q8_0, Q5_0, Q4_K and Q6_K: groups of 16 rows interleaved in 4-weight runs, the weights
    /// as bytes (Q4_K's quants two to a byte; a copy made at load, exact: the 32-weight types'
    /// GGUF bytes are rebuilt from it, the K-quant tensors are kept beside it).
    Interleaved,
}

impl Layout {
    /// Every layout.
    pub const ALL: [Layout; 2] = [Layout::Rows, Layout::Interleaved];

    /// The environment variable that, set to `rows`, keeps every weight in its GGUF rows (an
    /// A/B switch for benchmarks).
    pub const ENV: &'static str = "MTP_QMATMUL_LAYOUT";

    /// Whether weights of GGUF type `ty` can take this layout.
    pub fn supports(self, ty: GgmlType) -> bool {
        match self {
            Layout::Rows => QuantMatMul::supports(ty),
            Layout::Interleaved => {
                interleaved::Interleaved::supports(ty) || interleaved_k::InterleavedK::supports(ty)
            }
        }
    }

    /// The layout [`QuantMatMul::new`] gives a weight of type `ty`: interleaved where the type
    /// supports it and this CPU has the x86-64 kernels written for it (AVX2; elsewhere its only
    /// kernel would be the scalar one), unless [`ENV`](Self::ENV) is `rows`; else rows.
    pub fn preferred(ty: GgmlType) -> Layout {
        static ROWS_ONLY: OnceLock<bool> = OnceLock::new();
        let rows_only = *ROWS_ONLY.get_or_init(|| {
            let value = std::env::var(Self::ENV).unwrap_or_default();
            match value.trim() {
                "" | "auto" => false,
                "rows" => {
                    tracing::info!("{}=rows: quantized weights keep their GGUF rows", Self::ENV);
                    true
                }
                other => {
                    tracing::warn!("{}={other}: not `rows` or `auto`; ignored", Self::ENV);
                    false
                }
            }
        });
        let x86_kernels = Simd::Avx2.is_available();
        if !rows_only && x86_kernels && Layout::Interleaved.supports(ty) {
            Layout::Interleaved
        } else {
            Layout::Rows
        }
    }
}

/// A GGUF block weight ready for the batched CPU kernels: its GGUF rows (the shared tensor, no
/// copy) or the [interleaved](Layout::Interleaved) copy.
#[derive(Debug, Clone)]
pub struct QuantMatMul {
    storage: Storage,
    ty: GgmlType,
    shape: [usize; 2],
}

#[derive(Debug, Clone)]
enum Storage {
    Rows(Arc<QuantTensor>),
    Interleaved(Arc<interleaved::Interleaved>),
    InterleavedK(Arc<interleaved_k::InterleavedK>),
}

impl QuantMatMul {
    /// Whether GGUF type `ty` has a batched kernel here.
    pub fn supports(ty: GgmlType) -> bool {
        matches!(
            ty,
            GgmlType::Q8_0 | GgmlType::Q5_0 | GgmlType::Q4_0 | GgmlType::Q4K | GgmlType::Q6K
        )
    }

    /// Wrap `weight` (`[rows, cols]` GGUF blocks) in its [preferred](Layout::preferred) layout;
    /// [`QMatMulError::UnsupportedFormat`] for a format without a kernel.
    pub fn new(weight: Arc<QuantTensor>) -> Result<Self, QMatMulError> {
        let ty = Self::ggml_type_of(&weight)?;
        match Self::with_layout(weight.clone(), Layout::preferred(ty)) {
            Err(QMatMulError::CopyBudget { bytes, budget }) => {
                static SAID: AtomicBool = AtomicBool::new(false);
                if !SAID.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        "interleaved Q4_K/Q6_K copies past {budget} bytes: this weight ({bytes} bytes of copy) and any further ones keep their GGUF rows (slower multi-row products, no extra memory)"
                    );
                }
                Self::with_layout(weight, Layout::Rows)
            }
            other => other,
        }
    }

    /// Wrap `weight` in `layout` ([`QMatMulError::UnsupportedFormat`] if its type lacks it).
    pub fn with_layout(weight: Arc<QuantTensor>, layout: Layout) -> Result<Self, QMatMulError> {
        let ty = Self::ggml_type_of(&weight)?;
        let shape = weight.shape();
        let storage = match layout {
            Layout::Rows => Storage::Rows(weight),
            Layout::Interleaved => match (
                interleaved::Interleaved::new(&weight),
                interleaved_k::InterleavedK::new(&weight),
            ) {
                (Some(w), _) => Storage::Interleaved(Arc::new(w)),
                (None, Err(bytes)) => {
                    return Err(QMatMulError::CopyBudget {
                        bytes,
                        budget: interleaved_k::COPY_BUDGET_BYTES,
                    })
                }
                (None, Ok(Some(w))) => Storage::InterleavedK(Arc::new(w)),
                (None, Ok(None)) => {
                    return Err(QMatMulError::UnsupportedFormat {
                        format: format!("GGUF {ty} in the interleaved layout"),
                    })
                }
            },
        };
        Ok(Self { storage, ty, shape })
    }

    fn ggml_type_of(weight: &QuantTensor) -> Result<GgmlType, QMatMulError> {
        match weight.format() {
            QuantFormat::Ggml(ty) if Self::supports(ty) => Ok(ty),
            QuantFormat::Ggml(ty) => Err(QMatMulError::UnsupportedFormat {
                format: format!("GGUF {ty}"),
            }),
            QuantFormat::Affine(p) => Err(QMatMulError::UnsupportedFormat {
                format: format!("MLX affine {p:?}"),
            }),
        }
    }

    /// The weight's block type.
    pub fn ggml_type(&self) -> GgmlType {
        self.ty
    }

    /// `[rows, cols]` of the weight.
    pub fn shape(&self) -> [usize; 2] {
        self.shape
    }

    /// The layout its bytes are in.
    pub fn layout(&self) -> Layout {
        match self.storage {
            Storage::Rows(_) => Layout::Rows,
            Storage::Interleaved(_) | Storage::InterleavedK(_) => Layout::Interleaved,
        }
    }

    /// Bytes the kernels read per product (the interleaved copy's, or the GGUF tensor's).
    pub fn bytes(&self) -> usize {
        match &self.storage {
            Storage::Rows(w) => w.data().len(),
            Storage::Interleaved(w) => w.data().len(),
            Storage::InterleavedK(w) => w.data().len(),
        }
    }

    /// Rows `ids` decoded to `f32` (`[ids.len(), cols]`, the bits the GGUF blocks decode to),
    /// from whichever layout it holds; an id out of range is an error.
    pub fn decode_rows(&self, ids: &[usize]) -> Result<Vec<f32>, QMatMulError> {
        match &self.storage {
            Storage::Rows(w) => Ok(w.dequantize_rows(ids)?),
            Storage::InterleavedK(w) => Ok(w.source().dequantize_rows(ids)?),
            Storage::Interleaved(w) => {
                let [rows, cols] = self.shape;
                let mut out = vec![0f32; ids.len() * cols];
                for (&id, out) in ids.iter().zip(out.chunks_exact_mut(cols.max(1))) {
                    if id >= rows {
                        return Err(QuantError::RowOutOfRange { row: id, rows }.into());
                    }
                    w.decode_row(id, out);
                }
                Ok(out)
            }
        }
    }

    /// The GGUF tensor it holds, if it holds one (its rows, or the tensor kept beside an
    /// interleaved K-quant copy); `None` for an interleaved 32-weight copy, which dropped it.
    pub fn held_tensor(&self) -> Option<&Arc<QuantTensor>> {
        match &self.storage {
            Storage::Rows(w) => Some(w),
            Storage::InterleavedK(w) => Some(w.source()),
            Storage::Interleaved(_) => None,
        }
    }

    /// The GGUF tensor it computes with: the shared one, or rebuilt byte for byte from the
    /// interleaved copy.
    pub fn to_tensor(&self) -> Result<Arc<QuantTensor>, QMatMulError> {
        match &self.storage {
            Storage::Rows(w) => Ok(w.clone()),
            Storage::Interleaved(w) => Ok(Arc::new(w.to_tensor()?)),
            Storage::InterleavedK(w) => Ok(w.source().clone()),
        }
    }

    /// `y = x @ Wᵀ` for `n` activation rows: `x` is `[n, cols]` row-major, `y` is `[n, rows]`,
    /// with the fastest instruction set of this CPU ([`Simd::best`]).
    pub fn forward(&self, x: &[f32], n: usize) -> Result<Vec<f32>, QMatMulError> {
        self.forward_with(x, n, Simd::best())
    }

    /// [`forward`](Self::forward) with the instruction set `simd`
    /// ([`QMatMulError::SimdUnavailable`] if this CPU lacks it): for tests and benchmarks.
    /// The interleaved layout has scalar, AVX2 and VNNI kernels; with NEON it runs the scalar
    /// one.
    pub fn forward_with(&self, x: &[f32], n: usize, simd: Simd) -> Result<Vec<f32>, QMatMulError> {
        self.forward_in(x, n, simd, SpinPool::global())
    }

    /// [`forward_with`](Self::forward_with) on the threads of `pool` rather than the global
    /// [`SpinPool`] (every pool gives the same bits: each output has one task, in one order).
    pub fn forward_in(
        &self,
        x: &[f32],
        n: usize,
        simd: Simd,
        pool: &SpinPool,
    ) -> Result<Vec<f32>, QMatMulError> {
        if !simd.is_available() {
            return Err(QMatMulError::SimdUnavailable { simd });
        }
        let [_, cols] = self.shape;
        if n.checked_mul(cols) != Some(x.len()) {
            return Err(QMatMulError::InputSize {
                len: x.len(),
                rows: n,
                cols,
            });
        }
        let weight = match &self.storage {
            Storage::Rows(w) => dispatch::Weight::Rows(w.clone()),
            Storage::Interleaved(w) => dispatch::Weight::Interleaved(w.clone()),
            Storage::InterleavedK(w) => dispatch::Weight::InterleavedK(w.clone()),
        };
        let mut out = dispatch::matmul(self.ty, weight, self.shape, x, n, simd, pool)?;
        poison_non_finite_rows(x, cols, &mut out, self.shape[0]);
        Ok(out)
    }
}

/// Gives NaN outputs to every activation row of `x` (`cols` wide) that holds a NaN or an
/// infinity. The activation quantizers, like ggml's, round a NaN to 0 and clamp infinities, so
/// a non-finite activation (a NaN weight upstream, an overflow) would vanish in the product and
/// the engine's non-finite check on the logits would never see it; with this the row stays
/// non-finite, as an `f32` product keeps it.
fn poison_non_finite_rows(x: &[f32], cols: usize, out: &mut [f32], out_cols: usize) {
    if cols == 0 || out_cols == 0 {
        return;
    }
    for (input, output) in x.chunks_exact(cols).zip(out.chunks_exact_mut(out_cols)) {
        let bad = input.iter().fold(false, |bad, v| bad | !v.is_finite());
        if bad {
            output.fill(f32::NAN);
        }
    }
}

/// The little-endian `f16` at byte `at` of `b`, as `f32`.
fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}
