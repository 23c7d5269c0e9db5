//! [`Linear`]: `y = x @ Wᵀ` over a dense or quantized weight.

use std::sync::Arc;

use mtp_core::quant::QuantTensor;
use mtp_core::{Backend, DType};

use crate::loading::{ArrayLoader, LoadError, LoadResult, Matrix};

/// How a projection's weight `[out, in]` is held.
#[derive(Debug, Clone)]
enum Weight<B: Backend> {
    /// A dense array of the compute dtype.
    Dense(B::Array),
    /// A quantized weight prepared for the backend; rows read from it come out in `dtype`.
    Quantized {
        weight: B::QuantWeight,
        dtype: DType,
    },
}

/// A linear projection without bias: `forward(x) = x @ Wᵀ` for a weight `W` of shape
/// `[out, in]` and `x` of shape `[.., in]`. The weight is dense or quantized
/// ([`Backend::quant_linear`]); models call [`forward`](Self::forward) either way.
///
/// Cloning is cheap (the backend's arrays are reference counted), which is how a tied LM head
/// shares its embedding table ([`Embedding::as_linear`](super::Embedding::as_linear)).
#[derive(Debug, Clone)]
pub struct Linear<B: Backend> {
    weight: Weight<B>,
    out_features: usize,
    in_features: usize,
}

impl<B: Backend> Linear<B> {
    /// Load the weight `name` of shape `[out, in]`: quantized when the checkpoint stores it so
    /// (MLX affine, unless `--dequantize`) or the loader quantizes at load (`--quantize`), else
    /// dense in the compute dtype ([`ArrayLoader::matrix`]).
    pub fn load(
        loader: &mut ArrayLoader<'_, B>,
        name: &str,
        out: usize,
        inp: usize,
    ) -> LoadResult<Self> {
        let weight = match loader.matrix(name, out, inp)? {
            Matrix::Dense(array) => Weight::Dense(array),
            Matrix::Quantized(weight) => Weight::Quantized {
                weight,
                dtype: loader.dtype(),
            },
        };
        Ok(Self {
            weight,
            out_features: out,
            in_features: inp,
        })
    }

    /// A projection over the dense weight `w` of shape `[out, inp]` (the caller's shape is
    /// trusted; [`Backend::linear`] checks it on every call).
    pub fn dense(w: B::Array, out: usize, inp: usize) -> Self {
        Self {
            weight: Weight::Dense(w),
            out_features: out,
            in_features: inp,
        }
    }

    /// A projection over the quantized `tensor` (`[out, in]`, e.g. a GGUF tensor), prepared
    /// on `b` for activations of `dtype`.
    pub fn quantized(
        b: &B,
        name: &str,
        tensor: Arc<QuantTensor>,
        dtype: DType,
    ) -> LoadResult<Self> {
        let [out, inp] = tensor.shape();
        let weight = b
            .quant_weight(tensor, dtype)
            .map_err(|e| LoadError::Backend {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            weight: Weight::Quantized { weight, dtype },
            out_features: out,
            in_features: inp,
        })
    }

    /// `x @ Wᵀ`: `[.., in]` → `[.., out]`.
    pub fn forward(&self, b: &B, x: &B::Array) -> Result<B::Array, B::Error> {
        match &self.weight {
            Weight::Dense(w) => b.linear(x, w),
            Weight::Quantized { weight, .. } => b.quant_linear(x, weight),
        }
    }

    /// Rows `ids` of the weight (integer ids of any shape → `ids.shape ++ [in]`), dense in the
    /// compute dtype: the tied LM head read as a table. A quantized weight decodes only those
    /// rows ([`Backend::quant_embedding`]).
    pub fn rows(&self, b: &B, ids: &B::Array) -> Result<B::Array, B::Error> {
        match &self.weight {
            Weight::Dense(w) => b.embedding(w, ids),
            Weight::Quantized { weight, dtype } => b.quant_embedding(weight, ids, *dtype),
        }
    }

    /// Whether the weight is quantized.
    pub fn is_quantized(&self) -> bool {
        matches!(self.weight, Weight::Quantized { .. })
    }

    /// Output width.
    pub fn out_features(&self) -> usize {
        self.out_features
    }

    /// Input width.
    pub fn in_features(&self) -> usize {
        self.in_features
    }
}
