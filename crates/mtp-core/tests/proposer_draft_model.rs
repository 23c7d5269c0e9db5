//! A draft model ([`DraftModel`]) through the engine: greedy speculation emits exactly plain
//! greedy's tokens for random target/draft pairs under every validation mode, schedule and
//! cache flavour; a draft model that *is* the target has every draft accepted, greedy and
//! sampled with penalties (so its caches are exactly in sync with the history and its `q` is
//! processed as the target's rows are); and sampled speculation keeps the target's
//! distribution (χ²).

mod common;

use common::*;
use mtp_core::engine::{CancelToken, DiscardSink, DoneReason, Engine, GenerateRequest};
use mtp_core::model::TargetModel;
use mtp_core::options::{DecodeMode, ValidationMode};
use mtp_core::proposer::{
    DraftMode, DraftModel, Proposer, ProposerKind, ProposerRun, RoundContext,
};
use mtp_core::sampling::{Sampler, SamplerOptions};
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{CacheFlavor, LayerKind, TinyConfig, TinyTarget};
use mtp_core::CoreError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const INSTANCES: u64 = 40;

fn random_config(rng: &mut ChaCha8Rng, seed: u64, vocab: usize) -> TinyConfig {
    let window = rng.random_range(1..6);
    TinyConfig {
        vocab,
        layers: vec![LayerKind::Sliding { window }, LayerKind::Full],
        max_context: 96,
        gain: rng.random_range(0.5..2.5),
        seed,
        ..TinyConfig::default()
    }
}

#[test]
fn greedy_with_a_draft_model_equals_plain() {
    let b = B::default();
    let mut accepted = 0;
    for seed in 0..INSTANCES {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let vocab = rng.random_range(6..40);
        let mut config = random_config(&mut rng, seed, vocab);
        if rng.random_bool(0.2) {
            config.caches = CacheFlavor::SerialOnly;
        }
        let t = target(config.clone());
        // A draft model that is the target itself half of the time, else another random model
        // (a smaller one, other windows) with the same vocabulary.
        let same = rng.random_bool(0.5);
        let d = if same {
            target(config.clone())
        } else {
            let mut other = random_config(&mut rng, seed + 1000, vocab);
            other.layers = vec![LayerKind::Sliding {
                window: rng.random_range(1..4),
            }];
            target(other)
        };
        let prompt: Vec<u32> = (0..rng.random_range(1..10))
            .map(|_| rng.random_range(0..vocab as u32))
            .collect();
        let mut request = GenerateRequest::greedy(prompt, 32);
        if rng.random_bool(0.2) {
            request.eos = vec![rng.random_range(0..vocab as u32)];
        }
        let expected = plain(&t, &request);
        let proposer = DraftModel::new(&d, vocab).unwrap();
        for (schedule, validation, overlap) in decode_settings() {
            request.draft = draft(schedule, validation, rng.random_range(1..7));
            let out = Engine::new(&b, &t)
                .with_proposer(&proposer)
                .with_env(no_env())
                .with_overlap(overlap)
                .generate(&request, &mut DiscardSink, &CancelToken::new())
                .unwrap();
            let context =
                format!("seed {seed}, same {same}, {schedule:?}, {validation:?}, {overlap:?}");
            assert_eq!(
                (&out.tokens, out.done_reason),
                (&expected.tokens, expected.done_reason),
                "{context}"
            );
            assert_eq!(out.mode, DecodeMode::GreedyMtp);
            let stats = out.mtp.unwrap();
            assert_eq!(stats.proposer, ProposerKind::Model);
            assert_eq!(stats.batch_serial_mismatches, 0);
            if same && out.done_reason == DoneReason::Length {
                // The target drafting for itself: every draft is its own greedy token
                // (an accepted EOS cuts the drafts after it, hence runs that stop are
                // left out).
                assert_eq!(stats.accepted, stats.drafted, "{context}");
            }
            accepted += stats.accepted;
        }
    }
    assert!(accepted > 3000, "only {accepted} drafts accepted");
}

fn sampled_request(seed: u64, n: usize, penalties: bool) -> GenerateRequest {
    let mut r = GenerateRequest::greedy(vec![1, 2, 1, 2, 1], n);
    r.sampling = SamplerOptions {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        seed: Some(seed),
        ..SamplerOptions::default()
    };
    if penalties {
        r.sampling.repeat_penalty = 1.4;
        r.sampling.presence_penalty = 0.3;
        r.sampling.frequency_penalty = 0.2;
        r.sampling.repeat_last_n = 3;
    }
    r.draft = draft(ScheduleKind::Constant, ValidationMode::Batched, 3);
    r
}

