//! Ragged batches packed into one row block: the position-wise layers (norms, projections,
//! MLPs, the head) run once over every sequence's rows; attention runs per sequence, over its
//! own positions and caches.

use mtp_core::cache::CacheSet;
use mtp_core::model::{ForwardJob, TargetModel, TargetOutput};
use mtp_core::{Backend, CoreError};

/// Where one sequence's rows sit in a packed block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    /// The first row in the block.
    pub offset: usize,
    /// Its rows (tokens).
    pub len: usize,
    /// The position of its first token.
    pub start: usize,
}

/// The jobs' ids joined along the sequence axis (`[1, Σ t_i]`) and where each one's rows are.
pub(crate) fn pack_ids<B: Backend>(
    b: &B,
    jobs: &[ForwardJob<'_, B>],
) -> Result<(B::Array, Vec<Span>), B::Error> {
    let mut spans = Vec::with_capacity(jobs.len());
    let mut offset = 0;
    for job in jobs {
        let len = b.shape(job.ids)[1];
        spans.push(Span {
            offset,
            len,
            start: job.start,
        });
        offset += len;
    }
    // One job (every single-sequence forward): its ids as they are, no copy.
    if let [job] = jobs {
        return Ok((job.ids.clone(), spans));
    }
    let ids: Vec<&B::Array> = jobs.iter().map(|j| j.ids).collect();
    Ok((b.concat(&ids, 1)?, spans))
}

/// The rows of `span` in a packed `[1, T, ..]` block.
pub(crate) fn rows<B: Backend>(b: &B, x: &B::Array, span: Span) -> Result<B::Array, B::Error> {
    if span.offset == 0 && span.len == b.shape(x)[1] {
        return Ok(x.clone());
    }
    b.slice(x, 1, span.offset, span.len)
}

/// Per-sequence blocks joined along the sequence axis again.
pub(crate) fn join<B: Backend>(b: &B, parts: &[B::Array]) -> Result<B::Array, B::Error> {
    match parts {
        [one] => Ok(one.clone()),
        _ => {
            let refs: Vec<&B::Array> = parts.iter().collect();
            b.concat(&refs, 1)
        }
    }
}

/// Each sequence's outputs from the packed final hidden states.
pub(crate) fn split_outputs<B: Backend>(
    b: &B,
    hidden: &B::Array,
    draft_hidden: &B::Array,
    spans: &[Span],
) -> Result<Vec<TargetOutput<B>>, B::Error> {
    spans
        .iter()
        .map(|&s| {
            Ok(TargetOutput {
                hidden: rows(b, hidden, s)?,
                draft_hidden: rows(b, draft_hidden, s)?,
            })
        })
        .collect()
}

/// One sequence's forward as a batch of one, for a model whose
/// [`forward_batch`](TargetModel::forward_batch) is its forward (one job runs exactly the
/// single-sequence operations).
pub(crate) fn forward_alone<B: Backend, M: TargetModel<B> + ?Sized>(
    model: &M,
    b: &B,
    ids: &B::Array,
    start: usize,
    caches: &mut CacheSet<B>,
) -> Result<TargetOutput<B>, B::Error> {
    let mut job = [ForwardJob { ids, start, caches }];
    let mut out = model.forward_batch(b, &mut job)?;
    out.pop()
        .ok_or_else(|| CoreError::Model("a forward returned no output".into()).into())
}
