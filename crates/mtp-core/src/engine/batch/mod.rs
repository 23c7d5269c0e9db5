//! Continuous batching: several generations share each target pass, with speculation on only
//! where it pays at the batch size.
//!
//! # Shape
//!
//! Each sequence runs the ordinary [`Engine`] — its own caches, sampler, seed, acceptance rule,
//! proposers and draft schedule, so everything proven of one generation holds for each — but
//! as a *member* of the batch: a stackful coroutine on the one thread that called [`serve`] (the
//! thread that owns the backend and the models). Its target forwards and unembeddings suspend
//! the coroutine with the work; a scheduler loop resumes every member until each has parked its
//! work (or ended), runs all of it as one ragged [`TargetModel::forward_batch`](crate::model::TargetModel::forward_batch)
//! (each sequence with its own tokens, positions and caches, so a sequence drafting `k` tokens
//! rides beside one taking a plain step) and one [`TargetModel::unembed_batch`](crate::model::TargetModel::unembed_batch),
//! and resumes each member with its result; each then judges its own rows and commits its own
//! accepted prefix in its own caches' speculation transaction. No thread per request, no value
//! crossing threads: every backend batches, those whose arrays or contexts are bound to one
//! thread (MLX, CUDA) included, and nothing here is `unsafe`.
//!
//! # Why coroutines
//!
//! The engine's decode loops (plain, speculative, constrained, sampled and greedy, with
//! their proposers and schedules) are written once, synchronously, per sequence. The
//! alternatives for sharing a pass between sequences were:
//!
//! * a thread per sequence meeting at a gate (what this module did before): the same per-sequence
//!   code, but a context switch per member per pass (two clients ran at about half the rate of
//!   one at a time), `unsafe impl Send` over backend values that are not `Send`, and no MLX or
//!   CUDA, whose state is bound to a thread;
//! * `async` model calls driven by a small executor (vLLM-style per-sequence state, mistral.rs):
//!   one thread and no `unsafe`, but every model, proposer and engine function on the decode
//!   path becomes `async`, so the engine is written twice (the solo path stays synchronous) or
//!   every caller pays for an executor;
//! * explicit plan → forward → commit steps (llama.cpp's server): the decode loops re-written as
//!   state machines, which is where speculative decoding's exactness bugs live.
//!
//! A stackful coroutine ([`corosensei`]) keeps the engine synchronous and written once and gives
//! the executor's single thread: a member suspends inside its target call exactly where a thread
//! would have blocked. The cost is a stack per place (reserved address space, committed as
//! touched) and a stack switch per suspension (no system call, no other thread woken).
//!
//! # Scheduling
//!
//! [`serve`] keeps [`BatchOptions::max_batch`] places. A free place takes the next job from the
//! [`JobSource`] between passes (blocking only when nothing runs), so a job joins at the next
//! pass and leaves when it ends. A joining prompt is forwarded in chunks of at most
//! [`BatchOptions::prefill_chunk`] tokens, one chunk per pass, with cancellation checked between
//! chunks, so running streams wait at most one chunk for it. Every pass serves every member, so
//! no stream starves.
//!
//! # Speculation
//!
//! With [`SpeculationPolicy::Measured`] (the default) the batch fits a cost model of its own
//! rounds — the target's time per round as a function of sequences and rows, and per sequence
//! the tokens, rows and own time of a round with and without drafting — and runs, at each batch
//! size, the mode it predicts faster (see `policy.rs`); a member's round that may not draft is a
//! plain step. Under either policy each member's own draft schedule keeps choosing its depth,
//! from round times that count only the member's own work: its host time and its share of each
//! pass by the same cost model (what its rows add, plus an equal part of the fixed cost); the
//! time it waited on the other members is left out ([`SpeculationSwitch::others_time`]), so a
//! slow neighbour does not make its plain rounds look dear. Two approximations remain: a pass
//! holding forwards and unembeddings is split by the forwards' cost model, and on a lazy backend
//! (MLX) a pass is timed while its graph is built, so its evaluation lands in the host time of
//! the member that reads its result first.
//!
//! Each member keeps the engine's evaluation overlap ([`EvalOverlap`]): on a lazy backend the
//! first member to start its slice of a pass starts the whole pass on the device, and the
//! members' drafting, emission and graph building run beside it.

mod member;
mod pass;
mod policy;
mod scheduler;
mod slots;
mod source;

use std::panic::{catch_unwind, AssertUnwindSafe};

pub use policy::{SizeReport, SpeculationPolicy, EXPLORE_FAR_SHARE, EXPLORE_SHARE, WINDOW_FIRINGS};
pub use scheduler::PassCounts;
pub use source::{JobSource, JobWait, NextJob};

use super::Engine;
#[cfg(doc)]
use super::{EvalOverlap, SpeculationSwitch};
use crate::{Backend, CoreError};
use member::GatedTarget;
use scheduler::{Parked, PlaceYielder, Resume, Shared};

