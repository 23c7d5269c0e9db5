//! Quantized weights on candle. On the CPU, the GGUF types [`QuantMatMul`] supports (Q8_0,
//! Q5_0, Q4_0, Q4_K, Q6_K) run this crate's batched kernels straight from the shared GGUF bytes;
//! other GGUF blocks go to `candle_core::quantized` (`QTensor` / `QMatMul`: candle's CPU kernels,
//! and on CUDA and Metal candle's kernels for every type); MLX affine weights and GGUF Q8_K,
//! which candle has no kernel for, are dequantized once to a dense tensor of the compute dtype.
//!
//! Both quantized matmuls quantize the activations to the weight type's dot-product partner
//! (Q8_0 / Q8_K) as ggml does, so their results differ from the dequantized oracle by that
//! rounding (see the tests for the tolerance per type).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType, QMatMul};
use candle_core::{Device, Module, Tensor};
use mtp_core::quant::{GgmlType, QuantFormat, QuantTensor};
use mtp_core::DType;

use crate::ops::{self, to_candle};
use crate::qmatmul::QuantMatMul;
use crate::Result;

/// A quantized weight prepared for candle (which kernel runs it: see `src/quantized.rs`).
#[derive(Debug, Clone)]
pub struct CandleQuantWeight {
    source: Source,
    shape: [usize; 2],
    kernel: Kernel,
}

/// The host tensor a weight came from: kept (shared with the batched kernel where it holds the
/// tensor), or (for a weight the batched kernel holds only in its interleaved 32-weight copy)
/// rebuilt from that copy on the first request, so the GGUF bytes are not held twice. The backend's own matmul and row lookup never ask for it.
#[derive(Debug, Clone)]
enum Source {
    Kept(Arc<QuantTensor>),
    Rebuilt(QuantMatMul, Arc<OnceLock<QuantTensor>>),
}

#[derive(Debug, Clone)]
enum Kernel {
    /// This crate's batched CPU kernels over the shared GGUF bytes.
    Batched(QuantMatMul),
    /// candle's quantized matmul over the GGUF blocks.
    Blocks(QMatMul),
    /// A dense `[rows, cols]` tensor of the compute dtype (formats candle has no kernel for).
    Dense(Tensor),
}

/// candle's name for a GGUF block type.
pub(crate) fn ggml_dtype(ty: GgmlType) -> GgmlDType {
    match ty {
        GgmlType::F32 => GgmlDType::F32,
        GgmlType::F16 => GgmlDType::F16,
        GgmlType::BF16 => GgmlDType::BF16,
        GgmlType::Q4_0 => GgmlDType::Q4_0,
        GgmlType::Q4_1 => GgmlDType::Q4_1,
        GgmlType::Q5_0 => GgmlDType::Q5_0,
        GgmlType::Q5_1 => GgmlDType::Q5_1,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q2K => GgmlDType::Q2K,
        GgmlType::Q3K => GgmlDType::Q3K,
        GgmlType::Q4K => GgmlDType::Q4K,
        GgmlType::Q5K => GgmlDType::Q5K,
        GgmlType::Q6K => GgmlDType::Q6K,
        GgmlType::Q8K => GgmlDType::Q8K,
    }
}

/// Prepare `tensor` on `device` for activations of `dtype`.
pub(crate) fn prepare(
    device: &Device,
    tensor: Arc<QuantTensor>,
    dtype: DType,
) -> Result<CandleQuantWeight> {
    let kernel = match tensor.format() {
        QuantFormat::Ggml(ty)
            if device.is_cpu() && QuantMatMul::supports(ty) && batched_enabled() =>
        {
            Kernel::Batched(QuantMatMul::new(tensor.clone())?)
        }
        // candle 0.11 cannot decode Q8_K (a dot-product partner type, never a stored weight in
        // practice): the exact host decoder makes it dense.
        QuantFormat::Ggml(ty) if ty != GgmlType::Q8K => {
            if device.is_cpu() {
                say_no_batched_kernel(ty);
            }
            let q = qtensor_from_ggml(
                ggml_dtype(ty),
                tensor.data(),
                tensor.shape().to_vec(),
                device,
            )?;
            Kernel::Blocks(QMatMul::from_qtensor(q)?)
        }
        QuantFormat::Ggml(_) | QuantFormat::Affine(_) => Kernel::Dense(ops::from_f32(
            device,
            &tensor.dequantize(),
            &tensor.shape(),
            dtype,
        )?),
    };
    // A batched weight that dropped its GGUF tensor (an interleaved 32-weight copy) rebuilds it
    // on request; one that holds it shares it (no second copy of the bytes).
    let source = match &kernel {
        Kernel::Batched(k) => match k.held_tensor() {
            Some(held) => Source::Kept(held.clone()),
            None => Source::Rebuilt(k.clone(), Arc::default()),
        },
        _ => Source::Kept(tensor.clone()),
    };
    Ok(CandleQuantWeight {
        source,
        shape: tensor.shape(),
        kernel,
    })
}

