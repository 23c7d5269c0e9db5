//! The target a batch member's engine sees: every forward and unembedding joins the batch.

use std::cell::Cell;

use super::gate::{Done, Gate, Work};
use crate::cache::CacheSet;
use crate::engine::SpeculationSwitch;
use crate::model::{TargetModel, TargetOutput};
use crate::options::MtpDefaults;
use crate::{Backend, CoreError};

/// A member's view of the batch's target: the same model, with [`forward`](TargetModel::forward)
/// and [`unembed`](TargetModel::unembed) parked at the gate and run together with the other
/// members' (everything else is called directly: it is per sequence and cheap). Forwards longer
/// than the prefill chunk go in chunks, one per batched pass, so a new sequence's prompt does
/// not stall the running ones.
pub(super) struct GatedTarget<'g, 't, B: Backend> {
    gate: &'g Gate<'t, B>,
    prefill_chunk: usize,
    /// The start of this member's previous forward (for the policy's committed-token count).
    last_start: Cell<Option<usize>>,
}

impl<'g, 't, B: Backend> GatedTarget<'g, 't, B> {
    pub fn new(gate: &'g Gate<'t, B>, prefill_chunk: usize) -> Self {
        Self {
            gate,
            prefill_chunk: prefill_chunk.max(1),
            last_start: Cell::new(None),
        }
    }

    /// Report the tokens committed since the previous forward: a forward starts where the
    /// committed sequence ends, so the distance between starts is what was committed.
    fn count_progress(&self, start: usize, t: usize) {
        match self.last_start.get() {
            // The first forward is the prompt's: its last position produces the first token.
            None => self.last_start.set(Some((start + t).saturating_sub(1))),
            Some(last) => {
                if start > last {
                    self.gate.committed(start - last);
                }
                self.last_start.set(Some(start));
            }
        }
    }

    fn park_forward(
        &self,
        ids: &B::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, B::Error> {
        let owned = std::mem::replace(caches, CacheSet::new(Vec::new()));
        let work = Work::Forward {
            ids: ids.clone(),
            start,
            caches: owned,
        };
        match self.gate.park(work) {
            Done::Forward {
                caches: back,
                output,
            } => {
                *caches = back;
                output
            }
            // The batched call failed before it could hand the caches back (a panic).
            Done::Unembed(Err(e)) => Err(e),
            Done::Unembed(Ok(_)) => Err(CoreError::Model(
                "the batch answered a forward with logits (its caches are lost)".into(),
            )
            .into()),
        }
    }
}

impl<B: Backend> SpeculationSwitch for GatedTarget<'_, '_, B> {
    fn speculate(&self) -> bool {
        self.gate.speculate()
    }
}

impl<B: Backend> TargetModel<B> for GatedTarget<'_, '_, B> {
    fn vocab_size(&self) -> usize {
        self.gate.target().vocab_size()
    }

    fn max_context(&self) -> usize {
        self.gate.target().max_context()
    }

    fn new_caches(&self, backend: &B) -> Result<CacheSet<B>, B::Error> {
        self.gate.target().new_caches(backend)
    }

    fn forward(
        &self,
        backend: &B,
        ids: &B::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, B::Error> {
        let t = backend.shape(ids)[1];
        self.count_progress(start, t);
        if t <= self.prefill_chunk {
            return self.park_forward(ids, start, caches);
        }
        let mut hidden = Vec::new();
        let mut draft_hidden = Vec::new();
        let mut at = 0;
        while at < t {
            let len = self.prefill_chunk.min(t - at);
            let piece = backend.slice(ids, 1, at, len)?;
            let out = self.park_forward(&piece, start + at, caches)?;
            hidden.push(out.hidden);
            draft_hidden.push(out.draft_hidden);
            at += len;
        }
        let join = |parts: &[B::Array]| {
            let refs: Vec<&B::Array> = parts.iter().collect();
            backend.concat(&refs, 1)
        };
        Ok(TargetOutput {
            hidden: join(&hidden)?,
            draft_hidden: join(&draft_hidden)?,
        })
    }

    fn unembed(&self, _backend: &B, hidden: &B::Array) -> Result<B::Array, B::Error> {
        match self.gate.park(Work::Unembed {
            hidden: hidden.clone(),
        }) {
            Done::Unembed(logits) => logits,
            Done::Forward { .. } => Err(CoreError::Model(
                "the batch answered an unembedding with a forward".into(),
            )
            .into()),
        }
    }

    fn token_embeddings(&self, backend: &B, ids: &B::Array) -> Result<B::Array, B::Error> {
        self.gate.target().token_embeddings(backend, ids)
    }

    fn mtp_defaults(&self) -> MtpDefaults {
        self.gate.target().mtp_defaults()
    }
}
