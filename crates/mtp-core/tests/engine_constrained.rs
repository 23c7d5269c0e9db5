//! Constrained decoding through the engine: greedy constrained speculation emits exactly the
//! tokens of greedy constrained plain decode (random tiny models, random token grammars, every
//! proposer, schedule and validation mode, penalties), every output follows its grammar, forced
//! tokens are drafted and counted, and sampled constrained speculation keeps the masked target
//! distribution (χ²).

mod common;

use common::*;
use mtp_core::constraint::{Constraint, ConstraintFactory, ConstraintSource};
use mtp_core::engine::{CancelToken, DiscardSink, DoneReason, Engine, GenerateRequest, Response};
use mtp_core::model::TargetModel;
use mtp_core::options::{DecodeMode, ValidationMode};
use mtp_core::proposer::{DraftModel, NgramOptions, NgramProposer};
use mtp_core::sampling::{Sampler, SamplerOptions};
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{TinyConfig, TinyDrafter, TinyDrafterConfig, TinyTarget, TokenGrammar};
use mtp_core::Backend;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const INSTANCES: u64 = 60;

/// One random instance: a target, a grammar and a constrained greedy request.
fn instance(seed: u64) -> (TinyTarget<B>, TokenGrammar, GenerateRequest) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut config = random_config(&mut rng, seed);
    config.vocab = config.vocab.max(8);
    let vocab = config.vocab as u32;
    let t = target(config);
    let eos = rng.random_bool(0.5).then(|| rng.random_range(0..vocab));
    let grammar = TokenGrammar::random(seed, vocab, rng.random_range(2..9), eos);
    let prompt = (0..rng.random_range(1..10))
        .map(|_| rng.random_range(0..vocab))
        .collect();
    let mut request = GenerateRequest::greedy(prompt, rng.random_range(1..28));
    request.eos = eos.into_iter().collect();
    if rng.random_bool(0.4) {
        request.sampling = SamplerOptions {
            temperature: 0.0,
            repeat_penalty: 1.3,
            presence_penalty: 0.5,
            ..Default::default()
        };
    }
    request.constraint = Some(ConstraintSource::new(grammar.clone()));
    (t, grammar, request)
}

fn run(engine: &Engine<'_, B>, request: &GenerateRequest) -> Response {
    engine
        .generate(request, &mut DiscardSink, &CancelToken::new())
        .expect("constrained decode runs")
}

/// The output follows the grammar; a run that stopped ended a complete text.
fn check_grammar(grammar: &TokenGrammar, request: &GenerateRequest, out: &Response) {
    let mut path = out.tokens.clone();
    if out.done_reason == DoneReason::Stop {
        path.extend(request.eos.first());
    }
    let verdict = grammar.accepts(&path);
    assert!(
        verdict.is_some(),
        "{:?} is not a path of the grammar",
        out.tokens
    );
    if out.done_reason == DoneReason::Stop {
        assert_eq!(verdict, Some(true), "stopped before the text was complete");
        assert_eq!(out.constraint_complete, Some(true));
    }
}

