//! Timing decorators around the target and the drafter: every model call is timed with the
//! backend's `eval` forced on its outputs before the clock stops ([`ClockMode::Eval`]), so lazy
//! backends are measured by work done, not by dispatch — or, with [`ClockMode::Dispatch`], the
//! calls are timed as they return, leaving a lazy backend's evaluation to the engine.

use std::cell::Cell;
use std::time::{Duration, Instant};

use mtp_core::cache::CacheSet;
use mtp_core::model::{DraftStep, MtpDrafter, TargetModel, TargetOutput};
use mtp_core::options::MtpDefaults;
use mtp_core::Backend;

/// How the decorators time a model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClockMode {
    /// Force the backend's `eval` on the call's outputs before the clock stops: model time is
    /// work done, but a lazy backend is evaluated call by call (no overlap between calls).
    #[default]
    Eval,
    /// Stop the clock when the call returns: the engine drives evaluation as it would without
    /// the decorators. On a lazy backend model time is then graph-building time, and the work
    /// is counted where the engine reads results (host overhead); eager backends are unchanged.
    Dispatch,
}

/// Time spent inside model calls during one generation, split by phase.
#[derive(Debug, Default)]
pub struct ModelClock {
    mode: ClockMode,
    prefill: Cell<Duration>,
    target: Cell<Duration>,
    drafter: Cell<Duration>,
    decode_forwards: Cell<usize>,
    in_prefill: Cell<bool>,
}

/// What a [`ModelClock`] measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClockReading {
    /// The prompt's forward and the unembedding right after it.
    pub prefill: Duration,
    /// Target forwards and unembeddings after the prefill.
    pub target: Duration,
    /// Drafter steps and the token embeddings they consume.
    pub drafter: Duration,
    /// Target forwards after the prefill (one per round for plain decode).
    pub decode_forwards: usize,
}

impl ModelClock {
    /// A zeroed clock timing calls as `mode` says.
    pub fn new(mode: ClockMode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }

    /// Zero every counter (before a generation).
    pub fn reset(&self) {
        self.prefill.set(Duration::ZERO);
        self.target.set(Duration::ZERO);
        self.drafter.set(Duration::ZERO);
        self.decode_forwards.set(0);
        self.in_prefill.set(false);
    }

    /// The counters now.
    pub fn read(&self) -> ClockReading {
        ClockReading {
            prefill: self.prefill.get(),
            target: self.target.get(),
            drafter: self.drafter.get(),
            decode_forwards: self.decode_forwards.get(),
        }
    }

    fn add(cell: &Cell<Duration>, elapsed: Duration) {
        cell.set(cell.get() + elapsed);
    }
}

/// Run `call`, force evaluation of what it returns when `mode` says so, and give the elapsed
/// time with the result.
fn timed<B: Backend, T>(
    backend: &B,
    mode: ClockMode,
    call: impl FnOnce() -> Result<T, B::Error>,
    outputs: impl Fn(&T) -> Vec<&B::Array>,
) -> Result<(T, Duration), B::Error> {
    let t0 = Instant::now();
    let value = call()?;
    if mode == ClockMode::Eval {
        backend.eval(&outputs(&value))?;
    }
    Ok((value, t0.elapsed()))
}

/// Whose work a [`TimedTarget`]'s calls are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelRole {
    /// The target: its prompt forward counts as prefill, later calls as target time.
    Target,
    /// A draft model: every call (its prompt prefill and catch-up forwards included) is
    /// drafter time, since it runs inside rounds or at the proposer's start.
    DraftModel,
}

/// A [`TargetModel`] that times its inner model's calls on a [`ModelClock`], as `role`'s work.
pub struct TimedTarget<'a, B: Backend> {
    inner: &'a dyn TargetModel<B>,
    clock: &'a ModelClock,
    role: ModelRole,
}

impl<'a, B: Backend> TimedTarget<'a, B> {
    /// Time `inner` on `clock` as `role`'s work.
    pub fn new(inner: &'a dyn TargetModel<B>, clock: &'a ModelClock, role: ModelRole) -> Self {
        Self { inner, clock, role }
    }
}

impl<B: Backend> TargetModel<B> for TimedTarget<'_, B> {
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn max_context(&self) -> usize {
        self.inner.max_context()
    }

    fn new_caches(&self, backend: &B) -> Result<CacheSet<B>, B::Error> {
        self.inner.new_caches(backend)
    }

    fn forward(
        &self,
        backend: &B,
        ids: &B::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, B::Error> {
        let (out, elapsed) = timed(
            backend,
            self.clock.mode,
            || self.inner.forward(backend, ids, start, caches),
            |o: &TargetOutput<B>| vec![&o.hidden, &o.draft_hidden],
        )?;
        if self.role == ModelRole::DraftModel {
            ModelClock::add(&self.clock.drafter, elapsed);
            return Ok(out);
        }
        // The engine's prefill is the one forward that starts at position 0.
        if start == 0 {
            self.clock.in_prefill.set(true);
            ModelClock::add(&self.clock.prefill, elapsed);
        } else {
            self.clock
                .decode_forwards
                .set(self.clock.decode_forwards.get() + 1);
            ModelClock::add(&self.clock.target, elapsed);
        }
        Ok(out)
    }

    fn unembed(&self, backend: &B, hidden: &B::Array) -> Result<B::Array, B::Error> {
        let (logits, elapsed) = timed(
            backend,
            self.clock.mode,
            || self.inner.unembed(backend, hidden),
            |l| vec![l],
        )?;
        if self.role == ModelRole::DraftModel {
            ModelClock::add(&self.clock.drafter, elapsed);
        } else if self.clock.in_prefill.replace(false) {
            ModelClock::add(&self.clock.prefill, elapsed);
        } else {
            ModelClock::add(&self.clock.target, elapsed);
        }
        Ok(logits)
    }

    fn token_embeddings(&self, backend: &B, ids: &B::Array) -> Result<B::Array, B::Error> {
        // Only drafting embeds tokens outside the target's forward.
        let (embeddings, elapsed) = timed(
            backend,
            self.clock.mode,
            || self.inner.token_embeddings(backend, ids),
            |e| vec![e],
        )?;
        ModelClock::add(&self.clock.drafter, elapsed);
        Ok(embeddings)
    }

    fn mtp_defaults(&self) -> MtpDefaults {
        self.inner.mtp_defaults()
    }
}

/// An [`MtpDrafter`] that times its inner drafter's steps on a [`ModelClock`].
pub struct TimedDrafter<'a, B: Backend> {
    inner: &'a dyn MtpDrafter<B>,
    clock: &'a ModelClock,
}

impl<'a, B: Backend> TimedDrafter<'a, B> {
    /// Time `inner` on `clock`.
    pub fn new(inner: &'a dyn MtpDrafter<B>, clock: &'a ModelClock) -> Self {
        Self { inner, clock }
    }
}

impl<B: Backend> MtpDrafter<B> for TimedDrafter<'_, B> {
    fn draft_step(
        &self,
        backend: &B,
        input: &B::Array,
        position: usize,
        target_caches: &CacheSet<B>,
    ) -> Result<DraftStep<B>, B::Error> {
        let (step, elapsed) = timed(
            backend,
            self.clock.mode,
            || {
                self.inner
                    .draft_step(backend, input, position, target_caches)
            },
            |s: &DraftStep<B>| vec![&s.logits, &s.projected],
        )?;
        ModelClock::add(&self.clock.drafter, elapsed);
        Ok(step)
    }
}
