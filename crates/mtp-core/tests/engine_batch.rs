//! Continuous batching: every sequence of a batch emits exactly what it emits alone — greedy
//! (with penalties), seeded sampled, with an MTP drafter, prompt lookup or both, random
//! arrivals, prompt lengths, depths, EOS and early stops — and the batch really shares passes.

mod common;

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use mtp_core::engine::batch::{
    serve, serve_with_memory, BatchOptions, BatchReport, PolicyMemory, SpeculationPolicy,
};
use mtp_core::engine::{CancelToken, DoneReason, Engine, GenerateRequest, SinkFlow, TokenSink};
use mtp_core::model::TargetModel;
use mtp_core::options::ValidationMode;
use mtp_core::proposer::{NgramOptions, NgramProposer};
use mtp_core::sampling::SamplerOptions;
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{TinyConfig, TinyDrafter, TinyDrafterConfig, TinyTarget};
use mtp_core::Backend;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const TRIALS: u64 = 24;

/// Stops the generation after `limit` tokens (a client that goes away), else runs to the end.
struct StopAfter {
    limit: Option<usize>,
    seen: Vec<u32>,
}

impl TokenSink for StopAfter {
    fn token(&mut self, id: u32) -> SinkFlow {
        self.seen.push(id);
        match self.limit {
            Some(n) if self.seen.len() >= n => SinkFlow::Stop,
            _ => SinkFlow::Continue,
        }
    }
}

#[derive(Debug, Clone)]
struct Job {
    index: usize,
    request: GenerateRequest,
    stop_after: Option<usize>,
    /// Wait before it arrives.
    delay: Duration,
}

type Outcome = (Vec<u32>, Vec<u32>, DoneReason);

fn random_request(rng: &mut ChaCha8Rng, vocab: u32) -> GenerateRequest {
    let prompt = (0..rng.random_range(1..20))
        .map(|_| rng.random_range(0..vocab))
        .collect();
    let mut request = GenerateRequest::greedy(prompt, rng.random_range(1..28));
    if rng.random_bool(0.3) {
        request.eos = vec![rng.random_range(0..vocab)];
    }
    request.sampling = match rng.random_range(0..3) {
        0 => SamplerOptions::default(),
        1 => SamplerOptions {
            repeat_penalty: 1.3,
            presence_penalty: 0.5,
            repeat_last_n: 8,
            ..SamplerOptions::default()
        },
        _ => SamplerOptions {
            temperature: rng.random_range(0.5..1.5),
            top_k: rng.random_range(0..6),
            seed: Some(rng.random()),
            ..SamplerOptions::default()
        },
    };
    let schedule = [ScheduleKind::Constant, ScheduleKind::Heuristic][rng.random_range(0..2)];
    let validation =
        [ValidationMode::Batched, ValidationMode::Serial][usize::from(rng.random_bool(0.2))];
    request.draft = draft(schedule, validation, rng.random_range(1..6));
    request
}

fn solo(engine: &Engine<'_, B>, job: &Job) -> Outcome {
    let mut sink = StopAfter {
        limit: job.stop_after,
        seen: Vec::new(),
    };
    let r = engine
        .generate(&job.request, &mut sink, &CancelToken::new())
        .expect("solo generation runs");
    (r.tokens, sink.seen, r.done_reason)
}

fn batched(
    engine: &Engine<'_, B>,
    jobs: &[Job],
    options: &BatchOptions,
) -> (Vec<Option<Outcome>>, BatchReport) {
    let results: Mutex<Vec<Option<Outcome>>> = Mutex::new(vec![None; jobs.len()]);
    let mut queue: VecDeque<Job> = jobs.iter().cloned().collect();
    let report = serve(
        engine,
        options,
        move || {
            let job = queue.pop_front()?;
            std::thread::sleep(job.delay);
            Some(job)
        },
        |engine, job: Job| {
            let mut sink = StopAfter {
                limit: job.stop_after,
                seen: Vec::new(),
            };
            let r = engine
                .generate(&job.request, &mut sink, &CancelToken::new())
                .expect("batched generation runs");
            results.lock().unwrap()[job.index] = Some((r.tokens, sink.seen, r.done_reason));
        },
    )
    .expect("the batch runs");
    (results.into_inner().unwrap(), report)
}

