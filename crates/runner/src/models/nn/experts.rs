//! [`Experts`]: the stacked projections of a mixture-of-experts layer, dense or quantized.

use mtp_core::Backend;

use crate::loading::{ArrayLoader, ExpertMatrices, LoadResult};

/// `experts` projections of one shape `[out, in]`, each row of an input routed to one of them:
/// `forward(x, ids)` row `r` is `x[r] @ W[ids[r]]ᵀ`. Dense stacks are one `[experts, out, in]`
/// array ([`Backend::gather_linear`]); quantized stacks one quantized weight per expert
/// ([`Backend::quant_gather_linear`], which reads only the experts the rows pick).
#[derive(Debug)]
pub struct Experts<B: Backend> {
    matrices: ExpertMatrices<B>,
}

impl<B: Backend> Experts<B> {
    /// Load the stack `name` of shape `[experts, out, in]` (see
    /// [`ArrayLoader::expert_matrices`] for how it may be stored).
    pub fn load(
        loader: &mut ArrayLoader<'_, B>,
        name: &str,
        shape: [usize; 3],
    ) -> LoadResult<Self> {
        Ok(Self {
            matrices: loader.expert_matrices(name, shape)?,
        })
    }

    /// Row `r` of `x` (`[n, in]`) through expert `ids[r]` (`n` integer ids): `[n, out]`.
    pub fn forward(&self, b: &B, x: &B::Array, ids: &B::Array) -> Result<B::Array, B::Error> {
        match &self.matrices {
            ExpertMatrices::Dense(w) => b.gather_linear(x, w, ids),
            ExpertMatrices::Quantized(ws) => b.quant_gather_linear(x, ws, ids),
        }
    }

    /// Whether the experts are quantized.
    pub fn is_quantized(&self) -> bool {
        matches!(self.matrices, ExpertMatrices::Quantized(_))
    }
}
