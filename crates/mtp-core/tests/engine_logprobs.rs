//! Log-probabilities under speculation: read from the target's verification rows, they equal
//! what plain decode reports for every emitted token.
//!
//! * Temperature 0: greedy MTP (scripted drafters accepted always, never, up to a depth, at
//!   random; batched, serial and compare-serial validation, with and without the evaluation
//!   overlap; penalties on and off; EOS among the drafts), prompt lookup, a draft model and
//!   several proposers at once report, token for token, plain decode's log-probabilities
//!   (within 1e-5) and the same top ids; plain decode's equal the teacher-forced
//!   `log_softmax` computed here by hand.
//! * Temperature > 0: each emitted token's reported log-probability is the log of the
//!   probability the sampler's transformed distribution gives it, recomputed independently from
//!   a teacher-forced forward (by hand for temperature + top-k; through the sampler for
//!   penalties + top-p + min-p), and the tokens are drawn from the distribution reported
//!   (E[p(x)] = Σ p²).
//!
//! A row read one position off, a penalty prefix one draft off, or the draft's distribution
//! reported instead of the target's fails these tests.

mod common;

use common::*;
use mtp_core::engine::{
    CancelToken, DiscardSink, Engine, EvalOverlap, GenerateRequest, Response, ScoredSink, SinkFlow,
};
use mtp_core::model::{MtpDrafter, TargetModel};
use mtp_core::options::{DecodeMode, LogprobsRequest, ValidationMode};
use mtp_core::proposer::{DraftModel, NgramOptions, NgramProposer};
use mtp_core::sampling::{Sampler, SamplerOptions, TokenLogprobs};
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{LayerKind, TinyConfig, TinyDrafter, TinyDrafterConfig, TinyTarget};
use mtp_core::{Backend, CoreError};

const TOP: usize = 5;

fn request(n: usize, penalties: bool) -> GenerateRequest {
    let mut r = GenerateRequest::greedy(vec![3, 1, 4, 1, 5, 9, 2, 6], n);
    r.draft = draft(ScheduleKind::Constant, ValidationMode::Batched, 4);
    r.logprobs = LogprobsRequest::Top(TOP);
    if penalties {
        r.sampling = SamplerOptions {
            repeat_penalty: 1.6,
            presence_penalty: 0.4,
            frequency_penalty: 0.3,
            repeat_last_n: 6,
            ..SamplerOptions::default()
        };
    }
    r
}

/// The logits rows that chose `tokens` after `prompt`, from one teacher-forced forward: row `i`
/// is the target's row after `prompt ++ tokens[..i]`.
fn teacher_forced(t: &TinyTarget<B>, prompt: &[u32], tokens: &[u32]) -> Vec<Vec<f32>> {
    let b = B::default();
    let all: Vec<u32> = prompt.iter().chain(tokens).copied().collect();
    let mut caches = t.new_caches(&b).unwrap();
    let ids = b.from_u32(&all, &[1, all.len()]).unwrap();
    let out = t.forward(&b, &ids, 0, &mut caches).unwrap();
    let flat = b.to_vec_f32(&t.unembed(&b, &out.hidden).unwrap()).unwrap();
    let vocab = t.config().vocab;
    (0..tokens.len())
        .map(|i| {
            let at = prompt.len() - 1 + i;
            flat[at * vocab..(at + 1) * vocab].to_vec()
        })
        .collect()
}

/// `ln softmax(row)` in f64, by hand.
fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().map(|&x| f64::from(x)).fold(f64::MIN, f64::max);
    let lse = max
        + row
            .iter()
            .map(|&x| (f64::from(x) - max).exp())
            .sum::<f64>()
            .ln();
    row.iter().map(|&x| f64::from(x) - lse).collect()
}