fn trial_jobs(rng: &mut ChaCha8Rng, vocab: u32) -> Vec<Job> {
    (0..rng.random_range(2..10))
        .map(|index| Job {
            index,
            request: random_request(rng, vocab),
            stop_after: rng.random_bool(0.2).then(|| rng.random_range(1..6)),
            delay: Duration::from_micros(rng.random_range(0..1500)),
        })
        .collect()
}

fn check_trial(seed: u64, policy: SpeculationPolicy) -> BatchReport {
    let b = B::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let config = random_config(&mut rng, seed);
    let vocab = config.vocab as u32;
    let target: TinyTarget<B> = target(config);
    let drafter = TinyDrafter::new(
        &b,
        &target,
        TinyDrafterConfig {
            source_layer: 0,
            seed: seed + 1,
            ..Default::default()
        },
    )
    .expect("drafter builds");
    let ngram = NgramProposer::new(NgramOptions::new(1, 3).expect("n-gram sizes"));
    let base = Engine::new(&b, &target).with_env(no_env());
    let engine = match seed % 3 {
        0 => base.with_drafter(&drafter),
        1 => base.with_proposer(&ngram),
        _ => base.with_drafter(&drafter).also_proposer(&ngram),
    };
    let jobs = trial_jobs(&mut rng, vocab);
    let options = BatchOptions {
        max_batch: rng.random_range(1..6),
        prefill_chunk: rng.random_range(1..8),
        policy,
    };
    let (outcomes, report) = batched(&engine, &jobs, &options);
    for (job, outcome) in jobs.iter().zip(&outcomes) {
        let outcome = outcome
            .as_ref()
            .unwrap_or_else(|| panic!("trial {seed}: job {} did not run", job.index));
        // A sampled sequence that speculates in some rounds only draws other random numbers
        // than alone (same distribution: the chi2 test below); with every round speculating
        // (or none, against a plain run alone) its seeded stream is the same.
        if policy != SpeculationPolicy::Always && job.request.sampling.temperature > 0.0 {
            continue;
        }
        let alone = solo(&engine, job);
        assert_eq!(
            outcome,
            &alone,
            "trial {seed}, job {} ({:?}, {} prompt tokens): batched vs alone",
            job.index,
            job.request.sampling,
            job.request.prompt.len()
        );
    }
    assert_eq!(report.panicked, 0);
    report
}

#[test]
fn every_sequence_of_a_batch_emits_what_it_emits_alone() {
    let mut shared = 0;
    for seed in 0..TRIALS {
        let report = check_trial(seed, SpeculationPolicy::Always);
        if report.counts.widest > 1 && report.counts.items > report.counts.passes {
            shared += 1;
        }
    }
    // Batches of one (max_batch 1, or jobs that never overlap) share nothing; most do.
    assert!(
        shared >= TRIALS / 2,
        "only {shared} of {TRIALS} trials shared a pass"
    );
}

#[test]
fn the_measured_policy_and_plain_batches_are_exact_too() {
    for seed in 100..100 + TRIALS / 2 {
        check_trial(seed, SpeculationPolicy::Measured);
        check_trial(seed + 1000, SpeculationPolicy::Never);
    }
}

