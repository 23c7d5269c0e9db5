//! The evaluation overlap ([`EvalOverlap`]) reorders greedy MTP rounds (the next round's drafts
//! are built before a round's tokens are emitted); it must change nothing a caller can see:
//! tokens, the stream, done reasons, acceptance statistics and the caches left behind, also
//! when the sink stops, the run is cancelled, an EOS ends it or the budget runs out.

mod common;

use std::cell::{Cell, RefCell};

use common::*;
use mtp_core::cache::CacheSet;
use mtp_core::engine::{
    CancelToken, DoneReason, Engine, EvalOverlap, GenerateRequest, Response, SinkFlow,
};
use mtp_core::model::{DraftStep, MtpDrafter, TargetModel, TargetOutput};
use mtp_core::options::ValidationMode;
use mtp_core::reference::ReferenceBackend;
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{CacheFlavor, TinyConfig, TinyDrafter, TinyDrafterConfig, TinyTarget};
use mtp_core::{Backend, Execution};

/// What one run showed its caller.
#[derive(Debug, PartialEq)]
struct Observed {
    tokens: Vec<u32>,
    streamed: Vec<u32>,
    done: DoneReason,
    /// (iterations, drafted, accepted, per-position accepted counts)
    acceptance: (usize, usize, usize, Vec<usize>),
    cached: usize,
    speculating: bool,
}

/// Every drafter step's (position, input), in call order.
type Steps = Vec<(usize, Vec<f32>)>;

/// A drafter that records every step's input and position, then delegates.
struct Recording<'d> {
    inner: &'d dyn MtpDrafter<B>,
    steps: RefCell<Steps>,
}

impl MtpDrafter<B> for Recording<'_> {
    fn draft_step(
        &self,
        backend: &B,
        input: &<B as Backend>::Array,
        position: usize,
        target_caches: &CacheSet<B>,
    ) -> Result<DraftStep<B>, <B as Backend>::Error> {
        let values = backend.to_vec_f32(input)?;
        self.steps.borrow_mut().push((position, values));
        self.inner
            .draft_step(backend, input, position, target_caches)
    }
}

/// A target that counts its forwards, then delegates.
struct Counting<'t> {
    inner: &'t TinyTarget<B>,
    forwards: Cell<usize>,
}

impl TargetModel<B> for Counting<'_> {
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn max_context(&self) -> usize {
        self.inner.max_context()
    }

    fn new_caches(&self, backend: &B) -> Result<CacheSet<B>, <B as Backend>::Error> {
        self.inner.new_caches(backend)
    }

    fn forward(
        &self,
        backend: &B,
        ids: &<B as Backend>::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, <B as Backend>::Error> {
        self.forwards.set(self.forwards.get() + 1);
        self.inner.forward(backend, ids, start, caches)
    }

    fn unembed(
        &self,
        backend: &B,
        hidden: &<B as Backend>::Array,
    ) -> Result<<B as Backend>::Array, <B as Backend>::Error> {
        self.inner.unembed(backend, hidden)
    }

    fn token_embeddings(
        &self,
        backend: &B,
        ids: &<B as Backend>::Array,
    ) -> Result<<B as Backend>::Array, <B as Backend>::Error> {
        self.inner.token_embeddings(backend, ids)
    }
}

/// One run: what the caller saw, the drafter steps and the target forwards it took.
struct Run {
    observed: Observed,
    steps: Steps,
    forwards: usize,
}