/// Every token has its entry, and the entries equal `expected`'s: the same ids, log-probabilities
/// within 1e-5, the same alternatives.
fn assert_same_logprobs(out: &Response, expected: &Response, what: &str) {
    assert_eq!(out.tokens, expected.tokens, "{what}: tokens");
    assert_eq!(
        out.logprobs.len(),
        out.tokens.len(),
        "{what}: one entry per token"
    );
    for (i, (a, e)) in out.logprobs.iter().zip(&expected.logprobs).enumerate() {
        assert_eq!(a.id, out.tokens[i], "{what}: entry {i} is its token's");
        assert!(
            (a.logprob - e.logprob).abs() < 1e-5,
            "{what}: token {i}: {} vs plain {}",
            a.logprob,
            e.logprob
        );
        let ids = |l: &TokenLogprobs| l.top.iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(ids(a), ids(e), "{what}: token {i}: top ids");
        for (x, y) in a.top.iter().zip(&e.top) {
            assert!(
                (x.logprob - y.logprob).abs() < 1e-5,
                "{what}: token {i}: top"
            );
        }
    }
}

fn run(
    t: &TinyTarget<B>,
    drafter: &dyn MtpDrafter<B>,
    request: &GenerateRequest,
) -> Result<Response, CoreError> {
    run_with(t, drafter, request, EvalOverlap::Never)
}

/// Speculative decode with `drafter`; `overlap` on drafts each next round before emitting.
fn run_with(
    t: &TinyTarget<B>,
    drafter: &dyn MtpDrafter<B>,
    request: &GenerateRequest,
    overlap: EvalOverlap,
) -> Result<Response, CoreError> {
    let b = B::default();
    Engine::new(&b, t)
        .with_drafter(drafter)
        .with_env(no_env())
        .with_overlap(overlap)
        .generate(request, &mut DiscardSink, &CancelToken::new())
}

#[test]
fn greedy_plain_logprobs_are_the_teacher_forced_log_softmax() {
    let t = target(TinyConfig::default());
    let req = request(24, false);
    let out = plain(&t, &req);
    assert_eq!(out.mode, DecodeMode::Plain);
    assert_eq!(out.logprobs.len(), 24);
    let rows = teacher_forced(&t, &req.prompt, &out.tokens);
    for (i, (lp, row)) in out.logprobs.iter().zip(&rows).enumerate() {
        let expected = log_softmax(row);
        assert!(
            (f64::from(lp.logprob) - expected[lp.id as usize]).abs() < 1e-5,
            "token {i}"
        );
        // Greedy: the emitted token is the best one, and the alternatives rank the row.
        assert_eq!(lp.top[0].id, lp.id, "token {i}");
        assert_eq!(lp.top.len(), TOP);
        let mut order: Vec<u32> = (0..row.len() as u32).collect();
        order.sort_by(|&a, &b| expected[b as usize].total_cmp(&expected[a as usize]));
        let top: Vec<u32> = lp.top.iter().map(|t| t.id).collect();
        assert_eq!(top, order[..TOP].to_vec(), "token {i}");
        for alt in &lp.top {
            assert!((f64::from(alt.logprob) - expected[alt.id as usize]).abs() < 1e-5);
        }
    }
    // The one-token look-ahead of greedy plain decode gives way to reading each row.
    let b = B::default();
    let ahead = Engine::new(&b, &t)
        .with_env(no_env())
        .with_overlap(EvalOverlap::Always)
        .generate(&req, &mut DiscardSink, &CancelToken::new())
        .unwrap();
    assert_same_logprobs(&ahead, &out, "plain with the overlap");
    // Without the request, nothing is computed.
    let mut off = req.clone();
    off.logprobs = LogprobsRequest::None;
    assert!(plain(&t, &off).logprobs.is_empty());
}

