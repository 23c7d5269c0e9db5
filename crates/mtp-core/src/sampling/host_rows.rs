//! Reading logit rows to the host for sampling: the top candidates of each row when the settings
//! make that exact (a device-side [`Backend::top_k`] before the read), else every logit.

use super::{LogitRow, SamplerOptions};
use crate::{Backend, CoreError};

/// What was read.
#[derive(Debug)]
enum Read {
    /// Every logit, `rows × vocab`.
    Dense(Vec<f32>),
    /// The `k` largest logits of each row, `rows × k`.
    Top {
        k: usize,
        ids: Vec<u32>,
        values: Vec<f32>,
    },
}

/// Logit rows `[.., rows, vocab]` on the host, row by row as [`LogitRow`]s.
#[derive(Debug)]
pub(crate) struct HostRows {
    vocab: usize,
    rows: usize,
    read: Read,
}

impl HostRows {
    /// Read `logits` (`[.., rows, vocab]`, rows at positions `first_position ..`) for sampling with
    /// `options`. With [`SamplerOptions::top_candidates`] the device keeps only that many
    /// logits per row, and a row holding NaN or +∞ (or no finite logit) — which the candidates
    /// alone cannot show — is [`CoreError::NonFiniteLogits`], read with them. Otherwise every
    /// logit is read and the sampler checks them.
    pub(crate) fn read<B: Backend>(
        backend: &B,
        logits: &B::Array,
        options: &SamplerOptions,
        first_position: usize,
    ) -> Result<Self, B::Error> {
        let shape = backend.shape(logits);
        let (Some(&vocab), Some(last)) = (shape.last(), shape.len().checked_sub(1)) else {
            return Err(CoreError::InvalidArgument {
                op: "sampling",
                message: format!("logits of shape {shape:?}"),
            }
            .into());
        };
        let rows = shape[..last].iter().product();
        let read = match options.top_candidates(vocab) {
            Some(k) => {
                let (values, ids) = backend.top_k(logits, k)?;
                let flags = backend.non_finite_rows(logits, last)?;
                backend.eval(&[&values, &ids, &flags])?;
                let flags = backend.to_vec_u32(&flags)?;
                if let Some(row) = flags.iter().position(|&f| f != 0) {
                    return Err(CoreError::NonFiniteLogits {
                        position: first_position + row,
                    }
                    .into());
                }
                Read::Top {
                    k,
                    ids: backend.to_vec_u32(&ids)?,
                    values: backend.to_vec_f32(&values)?,
                }
            }
            None => Read::Dense(backend.to_vec_f32(logits)?),
        };
        Ok(Self { vocab, rows, read })
    }

    /// Number of rows.
    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    /// Row `i` (`i < len()`).
    pub(crate) fn row(&self, i: usize) -> LogitRow<'_> {
        match &self.read {
            Read::Dense(flat) => LogitRow::Dense(&flat[i * self.vocab..(i + 1) * self.vocab]),
            Read::Top { k, ids, values } => LogitRow::Top {
                vocab: self.vocab,
                ids: &ids[i * k..(i + 1) * k],
                values: &values[i * k..(i + 1) * k],
            },
        }
    }

    /// Every row.
    pub(crate) fn all(&self) -> Vec<LogitRow<'_>> {
        (0..self.rows).map(|i| self.row(i)).collect()
    }

    /// The dense rows, when every logit was read (for the host's own finiteness check).
    pub(crate) fn dense(&self) -> Option<&[f32]> {
        match &self.read {
            Read::Dense(flat) => Some(flat),
            Read::Top { .. } => None,
        }
    }
}