#[test]
fn a_draft_model_equal_to_the_target_has_every_sampled_draft_accepted() {
    let b = B::default();
    let config = TinyConfig {
        vocab: 12,
        gain: 0.8,
        ..TinyConfig::default()
    };
    let t = target(config.clone());
    let d = target(config);
    let proposer = DraftModel::new(&d, 12).unwrap();
    let engine = Engine::new(&b, &t)
        .with_proposer(&proposer)
        .with_env(no_env());
    for seed in 0..20 {
        for penalties in [false, true] {
            let out = engine
                .generate(
                    &sampled_request(seed, 24, penalties),
                    &mut DiscardSink,
                    &CancelToken::new(),
                )
                .unwrap();
            assert_eq!(out.mode, DecodeMode::SampledMtp);
            let stats = out.mtp.unwrap();
            assert!(stats.drafted > 0);
            // q = p at every draft (same logits, same penalty prefix): min(1, p/q) = 1.
            assert_eq!(
                stats.accepted, stats.drafted,
                "seed {seed}, penalties {penalties}"
            );
        }
    }
}

#[test]
fn sampled_with_a_draft_model_keeps_the_target_distribution() {
    let b = B::default();
    let vocab = 5;
    let t = target(TinyConfig {
        vocab,
        gain: 0.7,
        softcap: None,
        ..TinyConfig::default()
    });
    let d = target(TinyConfig {
        vocab,
        gain: 1.3,
        softcap: None,
        seed: 99,
        layers: vec![LayerKind::Full],
        ..TinyConfig::default()
    });
    let proposer = DraftModel::new(&d, vocab).unwrap();
    let engine = Engine::new(&b, &t)
        .with_proposer(&proposer)
        .with_env(no_env());
    for penalties in [false, true] {
        let expected = exact_first_two(&t, &sampled_request(0, 2, penalties));
        let draws = 8_000;
        let (counts, accepted, drafted) = first_two_counts(&engine, vocab, draws, |seed| {
            sampled_request(seed, 4, penalties)
        });
        // A different model: a good share of drafts is accepted, and a good share rejected.
        assert!(
            accepted * 10 > drafted && accepted * 10 < drafted * 9,
            "{accepted} of {drafted} accepted"
        );
        let (_, _, p) = common::chi2::chi_square(&counts, &expected, draws as usize);
        assert!(p > 0.01, "penalties {penalties}: χ² p = {p:.4}");
    }
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused() {
    let d = target(TinyConfig {
        vocab: 10,
        ..TinyConfig::default()
    });
    let err = DraftModel::new(&d, 12).unwrap_err();
    assert!(
        matches!(err, CoreError::InvalidOption { .. }),
        "unexpected error {err}"
    );
    assert!(err.to_string().contains("vocabulary"), "{err}");
}

/// The drafts a fresh draft-model run proposes for `history` (its prompt: all but the last).
fn fresh_drafts(d: &TinyTarget<B>, t: &TinyTarget<B>, history: &[u32], depth: usize) -> Vec<u32> {
    let b = B::default();
    let proposer = DraftModel::new(d, d.config().vocab).unwrap();
    let mut run = proposer.start(&b, &history[..history.len() - 1]).unwrap();
    propose(&mut *run, t, history, depth)
}

fn propose(
    run: &mut dyn ProposerRun<B>,
    t: &TinyTarget<B>,
    history: &[u32],
    depth: usize,
) -> Vec<u32> {
    let b = B::default();
    let caches = t.new_caches(&b).unwrap();
    let mut sampler =
        Sampler::new(GenerateRequest::greedy(vec![0], 1).sampling, &history[..1]).unwrap();
    let mut round = RoundContext {
        backend: &b,
        target: t,
        history,
        current: history[history.len() - 1],
        hidden: None,
        position: history.len() - 1,
        caches: &caches,
        sampler: &mut sampler,
        mode: DraftMode::Greedy,
        overlap: false,
        guide: None,
    };
    let draft = run.propose(&mut round, depth).unwrap().expect("drafts");
    draft.host.expect("host ids")
}

#[test]
fn a_history_rewritten_behind_the_draft_caches_is_followed() {
    let b = B::default();
    // Full caches (cut back) and a short sliding window that has wrapped (rebuilt).
    for layers in [
        vec![LayerKind::Full],
        vec![LayerKind::Sliding { window: 2 }, LayerKind::Full],
    ] {
        let config = TinyConfig {
            vocab: 16,
            layers,
            ..TinyConfig::default()
        };
        let (t, d) = (target(config.clone()), target(config));
        let proposer = DraftModel::new(&d, 16).unwrap();
        let prompt = [1u32, 7, 3, 9, 4, 11];
        let mut run = proposer.start(&b, &prompt).unwrap();
        let mut first = prompt.to_vec();
        first.push(5);
        propose(&mut *run, &t, &first, 3);
        // Another continuation after the same prompt, then one that rewrites the prompt.
        for history in [
            vec![1, 7, 3, 9, 4, 11, 8, 2],
            vec![1, 7, 3, 6, 13],
            vec![1, 7, 3, 6, 13, 0, 12, 2],
        ] {
            assert_eq!(
                propose(&mut *run, &t, &history, 3),
                fresh_drafts(&d, &t, &history, 3),
                "{history:?}"
            );
        }
    }
}