#[test]
fn greedy_mtp_reports_plain_decodes_logprobs() {
    let t = target(TinyConfig::default());
    for penalties in [false, true] {
        let req = request(31, penalties);
        let expected = plain(&t, &req);
        assert_eq!(expected.logprobs.len(), 31);
        let cases: [(&str, f64, Option<usize>); 4] = [
            ("accept all", 1.0, None),
            ("reject all", 0.0, None),
            ("two right", 0.0, Some(2)),
            ("random", 0.6, None),
        ];
        let modes = [
            (ValidationMode::Batched, EvalOverlap::Never),
            (ValidationMode::Batched, EvalOverlap::Always),
            (ValidationMode::Serial, EvalOverlap::Never),
            (ValidationMode::CompareSerial, EvalOverlap::Never),
        ];
        for (name, accuracy, right_steps) in cases {
            for (validation, overlap) in modes {
                let mut drafter = scripted(&t, &req, accuracy);
                drafter.right_steps = right_steps;
                let mut r = req.clone();
                r.draft = draft(ScheduleKind::Constant, validation, 4);
                let out = run_with(&t, &drafter, &r, overlap).unwrap();
                let what = format!("{name}, {validation:?}, {overlap:?}, penalties {penalties}");
                assert_eq!(out.mode, DecodeMode::GreedyMtp, "{what}");
                let stats = out.mtp.clone().unwrap();
                if accuracy > 0.0 || right_steps.is_some() {
                    assert!(stats.accepted > 0, "{what}: speculation accepted nothing");
                }
                assert_same_logprobs(&out, &expected, &what);
            }
        }
    }
}

#[test]
fn greedy_mtp_logprobs_stop_at_an_accepted_eos() {
    let t = target(TinyConfig::default());
    for penalties in [false, true] {
        let base = request(40, penalties);
        let reference = plain(&t, &base).tokens;
        // A token first seen on a draft slot (not a round's bonus slot).
        let eos = reference
            .iter()
            .enumerate()
            .find(|(i, id)| i % 5 != 0 && reference.iter().position(|x| x == *id) == Some(*i))
            .map(|(_, &id)| id)
            .expect("a draft-slot token");
        let mut req = base.clone();
        req.eos = vec![eos];
        let drafter = scripted(&t, &base, 1.0);
        let out = run(&t, &drafter, &req).unwrap();
        let expected = plain(&t, &req);
        assert!(expected.tokens.len() < 40);
        assert_same_logprobs(&out, &expected, &format!("EOS, penalties {penalties}"));
    }
}

#[test]
fn prompt_lookup_reports_plain_decodes_logprobs() {
    let b = B::default();
    let t = target(TinyConfig {
        vocab: 12,
        ..TinyConfig::default()
    });
    let ngram = NgramProposer::new(NgramOptions::new(1, 3).unwrap());
    let mut accepted = 0;
    for penalties in [false, true] {
        let mut req = request(40, penalties);
        req.prompt = [4, 7, 2, 9].repeat(4);
        let expected = plain(&t, &req);
        for validation in [ValidationMode::Batched, ValidationMode::Serial] {
            req.draft = draft(ScheduleKind::Constant, validation, 5);
            let out = Engine::new(&b, &t)
                .with_proposer(&ngram)
                .with_env(no_env())
                .generate(&req, &mut DiscardSink, &CancelToken::new())
                .unwrap();
            assert_eq!(out.mode, DecodeMode::GreedyMtp);
            accepted += out.mtp.clone().unwrap().accepted;
            let what = format!("lookup, {validation:?}, penalties {penalties}");
            assert_same_logprobs(&out, &expected, &what);
        }
    }
    assert!(accepted > 10, "lookup accepted only {accepted} drafts");
}

/// A draft model (greedy and sampled rows alike come from the target's verification forward)
/// and several proposers at once (a draft model, prompt lookup and a scripted MTP head, one
/// chosen per round) report plain decode's values too.
#[test]
fn a_draft_model_and_several_proposers_report_plain_decodes_logprobs() {
    let b = B::default();
    let config = TinyConfig {
        vocab: 12,
        ..TinyConfig::default()
    };
    let t = target(config.clone());
    let small = target(TinyConfig {
        seed: 5,
        layers: vec![LayerKind::Full],
        ..config
    });
    let model = DraftModel::new(&small, 12).unwrap();
    let ngram = NgramProposer::new(NgramOptions::new(1, 3).unwrap());
    let mut accepted = 0;
    for penalties in [false, true] {
        let mut req = request(36, penalties);
        req.prompt = [4, 7, 2, 9, 4, 7].to_vec();
        let expected = plain(&t, &req);
        let head = scripted(&t, &req, 0.7);
        let alone = Engine::new(&b, &t)
            .with_proposer(&model)
            .with_env(no_env())
            .generate(&req, &mut DiscardSink, &CancelToken::new())
            .unwrap();
        let several = Engine::new(&b, &t)
            .with_proposer(&model)
            .also_proposer(&ngram)
            .also_drafter(&head)
            .with_env(no_env())
            .generate(&req, &mut DiscardSink, &CancelToken::new())
            .unwrap();
        for (what, out) in [("draft model", alone), ("several", several)] {
            assert_eq!(out.mode, DecodeMode::GreedyMtp, "{what}");
            accepted += out.mtp.clone().unwrap().accepted;
            assert_same_logprobs(&out, &expected, &format!("{what}, penalties {penalties}"));
        }
    }
    assert!(accepted > 10, "only {accepted} drafts accepted");
}

