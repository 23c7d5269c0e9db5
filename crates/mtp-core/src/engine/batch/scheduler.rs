//! The scheduler: one loop, on the thread that owns the backend, drives every member.
//!
//! Each turn it (1) fills free places from the job source, (2) resumes every member that has
//! something to do until each has parked target work or ended its job, and (3) runs all the
//! parked work as one batched pass and hands each member its result. A round of the policy ends
//! at each pass that ran forwards; the policy then says whether the next rounds may draft.

use std::cell::Cell;
use std::time::{Duration, Instant};

use corosensei::{CoroutineResult, Yielder};

use super::pass::{self, Done, Work};
use super::policy::{PolicyState, Round};
use super::slots::Place;
use super::source::{JobSource, JobWait, NextJob};
use crate::model::TargetModel;
use crate::Backend;

/// What a place is resumed with.
pub(super) enum Resume<J, B: Backend> {
    /// Start this job (the place, index `place`, was free).
    Job { job: J, place: usize },
    /// The result of the work the member parked.
    Done(Done<B>),
    /// The batch is over: return.
    Stop,
}

/// What a place suspends with.
pub(super) enum Parked<B: Backend> {
    /// Target work for the next pass.
    Work(Work<B>),
    /// Its job ended: the place is free.
    Free,
}

/// The handle a member suspends through.
pub(super) type PlaceYielder<J, B> = Yielder<Resume<J, B>, Parked<B>>;

/// What the members and the scheduler share (one thread, so cells).
#[derive(Debug, Default)]
pub(super) struct Shared {
    speculate: Cell<bool>,
    tokens: Cell<usize>,
    decode_forwards: Cell<usize>,
    decode_rows: Cell<usize>,
    panicked: Cell<usize>,
    /// Per place: the time its members waited on others' work (see [`Self::others_time`]).
    others: Vec<Cell<Duration>>,
}

impl Shared {
    /// The state of a batch of `places` places.
    pub fn new(places: usize) -> Self {
        Self {
            others: (0..places).map(|_| Cell::new(Duration::ZERO)).collect(),
            ..Self::default()
        }
    }

    /// The time members of `place` waited on other members' work so far (monotonic): what a
    /// member's engine leaves out of its rounds ([`crate::engine::SpeculationSwitch`]).
    pub fn others_time(&self, place: usize) -> Duration {
        self.others.get(place).map(Cell::get).unwrap_or_default()
    }

    fn add_others_time(&self, place: usize, wait: Duration) {
        if let Some(cell) = self.others.get(place) {
            cell.set(cell.get() + wait);
        }
    }

    /// Whether rounds may draft now.
    pub fn speculate(&self) -> bool {
        self.speculate.get()
    }

    /// A member committed `tokens`.
    pub fn committed(&self, tokens: usize) {
        self.tokens.set(self.tokens.get() + tokens);
    }

    /// A member forwards `rows` while decoding (not its prompt).
    pub fn decode_forward(&self, rows: usize) {
        self.decode_forwards.set(self.decode_forwards.get() + 1);
        self.decode_rows.set(self.decode_rows.get() + rows);
    }

    /// A member's job panicked.
    pub fn panicked(&self) {
        self.panicked.set(self.panicked.get() + 1);
    }

    pub fn panics(&self) -> usize {
        self.panicked.get()
    }
}

/// Counters of a batch's passes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PassCounts {
    /// Batched target calls made (a forward or an unembedding of several members).
    pub passes: usize,
    /// Work items they served (one per sequence per call).
    pub items: usize,
    /// The most sequences served by one pass.
    pub widest: usize,
}

enum State<J, B: Backend> {
    Free,
    /// To be resumed with this.
    Ready(Resume<J, B>),
    Parked(Work<B>),
    /// Its coroutine returned (never resumed again).
    Gone,
}

/// Where the round in progress spent its time (its counts are in [`Shared`]).
#[derive(Default)]
struct RoundClock {
    target_secs: f64,
    member_secs: f64,
}

/// A parked member's wait, to split into its own part and others'.
#[derive(Default, Clone, Copy)]
struct Wait {
    /// When it parked (`None`: not parked).
    since: Option<Instant>,
    /// Its share of the passes run since.
    own: Duration,
}

