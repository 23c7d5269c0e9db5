//! The adaptive schedule's state lives with the engine: later requests start where earlier
//! ones left off, clones of an engine share it, a fresh engine does not, and every round is
//! logged with the depth chosen and drafted.

mod common;

use common::*;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::options::{DecodeMode, DraftOverrides, ValidationMode};
use mtp_core::schedule::{ScheduleKind, ScheduleMemory};
use mtp_core::testing::TinyConfig;

fn adaptive(prompt: Vec<u32>, n: usize) -> GenerateRequest {
    let mut r = GenerateRequest::greedy(prompt, n);
    r.draft = DraftOverrides {
        max_draft_tokens: Some(6),
        schedule: Some(ScheduleKind::Adaptive),
        ..DraftOverrides::default()
    };
    r
}

#[test]
fn learned_depth_carries_over_between_requests() {
    let b = B::default();
    let t = target(TinyConfig::default());
    let req = adaptive(vec![3, 1, 4, 1, 5], 120);
    let drafter = scripted(&t, &req, 1.0);
    let memory = ScheduleMemory::new();
    let engine = Engine::new(&b, &t)
        .with_drafter(&drafter)
        .with_env(no_env())
        .with_schedule_memory(memory.clone());
    let first = engine
        .generate(&req, &mut DiscardSink, &CancelToken::new())
        .expect("decodes");
    assert_eq!(first.tokens, plain(&t, &req).tokens);
    let log = &first.mtp.as_ref().expect("stats").round_log;
    assert_eq!(
        log[0].chosen, 0,
        "a controller that knows nothing starts at plain decode"
    );
    assert!(
        log.iter().any(|r| r.drafted > 1),
        "every draft is accepted: it climbs"
    );
    // The engine keyed its controller by proposer, backend, mode and validation.
    let snapshot = memory.snapshot();
    assert_eq!(snapshot.len(), 1);
    let (key, state) = &snapshot[0];
    assert_eq!(key.proposer, "mtp");
    assert_eq!(key.mode, DecodeMode::GreedyMtp);
    assert_eq!(key.validation, ValidationMode::Batched);
    assert!(state.frontier >= 2, "{state:?}");

    // The next request (through a clone of the engine) starts at the learned depth.
    let second = engine
        .clone()
        .generate(&req, &mut DiscardSink, &CancelToken::new())
        .expect("decodes");
    let log2 = &second.mtp.as_ref().expect("stats").round_log;
    assert_eq!(log2[0].chosen, state.planned.min(6));
    assert!(log2[0].chosen > 0);
    assert_eq!(second.tokens, first.tokens);

    // A fresh engine starts from nothing.
    let fresh = Engine::new(&b, &t)
        .with_drafter(&drafter)
        .with_env(no_env())
        .generate(&req, &mut DiscardSink, &CancelToken::new())
        .expect("decodes");
    assert_eq!(fresh.mtp.expect("stats").round_log[0].chosen, 0);
}

#[test]
fn the_round_log_marks_budget_capped_rounds() {
    let b = B::default();
    let t = target(TinyConfig::default());
    let mut req = GenerateRequest::greedy(vec![3, 1, 4, 1, 5], 12);
    req.draft = DraftOverrides::constant(4);
    let drafter = scripted(&t, &req, 1.0);
    let out = Engine::new(&b, &t)
        .with_drafter(&drafter)
        .with_env(no_env())
        .generate(&req, &mut DiscardSink, &CancelToken::new())
        .expect("decodes");
    let log = out.mtp.expect("stats").round_log;
    // 1 token from the prefill, two rounds of 4 + 1, then one token left: drafted 0 of 4.
    let shape: Vec<(usize, usize, usize, bool)> = log
        .iter()
        .map(|r| (r.chosen, r.drafted, r.accepted, r.capped))
        .collect();
    assert_eq!(
        shape,
        vec![(4, 4, 4, false), (4, 4, 4, false), (4, 0, 0, true)]
    );
    assert!(log.iter().all(|r| r.secs > 0.0));
}
