//! Greedy MTP: the named cases of the engine, each checked against plain greedy decode.

mod common;

use common::*;
use mtp_core::engine::{CancelToken, DoneReason, Engine, GenerateRequest, SinkFlow};
use mtp_core::model::TargetModel;
use mtp_core::options::{DecodeMode, ValidationMode};
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{CacheFlavor, TinyConfig};

fn request(n: usize) -> GenerateRequest {
    let mut r = GenerateRequest::greedy(vec![3, 1, 4, 1, 5, 9, 2, 6], n);
    r.draft = draft(ScheduleKind::Constant, ValidationMode::Batched, 4);
    r
}

#[test]
fn plain_greedy_is_not_degenerate() {
    let t = target(TinyConfig::default());
    let out = plain(&t, &request(40));
    let distinct: std::collections::BTreeSet<_> = out.tokens.iter().collect();
    assert_eq!(out.tokens.len(), 40);
    assert!(
        distinct.len() >= 4,
        "tiny target collapsed: {:?}",
        out.tokens
    );
}

#[test]
fn accept_all_emits_drafts_and_bonus() {
    let t = target(TinyConfig::default());
    let req = request(31);
    let drafter = scripted(&t, &req, 1.0);
    let (out, _) = speculative(&t, &drafter, &req);
    assert_eq!(out.tokens, plain(&t, &req).tokens);
    assert_eq!(out.mode, DecodeMode::GreedyMtp);
    let stats = out.mtp.expect("stats");
    // 1 token from prefill, then rounds of 4 accepted drafts + 1 bonus.
    assert_eq!(stats.iterations, 6);
    assert_eq!(stats.drafted, 24);
    assert_eq!(stats.accepted, 24);
    assert_eq!(stats.all_accepted, 6);
    assert_eq!(stats.mismatches, 0);
    assert_eq!(stats.batched_rounds, 6);
    assert!((stats.acceptance() - 1.0).abs() < 1e-12);
    assert_eq!(stats.per_position_acceptance(), vec![1.0; 4]);
}

#[test]
fn first_token_mismatch_emits_the_correction() {
    let t = target(TinyConfig::default());
    let req = request(12);
    let drafter = scripted(&t, &req, 0.0);
    let (out, _) = speculative(&t, &drafter, &req);
    assert_eq!(out.tokens, plain(&t, &req).tokens);
    let stats = out.mtp.expect("stats");
    assert_eq!(stats.accepted, 0);
    // Every round that drafted missed; the last round (one token left) drafts nothing.
    assert_eq!(stats.iterations, 11);
    assert_eq!(stats.mismatches, 10);
    assert_eq!(stats.per_position[0].drafted, 10);
}

#[test]
fn mid_mismatch_keeps_the_accepted_prefix() {
    let t = target(TinyConfig::default());
    let req = request(25);
    let mut drafter = scripted(&t, &req, 0.0);
    drafter.right_steps = Some(2);
    let (out, caches) = speculative(&t, &drafter, &req);
    assert_eq!(out.tokens, plain(&t, &req).tokens);
    let stats = out.mtp.expect("stats");
    // Each full round: 2 accepted + the correction = 3 tokens.
    assert_eq!(stats.iterations, 8);
    assert_eq!(stats.accepted, 16);
    assert_eq!(stats.per_position_acceptance(), vec![1.0, 1.0, 0.0, 0.0]);
    // Everything emitted is in the caches except the newest token.
    assert_eq!(caches.position(), req.prompt.len() + out.tokens.len() - 1);
    assert!(!caches.is_speculating());
}

#[test]
fn eos_among_drafts_ends_without_bonus_and_is_not_cached() {
    let t = target(TinyConfig::default());
    let base = request(40);
    let reference = plain(&t, &base).tokens;
    // A token whose first occurrence falls on a draft slot (rounds emit 4 drafts + 1 bonus
    // after the prefill token, so bonus slots are multiples of 5).
    let (index, eos) = reference
        .iter()
        .enumerate()
        .find(|(i, id)| i % 5 != 0 && reference.iter().position(|x| x == *id) == Some(*i))
        .map(|(i, &id)| (i, id))
        .expect("a draft-slot token");
    let mut req = base.clone();
    req.eos = vec![eos];
    let drafter = scripted(&t, &base, 1.0);
    let (out, caches) = speculative(&t, &drafter, &req);
    let expected = plain(&t, &req);
    assert_eq!(expected.tokens, reference[..index].to_vec());
    assert_eq!(expected.done_reason, DoneReason::Stop);
    assert_eq!(out.tokens, expected.tokens);
    assert_eq!(out.done_reason, DoneReason::Stop);
    // Every emitted token is cached; the EOS is not.
    assert_eq!(caches.position(), req.prompt.len() + out.tokens.len());
    assert!(!caches.is_speculating());
}