/// Drive `places` until `source` has ended and every job with it.
pub(super) fn drive<J, B, S>(
    places: &mut [Place<'_, Resume<J, B>, Parked<B>>],
    source: &mut S,
    (backend, target): (&B, &dyn TargetModel<B>),
    shared: &Shared,
    policy: &mut PolicyState,
) -> PassCounts
where
    B: Backend,
    S: JobSource<J> + ?Sized,
{
    let mut states: Vec<State<J, B>> = places.iter().map(|_| State::Free).collect();
    let mut waits = vec![Wait::default(); places.len()];
    let mut ended = false;
    let mut counts = PassCounts::default();
    let mut clock = RoundClock::default();
    shared.speculate.set(policy.speculate());
    loop {
        // Admit and run members until all have parked (a member ending frees a place for the
        // next job before the pass, so the pass is as full as the source allows).
        loop {
            let admitted = admit(&mut states, source, &mut ended);
            let resumed = resume_ready(places, &mut states, &mut waits, (&mut clock, shared));
            if admitted == 0 && resumed == 0 {
                break;
            }
        }
        let mut parked = Vec::new();
        for (slot, state) in states.iter_mut().enumerate() {
            if matches!(state, State::Parked(_)) {
                if let State::Parked(work) = std::mem::replace(state, State::Free) {
                    parked.push((slot, work));
                }
            }
        }
        if parked.is_empty() {
            if ended {
                break;
            }
            continue;
        }
        let rows: Vec<(usize, usize)> = parked
            .iter()
            .map(|(slot, work)| (*slot, work.rows(backend)))
            .collect();
        let started = Instant::now();
        let outcome = pass::run(backend, target, parked);
        let spent = started.elapsed();
        clock.target_secs += spent.as_secs_f64();
        let widths: Vec<usize> = rows.iter().map(|(_, r)| *r).collect();
        for ((slot, _), share) in rows.iter().zip(policy.pass_shares(&widths)) {
            if let Some(wait) = waits.get_mut(*slot) {
                let share = if share.is_finite() {
                    share.clamp(0.0, 1.0)
                } else {
                    0.0
                };
                wait.own += spent.mul_f64(share);
            }
        }
        counts.passes += outcome.calls;
        counts.items += outcome.results.len();
        counts.widest = counts.widest.max(outcome.results.len());
        for (slot, done) in outcome.results {
            states[slot] = State::Ready(Resume::Done(done));
        }
        if outcome.forwards > 0 {
            let clock = std::mem::take(&mut clock);
            policy.round(Round {
                batch: outcome.forwards,
                rows: outcome.rows,
                speculative: shared.speculate(),
                target_secs: clock.target_secs,
                member_secs: clock.member_secs,
                tokens: shared.tokens.take(),
                decode_forwards: shared.decode_forwards.take(),
                decode_rows: shared.decode_rows.take(),
            });
            shared.speculate.set(policy.speculate());
        }
    }
    for (place, state) in places.iter_mut().zip(&states) {
        if place.started() && !place.done() && !matches!(state, State::Gone) {
            // Free places wait for a job; told to stop, they return.
            let _ = place.as_mut().resume(Resume::Stop);
        }
    }
    counts
}

/// Fill free places from `source`; returns how many jobs started.
fn admit<J, B, S>(states: &mut [State<J, B>], source: &mut S, ended: &mut bool) -> usize
where
    B: Backend,
    S: JobSource<J> + ?Sized,
{
    let mut admitted = 0;
    while !*ended {
        let Some(free) = states.iter().position(|s| matches!(s, State::Free)) else {
            break;
        };
        let busy = states
            .iter()
            .any(|s| matches!(s, State::Ready(_) | State::Parked(_)));
        let wait = if busy { JobWait::Poll } else { JobWait::Block };
        match source.next_job(wait) {
            NextJob::Job(job) => {
                states[free] = State::Ready(Resume::Job { job, place: free });
                admitted += 1;
            }
            NextJob::NotYet => {
                if !busy {
                    // A source that does not wait when told it may: do not spin hot.
                    std::thread::yield_now();
                }
                break;
            }
            NextJob::Ended => *ended = true,
        }
    }
    admitted
}

/// Resume every member with something to do until it parks or frees its place; returns how
/// many were resumed. A member resumed after parking is first told how much of its wait was
/// others' work (the wait less its share of the passes run meanwhile).
fn resume_ready<J, B: Backend>(
    places: &mut [Place<'_, Resume<J, B>, Parked<B>>],
    states: &mut [State<J, B>],
    waits: &mut [Wait],
    (clock, shared): (&mut RoundClock, &Shared),
) -> usize {
    let mut resumed = 0;
    for (slot, ((place, state), wait)) in places
        .iter_mut()
        .zip(states.iter_mut())
        .zip(waits.iter_mut())
        .enumerate()
    {
        if !matches!(state, State::Ready(_)) {
            continue;
        }
        let State::Ready(input) = std::mem::replace(state, State::Free) else {
            continue;
        };
        if let Some(since) = wait.since.take() {
            shared.add_others_time(slot, since.elapsed().saturating_sub(wait.own));
        }
        wait.own = Duration::ZERO;
        let started = Instant::now();
        *state = match place.as_mut().resume(input) {
            CoroutineResult::Yield(Parked::Work(work)) => {
                wait.since = Some(Instant::now());
                State::Parked(work)
            }
            CoroutineResult::Yield(Parked::Free) => State::Free,
            CoroutineResult::Return(()) => State::Gone,
        };
        clock.member_secs += started.elapsed().as_secs_f64();
        resumed += 1;
    }
    resumed
}
