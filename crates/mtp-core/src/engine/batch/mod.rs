//! Continuous batching: several generations share each target pass, with speculation on only
//! where it pays at the batch size.
//!
//! # Shape
//!
//! Each sequence runs the ordinary [`Engine`] — its own caches, sampler, seed, acceptance rule,
//! proposers and draft schedule, so everything proven of one generation holds for each — but
//! its target is a member of the batch: a forward or an unembedding parks at a gate, and when
//! every member has parked, one [`TargetModel::forward_batch`](crate::model::TargetModel::forward_batch) runs all the forwards (ragged:
//! each with its own tokens, positions and caches, so a sequence drafting `k` tokens rides
//! beside one taking a plain step) and one [`TargetModel::unembed_batch`](crate::model::TargetModel::unembed_batch) all the
//! unembeddings; each member then judges its own rows and commits its own accepted prefix in
//! its own caches' speculation transaction. Members run one at a time (the gate's baton; see
//! `gate.rs`), so no backend needs to be thread-safe.
//!
//! # Scheduling
//!
//! [`serve`] admits jobs while fewer than [`BatchOptions::max_batch`] run; a job joins between
//! passes (its prompt is forwarded in chunks of at most [`BatchOptions::prefill_chunk`] tokens,
//! one chunk per pass, so running streams keep flowing) and leaves when it ends. Every pass
//! serves every member, so no stream starves.
//!
//! # Speculation
//!
//! With [`SpeculationPolicy::Measured`] (the default) the batch measures, per batch size,
//! committed tokens per second with speculation on and off and runs the better (see `policy.rs`);
//! a member's round that may not draft is a plain step. Each member's evaluation overlap is off
//! (its rounds wait for the batch anyway).

mod gate;
mod member;
mod policy;

use std::panic::{catch_unwind, AssertUnwindSafe};

pub use gate::GateCounts;
pub use policy::{SizeReport, SpeculationPolicy, EXPLORE_FAR_SHARE, EXPLORE_SHARE, WINDOW_FIRINGS};

use super::{Engine, EvalOverlap};
use crate::{Backend, CoreError};
use gate::Gate;
use member::GatedTarget;

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
    pub counts: GateCounts,
    /// What the speculation policy measured, per batch size.
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

/// A value moved to a member's thread: references to the engine, the gate and `run`, whose
/// backend values need not be thread-safe.
struct Handoff<T>(T);

// SAFETY: members run one at a time (the gate's baton, handed over through its mutex; see
// `gate.rs`), so what a handoff reaches is used by one thread at a time, each use ordered after
// the last; the thread that called `serve` is blocked in it meanwhile and runs only `next`,
// which is `Send` and so touches nothing that is not thread-safe.
#[allow(unsafe_code)]
unsafe impl<T> Send for Handoff<T> {}

impl<T> Handoff<T> {
    /// Unwrap (a method, so a closure captures the whole wrapper, not its field).
    fn into_inner(self) -> T {
        self.0
    }
}

/// Leaves the batch when the member's thread ends, however it ends.
struct Membership<'g, 't, B: Backend>(&'g Gate<'t, B>);

impl<B: Backend> Drop for Membership<'_, '_, B> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Run the jobs `next` yields as one continuous batch over `engine`'s target and proposers,
/// calling `run` on each with an engine whose target is a member of the batch (`run` generates
/// with it as with any engine, e.g. [`Engine::generate`]). Returns when `next` yields `None`
/// and every job has ended.
///
/// Backends whose arrays cannot move between threads (MLX) are refused
/// ([`CoreError::BatchUnsupported`]).
///
/// `next` is called on the caller's thread while members run (it may block waiting for work; it
/// is `Send`, so it shares nothing unsynchronised with the members). `run` is called on a thread per job, one job running at a
/// time; a job that panics is ended and counted in [`BatchReport::panicked`].
pub fn serve<B, J, N, R>(
    engine: &Engine<'_, B>,
    options: &BatchOptions,
    next: N,
    run: R,
) -> Result<BatchReport, CoreError>
where
    B: Backend,
    J: Send,
    N: FnMut() -> Option<J> + Send,
    R: Fn(&Engine<'_, B>, J),
{
    let mut memory = PolicyMemory::new(options.policy);
    serve_with_memory(engine, options, &mut memory, next, run)
}

/// [`serve`] with the speculation policy's state taken from `memory` and left there when the
/// batch ends (its policy is `memory`'s; `options.policy` is not used).
pub fn serve_with_memory<B, J, N, R>(
    engine: &Engine<'_, B>,
    options: &BatchOptions,
    memory: &mut PolicyMemory,
    mut next: N,
    run: R,
) -> Result<BatchReport, CoreError>
where
    B: Backend,
    J: Send,
    N: FnMut() -> Option<J> + Send,
    R: Fn(&Engine<'_, B>, J),
{
    options.validate()?;
    if !engine.backend.arrays_move_between_threads() {
        return Err(CoreError::BatchUnsupported {
            backend: engine.backend.name(),
        });
    }
    let mut policy = memory.0.clone();
    // The time since the last batch ended is idle, not a pass's interval.
    policy.idle();
    let gate = Gate::new(engine.backend, engine.target, policy);
    let panicked = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| -> Result<(), CoreError> {
        loop {
            gate.wait_for_room(options.max_batch);
            let Some(job) = next() else {
                break;
            };
            gate.join();
            let handoff = Handoff((engine, &gate, &run, &panicked));
            let spawned = std::thread::Builder::new()
                .name("mtp-batch-member".into())
                .spawn_scoped(scope, move || {
                    let (engine, gate, run, panicked) = handoff.into_inner();
                    gate.enter();
                    let _member = Membership(gate);
                    let target = GatedTarget::new(gate, options.prefill_chunk);
                    let engine = engine
                        .clone()
                        .with_target(&target)
                        .with_switch(&target)
                        .with_overlap(EvalOverlap::Never);
                    if catch_unwind(AssertUnwindSafe(|| run(&engine, job))).is_err() {
                        tracing::error!("a batched generation panicked; it was ended");
                        panicked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                });
            if let Err(e) = spawned {
                // The member never started: take its place back.
                gate.enter();
                gate.leave();
                return Err(CoreError::Model(format!(
                    "could not start a batch member thread: {e}"
                )));
            }
        }
        gate.wait_until_empty();
        Ok(())
    })?;
    let (counts, sizes) = gate.report();
    memory.0 = gate.into_policy();
    Ok(BatchReport {
        counts,
        sizes,
        panicked: panicked.into_inner(),
    })
}
