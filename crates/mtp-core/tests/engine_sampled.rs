//! Sampled MTP through the whole engine: seeded runs repeat, and the emitted tokens follow the
//! target's distribution (the large χ² suites of the acceptance math live in the sampling tests;
//! this one checks the engine's plumbing end to end).

mod common;

use common::*;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::options::{DecodeMode, ValidationMode};
use mtp_core::sampling::SamplerOptions;
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{TinyConfig, TinyDrafter, TinyDrafterConfig};

fn plain_sampling() -> SamplerOptions {
    SamplerOptions {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        ..SamplerOptions::default()
    }
}

fn sampled_request(seed: u64, n: usize) -> GenerateRequest {
    sampled_request_with(plain_sampling(), seed, n)
}

fn sampled_request_with(sampling: SamplerOptions, seed: u64, n: usize) -> GenerateRequest {
    let mut r = GenerateRequest::greedy(vec![1, 2, 3], n);
    r.sampling = SamplerOptions {
        seed: Some(seed),
        ..sampling
    };
    r.draft = draft(ScheduleKind::Constant, ValidationMode::Batched, 3);
    r
}

#[test]
fn seeded_sampled_runs_repeat_exactly() {
    let b = B::default();
    let t = target(TinyConfig::default());
    let d = TinyDrafter::new(&b, &t, TinyDrafterConfig::default()).unwrap();
    let engine = Engine::new(&b, &t).with_drafter(&d).with_env(no_env());
    let run = |seed| {
        engine
            .generate(
                &sampled_request(seed, 30),
                &mut DiscardSink,
                &CancelToken::new(),
            )
            .unwrap()
    };
    let (a, again, other) = (run(5), run(5), run(6));
    assert_eq!(a.mode, DecodeMode::SampledMtp);
    assert_eq!(a.tokens, again.tokens);
    let (sa, sb) = (a.mtp.clone().unwrap(), again.mtp.clone().unwrap());
    assert_eq!((sa.drafted, sa.accepted), (sb.drafted, sb.accepted));
    assert_ne!(a.tokens, other.tokens);
    assert_eq!(a.tokens.len(), 30);
}

#[test]
fn sampled_mtp_emits_the_target_distribution() {
    emits_the_target_distribution(plain_sampling(), 20_000);
}

/// Top-k with penalties that only lower logits: the engine reads each row's
/// `top_k + repeat_last_n` best logits after a device-side top-k (`top_candidates`, 5 of 6
/// here) instead of the whole row; the emitted tokens must still follow the target.
#[test]
fn sampled_mtp_with_device_top_k_and_penalties_emits_the_target_distribution() {
    let sampling = SamplerOptions {
        top_k: 2,
        repeat_penalty: 1.5,
        presence_penalty: 0.3,
        repeat_last_n: 3,
        ..plain_sampling()
    };
    assert_eq!(sampling.top_candidates(6), Some(5));
    emits_the_target_distribution(sampling, 10_000);
}

/// Top-p and min-p with top-k off over a vocabulary larger than
/// [`SamplerOptions::NUCLEUS_CANDIDATES`]: the engine reads each row's largest logits and the
/// device's sum of its softmax weight (`nucleus_candidates`), falling back to the whole row
/// when those do not settle it; the emitted tokens must still follow the target.
#[test]
fn sampled_mtp_with_device_top_p_emits_the_target_distribution() {
    let vocab = 300;
    let sampling = SamplerOptions {
        top_p: 0.6,
        min_p: 0.02,
        ..plain_sampling()
    };
    assert_eq!(
        sampling.nucleus_candidates(vocab),
        Some(SamplerOptions::NUCLEUS_CANDIDATES)
    );
    emits_the_target_distribution_over(sampling, 10_000, vocab, 2.5);
}

fn emits_the_target_distribution(sampling: SamplerOptions, draws: u64) {
    emits_the_target_distribution_over(sampling, draws, 6, 0.7);
}

fn emits_the_target_distribution_over(
    sampling: SamplerOptions,
    draws: u64,
    vocab: usize,
    gain: f32,
) {
    let b = B::default();
    let config = TinyConfig {
        vocab,
        gain,
        softcap: None,
        ..TinyConfig::default()
    };
    let t = target(config);
    let d = TinyDrafter::new(&b, &t, TinyDrafterConfig::default()).unwrap();
    let engine = Engine::new(&b, &t).with_drafter(&d).with_env(no_env());

    // Expected joint distribution of the first two tokens: p(t1) p(t2 | t1).
    let probe = sampled_request_with(sampling.clone(), 0, 2);
    let expected = exact_first_two(&t, &probe);

    let mut counts = vec![0usize; vocab * vocab];
    let mut accepted = 0;
    for seed in 0..draws {
        let out = engine
            .generate(
                &sampled_request_with(sampling.clone(), seed, 5),
                &mut DiscardSink,
                &CancelToken::new(),
            )
            .unwrap();
        counts[out.tokens[0] as usize * vocab + out.tokens[1] as usize] += 1;
        accepted += out.mtp.map_or(0, |s| s.accepted);
    }
    assert!(accepted > 0, "the drafter never got a token accepted");
    for (cell, (&n, &p)) in counts.iter().zip(&expected).enumerate() {
        assert!(
            p > 0.0 || n == 0,
            "pair {cell} has probability 0 but was drawn {n} times"
        );
    }
    let (chi2, dof, p_value) = common::chi2::chi_square(&counts, &expected, draws as usize);
    eprintln!("χ² = {chi2:.1} on {dof} dof, p = {p_value:.4}, {accepted} accepted");
    assert!(
        p_value > 0.01,
        "χ² = {chi2:.1} on {dof} dof, p = {p_value:.4}"
    );
}
