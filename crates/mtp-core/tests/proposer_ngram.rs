//! Prompt lookup ([`NgramProposer`]) through the engine: greedy speculation emits exactly plain
//! greedy's tokens for random models and prompts (self-repeating ones included, so lookup
//! proposes long runs), under every validation mode and schedule, with and without the
//! evaluation overlap; and sampled speculation with point-mass proposals (`q = δ`) keeps the
//! target's distribution (χ²).

mod common;

use common::*;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::options::{DecodeMode, ValidationMode};
use mtp_core::proposer::{
    Draft, NgramOptions, NgramProposer, Proposer, ProposerKind, ProposerRun, RoundContext,
};
use mtp_core::sampling::SamplerOptions;
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{LayerKind, TinyConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const INSTANCES: u64 = 60;

/// A random prompt; half of them repeat a random phrase several times.
fn random_prompt(rng: &mut ChaCha8Rng, vocab: u32) -> Vec<u32> {
    let phrase: Vec<u32> = (0..rng.random_range(1..6))
        .map(|_| rng.random_range(0..vocab))
        .collect();
    if rng.random_bool(0.5) {
        let times = rng.random_range(2..5);
        phrase
            .iter()
            .copied()
            .cycle()
            .take(phrase.len() * times)
            .collect()
    } else {
        let mut p = phrase;
        p.extend((0..rng.random_range(0..8)).map(|_| rng.random_range(0..vocab)));
        p
    }
}

#[test]
fn greedy_prompt_lookup_equals_plain() {
    let b = B::default();
    let mut accepted = 0;
    for seed in 0..INSTANCES {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let window = rng.random_range(1..6);
        let config = TinyConfig {
            vocab: rng.random_range(6..40),
            layers: vec![LayerKind::Sliding { window }, LayerKind::Full],
            max_context: 96,
            gain: rng.random_range(0.5..2.5),
            seed,
            ..TinyConfig::default()
        };
        let vocab = config.vocab as u32;
        let t = target(config);
        let mut request = GenerateRequest::greedy(random_prompt(&mut rng, vocab), 32);
        if rng.random_bool(0.2) {
            request.eos = vec![rng.random_range(0..vocab)];
        }
        let expected = plain(&t, &request);
        let min = rng.random_range(1..3);
        let ngram =
            NgramProposer::new(NgramOptions::new(min, min + rng.random_range(0..4)).unwrap());
        for (schedule, validation, overlap) in decode_settings() {
            request.draft = draft(schedule, validation, rng.random_range(1..7));
            let out = Engine::new(&b, &t)
                .with_proposer(&ngram)
                .with_env(no_env())
                .with_overlap(overlap)
                .generate(&request, &mut DiscardSink, &CancelToken::new())
                .unwrap();
            assert_eq!(
                (&out.tokens, out.done_reason),
                (&expected.tokens, expected.done_reason),
                "seed {seed}, {schedule:?}, {validation:?}, {overlap:?}, prompt {:?}",
                request.prompt
            );
            assert_eq!(out.mode, DecodeMode::GreedyMtp);
            let stats = out.mtp.unwrap();
            assert_eq!(stats.batch_serial_mismatches, 0);
            accepted += stats.accepted;
        }
    }
    // Lookup pays on these prompts: many drafts were accepted.
    assert!(accepted > 3000, "only {accepted} drafts accepted");
}

/// A proposer without distributions that guesses random tokens, seeded by the history: its
/// drafts are point masses, often rejected.
#[derive(Debug, Clone, Copy)]
struct Guesser {
    vocab: u32,
}

impl Proposer<B> for Guesser {
    fn kind(&self) -> ProposerKind {
        ProposerKind::Ngram
    }
    fn start<'p>(
        &'p self,
        _backend: &B,
        _prompt: &[u32],
    ) -> Result<Box<dyn ProposerRun<B> + 'p>, mtp_core::CoreError> {
        Ok(Box::new(*self))
    }
}

impl ProposerRun<B> for Guesser {
    fn propose(
        &mut self,
        round: &mut RoundContext<'_, B>,
        depth: usize,
    ) -> Result<Option<Draft<B>>, mtp_core::CoreError> {
        let mut rng = ChaCha8Rng::seed_from_u64(round.history.len() as u64 * 31 + 7);
        let ids = (0..depth)
            .map(|_| rng.random_range(0..self.vocab))
            .collect();
        Draft::from_host(round.backend, ids)
    }
}

fn sampled_request(seed: u64, n: usize) -> GenerateRequest {
    let mut r = GenerateRequest::greedy(vec![1, 2, 1, 2, 1], n);
    r.sampling = SamplerOptions {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        seed: Some(seed),
        ..SamplerOptions::default()
    };
    r.draft = draft(ScheduleKind::Constant, ValidationMode::Batched, 3);
    r
}

#[test]
fn sampled_point_mass_proposals_keep_the_target_distribution() {
    let b = B::default();
    let vocab = 5;
    let t = target(TinyConfig {
        vocab,
        gain: 0.7,
        softcap: None,
        ..TinyConfig::default()
    });
    let expected = exact_first_two(&t, &sampled_request(0, 2));
    let proposers: [(&str, &dyn Proposer<B>); 2] = [
        (
            "guesser",
            &Guesser {
                vocab: vocab as u32,
            },
        ),
        (
            "ngram",
            &NgramProposer::new(NgramOptions::new(1, 3).unwrap()),
        ),
    ];
    for (name, proposer) in proposers {
        let engine = Engine::new(&b, &t)
            .with_proposer(proposer)
            .with_env(no_env());
        let draws = 8_000;
        let (counts, accepted, drafted) =
            first_two_counts(&engine, vocab, draws, |seed| sampled_request(seed, 4));
        // Both accept and reject a good share of point-mass drafts.
        assert!(
            accepted * 40 > drafted && accepted * 10 < drafted * 9,
            "{name}: {accepted} of {drafted} accepted"
        );
        let (_, _, p) = common::chi2::chi_square(&counts, &expected, draws as usize);
        assert!(p > 0.01, "{name}: χ² p = {p:.4}");
    }
}