#[test]
fn greedy_constrained_speculation_equals_constrained_plain() {
    let b = B::default();
    let mut forced = 0;
    let mut cut = 0;
    for seed in 0..INSTANCES {
        let (t, grammar, request) = instance(seed);
        let plain = plain(&t, &request);
        check_grammar(&grammar, &request, &plain);
        assert_eq!(plain.mode, DecodeMode::Plain);

        let drafter = TinyDrafter::new(
            &b,
            &t,
            TinyDrafterConfig {
                seed: seed + 3,
                source_layer: t.config().layers.len() - 1,
                ..Default::default()
            },
        )
        .expect("drafter builds");
        let scripted = scripted(
            &t,
            &GenerateRequest {
                constraint: None,
                ..request.clone()
            },
            0.7,
        );
        let ngram = NgramProposer::new(NgramOptions::new(1, 3).expect("n-gram sizes"));
        let small = TinyTarget::new(
            &b,
            TinyConfig {
                seed: seed + 11,
                ..t.config().clone()
            },
        )
        .expect("draft model builds");
        let model = DraftModel::new(&small, t.config().vocab).expect("draft model");
        for (schedule, validation, overlap) in decode_settings() {
            let mut req = request.clone();
            req.draft = draft(schedule, validation, 1 + (seed as usize % 4));
            let engines = [
                Engine::new(&b, &t).with_drafter(&drafter),
                Engine::new(&b, &t).with_drafter(&scripted),
                Engine::new(&b, &t).with_proposer(&ngram),
                Engine::new(&b, &t).with_proposer(&model),
                Engine::new(&b, &t)
                    .with_drafter(&drafter)
                    .also_proposer(&ngram),
            ];
            for engine in engines {
                let engine = engine.with_env(no_env()).with_overlap(overlap);
                let out = run(&engine, &req);
                assert_eq!(
                    out.tokens, plain.tokens,
                    "seed {seed}, {schedule:?}, {validation:?}, {overlap:?}: {engine:?}"
                );
                assert_eq!(out.done_reason, plain.done_reason, "seed {seed}");
                assert_eq!(out.constraint_complete, plain.constraint_complete);
                let stats = out.mtp.expect("speculative statistics");
                assert!(stats.forced_accepted <= stats.forced);
                assert!(stats.forced <= stats.drafted);
                forced += stats.forced;
                cut += stats.cut;
                if validation == ValidationMode::CompareSerial {
                    assert_eq!(stats.batch_serial_mismatches, 0, "seed {seed}");
                }
            }
        }
    }
    assert!(forced > 0, "no forced token was ever drafted");
    assert!(cut > 0, "no draft was ever cut by a mask");
}

#[test]
fn forced_tokens_are_drafted_without_a_proposer_and_accepted() {
    // 0 --{0,1}--> 1 --forced 2 3 4 5--> 0; no token is ever free after a choice but the next
    // choice, so half the text is forced.
    let grammar = TokenGrammar::new(
        vec![
            vec![(0, 1), (1, 1)],
            vec![(2, 2)],
            vec![(3, 3)],
            vec![(4, 4)],
            vec![(5, 0)],
        ],
        vec![false; 5],
        None,
    )
    .expect("grammar");
    let b = B::default();
    let t = target(TinyConfig {
        vocab: 8,
        ..TinyConfig::default()
    });
    let ngram = NgramProposer::new(NgramOptions::new(1, 3).expect("n-gram sizes"));
    let mut request = GenerateRequest::greedy(vec![1, 2], 30);
    request.constraint = Some(ConstraintSource::new(grammar.clone()));
    request.draft = draft(ScheduleKind::Constant, ValidationMode::Batched, 2);
    let plain = plain(&t, &request);
    check_grammar(&grammar, &request, &plain);
    let out = run(
        &Engine::new(&b, &t).with_proposer(&ngram).with_env(no_env()),
        &request,
    );
    assert_eq!(out.tokens, plain.tokens);
    let stats = out.mtp.expect("speculative statistics");
    // Every run of four forced tokens after a prefill or a choice is drafted at once.
    assert!(stats.forced >= 20, "{stats:?}");
    assert_eq!(
        stats.forced_accepted, stats.forced,
        "forced drafts are always accepted"
    );
    // Forced rounds do not count towards the proposer's rounds.
    let proposer_rounds: usize = stats.per_proposer.iter().map(|p| p.rounds).sum();
    assert!(proposer_rounds < stats.iterations);
}

#[test]
fn an_open_grammar_at_the_budget_ends_with_length_and_says_so() {
    let grammar = TokenGrammar::new(vec![vec![(1, 1)], vec![(2, 0)]], vec![false, false], None)
        .expect("grammar");
    let t = target(TinyConfig::default());
    let mut request = GenerateRequest::greedy(vec![3], 5);
    request.constraint = Some(ConstraintSource::new(grammar));
    let out = plain(&t, &request);
    assert_eq!(out.tokens, vec![1, 2, 1, 2, 1]);
    assert_eq!(out.done_reason, DoneReason::Length);
    assert_eq!(out.constraint_complete, Some(false));
}

#[test]
fn a_complete_grammar_without_eos_ends_the_generation() {
    // 7 then 9, and nothing after: the text is complete, the generation stops.
    let grammar = TokenGrammar::new(
        vec![vec![(7, 1)], vec![(9, 2)], vec![]],
        vec![false, false, true],
        None,
    )
    .expect("grammar");
    let b = B::default();
    let t = target(TinyConfig::default());
    let drafter = TinyDrafter::new(&b, &t, TinyDrafterConfig::default()).expect("drafter");
    let mut request = GenerateRequest::greedy(vec![3], 20);
    request.constraint = Some(ConstraintSource::new(grammar));
    for engine in [
        Engine::new(&b, &t),
        Engine::new(&b, &t).with_drafter(&drafter),
    ] {
        let out = run(&engine.with_env(no_env()), &request);
        assert_eq!(out.tokens, vec![7, 9]);
        assert_eq!(out.done_reason, DoneReason::Stop);
        assert_eq!(out.constraint_complete, Some(true));
    }
}