#[test]
fn sampled_sequences_keep_the_target_distribution_in_a_measured_batch() {
    let b = B::default();
    let t = target(TinyConfig {
        vocab: 8,
        seed: 11,
        ..TinyConfig::default()
    });
    let probe = GenerateRequest {
        sampling: SamplerOptions {
            temperature: 1.0,
            repeat_penalty: 1.3,
            presence_penalty: 0.4,
            ..SamplerOptions::default()
        },
        draft: draft(ScheduleKind::Constant, ValidationMode::Batched, 2),
        ..GenerateRequest::greedy(vec![1, 2, 3], 2)
    };
    let expected = exact_first_two(&t, &probe);
    let drafter = scripted(&t, &probe, 0.5);
    let engine = Engine::new(&b, &t)
        .with_drafter(&drafter)
        .with_env(no_env());
    let vocab = 8;
    let draws = 3000u64;
    let counts = Mutex::new(vec![0usize; vocab * vocab]);
    let mut seeds = 0..draws;
    let options = BatchOptions {
        max_batch: 6,
        ..BatchOptions::default()
    };
    let report = serve(
        &engine,
        &options,
        move || seeds.next(),
        |engine, seed: u64| {
            let mut request = probe.clone();
            request.sampling.seed = Some(seed);
            let out = engine
                .generate(
                    &request,
                    &mut mtp_core::engine::DiscardSink,
                    &CancelToken::new(),
                )
                .expect("runs");
            counts.lock().unwrap()[out.tokens[0] as usize * vocab + out.tokens[1] as usize] += 1;
        },
    )
    .expect("the batch runs");
    // The policy ran both choices, so both kinds of rounds were drawn from (a size that starts
    // from a neighbour's measurement may not re-try the other within the run, so over all sizes).
    let on: usize = report.sizes.iter().map(|s| s.speculate_windows).sum();
    let off: usize = report.sizes.iter().map(|s| s.plain_windows).sum();
    assert!(on > 0 && off > 0, "{report:?}");
    let counts = counts.into_inner().unwrap();
    let (_, _, p) = common::chi2::chi_square(&counts, &expected, draws as usize);
    assert!(p > 0.001, "chi2 p = {p:.4}");
}

#[test]
fn a_batch_shares_passes_between_its_sequences() {
    let b = B::default();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let target = target(random_config(&mut rng, 7));
    let engine = Engine::new(&b, &target).with_env(no_env());
    let jobs: Vec<Job> = (0..4)
        .map(|index| Job {
            index,
            request: GenerateRequest::greedy(vec![1, 2, 3], 16),
            stop_after: None,
            delay: Duration::ZERO,
        })
        .collect();
    let options = BatchOptions {
        max_batch: 4,
        prefill_chunk: 64,
        policy: SpeculationPolicy::Never,
    };
    let (outcomes, report) = batched(&engine, &jobs, &options);
    assert!(outcomes
        .iter()
        .all(|o| o.as_ref().is_some_and(|o| o.0.len() == 16)));
    // 4 sequences x (1 prefill + 15 steps) forwards and as many unembeddings; sharing makes
    // far fewer passes than items.
    assert_eq!(report.counts.items, 4 * 16 * 2);
    assert!(
        report.counts.passes < report.counts.items / 2,
        "{:?}",
        report.counts
    );
    assert_eq!(report.counts.widest, 4);
}

#[test]
fn bad_batch_options_are_refused() {
    let b = B::default();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let target = target(random_config(&mut rng, 3));
    let engine = Engine::new(&b, &target).with_env(no_env());
    for options in [
        BatchOptions {
            max_batch: 0,
            ..BatchOptions::default()
        },
        BatchOptions {
            max_batch: 100_000,
            ..BatchOptions::default()
        },
        BatchOptions {
            prefill_chunk: 0,
            ..BatchOptions::default()
        },
    ] {
        let err = serve(&engine, &options, || None::<()>, |_, _| {}).expect_err("refused");
        assert!(err.to_string().contains("invalid option"), "{err}");
    }
}

#[test]
fn a_panicking_job_ends_alone() {
    let b = B::default();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let target = target(random_config(&mut rng, 5));
    let engine = Engine::new(&b, &target).with_env(no_env());
    let done = Mutex::new(0);
    let mut left = 4;
    let report = serve(
        &engine,
        &BatchOptions::default(),
        move || {
            left -= 1;
            (left >= 0).then_some(left)
        },
        |engine, job: i32| {
            let request = GenerateRequest::greedy(vec![1, 2], 8);
            engine
                .generate(
                    &request,
                    &mut mtp_core::engine::DiscardSink,
                    &CancelToken::new(),
                )
                .expect("runs");
            if job == 2 {
                panic!("a job that fails after generating");
            }
            *done.lock().unwrap() += 1;
        },
    )
    .expect("the batch runs");
    assert_eq!(report.panicked, 1);
    assert_eq!(*done.lock().unwrap(), 3);
}

