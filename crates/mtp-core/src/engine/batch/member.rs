//! The target a batch member's engine sees: every forward and unembedding becomes work for the
//! scheduler's next batched pass.

use std::cell::Cell;

use super::pass::{Done, Work};
use super::scheduler::{Parked, PlaceYielder, Resume, Shared};
use crate::cache::CacheSet;
use crate::engine::SpeculationSwitch;
use crate::model::{TargetModel, TargetOutput};
use crate::options::MtpDefaults;
use crate::{Backend, CoreError};

/// A member's view of the batch's target: the same model, with
/// [`forward`](TargetModel::forward) and [`unembed`](TargetModel::unembed) suspending the
/// member's coroutine with the work, to be resumed with the result once the scheduler's
/// batched pass has run it with the other members' (everything else is called directly: it is
/// per sequence and cheap). A prompt arrives here already in chunks (the member's engine
/// forwards it `prefill_chunk` tokens at a time), so each forward is one pass's work.
pub(super) struct GatedTarget<'y, J, B: Backend> {
    yielder: &'y PlaceYielder<J, B>,
    target: &'y dyn TargetModel<B>,
    shared: &'y Shared,
    /// The start of this member's previous forward (for the policy's committed-token count).
    last_start: Cell<Option<usize>>,
    /// Whether the member has asked for logits yet: its forwards before that are its prompt's.
    decoding: Cell<bool>,
    /// The member's place (its others-time account in [`Shared`]).
    place: usize,
}

impl<'y, J, B: Backend> GatedTarget<'y, J, B> {
    pub fn new(
        yielder: &'y PlaceYielder<J, B>,
        target: &'y dyn TargetModel<B>,
        shared: &'y Shared,
        place: usize,
    ) -> Self {
        Self {
            yielder,
            target,
            shared,
            last_start: Cell::new(None),
            decoding: Cell::new(false),
            place,
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
                    self.shared.committed(start - last);
                }
                self.last_start.set(Some(start));
            }
        }
        if self.decoding.get() {
            self.shared.decode_forward(t);
        }
    }

    /// Suspend with `work` until the pass that serves it.
    fn park(&self, work: Work<B>) -> Done<B> {
        match self.yielder.suspend(Parked::Work(work)) {
            Resume::Done(done) => done,
            Resume::Job { .. } | Resume::Stop => Done::Unembed(Err(CoreError::Model(
                "a batch member was resumed without its work's result".into(),
            )
            .into())),
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
        match self.park(work) {
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

impl<J, B: Backend> SpeculationSwitch for GatedTarget<'_, J, B> {
    fn speculate(&self) -> bool {
        self.shared.speculate()
    }

    fn others_time(&self) -> std::time::Duration {
        self.shared.others_time(self.place)
    }
}

impl<J, B: Backend> TargetModel<B> for GatedTarget<'_, J, B> {
    fn vocab_size(&self) -> usize {
        self.target.vocab_size()
    }

    fn max_context(&self) -> usize {
        self.target.max_context()
    }

    fn new_caches(&self, backend: &B) -> Result<CacheSet<B>, B::Error> {
        self.target.new_caches(backend)
    }

    fn forward(
        &self,
        backend: &B,
        ids: &B::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, B::Error> {
        let t = backend.shape(ids).get(1).copied().unwrap_or(0);
        self.count_progress(start, t);
        self.park_forward(ids, start, caches)
    }

    fn unembed(&self, _backend: &B, hidden: &B::Array) -> Result<B::Array, B::Error> {
        self.decoding.set(true);
        match self.park(Work::Unembed {
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
        self.target.token_embeddings(backend, ids)
    }

    fn mtp_defaults(&self) -> MtpDefaults {
        self.target.mtp_defaults()
    }
}
