//! The rendezvous where a batch's sequences meet for each target pass.
//!
//! Every sequence of a batch runs the ordinary engine on a thread of its own, but only one of
//! them runs at a time: the one holding the *baton*. A sequence that needs the target (a
//! forward, or its logits) *parks* its work at the gate and hands the baton on; the sequence
//! that parks last — when every member is parked — runs all the parked work as one batched
//! target call ([`TargetModel::forward_batch`], [`TargetModel::unembed_batch`]) and hands each
//! member its result. So the backend, the models and every array are only ever touched by one
//! thread at a time, and each hand-over goes through the gate's mutex (which orders everything
//! before it before everything after it): this is why backend values may cross threads here
//! although the backends' types need not be `Send` or `Sync`.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::Thread;
use std::time::Instant;

use super::policy::{PolicyState, SizeReport};
use crate::cache::CacheSet;
use crate::model::{ForwardJob, TargetModel, TargetOutput};
use crate::{Backend, CoreError};

/// Work parked at the gate.
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

/// The result of parked work.
pub(super) enum Done<B: Backend> {
    Forward {
        caches: CacheSet<B>,
        output: Result<TargetOutput<B>, B::Error>,
    },
    Unembed(Result<B::Array, B::Error>),
}

/// Counters of a batch's passes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GateCounts {
    /// Batched target calls made (a forward pass or an unembedding pass).
    pub passes: usize,
    /// Work items they served (one per sequence per call).
    pub items: usize,
    /// The largest number of sequences in one call.
    pub widest: usize,
}

struct State<B: Backend> {
    /// Whether a member is running (holds the baton), or the baton is on its way to one.
    baton: bool,
    /// Members waiting for the baton (their work is done, or they are entering), in order.
    ready: VecDeque<u64>,
    /// The waiting member the baton was handed to (it has not woken yet).
    granted: Option<u64>,
    /// The threads of waiting members, to wake exactly the one the baton goes to.
    sleepers: HashMap<u64, Thread>,
    /// Sequences in the batch (running, waiting for the baton, or parked).
    members: usize,
    parked: Vec<(u64, Work<B>)>,
    done: HashMap<u64, Done<B>>,
    next_ticket: u64,
    policy: PolicyState,
    counts: GateCounts,
}

/// The gate of one batch over `target`.
pub(super) struct Gate<'t, B: Backend> {
    backend: &'t B,
    target: &'t dyn TargetModel<B>,
    state: Mutex<State<B>>,
    changed: Condvar,
}

// SAFETY: see the module docs. Backend values inside the gate (parked work, results, the
// backend and target references) are only used by the member holding the baton, and the baton
// passes between threads only through `state`'s mutex, so no two threads ever use them at once
// and every use is ordered after the previous one. The thread that created the gate does not
// use them while members run (it is blocked in `serve`, running only `Send` code).
#[allow(unsafe_code)]
unsafe impl<B: Backend> Sync for Gate<'_, B> {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl<B: Backend> Send for Gate<'_, B> {}

impl<'t, B: Backend> Gate<'t, B> {
    pub fn new(backend: &'t B, target: &'t dyn TargetModel<B>, policy: PolicyState) -> Self {
        Self {
            backend,
            target,
            state: Mutex::new(State {
                baton: false,
                ready: VecDeque::new(),
                granted: None,
                sleepers: HashMap::new(),
                members: 0,
                parked: Vec::new(),
                done: HashMap::new(),
                next_ticket: 0,
                policy,
                counts: GateCounts::default(),
            }),
            changed: Condvar::new(),
        }
    }

