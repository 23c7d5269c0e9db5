//! [`Linear`]: `y = x @ Wᵀ` over a dense or quantized weight.

use mtp_core::Backend;

use crate::loading::{ArrayLoader, LoadResult};

/// How a projection's weight `[out, in]` is held.
#[derive(Debug, Clone)]
enum Weight<B: Backend> {
    /// A dense array of the compute dtype.
    Dense(B::Array),
}

/// A linear projection without bias: `forward(x) = x @ Wᵀ` for a weight `W` of shape
/// `[out, in]` and `x` of shape `[.., in]`.
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
    /// Load the weight `name` of shape `[out, in]`.
    pub fn load(
        loader: &mut ArrayLoader<'_, B>,
        name: &str,
        out: usize,
        inp: usize,
    ) -> LoadResult<Self> {
        let array = loader.array(name, &[out, inp])?;
        Ok(Self::dense(array, out, inp))
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

    /// `x @ Wᵀ`: `[.., in]` → `[.., out]`.
    pub fn forward(&self, b: &B, x: &B::Array) -> Result<B::Array, B::Error> {
        match &self.weight {
            Weight::Dense(w) => b.linear(x, w),
        }
    }

    /// Rows `ids` of the weight (integer ids of any shape → `ids.shape ++ [in]`), dense in the
    /// compute dtype: the tied LM head read as a table.
    pub fn rows(&self, b: &B, ids: &B::Array) -> Result<B::Array, B::Error> {
        match &self.weight {
            Weight::Dense(w) => b.embedding(w, ids),
        }
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
