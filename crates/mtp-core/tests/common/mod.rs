//! Helpers shared by the engine tests.
#![allow(dead_code)]

pub mod chi2;

use std::collections::HashMap;
use std::sync::Arc;

use mtp_core::cache::CacheSet;
use mtp_core::engine::{
    CancelToken, DiscardSink, Engine, EnvLookup, EvalOverlap, GenerateRequest, Response,
};
use mtp_core::model::{MtpDrafter, TargetModel};
use mtp_core::options::{DraftOverrides, ValidationMode};
use mtp_core::reference::ReferenceBackend;
use mtp_core::sampling::Sampler;
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{LayerKind, ScriptedDrafter, TinyConfig, TinyTarget};
use mtp_core::Backend;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

pub type B = ReferenceBackend;

/// An environment with no `MTP_*` settings, so tests do not depend on the caller's shell.
pub fn no_env() -> EnvLookup {
    Arc::new(|_| None)
}

/// An environment with the given settings.
pub fn env(pairs: &[(&str, &str)]) -> EnvLookup {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(move |k| map.get(k).cloned())
}

pub fn target(config: TinyConfig) -> TinyTarget<B> {
    TinyTarget::new(&B::default(), config).expect("test model builds")
}

/// Plain greedy decode (no drafter).
pub fn plain(target: &TinyTarget<B>, request: &GenerateRequest) -> Response {
    let b = B::default();
    Engine::new(&b, target)
        .with_env(no_env())
        .generate(request, &mut DiscardSink, &CancelToken::new())
        .expect("plain decode runs")
}

/// Speculative decode with `drafter`, returning the response and the final caches.
pub fn speculative(
    target: &TinyTarget<B>,
    drafter: &dyn MtpDrafter<B>,
    request: &GenerateRequest,
) -> (Response, CacheSet<B>) {
    let b = B::default();
    let engine = Engine::new(&b, target)
        .with_drafter(drafter)
        .with_env(no_env());
    let mut caches = target.new_caches(&b).expect("caches");
    let response = engine
        .generate_with_caches(&mut caches, request, &mut DiscardSink, &CancelToken::new())
        .expect("speculative decode runs");
    (response, caches)
}

/// A drafter that knows the plain continuation of `request`.
pub fn scripted(
    target: &TinyTarget<B>,
    request: &GenerateRequest,
    accuracy: f64,
) -> ScriptedDrafter {
    let reference = plain(target, request);
    let mut sequence = request.prompt.clone();
    sequence.extend(&reference.tokens);
    ScriptedDrafter {
        sequence,
        accuracy,
        right_steps: None,
        seed: 7,
        vocab: target.config().vocab,
        hidden: target.config().hidden,
        confidence: 8.0,
    }
}

/// Draft overrides for a schedule, validation mode and depth.
pub fn draft(schedule: ScheduleKind, validation: ValidationMode, depth: usize) -> DraftOverrides {
    DraftOverrides {
        initial_draft_tokens: Some(depth),
        max_draft_tokens: Some(depth.max(8)),
        schedule: Some(schedule),
        validation: Some(validation),
        enabled: None,
    }
}

/// Two tokens sampled at temperature 1 with repeat and presence penalties after `[1, 2, 3]`,
/// drafting 2 at a time: the probe of the batch χ² tests.
pub fn penalised_probe() -> GenerateRequest {
    GenerateRequest {
        sampling: mtp_core::sampling::SamplerOptions {
            temperature: 1.0,
            repeat_penalty: 1.3,
            presence_penalty: 0.4,
            ..Default::default()
        },
        draft: draft(ScheduleKind::Constant, ValidationMode::Batched, 2),
        ..GenerateRequest::greedy(vec![1, 2, 3], 2)
    }
}