/// Run `request` with `overlap`; the sink stops after `stop_after` tokens and the cancel token
/// is set after `cancel_after` tokens.
fn observe(
    target: &TinyTarget<B>,
    drafter: &dyn MtpDrafter<B>,
    request: &GenerateRequest,
    overlap: EvalOverlap,
    stop_after: Option<usize>,
    cancel_after: Option<usize>,
) -> Run {
    let b = B::default();
    let drafter = Recording {
        inner: drafter,
        steps: RefCell::new(Vec::new()),
    };
    let target = Counting {
        inner: target,
        forwards: Cell::new(0),
    };
    let engine = Engine::new(&b, &target)
        .with_drafter(&drafter)
        .with_env(no_env())
        .with_overlap(overlap);
    let cancel = CancelToken::new();
    let flag = cancel.clone();
    let mut streamed = Vec::new();
    let mut sink = |id: u32| {
        streamed.push(id);
        if cancel_after == Some(streamed.len()) {
            flag.cancel();
        }
        match stop_after {
            Some(n) if streamed.len() >= n => SinkFlow::Stop,
            _ => SinkFlow::Continue,
        }
    };
    let mut caches: CacheSet<B> = target.new_caches(&b).expect("caches");
    let out: Response = engine
        .generate_with_caches(&mut caches, request, &mut sink, &cancel)
        .expect("runs");
    let stats = out.mtp.clone().unwrap_or_default();
    let observed = Observed {
        tokens: out.tokens,
        streamed,
        done: out.done_reason,
        acceptance: (
            stats.iterations,
            stats.drafted,
            stats.accepted,
            stats.per_position.iter().map(|p| p.accepted).collect(),
        ),
        cached: caches.position(),
        speculating: caches.is_speculating(),
    };
    Run {
        observed,
        steps: drafter.steps.into_inner(),
        forwards: target.forwards.get(),
    }
}

fn request(n: usize, schedule: ScheduleKind, validation: ValidationMode) -> GenerateRequest {
    let mut r = GenerateRequest::greedy(vec![3, 1, 4, 1, 5, 9, 2, 6], n);
    r.draft = draft(schedule, validation, 3);
    r
}

/// (sink stops after, cancel token set after) this many tokens.
const SINK_BEHAVIOURS: [(Option<usize>, Option<usize>); 3] =
    [(None, None), (Some(2), None), (None, Some(4))];

/// `base`, then `base` with each of the first six tokens of its plain continuation `reference`
/// as the EOS token (runs that end at every early position).
fn with_each_eos(base: &GenerateRequest, reference: &[u32]) -> Vec<GenerateRequest> {
    let eos_runs = reference.iter().take(6).map(|&id| GenerateRequest {
        eos: vec![id],
        ..base.clone()
    });
    std::iter::once(base.clone()).chain(eos_runs).collect()
}