#[test]
fn a_policy_memory_carries_what_was_learned_to_the_next_batch() {
    let b = B::default();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let target = target(random_config(&mut rng, 9));
    let engine = Engine::new(&b, &target).with_env(no_env());
    let mut memory = PolicyMemory::new(SpeculationPolicy::Measured);
    let options = BatchOptions {
        max_batch: 2,
        ..BatchOptions::default()
    };
    let windows = |m: &PolicyMemory| -> usize {
        m.report()
            .iter()
            .map(|s| s.speculate_windows + s.plain_windows)
            .sum()
    };
    let mut seen = Vec::new();
    for _ in 0..2 {
        let mut left = 4;
        serve_with_memory(
            &engine,
            &options,
            &mut memory,
            move || {
                left -= 1;
                (left >= 0).then_some(())
            },
            |engine, ()| {
                let request = GenerateRequest::greedy(vec![1, 2, 3], 40);
                engine
                    .generate(
                        &request,
                        &mut mtp_core::engine::DiscardSink,
                        &CancelToken::new(),
                    )
                    .expect("runs");
            },
        )
        .expect("the batch runs");
        seen.push(windows(&memory));
    }
    assert!(seen[0] > 0, "the first batch measured windows: {seen:?}");
    assert!(seen[1] > seen[0], "the second added to them: {seen:?}");
}

/// A target whose forward panics on a prompt of `bad_len` tokens.
struct PanicsOn<'t> {
    inner: &'t TinyTarget<B>,
    bad_len: usize,
}

impl TargetModel<B> for PanicsOn<'_> {
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
    fn max_context(&self) -> usize {
        self.inner.max_context()
    }
    fn new_caches(&self, b: &B) -> Result<mtp_core::cache::CacheSet<B>, mtp_core::CoreError> {
        self.inner.new_caches(b)
    }
    fn forward(
        &self,
        b: &B,
        ids: &<B as Backend>::Array,
        start: usize,
        caches: &mut mtp_core::cache::CacheSet<B>,
    ) -> Result<mtp_core::model::TargetOutput<B>, mtp_core::CoreError> {
        if start == 0 && b.shape(ids)[1] == self.bad_len {
            panic!("a model bug");
        }
        self.inner.forward(b, ids, start, caches)
    }
    fn unembed(
        &self,
        b: &B,
        hidden: &<B as Backend>::Array,
    ) -> Result<<B as Backend>::Array, mtp_core::CoreError> {
        self.inner.unembed(b, hidden)
    }
    fn token_embeddings(
        &self,
        b: &B,
        ids: &<B as Backend>::Array,
    ) -> Result<<B as Backend>::Array, mtp_core::CoreError> {
        self.inner.token_embeddings(b, ids)
    }
}

#[test]
fn a_model_that_panics_inside_a_batched_pass_fails_its_pass_and_nothing_hangs() {
    let b = B::default();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let inner = target(random_config(&mut rng, 11));
    let model = PanicsOn {
        inner: &inner,
        bad_len: 7,
    };
    let engine = Engine::new(&b, &model).with_env(no_env());
    let outcomes = Mutex::new(Vec::new());
    let mut prompts = vec![vec![1u32; 7], vec![2u32; 3], vec![3u32; 4], vec![4u32; 5]].into_iter();
    serve(
        &engine,
        &BatchOptions::default(),
        move || prompts.next(),
        |engine, prompt: Vec<u32>| {
            let len = prompt.len();
            let request = GenerateRequest::greedy(prompt, 6);
            let ok = engine
                .generate(
                    &request,
                    &mut mtp_core::engine::DiscardSink,
                    &CancelToken::new(),
                )
                .is_ok();
            outcomes.lock().unwrap().push((len, ok));
        },
    )
    .expect("the batch ends");
    let outcomes = outcomes.into_inner().unwrap();
    assert_eq!(outcomes.len(), 4, "every job ended: {outcomes:?}");
    assert!(outcomes.contains(&(7, false)), "{outcomes:?}");
}