#[test]
fn num_predict_is_respected_exactly() {
    let t = target(TinyConfig::default());
    let full = plain(&t, &request(20)).tokens;
    for n in 0..=13 {
        let req = request(n);
        let drafter = scripted(&t, &req, 1.0);
        let (out, caches) = speculative(&t, &drafter, &req);
        assert_eq!(out.tokens, full[..n].to_vec(), "num_predict {n}");
        assert_eq!(out.done_reason, DoneReason::Length);
        assert_eq!(out.eval_count, n);
        assert!(!caches.is_speculating());
    }
}

#[test]
fn cancellation_mid_stream_leaves_consistent_caches() {
    let b = B::default();
    let t = target(TinyConfig::default());
    let req = request(40);
    let drafter = scripted(&t, &req, 1.0);
    let reference = plain(&t, &req).tokens;
    for stop_after in [1, 2, 5, 7, 11] {
        let cancel = CancelToken::new();
        let flag = cancel.clone();
        let mut seen = 0;
        let mut sink = |_id: u32| {
            seen += 1;
            if seen == stop_after {
                flag.cancel();
            }
            SinkFlow::Continue
        };
        let engine = Engine::new(&b, &t)
            .with_drafter(&drafter)
            .with_env(no_env());
        let mut caches = t.new_caches(&b).expect("caches");
        let out = engine
            .generate_with_caches(&mut caches, &req, &mut sink, &cancel)
            .expect("runs");
        assert_eq!(out.done_reason, DoneReason::Cancelled);
        assert!(out.tokens.len() >= stop_after && out.tokens.len() < stop_after + 6);
        assert_eq!(out.tokens, reference[..out.tokens.len()].to_vec());
        assert!(!caches.is_speculating(), "no speculation left open");
        assert_eq!(caches.position(), req.prompt.len() + out.tokens.len() - 1);
    }
}

#[test]
fn a_sink_can_stop_generation() {
    let b = B::default();
    let t = target(TinyConfig::default());
    let req = request(30);
    let drafter = scripted(&t, &req, 1.0);
    let mut count = 0;
    let mut sink = |_id: u32| {
        count += 1;
        if count == 3 {
            SinkFlow::Stop
        } else {
            SinkFlow::Continue
        }
    };
    let engine = Engine::new(&b, &t)
        .with_drafter(&drafter)
        .with_env(no_env());
    let out = engine
        .generate(&req, &mut sink, &CancelToken::new())
        .expect("runs");
    assert_eq!(out.done_reason, DoneReason::Cancelled);
    assert_eq!(out.tokens.len(), 3);
}

#[test]
fn caches_that_cannot_speculate_fall_back_to_serial_validation() {
    let t = target(TinyConfig {
        caches: CacheFlavor::SerialOnly,
        ..TinyConfig::default()
    });
    let req = request(30);
    let mut drafter = scripted(&t, &req, 0.0);
    drafter.right_steps = Some(3);
    let (out, _) = speculative(&t, &drafter, &req);
    assert_eq!(out.tokens, plain(&t, &req).tokens);
    let stats = out.mtp.expect("stats");
    assert_eq!(stats.batched_rounds, 0);
    assert_eq!(stats.serial_rounds, stats.per_position[0].drafted);
    let rates = stats.per_position_acceptance();
    assert!(rates[..3].iter().all(|&r| r == 1.0), "{rates:?}");
    assert_eq!(rates[3], 0.0);
}

#[test]
fn compare_serial_finds_no_disagreement_on_the_reference_backend() {
    let t = target(TinyConfig::default());
    let mut req = request(30);
    req.draft = draft(ScheduleKind::Heuristic, ValidationMode::CompareSerial, 3);
    let drafter = scripted(&t, &req, 0.7);
    let (out, _) = speculative(&t, &drafter, &req);
    assert_eq!(out.tokens, plain(&t, &req).tokens);
    let stats = out.mtp.expect("stats");
    assert!(stats.compared > stats.iterations);
    assert_eq!(stats.batch_serial_mismatches, 0);
    assert_eq!(stats.batched_rounds, stats.iterations);
}

