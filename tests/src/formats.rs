//! Greedy MTP equals plain greedy, token for token, with batched verification, on random tiny
//! models in every weight format: dense `f32`, `f16` and `bf16`, and projections quantized to
//! GGUF Q8_0 and Q4_0 (`--quantize q8|q4`). Nothing is validated serially: a verify forward of
//! `k + 1` rows must give each row the bits a one-row forward gives it (the
//! [`invariance`](crate::invariance) cases), or a near-tie somewhere in 200 models tips.

use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::options::{DraftOverrides, ValidationMode};
use mtp_core::quant::QuantScheme;
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{ScriptedDrafter, TinyConfig, TinyTarget, TinyWeights};
use mtp_core::{Backend, DType};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::engine_helpers::no_env;
use crate::error::{backend_err, SuiteError};

/// Random models per format.
pub const INSTANCES: u64 = 200;

/// The weight formats checked.
pub const FORMATS: [TinyWeights; 5] = [
    TinyWeights::Dense(DType::F32),
    TinyWeights::Dense(DType::F16),
    TinyWeights::Dense(DType::BF16),
    TinyWeights::Quantized(QuantScheme::Q8),
    TinyWeights::Quantized(QuantScheme::Q4),
];

/// A random model of the engine tests ([`random_config`](crate::engine_helpers::random_config):
/// 1–3 layers, full and sliding, grouped heads, soft-capping or not) with widths that take
/// 32-wide quantization blocks, in `weights`.
pub(crate) fn random_config(rng: &mut ChaCha8Rng, seed: u64, weights: TinyWeights) -> TinyConfig {
    let base = crate::engine_helpers::random_config(rng, seed);
    let (heads, kv_heads, head_dim) =
        [(4, 2, 8), (2, 1, 16), (4, 1, 16), (2, 2, 32), (8, 2, 4)][rng.random_range(0..5)];
    TinyConfig {
        hidden: [32, 64][rng.random_range(0..2)],
        heads,
        kv_heads,
        head_dim,
        mlp: [32, 64, 96][rng.random_range(0..3)],
        weights,
        ..base
    }
}

/// What one instance ran: whether speculation matched plain, and the drafts it accepted.
struct Outcome {
    mismatch: Option<String>,
    drafted: usize,
    accepted: usize,
}

/// Instance `seed` in `weights` on `b`: plain greedy, then greedy MTP with a scripted drafter
/// (right with a random share, so rows are both accepted and rejected) verified in one batched
/// forward per round at a random depth.
fn instance<B: Backend>(b: &B, seed: u64, weights: TinyWeights) -> Result<Outcome, B::Error> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let config = random_config(&mut rng, seed, weights);
    let vocab = config.vocab as u32;
    let (hidden, vocab_size) = (config.hidden, config.vocab);
    let target = TinyTarget::new(b, config)?;
    let prompt: Vec<u32> = (0..rng.random_range(1..12))
        .map(|_| rng.random_range(0..vocab))
        .collect();
    let mut request = GenerateRequest::greedy(prompt, rng.random_range(4..28));
    if rng.random_bool(0.2) {
        request.eos = vec![rng.random_range(0..vocab)];
    }
    let plain = Engine::new(b, &target).with_env(no_env()).generate(
        &request,
        &mut DiscardSink,
        &CancelToken::new(),
    )?;
    let mut sequence = request.prompt.clone();
    sequence.extend(&plain.tokens);
    let drafter = ScriptedDrafter {
        sequence,
        accuracy: rng.random_range(0.3..1.0),
        right_steps: None,
        seed,
        vocab: vocab_size,
        hidden,
        confidence: 8.0,
    };
    let depth = rng.random_range(1..9);
    request.draft = DraftOverrides {
        initial_draft_tokens: Some(depth),
        max_draft_tokens: Some(depth),
        schedule: Some(ScheduleKind::Constant),
        validation: Some(ValidationMode::Batched),
        enabled: None,
    };
    let out = Engine::new(b, &target)
        .with_drafter(&drafter)
        .with_env(no_env())
        .generate(&request, &mut DiscardSink, &CancelToken::new())?;
    let same = out.tokens == plain.tokens && out.done_reason == plain.done_reason;
    let mismatch = (!same).then(|| {
        let at = out
            .tokens
            .iter()
            .zip(&plain.tokens)
            .position(|(a, b)| a != b);
        format!(
            "model seed {seed}, depth {depth}: batched MTP {:?} ({:?}) vs plain {:?} ({:?}); \
             first difference at token {at:?}",
            out.tokens, out.done_reason, plain.tokens, plain.done_reason
        )
    });
    let stats = out.mtp.unwrap_or_default();
    Ok(Outcome {
        mismatch,
        drafted: stats.drafted,
        accepted: stats.accepted,
    })
}

/// [`INSTANCES`] random models in each of [`FORMATS`]: batched greedy MTP emits plain greedy's
/// tokens (and stops for the same reason), and the drafts are both accepted and rejected.
pub fn greedy_mtp_matches_plain_in_every_format<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    for weights in FORMATS {
        let (mut drafted, mut accepted) = (0, 0);
        for seed in 0..INSTANCES {
            let what = || format!("{weights:?}, model seed {seed}");
            let outcome = backend_err(backend, what, instance(backend, seed, weights))?;
            if let Some(detail) = outcome.mismatch {
                return Err(SuiteError::Mismatch {
                    backend: backend.name(),
                    check: format!("{weights:?}: batched greedy MTP vs plain greedy"),
                    detail,
                });
            }
            drafted += outcome.drafted;
            accepted += outcome.accepted;
        }
        if accepted * 5 < drafted || accepted == drafted {
            return Err(SuiteError::Mismatch {
                backend: backend.name(),
                check: format!("{weights:?}: the instances accept and reject drafts"),
                detail: format!("{accepted} of {drafted} drafts accepted"),
            });
        }
    }
    Ok(())
}