/// A factory whose grammar dead-ends: a state with no transition that does not accept.
#[derive(Debug)]
struct DeadEnd;

struct DeadEndRun(usize);

impl Constraint for DeadEndRun {
    fn mask(&mut self) -> Result<mtp_core::constraint::TokenMask, mtp_core::CoreError> {
        Ok(mtp_core::constraint::TokenMask::of(
            32,
            if self.0 == 0 { &[4] } else { &[] },
        ))
    }
    fn advance(&mut self, ids: &[u32]) -> Result<(), mtp_core::CoreError> {
        self.0 += ids.len();
        Ok(())
    }
    fn rollback(&mut self, n: usize) -> Result<(), mtp_core::CoreError> {
        self.0 -= n;
        Ok(())
    }
    fn forced(&mut self) -> Result<Vec<u32>, mtp_core::CoreError> {
        Ok(Vec::new())
    }
    fn is_complete(&mut self) -> bool {
        false
    }
}

impl ConstraintFactory for DeadEnd {
    fn start(&self, _vocab: usize) -> Result<Box<dyn Constraint>, mtp_core::CoreError> {
        Ok(Box::new(DeadEndRun(0)))
    }
}

#[test]
fn a_grammar_that_dead_ends_is_an_error_not_a_panic() {
    let t = target(TinyConfig::default());
    let b = B::default();
    let mut request = GenerateRequest::greedy(vec![3], 5);
    request.constraint = Some(ConstraintSource::new(DeadEnd));
    let err = Engine::new(&b, &t)
        .with_env(no_env())
        .generate(&request, &mut DiscardSink, &CancelToken::new())
        .expect_err("a dead end is an error");
    assert!(err.to_string().contains("allows no token"), "{err}");
}

/// The exact distribution of the first `n` tokens of constrained sampling: the product of
/// each step's distribution over the target's logits with the grammar's disallowed tokens at
/// −∞, as a map from token sequences to probabilities.
fn exact_sequences(
    t: &TinyTarget<B>,
    grammar: &TokenGrammar,
    probe: &GenerateRequest,
    n: usize,
) -> Vec<(Vec<u32>, f64)> {
    let b = B::default();
    let vocab = t.config().vocab;
    let sampler = Sampler::new(probe.sampling.clone(), &probe.prompt).expect("sampler");
    let mut frontier = vec![(Vec::new(), 1.0)];
    for _ in 0..n {
        let mut next = Vec::new();
        for (seq, p) in frontier {
            let mut tokens = probe.prompt.clone();
            tokens.extend(&seq);
            let mut caches = t.new_caches(&b).expect("caches");
            let ids = b.from_u32(&tokens, &[1, tokens.len()]).expect("ids");
            let out = t.forward(&b, &ids, 0, &mut caches).expect("forward");
            let last = b.slice(&out.hidden, 1, tokens.len() - 1, 1).expect("slice");
            let mut row = b
                .to_vec_f32(&t.unembed(&b, &last).expect("unembed"))
                .expect("row");
            let mut run = grammar.start(vocab).expect("grammar run");
            run.advance(&seq).expect("a path of the grammar");
            let mask = run.mask().expect("mask");
            for (id, logit) in row.iter_mut().enumerate() {
                if !mask.allows(id as u32) {
                    *logit = f32::NEG_INFINITY;
                }
            }
            let dist = sampler.distribution(&row, &seq).expect("distribution");
            for (id, q) in dist.support() {
                let mut longer = seq.clone();
                longer.push(id);
                next.push((longer, p * q));
            }
        }
        frontier = next;
    }
    frontier
}

