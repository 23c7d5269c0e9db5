//! One batched target pass: every parked forward as one
//! [`TargetModel::forward_batch`], every parked unembedding as one
//! [`TargetModel::unembed_batch`].

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::cache::CacheSet;
use crate::model::{ForwardJob, TargetModel, TargetOutput};
use crate::{Backend, CoreError};

/// A member's target call, parked until the pass that serves it.
pub(super) enum Work<B: Backend> {
    /// A forward of `ids` (`[1, t]`) at `start` into `caches` (moved here while parked).
    Forward {
        ids: B::Array,
        start: usize,
        caches: CacheSet<B>,
    },
    /// Logits of `hidden` (`[1, t, hidden]`).
    Unembed { hidden: B::Array },
}

impl<B: Backend> Work<B> {
    /// The rows (positions) the work runs.
    pub fn rows(&self, backend: &B) -> usize {
        let x = match self {
            Work::Forward { ids, .. } => ids,
            Work::Unembed { hidden } => hidden,
        };
        backend.shape(x).get(1).copied().unwrap_or(0)
    }
}

/// The result of parked work.
pub(super) enum Done<B: Backend> {
    Forward {
        caches: CacheSet<B>,
        output: Result<TargetOutput<B>, B::Error>,
    },
    Unembed(Result<B::Array, B::Error>),
}

/// What one pass did.
pub(super) struct PassOutcome<B: Backend> {
    /// Each item's result, keyed as it was parked.
    pub results: Vec<(usize, Done<B>)>,
    /// Batched target calls made (0, 1 or 2).
    pub calls: usize,
    /// Forwards among the items, and the rows they ran (the sum of their lengths).
    pub forwards: usize,
    pub rows: usize,
}

/// Serve `parked` (each keyed by its member's slot) in at most two batched calls. A panic inside
/// the model fails every item of the pass with an error instead of ending the batch (the items'
/// caches were inside the failed call and are lost with it).
pub(super) fn run<B: Backend>(
    backend: &B,
    target: &dyn TargetModel<B>,
    parked: Vec<(usize, Work<B>)>,
) -> PassOutcome<B> {
    let keys: Vec<usize> = parked.iter().map(|(k, _)| *k).collect();
    let lengths: Vec<usize> = parked
        .iter()
        .filter_map(|(_, w)| match w {
            Work::Forward { ids, .. } => Some(backend.shape(ids).get(1).copied().unwrap_or(0)),
            Work::Unembed { .. } => None,
        })
        .collect();
    let (forwards, rows) = (lengths.len(), lengths.iter().sum());
    match catch_unwind(AssertUnwindSafe(|| calls(backend, target, parked))) {
        Ok((results, calls)) => PassOutcome {
            results,
            calls,
            forwards,
            rows,
        },
        Err(_) => {
            tracing::error!("a batched target call panicked; its members get an error");
            let results = keys
                .into_iter()
                .map(|k| {
                    let error = CoreError::Model("the batched target call panicked".into());
                    (k, Done::Unembed(Err(error.into())))
                })
                .collect();
            PassOutcome {
                results,
                calls: 1,
                forwards,
                rows,
            }
        }
    }
}

/// The batched calls. Returns the results and the number of calls made.
fn calls<B: Backend>(
    backend: &B,
    target: &dyn TargetModel<B>,
    parked: Vec<(usize, Work<B>)>,
) -> (Vec<(usize, Done<B>)>, usize) {
    let mut forwards = Vec::new();
    let mut unembeds = Vec::new();
    for (key, work) in parked {
        match work {
            Work::Forward { ids, start, caches } => forwards.push((key, ids, start, caches)),
            Work::Unembed { hidden } => unembeds.push((key, hidden)),
        }
    }
    let mut out = Vec::with_capacity(forwards.len() + unembeds.len());
    let mut calls = 0;
    if !forwards.is_empty() {
        calls += 1;
        let mut jobs: Vec<ForwardJob<'_, B>> = forwards
            .iter_mut()
            .map(|(_, ids, start, caches)| ForwardJob {
                ids,
                start: *start,
                caches,
            })
            .collect();
        // One forward alone is the single-sequence forward (what `forward_batch` promises to
        // equal), without the packing a batch of one would pay for.
        let result = match jobs.as_mut_slice() {
            [one] => target
                .forward(backend, one.ids, one.start, one.caches)
                .map(|out| vec![out]),
            jobs => target.forward_batch(backend, jobs),
        };
        drop(jobs);
        let outputs = spread(result, forwards.len());
        for ((key, _, _, caches), output) in forwards.into_iter().zip(outputs) {
            out.push((key, Done::Forward { caches, output }));
        }
    }
    if !unembeds.is_empty() {
        calls += 1;
        let hiddens: Vec<&B::Array> = unembeds.iter().map(|(_, h)| h).collect();
        let result = target.unembed_batch(backend, &hiddens);
        let outputs = spread(result, unembeds.len());
        for ((key, _), output) in unembeds.into_iter().zip(outputs) {
            out.push((key, Done::Unembed(output)));
        }
    }
    (out, calls)
}

/// One result per item from a batched call's result: its outputs, or its error for every item
/// (the first gets the error itself, the others a description of it).
fn spread<T, E: std::error::Error + From<CoreError>>(
    result: Result<Vec<T>, E>,
    n: usize,
) -> Vec<Result<T, E>> {
    match result {
        Ok(values) if values.len() == n => values.into_iter().map(Ok).collect(),
        Ok(values) => (0..n)
            .map(|_| {
                Err(CoreError::Model(format!(
                    "a batched target call returned {} results for {n} items",
                    values.len()
                ))
                .into())
            })
            .collect(),
        Err(e) => {
            let text = e.to_string();
            std::iter::once(Err(e))
                .chain((1..n).map(|_| {
                    Err(CoreError::Model(format!("the batched target call failed: {text}")).into())
                }))
                .collect()
        }
    }
}