    pub fn target(&self) -> &'t dyn TargetModel<B> {
        self.target
    }

    fn lock(&self) -> MutexGuard<'_, State<B>> {
        // A member that panicked leaves the state consistent (every change is one statement
        // under the lock), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'g>(&'g self, guard: MutexGuard<'g, State<B>>) -> MutexGuard<'g, State<B>> {
        self.changed.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// Count one more member (before its thread starts; it then [`enter`](Self::enter)s).
    pub fn join(&self) {
        self.lock().members += 1;
    }

    /// Block until fewer than `max` sequences are members.
    pub fn wait_for_room(&self, max: usize) {
        let mut state = self.lock();
        while state.members >= max {
            state = self.wait(state);
        }
    }

    /// Block until no sequence is a member.
    pub fn wait_until_empty(&self) {
        let mut state = self.lock();
        while state.members > 0 {
            state = self.wait(state);
        }
    }

    /// A new ticket (work, or a wait for the baton).
    fn ticket(state: &mut State<B>) -> u64 {
        let t = state.next_ticket;
        state.next_ticket += 1;
        t
    }

    /// Hand the baton on (the caller holds it): to the first ready member, woken alone (a
    /// batch of N does not wake N threads to let one run), or put it down when none is ready.
    fn release(state: &mut State<B>) {
        match state.ready.pop_front() {
            Some(next) => {
                state.granted = Some(next);
                if let Some(thread) = state.sleepers.get(&next) {
                    thread.unpark();
                }
            }
            None => state.baton = false,
        }
    }

    /// Sleep until the baton is handed to `ticket` (queued in `ready` by the caller).
    fn wait_for_baton<'g>(
        &'g self,
        mut state: MutexGuard<'g, State<B>>,
        ticket: u64,
    ) -> MutexGuard<'g, State<B>> {
        state.sleepers.insert(ticket, std::thread::current());
        while state.granted != Some(ticket) {
            drop(state);
            // A wake-up for someone else, or a spurious one, just loops.
            std::thread::park();
            state = self.lock();
        }
        state.granted = None;
        state.sleepers.remove(&ticket);
        state
    }

    /// Take the baton (a joined member, before it first runs).
    pub fn enter(&self) {
        let mut state = self.lock();
        if !state.baton {
            state.baton = true;
            return;
        }
        let ticket = Self::ticket(&mut state);
        state.ready.push_back(ticket);
        drop(self.wait_for_baton(state, ticket));
    }

    /// Leave the batch (holding the baton): if everyone else is parked, serve them first.
    pub fn leave(&self) {
        let mut state = self.lock();
        state.members = state.members.saturating_sub(1);
        if !state.parked.is_empty() && state.parked.len() == state.members {
            state = self.serve(state, None);
        }
        if state.members == 0 {
            state.policy.idle();
        }
        Self::release(&mut state);
        drop(state);
        self.changed.notify_all();
    }

    /// Whether rounds may draft now (the batch's policy).
    pub fn speculate(&self) -> bool {
        self.lock().policy.speculate()
    }

    /// `tokens` committed by a member (for the policy's measurement).
    pub fn committed(&self, tokens: usize) {
        self.lock().policy.committed(tokens);
    }

    /// The policy's state, for a later batch ([`super::PolicyMemory`]).
    pub fn into_policy(self) -> PolicyState {
        self.state
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .policy
    }

    pub fn report(&self) -> (GateCounts, Vec<SizeReport>) {
        let state = self.lock();
        (state.counts, state.policy.report())
    }

    /// Park `work` (holding the baton) and return its result once a batched call has served it;
    /// the caller holds the baton again.
    pub fn park(&self, work: Work<B>) -> Done<B> {
        let mut state = self.lock();
        let ticket = Self::ticket(&mut state);
        state.parked.push((ticket, work));
        if state.parked.len() >= state.members {
            // Everyone is here: this member runs the batch and keeps the baton.
            state = self.serve(state, Some(ticket));
            if let Some(done) = state.done.remove(&ticket) {
                return done;
            }
        }
        Self::release(&mut state);
        let mut state = self.wait_for_baton(state, ticket);
        match state.done.remove(&ticket) {
            Some(done) => done,
            // Handed the baton before its work was served: impossible (only served work is
            // queued as ready), reported rather than trusted.
            None => Done::Unembed(Err(CoreError::Model(
                "a batch member was woken before its work was served".into(),
            )
            .into())),
        }
    }

    /// Run every parked item as batched target calls (the caller holds the baton), post the
    /// results and queue their members for the baton.
    fn serve<'g>(
        &'g self,
        mut state: MutexGuard<'g, State<B>>,
        own: Option<u64>,
    ) -> MutexGuard<'g, State<B>> {
        let parked = std::mem::take(&mut state.parked);
        let members = state.members;
        drop(state);
        let tickets: Vec<u64> = parked.iter().map(|(t, _)| *t).collect();
        // A panic inside the model must not leave the other members waiting for ever: each
        // gets an error (its caches were in the failed call).
        let results = catch_unwind(AssertUnwindSafe(|| self.run(parked))).unwrap_or_else(|_| {
            let failed = tickets
                .iter()
                .map(|&t| {
                    let error = CoreError::Model("the batched target call panicked".into());
                    (t, Done::Unembed(Err(error.into())))
                })
                .collect();
            (failed, 1)
        });
        let mut state = self.lock();
        state.counts.passes += results.1;
        state.counts.items += results.0.len();
        state.counts.widest = state.counts.widest.max(members);
        // Everyone served waits for the baton, in parking order, except the member serving
        // (`own`), which keeps it.
        for (ticket, _) in &results.0 {
            if Some(*ticket) != own {
                state.ready.push_back(*ticket);
            }
        }
        state.done.extend(results.0);
        state.policy.fired(members, Instant::now());
        state
    }

    /// The batched calls: one forward over every parked forward, one unembedding over every
    /// parked unembedding. Returns the results and the number of calls made.
    fn run(&self, parked: Vec<(u64, Work<B>)>) -> (Vec<(u64, Done<B>)>, usize) {
        let (b, target) = (self.backend, self.target);
        let mut forwards = Vec::new();
        let mut unembeds = Vec::new();
        for (ticket, work) in parked {
            match work {
                Work::Forward { ids, start, caches } => forwards.push((ticket, ids, start, caches)),
                Work::Unembed { hidden } => unembeds.push((ticket, hidden)),
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
            let result = target.forward_batch(b, &mut jobs);
            drop(jobs);
            let outputs = spread(result, forwards.len());
            for ((ticket, _, _, caches), output) in forwards.into_iter().zip(outputs) {
                out.push((ticket, Done::Forward { caches, output }));
            }
        }
        if !unembeds.is_empty() {
            calls += 1;
            let hiddens: Vec<&B::Array> = unembeds.iter().map(|(_, h)| h).collect();
            let result = target.unembed_batch(b, &hiddens);
            let outputs = spread(result, unembeds.len());
            for ((ticket, _), output) in unembeds.into_iter().zip(outputs) {
                out.push((ticket, Done::Unembed(output)));
            }
        }
        (out, calls)
    }
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