#[test]
fn overlap_changes_nothing_a_caller_sees() {
    let t = target(TinyConfig::default());
    let mut checked = 0;
    let mut dropped_steps = 0;
    for schedule in [ScheduleKind::Constant, ScheduleKind::Heuristic] {
        for validation in [
            ValidationMode::Batched,
            ValidationMode::Serial,
            ValidationMode::CompareSerial,
        ] {
            for n in [1, 2, 3, 5, 17, 40] {
                let base = request(n, schedule, validation);
                let reference = plain(&t, &base).tokens;
                // Scripted drafters (which know the answer to a chosen accuracy) and a model
                // drafter (whose drafts depend on the token and hidden it is given).
                let mut drafters: Vec<Box<dyn MtpDrafter<B>>> = [0.0, 0.5, 0.9, 1.0]
                    .into_iter()
                    .map(|accuracy| Box::new(scripted(&t, &base, accuracy)) as Box<_>)
                    .collect();
                drafters.push(Box::new(
                    TinyDrafter::new(&B::default(), &t, TinyDrafterConfig::default())
                        .expect("drafter builds"),
                ));
                for (which, drafter) in drafters.iter().enumerate() {
                    let drafter = drafter.as_ref();
                    for req in with_each_eos(&base, &reference) {
                        for (stop, cancel) in SINK_BEHAVIOURS {
                            let never =
                                observe(&t, drafter, &req, EvalOverlap::Never, stop, cancel);
                            let always =
                                observe(&t, drafter, &req, EvalOverlap::Always, stop, cancel);
                            let case = format!(
                                "{schedule} / {validation:?} / n={n} / drafter {which} / eos {:?} \
                                 / stop {stop:?} / cancel {cancel:?}",
                                req.eos
                            );
                            assert_eq!(always.observed, never.observed, "{case}");
                            // The same drafter calls on the same inputs and the same target
                            // forwards, then at most one chain of early drafts that emission
                            // made useless.
                            assert!(always.steps.starts_with(&never.steps), "{case}");
                            assert!(always.steps.len() <= never.steps.len() + 8, "{case}");
                            assert_eq!(always.forwards, never.forwards, "{case}");
                            dropped_steps += always.steps.len() - never.steps.len();
                            let seen = &always.observed;
                            assert!(!seen.speculating, "{case}");
                            assert_eq!(seen.tokens, seen.streamed, "{case}");
                            assert_eq!(seen.tokens, reference[..seen.tokens.len()].to_vec());
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    // schedules × validations × drafters × sink behaviours × (6 lengths + EOS choices).
    assert_eq!(checked, 2 * 3 * 5 * 3 * (6 + 1 + 2 + 3 + 5 + 6 + 6));
    // Early drafting ran: some runs ended with early drafts that were dropped.
    assert!(dropped_steps > 0);
}

#[test]
fn pipelined_plain_decode_changes_nothing_a_caller_sees() {
    let mut checked = 0;
    let mut rolled_back = 0;
    for caches in [CacheFlavor::Speculative, CacheFlavor::SerialOnly] {
        let t = target(TinyConfig {
            caches,
            ..TinyConfig::default()
        });
        let drafter = TinyDrafter::new(&B::default(), &t, TinyDrafterConfig::default())
            .expect("drafter builds");
        for n in [1, 2, 3, 5, 17, 40] {
            let mut base = GenerateRequest::greedy(vec![3, 1, 4, 1, 5, 9, 2, 6], n);
            base.draft.enabled = Some(false);
            let reference = plain(&t, &base).tokens;
            for req in with_each_eos(&base, &reference) {
                for (stop, cancel) in SINK_BEHAVIOURS {
                    let never = observe(&t, &drafter, &req, EvalOverlap::Never, stop, cancel);
                    let always = observe(&t, &drafter, &req, EvalOverlap::Always, stop, cancel);
                    let case = format!(
                        "{caches:?} / n={n} / eos {:?} / stop {stop:?} / cancel {cancel:?}",
                        req.eos
                    );
                    assert_eq!(always.observed, never.observed, "{case}");
                    let seen = &always.observed;
                    assert!(!seen.speculating, "{case}");
                    assert_eq!(seen.tokens, seen.streamed, "{case}");
                    assert_eq!(seen.tokens, reference[..seen.tokens.len()].to_vec());
                    // Running ahead costs at most one forward, rolled back; only caches that
                    // can roll back run ahead.
                    let extra = always.forwards - never.forwards;
                    match caches {
                        CacheFlavor::Speculative => assert!(extra <= 1, "{case}"),
                        CacheFlavor::SerialOnly => assert_eq!(extra, 0, "{case}"),
                    }
                    rolled_back += extra;
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 2 * 3 * (6 + 1 + 2 + 3 + 5 + 6 + 6));
    // The pipelined loop ran: some runs ended early with a look-ahead forward rolled back.
    assert!(rolled_back > 0);
}

#[test]
fn auto_overlaps_only_lazy_backends() {
    let reference = ReferenceBackend::default();
    assert_eq!(reference.execution(), Execution::Eager);
    assert!(!EvalOverlap::Auto.is_active(&reference));
    assert!(EvalOverlap::Always.is_active(&reference));
    assert!(!EvalOverlap::Never.is_active(&reference));
    assert_eq!(EvalOverlap::default(), EvalOverlap::Auto);
}