/// The environment variable that, set to `0`, turns the batched CPU kernel off (candle's
/// `QMatMul` then runs every GGUF type): an A/B switch for benchmarks and bisecting.
pub const BATCHED_QMATMUL_ENV: &str = "MTP_BATCHED_QMATMUL";

/// Whether the batched CPU kernel is on (read once; said once at `info` when it is off).
fn batched_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let off = std::env::var(BATCHED_QMATMUL_ENV).is_ok_and(|v| v.trim() == "0");
        if off {
            tracing::info!("{BATCHED_QMATMUL_ENV}=0: the batched quantized CPU kernel is off, candle's QMatMul runs every GGUF type");
        }
        !off
    })
}

/// Log once per type that GGUF `ty` runs on candle's one-row-at-a-time CPU `QMatMul`.
fn say_no_batched_kernel(ty: GgmlType) {
    static SAID: [AtomicBool; 64] = [const { AtomicBool::new(false) }; 64];
    let said = &SAID[ty.id() as usize % SAID.len()];
    if !said.swap(true, Ordering::Relaxed) {
        tracing::info!(
            "GGUF {ty} weights: no batched CPU kernel, using candle's QMatMul (one activation row at a time)"
        );
    }
}

impl CandleQuantWeight {
    /// The host tensor this weight was prepared from.
    pub fn source(&self) -> &QuantTensor {
        match &self.source {
            Source::Kept(t) => t,
            Source::Rebuilt(k, cell) => cell.get_or_init(|| {
                // The copy was made from a valid tensor of this shape, and rebuilding is exact.
                k.to_tensor()
                    .map(Arc::unwrap_or_clone)
                    .expect("an interleaved copy rebuilds its GGUF tensor")
            }),
        }
    }

    /// Whether a quantized kernel (this crate's batched one or candle's) computes with it, else
    /// a dense tensor does.
    pub fn uses_quantized_kernel(&self) -> bool {
        matches!(
            self.kernel,
            Kernel::Batched(_) | Kernel::Blocks(QMatMul::QTensor(_))
        )
    }

    /// Whether this crate's batched CPU kernel ([`QuantMatMul`]) computes with it.
    pub fn uses_batched_kernel(&self) -> bool {
        matches!(self.kernel, Kernel::Batched(_))
    }

    /// `x @ Wᵀ` (`x`: `[.., in]`), in `x`'s dtype.
    pub(crate) fn linear(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let [rows, cols] = self.shape;
        let inner = dims.last().copied().unwrap_or(0);
        if inner != cols {
            return Err(mtp_core::CoreError::ShapeMismatch {
                op: "quant_linear",
                lhs: dims,
                rhs: vec![rows, cols],
            }
            .into());
        }
        let flat = x.reshape(((dims.iter().product::<usize>()) / cols.max(1), cols))?;
        let y = match &self.kernel {
            Kernel::Batched(k) => batched_linear(k, &flat)?,
            Kernel::Blocks(q) => q.forward(&flat.contiguous()?)?,
            Kernel::Dense(w) => flat.matmul(&w.t()?)?,
        };
        let mut out = dims;
        out.pop();
        out.push(rows);
        Ok(y.reshape(out)?)
    }

    /// Rows `ids` (any shape) as `dtype`.
    pub(crate) fn rows(&self, ids: &Tensor, dtype: DType) -> Result<Tensor> {
        let rows = match &self.kernel {
            Kernel::Batched(k) => self.decoded_rows(k, ids)?,
            Kernel::Blocks(q) => q.embedding(ids)?,
            Kernel::Dense(w) => ops::embedding(w, ids)?,
        };
        Ok(rows.to_dtype(to_candle(dtype, rows.device()))?)
    }

    /// Rows `ids` decoded on the host (only those rows, the bits mtp-core's exact decoders
    /// give), from whichever layout the batched kernel holds, as `f32` `[ids.., cols]`.
    fn decoded_rows(&self, k: &QuantMatMul, ids: &Tensor) -> Result<Tensor> {
        let list: Vec<usize> = ids
            .flatten_all()?
            .to_dtype(candle_core::DType::U32)?
            .to_vec1::<u32>()?
            .into_iter()
            .map(|i| i as usize)
            .collect();
        let values = k.decode_rows(&list)?;
        let mut shape = ids.dims().to_vec();
        shape.push(self.shape[1]);
        Ok(Tensor::from_vec(values, shape, ids.device())?)
    }
}

/// `x @ Wᵀ` on [`QuantMatMul`] for `[n, cols]` `x` of any float dtype (computed in `f32`,
/// returned in `x`'s dtype).
fn batched_linear(k: &QuantMatMul, x: &Tensor) -> Result<Tensor> {
    let (n, _) = x.dims2()?;
    let values = x
        .to_dtype(candle_core::DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let y = k.forward(&values, n)?;
    let y = Tensor::from_vec(y, (n, k.shape()[0]), x.device())?;
    Ok(y.to_dtype(x.dtype())?)
}
