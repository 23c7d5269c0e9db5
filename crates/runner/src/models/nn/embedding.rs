//! [`Embedding`]: a token table looked up by row.

use std::sync::Arc;

use mtp_core::quant::QuantTensor;
use mtp_core::{Backend, DType};

use super::Linear;
use crate::loading::{ArrayLoader, LoadResult};

/// A table of `vocab` rows of `width` values, looked up by integer ids.
///
/// A quantized table decodes only the rows a lookup reads ([`Backend::quant_embedding`]).
/// It is held like a [`Linear`] weight (`[vocab, width]` = `[out, in]`), so a model whose LM head
/// is tied to its embedding reuses the same storage through [`as_linear`](Self::as_linear).
#[derive(Debug, Clone)]
pub struct Embedding<B: Backend> {
    table: Linear<B>,
}

impl<B: Backend> Embedding<B> {
    /// Load the table `name` of shape `[vocab, width]`.
    pub fn load(
        loader: &mut ArrayLoader<'_, B>,
        name: &str,
        vocab: usize,
        width: usize,
    ) -> LoadResult<Self> {
        Ok(Self {
            table: Linear::load(loader, name, vocab, width)?,
        })
    }

    /// A table over the dense array `table` of shape `[vocab, width]`.
    pub fn dense(table: B::Array, vocab: usize, width: usize) -> Self {
        Self {
            table: Linear::dense(table, vocab, width),
        }
    }

    /// A table over the quantized `tensor` (`[vocab, width]`, e.g. a GGUF tensor), prepared on
    /// `b`; rows come out in `dtype`, and a lookup decodes only the rows it reads.
    pub fn quantized(
        b: &B,
        name: &str,
        tensor: Arc<QuantTensor>,
        dtype: DType,
    ) -> LoadResult<Self> {
        Ok(Self {
            table: Linear::quantized(b, name, tensor, dtype)?,
        })
    }

    /// Whether the table is quantized.
    pub fn is_quantized(&self) -> bool {
        self.table.is_quantized()
    }

    /// Rows `ids` (integer ids of any shape → `ids.shape ++ [width]`), in the compute dtype.
    pub fn forward(&self, b: &B, ids: &B::Array) -> Result<B::Array, B::Error> {
        self.table.rows(b, ids)
    }

    /// The table as the weight of a projection `x @ tableᵀ` (a tied LM head), sharing storage.
    pub fn as_linear(&self) -> Linear<B> {
        self.table.clone()
    }

    /// Number of rows.
    pub fn vocab(&self) -> usize {
        self.table.out_features()
    }

    /// Row width.
    pub fn width(&self) -> usize {
        self.table.in_features()
    }
}
