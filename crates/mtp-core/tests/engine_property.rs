//! Property: greedy MTP emits exactly the tokens of plain greedy decode, for random tiny models,
//! prompts, drafters, every schedule and every validation mode, with and without the evaluation
//! overlap — with penalties too (penalised greedy, where top-k / top-p / min-p are neutral) —
//! and the check catches a wrong acceptance rule.

mod common;

use common::*;
use mtp_core::acceptance::{AcceptanceRules, RoundEnd, Verdict};
use mtp_core::engine::{
    CancelToken, DiscardSink, DoneReason, Engine, EvalOverlap, GenerateRequest,
};
use mtp_core::model::{MtpDrafter, TargetModel};
use mtp_core::options::{DecodeMode, ValidationMode};
use mtp_core::sampling::SamplerOptions;
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{TinyDrafter, TinyDrafterConfig, TinyTarget};
use mtp_core::CoreError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const INSTANCES: u64 = 200;

/// One random instance: target, request and drafter.
struct Instance {
    target: TinyTarget<B>,
    request: GenerateRequest,
    drafter: Box<dyn MtpDrafter<B>>,
}

fn instance(seed: u64) -> Instance {
    let b = B::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let config = random_config(&mut rng, seed);
    let vocab = config.vocab as u32;
    let target = target(config);
    let prompt = (0..rng.random_range(1..12))
        .map(|_| rng.random_range(0..vocab))
        .collect();
    let mut request = GenerateRequest::greedy(prompt, rng.random_range(1..24));
    if rng.random_bool(0.3) {
        request.eos = vec![rng.random_range(0..vocab)];
    }
    // A separate stream, so the instances without penalties stay what they were.
    let mut penalties = ChaCha8Rng::seed_from_u64(seed ^ 0x05ee_d0f9_e7a1);
    if penalties.random_bool(0.5) {
        request.sampling = penalised_greedy(&mut penalties);
    }
    let drafter: Box<dyn MtpDrafter<B>> = if rng.random_bool(0.6) {
        let mut d = scripted(&target, &request, rng.random_range(0.0..1.0));
        d.seed = seed;
        Box::new(d)
    } else {
        let layer = rng.random_range(0..target.config().layers.len());
        let config = TinyDrafterConfig {
            source_layer: layer,
            seed: seed + 1,
            ..Default::default()
        };
        Box::new(TinyDrafter::new(&b, &target, config).expect("drafter builds"))
    };
    Instance {
        target,
        request,
        drafter,
    }
}

/// Greedy sampling options with random penalties (and random top-k / top-p / min-p, which
/// cannot change a greedy choice).
fn penalised_greedy(rng: &mut ChaCha8Rng) -> SamplerOptions {
    // `value` with probability `p`, else 0 (off).
    let mut pick = |p: f64, value: f32| if rng.random_bool(p) { value } else { 0.0 };
    let presence_penalty = pick(0.4, 1.5);
    let frequency_penalty = pick(0.4, 0.5);
    let min_p = pick(0.5, 0.3);
    SamplerOptions {
        temperature: 0.0,
        repeat_penalty: [1.0, 1.3, 2.0, 0.7][rng.random_range(0..4)],
        presence_penalty,
        frequency_penalty,
        repeat_last_n: rng.random_range(1..16),
        top_k: rng.random_range(0..4),
        // A sixth of the instances with top-p off (1), as the range past 1 gave before top-p
        // was bounded to [0, 1].
        top_p: rng.random_range(0.0..1.2f32).min(1.0),
        min_p,
        seed: None,
    }
}

