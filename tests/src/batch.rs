//! Continuous batching on the backend (`mtp_core::engine::batch`): every sequence of a batch —
//! greedy with penalties, seeded sampled, under a grammar, with an MTP drafter, prompt lookup
//! or both — emits exactly what it emits alone on the same backend, the batch really shares its
//! passes, and sampled sequences in a batch that turns speculation on and off keep the target
//! distribution (χ² against the reference backend's exact probabilities).

use std::cell::RefCell;

use mtp_core::constraint::ConstraintSource;
use mtp_core::engine::batch::{serve, BatchOptions, BatchReport, SpeculationPolicy};
use mtp_core::engine::{CancelToken, DiscardSink, Engine, EvalOverlap, GenerateRequest, Response};
use mtp_core::options::ValidationMode;
use mtp_core::proposer::{NgramOptions, NgramProposer};
use mtp_core::reference::ReferenceBackend;
use mtp_core::sampling::SamplerOptions;
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{
    TinyConfig, TinyDrafter, TinyDrafterConfig, TinyTarget, TinyWeights, TokenGrammar,
};
use mtp_core::Backend;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{backend_err, SuiteError};
use crate::formats;

use crate::engine_helpers::{
    chi2::chi_square, draft, exact_first_two, no_env, penalised_probe, random_config, scripted,
};

/// Random batches per policy in `f32`.
const TRIALS: u64 = 6;

/// Random batches per policy in each half-precision and quantized format.
const HALF_AND_QUANTIZED_TRIALS: usize = 2;

fn random_request(rng: &mut ChaCha8Rng, vocab: u32) -> GenerateRequest {
    let prompt = (0..rng.random_range(1..16))
        .map(|_| rng.random_range(0..vocab))
        .collect();
    let mut request = GenerateRequest::greedy(prompt, rng.random_range(1..24));
    request.sampling = match rng.random_range(0..3) {
        0 => SamplerOptions::default(),
        1 => SamplerOptions {
            repeat_penalty: 1.3,
            presence_penalty: 0.5,
            ..SamplerOptions::default()
        },
        _ => SamplerOptions {
            temperature: rng.random_range(0.5..1.5),
            seed: Some(rng.random()),
            ..SamplerOptions::default()
        },
    };
    let schedule = [ScheduleKind::Constant, ScheduleKind::Heuristic][rng.random_range(0..2)];
    request.draft = draft(schedule, ValidationMode::Batched, rng.random_range(1..5));
    if rng.random_bool(0.25) {
        let grammar = TokenGrammar::random(rng.random(), vocab, 4, None);
        request.constraint = Some(ConstraintSource::new(grammar));
    }
    request
}

/// Each request's response, in order, and the batch's report.
type BatchRun<E> = (Vec<Result<Response, E>>, BatchReport);

/// Run `requests` as one batch.
fn batched<B: Backend>(
    engine: &Engine<'_, B>,
    requests: &[GenerateRequest],
    options: &BatchOptions,
) -> Result<BatchRun<B::Error>, B::Error> {
    let results = RefCell::new(Vec::new());
    let mut queue = requests.iter().enumerate();
    let report = serve(
        engine,
        options,
        move || queue.next(),
        |engine, (i, request): (usize, &GenerateRequest)| {
            let out = engine.generate(request, &mut DiscardSink, &CancelToken::new());
            results.borrow_mut().push((i, out));
        },
    )
    .map_err(B::Error::from)?;
    let mut results = results.into_inner();
    results.sort_by_key(|(i, _)| *i);
    Ok((results.into_iter().map(|(_, r)| r).collect(), report))
}

