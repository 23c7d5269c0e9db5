//! Quantized weights on MLX: affine groups run MLX's `quantized_matmul`; GGUF Q4_0 / Q4_1 / Q8_0
//! blocks are re-expressed as affine groups of 32 ([`ggml_to_affine`], lossless up to one `f32`
//! rounding) and run the same kernel; every other GGUF type (the K-quants, Q5_0, Q5_1) is
//! dequantized once at load to a dense array of the compute dtype (MLX has no kernel for them).
//! Scales and biases are stored in the compute dtype, as mlx-lm does (with a `bf16` compute dtype
//! the `f16` scales of GGUF blocks round to `bf16`).

use std::sync::Arc;

use mlx_rs::ops::{dequantize, quantized_matmul};
use mlx_rs::Array;
use mtp_core::quant::{ggml_to_affine, AffineParams, QuantFormat, QuantTensor};
use mtp_core::{CoreError, DType};

use crate::convert::shape_of;
use crate::error::{Context, Result};
use crate::ops;

/// A quantized weight prepared for MLX; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct MlxQuantWeight {
    source: Arc<QuantTensor>,
    kernel: Kernel,
}

#[derive(Debug, Clone)]
enum Kernel {
    /// MLX affine groups: packed `u32` words `[rows, cols * bits / 32]`, scales and biases
    /// `[rows, groups]` in the compute dtype.
    Affine {
        params: AffineParams,
        words: Array,
        scales: Array,
        biases: Array,
    },
    /// A dense `[rows, cols]` array of the compute dtype.
    Dense(Array),
}

/// Prepare `tensor` for activations of `dtype`.
pub(crate) fn prepare(tensor: Arc<QuantTensor>, dtype: DType) -> Result<MlxQuantWeight> {
    let affine = match tensor.format() {
        QuantFormat::Affine(_) => Some((*tensor).clone()),
        QuantFormat::Ggml(_) => ggml_to_affine(&tensor),
    };
    let [rows, cols] = tensor.shape();
    let kernel = match affine {
        Some(a) => {
            let QuantFormat::Affine(params) = a.format() else {
                return Err(
                    CoreError::Model("affine conversion returned another format".into()).into(),
                );
            };
            let groups = cols / params.group_size();
            Kernel::Affine {
                params,
                words: ops::from_u32(&a.affine_words(), &[rows, cols / params.values_per_word()])?,
                scales: ops::from_f32(a.scales(), &[rows, groups], dtype)?,
                biases: ops::from_f32(a.biases(), &[rows, groups], dtype)?,
            }
        }
        None => Kernel::Dense(ops::from_f32(&tensor.dequantize(), &[rows, cols], dtype)?),
    };
    Ok(MlxQuantWeight {
        source: tensor,
        kernel,
    })
}

impl MlxQuantWeight {
    /// The host tensor this weight was prepared from.
    pub fn source(&self) -> &QuantTensor {
        &self.source
    }

    /// Whether MLX's quantized kernel computes with it (else a dense array does).
    pub fn uses_quantized_kernel(&self) -> bool {
        matches!(self.kernel, Kernel::Affine { .. })
    }

    /// `x @ Wᵀ` (`x`: `[.., in]`), in `x`'s dtype.
    pub(crate) fn linear(&self, x: &Array) -> Result<Array> {
        const OP: &str = "quant_linear";
        let xs = shape_of(x);
        let [rows, cols] = self.source.shape();
        if xs.last() != Some(&cols) {
            return Err(CoreError::ShapeMismatch {
                op: OP,
                lhs: xs,
                rhs: vec![rows, cols],
            }
            .into());
        }
        let y = match &self.kernel {
            Kernel::Affine {
                params,
                words,
                scales,
                biases,
            } => quantized_matmul(
                x,
                words,
                scales,
                biases,
                true,
                params.group_size() as i32,
                params.bits() as i32,
            )
            .op(OP)?,
            Kernel::Dense(w) => return ops::matmul(x, &w.t()),
        };
        y.as_dtype(x.dtype()).op(OP)
    }

    /// Rows `ids` (any integer shape) as `dtype`: the packed rows are gathered, then only they
    /// are dequantized.
    pub(crate) fn rows(&self, ids: &Array, dtype: DType) -> Result<Array> {
        const OP: &str = "quant_embedding";
        let rows = match &self.kernel {
            Kernel::Dense(w) => ops::embedding(w, ids)?,
            Kernel::Affine {
                params,
                words,
                scales,
                biases,
            } => {
                let mut out_shape = shape_of(ids);
                out_shape.push(self.source.cols());
                let flat = ids.reshape(&[-1]).op(OP)?;
                let pick = |a: &Array| a.take_axis(&flat, 0).op(OP);
                let dense = dequantize(
                    pick(words)?,
                    pick(scales)?,
                    &pick(biases)?,
                    params.group_size() as i32,
                    params.bits() as i32,
                )
                .op(OP)?;
                ops::reshape(&dense, &out_shape)?
            }
        };
        ops::cast(&rows, dtype)
    }
}