#[test]
fn sampled_constrained_speculation_keeps_the_masked_distribution() {
    // A choice of three, then (after 0 or 1) a forced 3, or (after 2) a choice of three again:
    // the first three tokens cover choices, a forced draft and masked bonus rows.
    let grammar = TokenGrammar::new(
        vec![
            vec![(0, 1), (1, 1), (2, 2)],
            vec![(3, 0)],
            vec![(4, 0), (5, 0), (0, 0)],
        ],
        vec![false; 3],
        None,
    )
    .expect("grammar");
    let b = B::default();
    let t = target(TinyConfig {
        vocab: 6,
        gain: 0.7,
        softcap: None,
        ..TinyConfig::default()
    });
    let d = TinyDrafter::new(&b, &t, TinyDrafterConfig::default()).expect("drafter");
    let ngram = NgramProposer::new(NgramOptions::new(1, 2).expect("n-gram sizes"));
    let sampling = SamplerOptions {
        temperature: 0.9,
        repeat_penalty: 1.2,
        ..Default::default()
    };
    let source = ConstraintSource::new(grammar.clone());
    let request = |seed: u64| GenerateRequest {
        sampling: SamplerOptions {
            seed: Some(seed),
            ..sampling.clone()
        },
        constraint: Some(source.clone()),
        draft: draft(ScheduleKind::Constant, ValidationMode::Batched, 3),
        ..GenerateRequest::greedy(vec![1, 4, 2], 6)
    };
    let expected = exact_sequences(&t, &grammar, &request(0), 3);
    let draws = 6_000u64;
    for engine in [
        Engine::new(&b, &t).with_drafter(&d),
        Engine::new(&b, &t).with_proposer(&ngram),
    ] {
        let engine = engine.with_env(no_env());
        let mut counts = vec![0usize; expected.len()];
        let (mut forced, mut accepted) = (0, 0);
        for seed in 0..draws {
            let out = run(&engine, &request(seed));
            assert_eq!(out.mode, DecodeMode::SampledMtp);
            assert!(grammar.accepts(&out.tokens).is_some(), "{:?}", out.tokens);
            let cell = expected
                .iter()
                .position(|(seq, _)| seq[..] == out.tokens[..3])
                .expect("a sequence of positive probability");
            counts[cell] += 1;
            let stats = out.mtp.expect("statistics");
            forced += stats.forced;
            accepted += stats.accepted - stats.forced_accepted;
        }
        assert!(forced > 0, "no forced draft");
        assert!(accepted > 0, "no proposer draft accepted");
        let probs: Vec<f64> = expected.iter().map(|(_, p)| *p).collect();
        let (chi2, dof, p_value) = chi2::chi_square(&counts, &probs, draws as usize);
        eprintln!("χ² = {chi2:.1} on {dof} dof, p = {p_value:.4}");
        assert!(
            p_value > 0.01,
            "χ² = {chi2:.1} on {dof} dof, p = {p_value:.4}"
        );
    }
}

#[test]
fn completeness_is_that_of_the_emitted_tokens_when_a_sink_stops_mid_round() {
    // 5 6 7 forced, then nothing: complete after 7.
    let grammar = TokenGrammar::new(
        vec![vec![(5, 1)], vec![(6, 2)], vec![(7, 3)], vec![]],
        vec![false, false, false, true],
        None,
    )
    .expect("grammar");
    let b = B::default();
    let t = target(TinyConfig::default());
    let ngram = NgramProposer::new(NgramOptions::new(1, 3).expect("n-gram sizes"));
    let mut request = GenerateRequest::greedy(vec![3], 20);
    request.constraint = Some(ConstraintSource::new(grammar));
    for engine in [
        Engine::new(&b, &t),
        Engine::new(&b, &t).with_proposer(&ngram),
    ] {
        let engine = engine.with_env(no_env());
        let full = run(&engine, &request);
        assert_eq!(full.tokens, vec![5, 6, 7]);
        assert_eq!(full.constraint_complete, Some(true));
        // A client that goes away after two tokens: the third was chosen (in the same
        // speculative round) but never emitted.
        let mut seen = 0;
        let mut stop_after_two = |_id: u32| {
            seen += 1;
            if seen >= 2 {
                mtp_core::engine::SinkFlow::Stop
            } else {
                mtp_core::engine::SinkFlow::Continue
            }
        };
        let cut = engine
            .generate(&request, &mut stop_after_two, &CancelToken::new())
            .expect("runs");
        assert_eq!(cut.tokens, vec![5, 6]);
        assert_eq!(cut.constraint_complete, Some(false), "{engine:?}");
    }
}
