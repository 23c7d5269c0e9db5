//! Sampled MTP with repeat, presence and frequency penalties over a penalty window shorter than
//! the run, through the whole engine: the first three tokens follow the target's distribution
//! (χ² against the exact joint), so the sampler's penalty history holds the *accepted* drafts
//! and never the rejected ones (committing the rejected drafts shifts later rows' penalties and
//! fails this test).

mod common;

use common::*;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::model::TargetModel;
use mtp_core::options::{DecodeMode, ValidationMode};
use mtp_core::sampling::{Sampler, SamplerOptions};
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{TinyConfig, TinyDrafter, TinyDrafterConfig, TinyTarget};
use mtp_core::Backend;

const VOCAB: usize = 5;
const PROMPT: [u32; 3] = [1, 2, 3];

fn request(seed: u64) -> GenerateRequest {
    let mut r = GenerateRequest::greedy(PROMPT.to_vec(), 6);
    r.sampling = SamplerOptions {
        temperature: 1.0,
        repeat_penalty: 1.8,
        presence_penalty: 1.2,
        frequency_penalty: 0.8,
        // Shorter than prompt + run: the window slides inside a round.
        repeat_last_n: 3,
        seed: Some(seed),
        ..SamplerOptions::default()
    };
    r.draft = draft(ScheduleKind::Constant, ValidationMode::Batched, 3);
    r
}

/// The exact joint distribution of the first three tokens: `p(t1) p(t2 | t1) p(t3 | t1 t2)`,
/// each row penalised over the last `repeat_last_n` tokens of prompt and generated text.
fn expected_joint(t: &TinyTarget<B>) -> Vec<f64> {
    let b = B::default();
    let probe = request(0);
    let sampler = Sampler::new(probe.sampling.clone(), &probe.prompt).unwrap();
    let next = |generated: &[u32]| {
        let mut tokens = probe.prompt.clone();
        tokens.extend(generated);
        let mut caches = t.new_caches(&b).unwrap();
        let ids = b.from_u32(&tokens, &[1, tokens.len()]).unwrap();
        let out = t.forward(&b, &ids, 0, &mut caches).unwrap();
        let last = b.slice(&out.hidden, 1, tokens.len() - 1, 1).unwrap();
        let row = b.to_vec_f32(&t.unembed(&b, &last).unwrap()).unwrap();
        sampler.distribution(&row, generated).unwrap()
    };
    let mut joint = vec![0.0; VOCAB.pow(3)];
    let first = next(&[]);
    for a in 0..VOCAB as u32 {
        let second = next(&[a]);
        for c in 0..VOCAB as u32 {
            let third = next(&[a, c]);
            for d in 0..VOCAB as u32 {
                let cell = (a as usize * VOCAB + c as usize) * VOCAB + d as usize;
                joint[cell] = first.prob(a) * second.prob(c) * third.prob(d);
            }
        }
    }
    joint
}

#[test]
fn penalised_sampled_mtp_emits_the_target_distribution() {
    let b = B::default();
    let t = target(TinyConfig {
        vocab: VOCAB,
        gain: 1.2,
        softcap: None,
        ..TinyConfig::default()
    });
    let d = TinyDrafter::new(&b, &t, TinyDrafterConfig::default()).unwrap();
    let engine = Engine::new(&b, &t).with_drafter(&d).with_env(no_env());
    let expected = expected_joint(&t);
    let draws = 6_000;
    let mut counts = vec![0usize; expected.len()];
    let (mut drafted, mut accepted, mut rejections) = (0, 0, 0);
    for seed in 0..draws {
        let out = engine
            .generate(&request(seed), &mut DiscardSink, &CancelToken::new())
            .unwrap();
        assert_eq!(out.mode, DecodeMode::SampledMtp);
        let cell = (out.tokens[0] as usize * VOCAB + out.tokens[1] as usize) * VOCAB
            + out.tokens[2] as usize;
        counts[cell] += 1;
        let stats = out.mtp.unwrap();
        drafted += stats.drafted;
        accepted += stats.accepted;
        rejections += stats.mismatches;
    }
    // Both outcomes are common, so a wrong history would show.
    assert!(accepted * 10 > drafted, "{accepted} of {drafted} accepted");
    assert!(rejections as u64 > draws, "{rejections} rejecting rounds");
    let (chi2, dof, p_value) = common::chi2::chi_square(&counts, &expected, draws as usize);
    assert!(
        p_value > 0.01,
        "χ² = {chi2:.1} on {dof} dof, p = {p_value:.2e} ({accepted} of {drafted} drafts accepted)"
    );
}
