//! Reading logit rows to the host for sampling: the top candidates of each row when the settings
//! make that exact (a device-side [`Backend::top_k`] before the read: top-k on, or top-p / min-p
//! settled by a device sum of each row's softmax weight), else every logit.

use super::{pipeline, row_mass, LogitRow, SamplerOptions};
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
    /// The `k` largest logits of each row and bounds on each row's total softmax weight,
    /// which settle its top-p / min-p survivors.
    Head {
        k: usize,
        ids: Vec<u32>,
        values: Vec<f32>,
        totals: Vec<(f64, f64)>,
    },
}

/// A row's largest logits as read (ids, values; `rows × k` each) and the device masses, when
/// asked for.
type Candidates = (Vec<u32>, Vec<f32>, Option<Vec<f32>>);

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
    /// alone cannot show — is [`CoreError::NonFiniteLogits`], read with them. With
    /// [`SamplerOptions::nucleus_candidates`] the same, plus each row's total softmax weight
    /// summed on the device; when those settle every row's top-p / min-p survivors the rows
    /// are kept in that form, else every logit is read as well. Otherwise every logit is read
    /// and the sampler checks them.
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
        let read = if let Some(k) = options.top_candidates(vocab) {
            let (ids, values, _) = candidates(backend, logits, k, None, first_position)?;
            Read::Top { k, ids, values }
        } else if let Some(k) = options.nucleus_candidates(vocab) {
            let masses = row_mass::row_masses(backend, logits, rows, vocab, options.temperature)?;
            let (ids, values, masses) =
                candidates(backend, logits, k, Some(&masses), first_position)?;
            let totals: Vec<(f64, f64)> = masses
                .unwrap_or_default()
                .iter()
                .map(|&mass| row_mass::bounds(mass, vocab))
                .collect();
            let head = Self {
                vocab,
                rows,
                read: Read::Head {
                    k,
                    ids,
                    values,
                    totals,
                },
            };
            match (0..rows).find(|&i| !pipeline::settles(head.row(i), options)) {
                None => head.read,
                Some(row) => {
                    tracing::debug!(
                        target: "mtp",
                        position = first_position + row,
                        "top-p / min-p not settled by the {k} largest logits: reading whole rows"
                    );
                    Read::Dense(backend.to_vec_f32(logits)?)
                }
            }
        } else {
            Read::Dense(backend.to_vec_f32(logits)?)
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
            Read::Head {
                k,
                ids,
                values,
                totals,
            } => LogitRow::Head {
                vocab: self.vocab,
                ids: &ids[i * k..(i + 1) * k],
                values: &values[i * k..(i + 1) * k],
                total_low: totals[i].0,
                total_high: totals[i].1,
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
            Read::Top { .. } | Read::Head { .. } => None,
        }
    }
}

/// The `k` largest logits of every row (and `masses`, when given) in one device read; a row
/// holding NaN or +∞ (or no finite logit) is [`CoreError::NonFiniteLogits`].
fn candidates<B: Backend>(
    backend: &B,
    logits: &B::Array,
    k: usize,
    masses: Option<&B::Array>,
    first_position: usize,
) -> Result<Candidates, B::Error> {
    let last = backend.shape(logits).len().saturating_sub(1);
    let (values, ids) = backend.top_k(logits, k)?;
    let flags = backend.non_finite_rows(logits, last)?;
    let mut read = vec![&values, &ids, &flags];
    read.extend(masses);
    backend.eval(&read)?;
    let flags = backend.to_vec_u32(&flags)?;
    if let Some(row) = flags.iter().position(|&f| f != 0) {
        return Err(CoreError::NonFiniteLogits {
            position: first_position + row,
        }
        .into());
    }
    let masses = masses.map(|m| backend.to_vec_f32(m)).transpose()?;
    Ok((
        backend.to_vec_u32(&ids)?,
        backend.to_vec_f32(&values)?,
        masses,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::ReferenceBackend;
    use crate::DType;
    use rand::{Rng, SeedableRng};

    /// Top-p / min-p with top-k off: the rows are read as their largest logits plus the
    /// device's total weight, and every row's distribution is bit for bit the dense row's.
    #[test]
    fn nucleus_rows_are_read_as_candidates_and_give_the_dense_distribution() {
        let b = ReferenceBackend::new();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let (rows, vocab) = (4, 3000);
        let mut read_as_head = 0;
        for case in 0..20 {
            let logits: Vec<f32> = (0..rows * vocab)
                .map(|i| {
                    let peak = if i % vocab < 5 { 8.0 } else { 0.0 };
                    peak + rng.random_range(-4.0f32..4.0)
                })
                .collect();
            let options = SamplerOptions {
                temperature: rng.random_range(0.5..1.2),
                top_p: if case % 2 == 0 { 0.8 } else { 1.0 },
                min_p: if case % 3 == 0 { 0.1 } else { 0.0 },
                ..Default::default()
            };
            if options.nucleus_candidates(vocab).is_none() {
                continue;
            }
            let x = b.from_f32(&logits, &[1, rows, vocab], DType::F32).unwrap();
            let host = HostRows::read(&b, &x, &options, 0).unwrap();
            read_as_head += usize::from(host.dense().is_none());
            for r in 0..rows {
                let dense = pipeline::distribution(
                    LogitRow::Dense(&logits[r * vocab..(r + 1) * vocab]),
                    &[],
                    &options,
                )
                .unwrap();
                let got = pipeline::distribution(host.row(r), &[], &options).unwrap();
                assert_eq!(got, dense, "case {case} row {r}");
            }
        }
        assert!(
            read_as_head >= 10,
            "read as candidates {read_as_head} times"
        );
    }

    /// A NaN is still an error when only the candidates are read.
    #[test]
    fn nucleus_reads_still_reject_non_finite_rows() {
        let b = ReferenceBackend::new();
        let vocab = 1000;
        let mut logits = vec![0.0f32; 2 * vocab];
        logits[vocab + 7] = f32::NAN;
        let x = b.from_f32(&logits, &[1, 2, vocab], DType::F32).unwrap();
        let options = SamplerOptions {
            temperature: 1.0,
            top_p: 0.5,
            ..Default::default()
        };
        let err = HostRows::read(&b, &x, &options, 10).unwrap_err();
        assert!(
            matches!(err, CoreError::NonFiniteLogits { position: 11 }),
            "{err}"
        );
    }
}