#[test]
fn environment_settings_apply_and_bad_values_are_ignored() {
    let b = B::default();
    let t = target(TinyConfig::default());
    let req = GenerateRequest::greedy(vec![1, 2, 3], 20);
    let drafter = scripted(&t, &req, 1.0);
    let engine = Engine::new(&b, &t).with_drafter(&drafter).with_env(env(&[
        ("MTP_INITIAL_DRAFT_TOKENS", "2"),
        ("MTP_MAX_DRAFT_TOKENS", "banana"),
        ("MTP_SERIAL_VALIDATE", "true"),
        // The initial depth is the constant schedule's (the adaptive default ignores it).
        ("MTP_DRAFT_SCHEDULE", "constant"),
    ]));
    let options = engine.mtp_options(&req).expect("options");
    assert_eq!(options.initial_draft_tokens, 2);
    assert_eq!(options.max_draft_tokens, 16);
    assert_eq!(options.validation, ValidationMode::Serial);
    let out = engine
        .generate(
            &req,
            &mut mtp_core::engine::DiscardSink,
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(out.tokens, plain(&t, &req).tokens);
    let stats = out.mtp.expect("stats");
    assert_eq!(stats.serial_rounds, stats.per_position[0].drafted);
    assert_eq!(stats.max_draft, 2);
}

#[test]
fn bad_requests_are_errors() {
    let b = B::default();
    let t = target(TinyConfig {
        max_context: 16,
        ..TinyConfig::default()
    });
    let engine = Engine::new(&b, &t).with_env(no_env());
    let run = |req: &GenerateRequest| {
        engine.generate(req, &mut mtp_core::engine::DiscardSink, &CancelToken::new())
    };
    assert!(
        run(&GenerateRequest::greedy(vec![], 4)).is_err(),
        "empty prompt"
    );
    assert!(
        run(&GenerateRequest::greedy(vec![1; 16], 4)).is_err(),
        "prompt too long"
    );
    assert!(
        run(&GenerateRequest::greedy(vec![1, 999], 4)).is_err(),
        "token out of vocab"
    );
    let mut bad = GenerateRequest::greedy(vec![1, 2], 4);
    bad.sampling.temperature = -1.0;
    assert!(run(&bad).is_err(), "negative temperature");
    // The context caps num_predict.
    let out = run(&GenerateRequest::greedy(vec![1; 10], 100)).expect("runs");
    assert_eq!(out.tokens.len(), 6);
    assert_eq!(out.done_reason, DoneReason::Length);
}

#[test]
fn the_response_serialises_with_every_statistic() {
    let t = target(TinyConfig::default());
    let req = request(12);
    let drafter = scripted(&t, &req, 0.5);
    let (out, _) = speculative(&t, &drafter, &req);
    let json = serde_json::to_value(&out).expect("serialises");
    for key in [
        "tokens",
        "done_reason",
        "mode",
        "prompt_eval_count",
        "prompt_eval_duration",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    assert_eq!(json["done_reason"], "length");
    assert_eq!(json["mode"], "greedy-mtp");
    let mtp = &json["mtp"];
    for key in [
        "schedule",
        "drafted",
        "accepted",
        "acceptance",
        "iterations",
        "mean_draft",
        "mean_accepted",
        "per_position",
        "per_position_acceptance",
        "batched_rounds",
        "serial_rounds",
        "mismatches",
        "all_accepted",
        "max_draft",
        "compared",
        "batch_serial_mismatches",
        "target_secs",
        "draft_secs",
        "validate_secs",
    ] {
        assert!(mtp.get(key).is_some(), "missing mtp.{key}");
    }
}

/// A prompt longer than a prefill chunk: 1300 tokens go through the target 512 at a time.
fn long_prompt_request() -> GenerateRequest {
    let prompt: Vec<u32> = (0..1300u32).map(|i| (i * 7 + i / 13) % 32).collect();
    let mut r = GenerateRequest::greedy(prompt, 6);
    r.draft = draft(ScheduleKind::Constant, ValidationMode::Batched, 3);
    r
}

/// The tiny target with a context that holds [`long_prompt_request`].
fn long_context_target() -> mtp_core::testing::TinyTarget<B> {
    target(TinyConfig {
        max_context: 2048,
        ..TinyConfig::default()
    })
}

#[test]
fn a_prompt_longer_than_a_chunk_prefills_in_chunks_as_in_one_forward() {
    use mtp_core::Backend;
    let b = B::default();
    let t = long_context_target();
    let req = long_prompt_request();
    // The oracle: the whole prompt in one forward, the first token its last row's argmax.
    let mut caches = t.new_caches(&b).expect("caches");
    let ids = b
        .from_u32(&req.prompt, &[1, req.prompt.len()])
        .expect("ids");
    let out = t.forward(&b, &ids, 0, &mut caches).expect("forward");
    let last = b
        .slice(&out.hidden, 1, req.prompt.len() - 1, 1)
        .expect("row");
    let logits = t.unembed(&b, &last).expect("logits");
    let first = b
        .to_vec_u32(&b.argmax(&logits, 2).expect("argmax"))
        .expect("read")[0];
    let plain_out = plain(&t, &req);
    assert_eq!(plain_out.tokens[0], first);
    assert_eq!(plain_out.prompt_eval_count, 1300);
    let drafter = scripted(&t, &req, 1.0);
    let (spec, _) = speculative(&t, &drafter, &req);
    assert_eq!(spec.tokens, plain_out.tokens);
}

#[test]
fn cancellation_stops_a_long_prefill_within_one_chunk() {
    let b = B::default();
    let t = long_context_target();
    let req = long_prompt_request();
    let cancel = CancelToken::new();
    cancel.cancel();
    let engine = Engine::new(&b, &t).with_env(no_env());
    let mut caches = t.new_caches(&b).expect("caches");
    let out = engine
        .generate_with_caches(
            &mut caches,
            &req,
            &mut |_id: u32| SinkFlow::Continue,
            &cancel,
        )
        .expect("runs");
    assert_eq!(out.done_reason, DoneReason::Cancelled);
    assert!(out.tokens.is_empty());
    assert_eq!(caches.position(), mtp_core::engine::PREFILL_CHUNK);
    assert!(!caches.is_speculating());
}