#[test]
fn the_sink_receives_each_tokens_logprobs_as_it_is_emitted() {
    let b = B::default();
    let t = target(TinyConfig::default());
    let req = request(20, true);
    let drafter = scripted(&t, &req, 0.7);
    let mut seen: Vec<(u32, Option<TokenLogprobs>)> = Vec::new();
    let mut sink = ScoredSink(|id: u32, lp: Option<&TokenLogprobs>| {
        seen.push((id, lp.cloned()));
        SinkFlow::Continue
    });
    let out = Engine::new(&b, &t)
        .with_drafter(&drafter)
        .with_env(no_env())
        .generate(&req, &mut sink, &CancelToken::new())
        .unwrap();
    let (ids, lps): (Vec<u32>, Vec<Option<TokenLogprobs>>) = seen.into_iter().unzip();
    assert_eq!(ids, out.tokens);
    let lps: Vec<TokenLogprobs> = lps.into_iter().map(|l| l.expect("scored")).collect();
    assert_eq!(lps, out.logprobs);
    // Bounded like OpenAI's top_logprobs.
    let mut too_many = req.clone();
    too_many.logprobs = LogprobsRequest::Top(21);
    assert!(matches!(
        run(&t, &drafter, &too_many),
        Err(CoreError::InvalidOption { .. })
    ));
}

/// The sampled requests: a tiny vocabulary so that every token's probability is reported
/// (`top` ≥ vocab) and rejections are common.
fn sampled(sampling: SamplerOptions, seed: u64) -> GenerateRequest {
    let mut r = GenerateRequest::greedy(vec![1, 2, 3], 8);
    r.sampling = SamplerOptions {
        seed: Some(seed),
        ..sampling
    };
    r.draft = draft(ScheduleKind::Constant, ValidationMode::Batched, 3);
    r.logprobs = LogprobsRequest::Top(20);
    r
}

const VOCAB: usize = 8;

fn sampled_pair() -> (TinyTarget<B>, TinyDrafter<B>) {
    let b = B::default();
    let t = target(TinyConfig {
        vocab: VOCAB,
        gain: 0.9,
        softcap: None,
        ..TinyConfig::default()
    });
    let d = TinyDrafter::new(&b, &t, TinyDrafterConfig::default()).unwrap();
    (t, d)
}

/// Temperature and top-k, by hand: ln p(x) = l_x / T − logsumexp over the k best of l / T.
#[test]
fn sampled_mtp_logprobs_are_the_tempered_top_k_distribution() {
    let (t, d) = sampled_pair();
    let (temperature, top_k) = (0.7f64, 4usize);
    let sampling = SamplerOptions {
        temperature: temperature as f32,
        top_k,
        top_p: 1.0,
        ..SamplerOptions::default()
    };
    let (mut accepted, mut rejections) = (0, 0);
    for seed in 0..60 {
        let req = sampled(sampling.clone(), seed);
        let out = run(&t, &d, &req).unwrap();
        assert_eq!(out.mode, DecodeMode::SampledMtp);
        let stats = out.mtp.clone().unwrap();
        accepted += stats.accepted;
        rejections += stats.mismatches;
        assert_eq!(out.logprobs.len(), out.tokens.len());
        let rows = teacher_forced(&t, &req.prompt, &out.tokens);
        for (i, (lp, row)) in out.logprobs.iter().zip(&rows).enumerate() {
            assert_eq!(lp.id, out.tokens[i]);
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            let kept = &order[..top_k];
            let scaled = |i: usize| f64::from(row[i]) / temperature;
            let max = kept.iter().map(|&i| scaled(i)).fold(f64::MIN, f64::max);
            let lse = max
                + kept
                    .iter()
                    .map(|&i| (scaled(i) - max).exp())
                    .sum::<f64>()
                    .ln();
            assert!(kept.contains(&(lp.id as usize)), "seed {seed} token {i}");
            let want = scaled(lp.id as usize) - lse;
            assert!(
                (f64::from(lp.logprob) - want).abs() < 1e-5,
                "seed {seed} token {i}: {} vs {want}",
                lp.logprob
            );
            // The alternatives are exactly the kept tokens, best first.
            let top: Vec<usize> = lp.top.iter().map(|t| t.id as usize).collect();
            assert_eq!(top, kept.to_vec(), "seed {seed} token {i}");
            for alt in &lp.top {
                let want = scaled(alt.id as usize) - lse;
                assert!((f64::from(alt.logprob) - want).abs() < 1e-5);
            }
        }
    }
    assert!(
        accepted > 20 && rejections > 20,
        "{accepted} accepted, {rejections} rejections"
    );
}