/// Greedy (with penalties, under grammars) and seeded sampled sequences of random batches emit
/// what they emit alone: every request with every round drafting, and the greedy ones under
/// the measured policy too (a sampled sequence whose rounds switch between drafting and not
/// draws other random numbers than alone: the χ² case covers it).
///
/// The trials run in `f32`, then [`HALF_AND_QUANTIZED_TRIALS`] more in each other weight
/// format of [`formats::FORMATS`]: a sequence's bits do not depend on its neighbours' rows in
/// any dtype.
pub fn sequences_emit_what_they_emit_alone<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let others = formats::FORMATS[1..]
        .iter()
        .flat_map(|&w| (0..HALF_AND_QUANTIZED_TRIALS).map(move |_| w));
    let trials = (0..TRIALS as usize)
        .map(|_| TinyWeights::default())
        .chain(others);
    for (seed, weights) in trials.enumerate() {
        let seed = seed as u64;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let config = if weights == TinyWeights::default() {
            random_config(&mut rng, seed)
        } else {
            formats::random_config(&mut rng, seed, weights)
        };
        let vocab = config.vocab as u32;
        let what = || format!("batch trial {seed} ({weights:?})");
        let target = backend_err(backend, what, TinyTarget::new(backend, config))?;
        let drafter_config = TinyDrafterConfig {
            source_layer: 0,
            seed: seed + 1,
            ..TinyDrafterConfig::default()
        };
        let drafter = backend_err(
            backend,
            what,
            TinyDrafter::new(backend, &target, drafter_config),
        )?;
        let ngram =
            NgramProposer::new(NgramOptions::new(1, 3).map_err(|e| SuiteError::Reference {
                what: what(),
                message: e.to_string(),
            })?);
        let base = Engine::new(backend, &target).with_env(no_env());
        let engine = match seed % 3 {
            0 => base.with_drafter(&drafter),
            1 => base.with_proposer(&ngram),
            _ => base.with_drafter(&drafter).also_proposer(&ngram),
        };
        // Batch members keep the engine's evaluation overlap: every proposer runs in batches
        // with and without it (the reordered loop must not change what a member emits).
        let overlap = [EvalOverlap::Always, EvalOverlap::Never][(seed / 3 % 2) as usize];
        let in_batch = engine.clone().with_overlap(overlap);
        let requests: Vec<GenerateRequest> = (0..rng.random_range(2..8))
            .map(|_| random_request(&mut rng, vocab))
            .collect();
        let alone = requests
            .iter()
            .map(|r| {
                let out = engine.generate(r, &mut DiscardSink, &CancelToken::new());
                backend_err(backend, what, out).map(|o| o.tokens)
            })
            .collect::<Result<Vec<_>, _>>()?;
        for policy in [SpeculationPolicy::Always, SpeculationPolicy::Measured] {
            let options = BatchOptions {
                max_batch: rng.random_range(2..6),
                prefill_chunk: rng.random_range(1..8),
                policy,
            };
            let (outs, report) =
                backend_err(backend, what, batched(&in_batch, &requests, &options))?;
            let mismatch = |detail: String| SuiteError::Mismatch {
                backend: backend.name(),
                check: format!("{} under {policy:?} ({options:?})", what()),
                detail,
            };
            if report.counts.widest < 2 || report.panicked > 0 {
                return Err(mismatch(format!(
                    "the batch did not share passes: {report:?}"
                )));
            }
            for (i, (out, alone)) in outs.into_iter().zip(&alone).enumerate() {
                let tokens = backend_err(backend, what, out)?.tokens;
                let sampled = requests[i].sampling.temperature > 0.0;
                if (policy == SpeculationPolicy::Always || !sampled) && tokens != *alone {
                    return Err(mismatch(format!(
                        "request {i} ({:?}): batched {tokens:?}, alone {alone:?}",
                        requests[i].sampling
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Seeded sampled sequences (temperature 1, repeat and presence penalties, a drafter right half
/// the time) in a batch whose measured policy runs rounds with and without drafting: the first
/// two tokens' joint frequencies over 3000 draws fit the target's exact distribution (χ²,
/// p > 0.001), computed on the reference backend.
pub fn sampled_sequences_keep_the_distribution<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let vocab = 8;
    let config = TinyConfig {
        vocab,
        seed: 11,
        ..TinyConfig::default()
    };
    let probe = penalised_probe();
    let oracle = TinyTarget::new(&ReferenceBackend::default(), config.clone()).map_err(|e| {
        SuiteError::Reference {
            what: "the oracle's tiny target".into(),
            message: e.to_string(),
        }
    })?;
    let expected = exact_first_two(&oracle, &probe);
    let drafter = scripted(&oracle, &probe, 0.5);
    let what = || "sampled batch χ²".to_string();
    let target = backend_err(backend, what, TinyTarget::new(backend, config))?;
    let engine = Engine::new(backend, &target)
        .with_drafter(&drafter)
        .with_env(no_env());
    let draws = 3000u64;
    let requests: Vec<GenerateRequest> = (0..draws)
        .map(|seed| {
            let mut request = probe.clone();
            request.sampling.seed = Some(seed);
            request
        })
        .collect();
    let options = BatchOptions {
        max_batch: 6,
        ..BatchOptions::default()
    };
    let (outs, report) = backend_err(backend, what, batched(&engine, &requests, &options))?;
    let mut counts = vec![0usize; vocab * vocab];
    for out in outs {
        let tokens = backend_err(backend, what, out)?.tokens;
        counts[tokens[0] as usize * vocab + tokens[1] as usize] += 1;
    }
    let mismatch = |detail: String| SuiteError::Mismatch {
        backend: backend.name(),
        check: what(),
        detail,
    };
    let on: usize = report.sizes.iter().map(|s| s.speculate_windows).sum();
    let off: usize = report.sizes.iter().map(|s| s.plain_windows).sum();
    if on == 0 || off == 0 {
        return Err(mismatch(format!(
            "the policy did not run both kinds of rounds: {report:?}"
        )));
    }
    let (chi2, dof, p) = chi_square(&counts, &expected, draws as usize);
    if p <= 0.001 {
        return Err(mismatch(format!("chi2 {chi2:.1} on {dof} dof, p = {p:.5}")));
    }
    Ok(())
}