/// The exact joint distribution `p(t1) · p(t2 | t1)` of the first two tokens `probe` samples
/// (its sampler's processing, penalties included), indexed `t1 * vocab + t2`: what the
/// engine χ² tests compare sampled speculation against.
pub fn exact_first_two(t: &TinyTarget<B>, probe: &GenerateRequest) -> Vec<f64> {
    let b = B::default();
    let vocab = t.config().vocab;
    let sampler = Sampler::new(probe.sampling.clone(), &probe.prompt).expect("sampler");
    let next = |tokens: &[u32]| {
        let mut caches = t.new_caches(&b).expect("caches");
        let ids = b.from_u32(tokens, &[1, tokens.len()]).expect("ids");
        let out = t.forward(&b, &ids, 0, &mut caches).expect("forward");
        let last = b.slice(&out.hidden, 1, tokens.len() - 1, 1).expect("slice");
        let row = b
            .to_vec_f32(&t.unembed(&b, &last).expect("unembed"))
            .expect("row");
        sampler
            .distribution(&row, &tokens[probe.prompt.len()..])
            .expect("distribution")
    };
    let first = next(&probe.prompt);
    let mut expected = vec![0.0; vocab * vocab];
    for t1 in 0..vocab as u32 {
        let mut seq = probe.prompt.clone();
        seq.push(t1);
        let second = next(&seq);
        for t2 in 0..vocab as u32 {
            expected[t1 as usize * vocab + t2 as usize] = first.prob(t1) * second.prob(t2);
        }
    }
    expected
}

/// Every combination of the varying schedules, the validation modes and the evaluation
/// overlap that an "equals plain greedy" property test runs a proposer under.
pub fn decode_settings() -> Vec<(ScheduleKind, ValidationMode, EvalOverlap)> {
    let mut settings = Vec::new();
    for schedule in [ScheduleKind::Constant, ScheduleKind::Heuristic] {
        for validation in [
            ValidationMode::Batched,
            ValidationMode::Serial,
            ValidationMode::CompareSerial,
        ] {
            for overlap in [EvalOverlap::Never, EvalOverlap::Always] {
                settings.push((schedule, validation, overlap));
            }
        }
    }
    settings
}

/// What `draws` seeded sampled generations by `engine` give: the counts of their first two
/// tokens (indexed as [`exact_first_two`]), and the accepted and drafted totals. Each run
/// must be sampled MTP.
pub fn first_two_counts(
    engine: &Engine<'_, B>,
    vocab: usize,
    draws: u64,
    request: impl Fn(u64) -> GenerateRequest,
) -> (Vec<usize>, usize, usize) {
    let (mut counts, mut accepted, mut drafted) = (vec![0usize; vocab * vocab], 0, 0);
    for seed in 0..draws {
        let out = engine
            .generate(&request(seed), &mut DiscardSink, &CancelToken::new())
            .expect("sampled decode runs");
        assert_eq!(out.mode, mtp_core::options::DecodeMode::SampledMtp);
        counts[out.tokens[0] as usize * vocab + out.tokens[1] as usize] += 1;
        let stats = out.mtp.expect("speculative statistics");
        accepted += stats.accepted;
        drafted += stats.drafted;
    }
    (counts, accepted, drafted)
}

/// A random tiny target configuration (1-3 layers, full and sliding, random widths).
pub fn random_config(rng: &mut ChaCha8Rng, seed: u64) -> TinyConfig {
    let (heads, kv_heads) = [(2, 1), (4, 2), (2, 2), (4, 1)][rng.random_range(0..4)];
    let layers = (0..rng.random_range(1..4))
        .map(|_| {
            if rng.random_bool(0.5) {
                LayerKind::Full
            } else {
                LayerKind::Sliding {
                    window: rng.random_range(1..7),
                }
            }
        })
        .collect();
    TinyConfig {
        vocab: rng.random_range(6..48),
        hidden: [8, 16][rng.random_range(0..2)],
        heads,
        kv_heads,
        head_dim: [4, 8][rng.random_range(0..2)],
        mlp: 16,
        layers,
        max_context: 64,
        softcap: rng.random_bool(0.5).then_some(rng.random_range(5.0..40.0)),
        gain: rng.random_range(0.5..2.0),
        seed,
        ..TinyConfig::default()
    }
}