/// The first (schedule, validation) for which speculative output differs from plain output.
fn first_divergence(inst: &Instance, rules: AcceptanceRules) -> Option<String> {
    let b = B::default();
    let expected = plain(&inst.target, &inst.request);
    // Plain decode run one token ahead (the overlap) is plain decode.
    let ahead = Engine::new(&b, &inst.target)
        .with_env(no_env())
        .with_overlap(EvalOverlap::Always)
        .generate(&inst.request, &mut DiscardSink, &CancelToken::new())
        .expect("pipelined plain decode runs");
    if ahead.tokens != expected.tokens || ahead.done_reason != expected.done_reason {
        return Some(format!(
            "pipelined plain: {:?} ({:?}) vs plain {:?} ({:?})",
            ahead.tokens, ahead.done_reason, expected.tokens, expected.done_reason
        ));
    }
    for schedule in [
        ScheduleKind::Constant,
        ScheduleKind::Heuristic,
        ScheduleKind::Adaptive,
    ] {
        for (validation, overlap) in [
            ValidationMode::Batched,
            ValidationMode::Serial,
            ValidationMode::CompareSerial,
        ]
        .into_iter()
        .flat_map(|v| [(v, EvalOverlap::Never), (v, EvalOverlap::Always)])
        {
            let mut request = inst.request.clone();
            request.draft = draft(schedule, validation, 1 + (request.prompt.len() % 5));
            let engine = Engine::new(&b, &inst.target)
                .with_drafter(inst.drafter.as_ref())
                .with_env(no_env())
                .with_rules(rules)
                .with_overlap(overlap);
            let mut caches = inst.target.new_caches(&b).expect("caches");
            let out = engine
                .generate_with_caches(&mut caches, &request, &mut DiscardSink, &CancelToken::new())
                .expect("speculative decode runs");
            if out.tokens != expected.tokens || out.done_reason != expected.done_reason {
                return Some(format!(
                    "{schedule} / {validation:?} / {overlap:?}: {:?} ({:?}) vs plain {:?} ({:?})",
                    out.tokens, out.done_reason, expected.tokens, expected.done_reason
                ));
            }
            // Every emitted token is cached except the last one (`current`) of a run that did
            // not stop at an EOS (the EOS itself is neither emitted nor cached).
            let cached = request.prompt.len() + out.tokens.len()
                - usize::from(out.done_reason != DoneReason::Stop);
            if caches.position() != cached || caches.is_speculating() {
                return Some(format!(
                    "{schedule} / {validation:?} / {overlap:?}: caches hold {} positions \
                     after {cached} tokens",
                    caches.position()
                ));
            }
            if let Some(stats) = &out.mtp {
                assert_eq!(
                    stats.batch_serial_mismatches, 0,
                    "compare-serial disagreement"
                );
            }
        }
    }
    None
}

#[test]
fn greedy_mtp_equals_plain_greedy_on_random_instances() {
    let mut drafted = 0;
    let mut accepted = 0;
    let (mut penalised, mut changed) = (0, 0);
    for seed in 0..INSTANCES {
        let inst = instance(seed);
        if let Some(diff) = first_divergence(&inst, AcceptanceRules::default()) {
            panic!("instance {seed}: {diff}");
        }
        let (out, _) = speculative(&inst.target, inst.drafter.as_ref(), &inst.request);
        assert_eq!(out.mode, DecodeMode::GreedyMtp, "instance {seed}");
        if let Some(stats) = out.mtp {
            drafted += stats.drafted;
            accepted += stats.accepted;
        }
        if inst.request.sampling.has_penalties() {
            penalised += 1;
            let mut unpenalised = inst.request.clone();
            unpenalised.sampling = SamplerOptions::default();
            changed += usize::from(
                plain(&inst.target, &unpenalised).tokens
                    != plain(&inst.target, &inst.request).tokens,
            );
        }
    }
    // The penalised instances are many, and penalties change their output often enough for
    // the equivalence to mean something.
    assert!(
        penalised > INSTANCES as usize / 4,
        "{penalised} penalised instances"
    );
    assert!(
        changed > penalised / 4,
        "penalties changed {changed} of {penalised} outputs"
    );
    // The instances exercise both acceptance and rejection.
    assert!(
        accepted > drafted / 10 && accepted < drafted,
        "{accepted} of {drafted}"
    );
}

/// Accepts every draft: a wrong rule.
fn accept_everything(drafts: &[u32], target: &[u32], _eos: &[u32]) -> Result<Verdict, CoreError> {
    Ok(Verdict {
        accepted: drafts.len(),
        next: target.last().copied(),
        end: RoundEnd::Continue,
    })
}

#[test]
fn the_equivalence_check_rejects_a_wrong_greedy_rule() {
    let rules = AcceptanceRules {
        greedy: accept_everything,
        ..AcceptanceRules::default()
    };
    let caught = (0..20)
        .filter(|&seed| first_divergence(&instance(seed), rules).is_some())
        .count();
    assert!(
        caught >= 10,
        "a rule that accepts every draft went unnoticed ({caught} of 20)"
    );
}