/// The largest batch [`serve`] accepts.
pub const MAX_BATCH_LIMIT: usize = 256;

/// Settings of a continuous batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// Sequences running at once (1 ..= [`MAX_BATCH_LIMIT`]); more jobs wait for a place.
    pub max_batch: usize,
    /// The most prompt tokens a sequence forwards in one pass (its prefill is chunked).
    pub prefill_chunk: usize,
    /// Whether members draft.
    pub policy: SpeculationPolicy,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            max_batch: 8,
            prefill_chunk: 128,
            policy: SpeculationPolicy::Measured,
        }
    }
}

impl BatchOptions {
    /// Check the bounds.
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.max_batch == 0 || self.max_batch > MAX_BATCH_LIMIT {
            return Err(CoreError::InvalidOption {
                name: "max_batch",
                value: self.max_batch.to_string(),
                reason: "the batch size must be from 1 to 256",
            });
        }
        if self.prefill_chunk == 0 {
            return Err(CoreError::InvalidOption {
                name: "prefill_chunk",
                value: self.prefill_chunk.to_string(),
                reason: "the prefill chunk must be at least 1 token",
            });
        }
        Ok(())
    }
}

/// What a finished batch did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct BatchReport {
    /// Its batched target calls.
    pub counts: PassCounts,
    /// What the speculation policy measured and predicts, per batch size.
    pub sizes: Vec<SizeReport>,
    /// Jobs that panicked (each was ended; the others ran on).
    pub panicked: usize,
}

/// What a batch's speculation policy has learned, kept from one batch to the next (a server's
/// batch lives as long as its worker; a benchmark that runs several batches keeps it here so
/// that each does not learn from nothing).
#[derive(Debug, Clone)]
pub struct PolicyMemory(policy::PolicyState);

impl PolicyMemory {
    /// Nothing learned yet, under `policy`.
    pub fn new(policy: SpeculationPolicy) -> Self {
        Self(policy::PolicyState::new(policy))
    }

    /// What was learned, per batch size.
    pub fn report(&self) -> Vec<SizeReport> {
        self.0.report()
    }
}

/// Run the jobs of `source` as one continuous batch over `engine`'s target and proposers,
/// calling `run` on each with an engine whose target is a member of the batch (`run` generates
/// with it as with any engine, e.g. [`Engine::generate`]). Returns when the source has ended
/// and every job with it.
///
/// Everything runs on the calling thread: `run` for each job inside its own coroutine (see the
/// module docs), the source between passes. A job that panics is ended and counted in
/// [`BatchReport::panicked`]; the others run on.
pub fn serve<B, J, S, R>(
    engine: &Engine<'_, B>,
    options: &BatchOptions,
    source: S,
    run: R,
) -> Result<BatchReport, CoreError>
where
    B: Backend,
    S: JobSource<J>,
    R: Fn(&Engine<'_, B>, J),
{
    let mut memory = PolicyMemory::new(options.policy);
    serve_with_memory(engine, options, &mut memory, source, run)
}

/// [`serve`] with the speculation policy's state taken from `memory` and left there when the
/// batch ends (its policy is `memory`'s; `options.policy` is not used).
pub fn serve_with_memory<B, J, S, R>(
    engine: &Engine<'_, B>,
    options: &BatchOptions,
    memory: &mut PolicyMemory,
    mut source: S,
    run: R,
) -> Result<BatchReport, CoreError>
where
    B: Backend,
    S: JobSource<J>,
    R: Fn(&Engine<'_, B>, J),
{
    options.validate()?;
    let shared = Shared::new(options.max_batch);
    let chunk = options.prefill_chunk;
    let body = |yielder: &PlaceYielder<J, B>, first: Resume<J, B>| {
        let mut input = first;
        loop {
            match input {
                Resume::Job { job, place } => {
                    let target = GatedTarget::new(yielder, engine.target, &shared, place);
                    let member = engine
                        .clone()
                        .with_target(&target)
                        .with_switch(&target)
                        .with_prefill_chunk(chunk);
                    if catch_unwind(AssertUnwindSafe(|| run(&member, job))).is_err() {
                        tracing::error!("a batched generation panicked; it was ended");
                        shared.panicked();
                    }
                }
                Resume::Stop => return,
                Resume::Done(_) => {
                    tracing::error!("a free batch place was resumed with a result; ignored");
                }
            }
            input = yielder.suspend(Parked::Free);
        }
    };
    let policy = &mut memory.0;
    let counts = slots::with_places(options.max_batch, &body, |places| {
        scheduler::drive(
            places,
            &mut source,
            (engine.backend, engine.target),
            &shared,
            policy,
        )
    })
    .map_err(|e| CoreError::Model(format!("could not reserve the batch's stacks: {e}")))?;
    Ok(BatchReport {
        counts,
        sizes: memory.0.report(),
        panicked: shared.panics(),
    })
}