/// Penalties, top-p and min-p through the sampler on teacher-forced rows (each row's penalty
/// context: the prompt and the tokens before it), and the draws follow the reported
/// distribution: over all tokens, the mean of p(x) − Σ_y p(y)² is 0 within four standard
/// errors.
#[test]
fn sampled_mtp_logprobs_are_the_penalised_nucleus_distribution_and_draws_follow_it() {
    let (t, d) = sampled_pair();
    let sampling = SamplerOptions {
        temperature: 1.1,
        top_p: 0.92,
        min_p: 0.02,
        repeat_penalty: 1.4,
        presence_penalty: 0.3,
        frequency_penalty: 0.2,
        repeat_last_n: 4,
        ..SamplerOptions::default()
    };
    let (mut sum, mut sum_sq, mut n) = (0.0f64, 0.0f64, 0usize);
    let mut accepted = 0;
    for seed in 0..250 {
        let req = sampled(sampling.clone(), seed);
        let out = run(&t, &d, &req).unwrap();
        accepted += out.mtp.clone().unwrap().accepted;
        assert_eq!(out.logprobs.len(), out.tokens.len());
        let sampler = Sampler::new(req.sampling.clone(), &req.prompt).unwrap();
        let rows = teacher_forced(&t, &req.prompt, &out.tokens);
        for (i, (lp, row)) in out.logprobs.iter().zip(&rows).enumerate() {
            let dist = sampler.distribution(row, &out.tokens[..i]).unwrap();
            let p = dist.prob(lp.id);
            assert!(
                p > 0.0,
                "seed {seed} token {i}: drew a token of probability 0"
            );
            assert!(
                (f64::from(lp.logprob) - p.ln()).abs() < 1e-5,
                "seed {seed} token {i}: {} vs {}",
                lp.logprob,
                p.ln()
            );
            let support: Vec<(u32, f64)> = dist.support().collect();
            assert_eq!(lp.top.len(), support.len(), "seed {seed} token {i}");
            for alt in &lp.top {
                assert!((f64::from(alt.logprob) - dist.prob(alt.id).ln()).abs() < 1e-5);
            }
            // The reported mass is the whole distribution.
            let mass: f64 = lp.top.iter().map(|a| f64::from(a.logprob).exp()).sum();
            assert!((mass - 1.0).abs() < 1e-5);
            let reported_p = f64::from(lp.logprob).exp();
            let collision: f64 = lp
                .top
                .iter()
                .map(|a| f64::from(a.logprob).exp().powi(2))
                .sum();
            let x = reported_p - collision;
            sum += x;
            sum_sq += x * x;
            n += 1;
        }
    }
    assert!(accepted > 100, "{accepted} drafts accepted");
    let mean = sum / n as f64;
    let se = ((sum_sq / n as f64 - mean * mean) / n as f64).sqrt();
    assert!(
        mean.abs() < 4.0 * se,
        "E[p(x)] − Σp² = {mean:.4} over {n} tokens (standard error {se:.4})"
    );
}
