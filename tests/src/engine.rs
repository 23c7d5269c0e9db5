//! The engine on the backend, with the tiny test models of [`mtp_core::testing`]: greedy MTP
//! emits exactly the plain greedy tokens under batched, serial and compare-serial validation;
//! the backend's greedy tokens and prompt logits agree with the reference backend's; under a
//! constraint (a token grammar), greedy MTP still emits constrained plain decoding's tokens,
//! and those of the reference backend.

use mtp_core::constraint::ConstraintSource;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, EnvLookup, GenerateRequest};
use mtp_core::model::TargetModel;
use mtp_core::options::{DraftOverrides, ValidationMode};
use mtp_core::reference::ReferenceBackend;
use mtp_core::testing::{
    CacheFlavor, LayerKind, TinyConfig, TinyDrafter, TinyDrafterConfig, TinyTarget, TokenGrammar,
};
use mtp_core::Backend;

use crate::error::{backend_err, reference_err, SuiteError};
pub use crate::formats::greedy_mtp_matches_plain_in_every_format;
use crate::tolerance::Tolerance;

/// The model configurations of the engine cases: `(target, drafter)`.
pub(crate) fn models() -> Vec<(TinyConfig, TinyDrafterConfig)> {
    let mut out = Vec::new();
    for seed in 0..4 {
        out.push((
            TinyConfig {
                seed,
                ..TinyConfig::default()
            },
            TinyDrafterConfig {
                seed: seed + 100,
                ..TinyDrafterConfig::default()
            },
        ));
    }
    // GQA 8/1, a window of 2, a peaky model without soft-capping, the drafter on the sliding
    // layer.
    out.push((
        TinyConfig {
            heads: 8,
            kv_heads: 1,
            layers: vec![
                LayerKind::Full,
                LayerKind::Sliding { window: 2 },
                LayerKind::Full,
            ],
            softcap: None,
            gain: 2.0,
            seed: 11,
            ..TinyConfig::default()
        },
        TinyDrafterConfig {
            heads: 8,
            source_layer: 1,
            seed: 12,
            ..TinyDrafterConfig::default()
        },
    ));
    // Caches that cannot roll back: the engine must fall back to serial validation.
    out.push((
        TinyConfig {
            seed: 21,
            caches: CacheFlavor::SerialOnly,
            ..TinyConfig::default()
        },
        TinyDrafterConfig::default(),
    ));
    out
}

/// No `MTP_*` settings from the process environment.
fn no_env() -> EnvLookup {
    std::sync::Arc::new(|_| None)
}

/// Plain greedy tokens, then greedy MTP tokens under each validation mode, for one model.
fn greedy_runs<X: Backend>(
    b: &X,
    target: &TinyConfig,
    drafter: &TinyDrafterConfig,
    prompt: &[u32],
) -> Result<Vec<Vec<u32>>, X::Error> {
    constrained_runs(b, (target, drafter), prompt, None)
}

/// [`greedy_runs`] with every token chosen under `constraint` (`None`: free text).
fn constrained_runs<X: Backend>(
    b: &X,
    (target, drafter): (&TinyConfig, &TinyDrafterConfig),
    prompt: &[u32],
    constraint: Option<ConstraintSource>,
) -> Result<Vec<Vec<u32>>, X::Error> {
    let target = TinyTarget::new(b, target.clone())?;
    let drafter = TinyDrafter::new(b, &target, drafter.clone())?;
    let mut request = GenerateRequest::greedy(prompt.to_vec(), 20);
    request.constraint = constraint;
    let plain = Engine::new(b, &target).with_env(no_env()).generate(
        &request,
        &mut DiscardSink,
        &CancelToken::new(),
    )?;
    let mut out = vec![plain.tokens];
    for validation in [
        ValidationMode::Batched,
        ValidationMode::Serial,
        ValidationMode::CompareSerial,
    ] {
        request.draft = DraftOverrides {
            validation: Some(validation),
            max_draft_tokens: Some(4),
            initial_draft_tokens: Some(3),
            ..DraftOverrides::default()
        };
        let engine = Engine::new(b, &target)
            .with_drafter(&drafter)
            .with_env(no_env());
        out.push(
            engine
                .generate(&request, &mut DiscardSink, &CancelToken::new())?
                .tokens,
        );
    }
    Ok(out)
}

const PROMPTS: [&[u32]; 2] = [&[1, 2, 3, 4, 5], &[7, 30, 2, 2, 9, 17, 0, 3, 12]];

const MODES: [&str; 4] = ["plain", "batched", "serial", "compare-serial"];

/// Greedy MTP equals plain greedy decode on the backend, token for token, under batched, serial
/// and compare-serial validation, for several tiny models (sliding and full layers, GQA,
/// serial-only caches).
pub fn greedy_mtp_matches_plain<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    for (target, drafter) in models() {
        for prompt in PROMPTS {
            let what = || format!("greedy decode, model seed {}", target.seed);
            let runs = backend_err(
                backend,
                what,
                greedy_runs(backend, &target, &drafter, prompt),
            )?;
            for (mode, tokens) in MODES.iter().zip(&runs).skip(1) {
                if tokens != &runs[0] {
                    return Err(SuiteError::Mismatch {
                        backend: backend.name(),
                        check: format!("greedy MTP ({mode}) vs plain greedy"),
                        detail: format!(
                            "model seed {}, prompt {prompt:?}: {tokens:?} vs {:?}",
                            target.seed, runs[0]
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

/// The backend's greedy tokens (plain and MTP) equal the reference backend's. (A failure on a
/// real backend is worth a look at the logit margin: two nearly tied logits may legitimately
/// swap under f32 rounding, but the tiny models here have no such ties on the reference.)
pub fn greedy_tokens_match_reference<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let reference = ReferenceBackend::new();
    for (target, drafter) in models() {
        for prompt in PROMPTS {
            let what = || format!("greedy decode, model seed {}", target.seed);
            let ours = backend_err(
                backend,
                what,
                greedy_runs(backend, &target, &drafter, prompt),
            )?;
            let theirs = reference_err(what, greedy_runs(&reference, &target, &drafter, prompt))?;
            for ((mode, o), t) in MODES.iter().zip(&ours).zip(&theirs) {
                if o != t {
                    return Err(SuiteError::Mismatch {
                        backend: backend.name(),
                        check: format!("greedy tokens ({mode}) vs the reference backend"),
                        detail: format!(
                            "model seed {}, prompt {prompt:?}: {o:?} vs {t:?}",
                            target.seed
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Under a constraint (random token grammars, forced runs and choices; fresh per model), greedy
/// MTP emits constrained plain decoding's tokens under every validation mode, and the backend's
/// tokens equal the reference backend's: the logits mask, the per-row masks of a verification
/// forward and the forced drafts behave the same on every backend.
pub fn constrained_greedy_matches_reference<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let reference = ReferenceBackend::new();
    for (target, drafter) in models() {
        let vocab = target.vocab as u32;
        for (i, prompt) in PROMPTS.iter().enumerate() {
            let grammar = TokenGrammar::random(target.seed * 7 + i as u64, vocab, 6, None);
            let source = ConstraintSource::new(grammar);
            let what = || format!("constrained greedy decode, model seed {}", target.seed);
            let runs = (&target, &drafter);
            let ours = backend_err(
                backend,
                what,
                constrained_runs(backend, runs, prompt, Some(source.clone())),
            )?;
            let theirs = reference_err(
                what,
                constrained_runs(&reference, runs, prompt, Some(source)),
            )?;
            for (mode, (o, t)) in MODES.iter().zip(ours.iter().zip(&theirs)) {
                if o != &ours[0] || o != t {
                    return Err(SuiteError::Mismatch {
                        backend: backend.name(),
                        check: format!(
                            "constrained greedy ({mode}) vs constrained plain and the reference"
                        ),
                        detail: format!(
                            "model seed {}, prompt {prompt:?}: {o:?}, plain {:?}, reference {t:?}",
                            target.seed, ours[0]
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Prompt logits of the tiny target `config` on `b`.
fn prompt_logits<X: Backend>(
    b: &X,
    config: &TinyConfig,
    prompt: &[u32],
) -> Result<Vec<f32>, X::Error> {
    let t = TinyTarget::new(b, config.clone())?;
    let mut caches = t.new_caches(b)?;
    let ids = b.from_u32(prompt, &[1, prompt.len()])?;
    let out = t.forward(b, &ids, 0, &mut caches)?;
    b.to_vec_f32(&t.unembed(b, &out.hidden)?)
}

/// The tiny targets' prompt logits on the backend are within `tolerance` of the reference
/// backend's.
pub fn logits_match_reference_within<B: Backend>(
    backend: &B,
    tolerance: Tolerance,
) -> Result<(), SuiteError> {
    let reference = ReferenceBackend::new();
    let prompt = [3u32, 1, 4, 1, 5, 9, 2, 6, 5, 3];
    for (config, _) in models() {
        let what = || format!("tiny target logits, model seed {}", config.seed);
        let ours = backend_err(backend, what, prompt_logits(backend, &config, &prompt))?;
        let theirs = reference_err(what, prompt_logits(&reference, &config, &prompt))?;
        let mismatch = |detail: String| SuiteError::Mismatch {
            backend: backend.name(),
            check: what(),
            detail,
        };
        if ours.len() != theirs.len() {
            return Err(mismatch(format!(
                "{} vs {} logits",
                ours.len(),
                theirs.len()
            )));
        }
        if let Err(worst) = tolerance.compare(&ours, &theirs) {
            return Err(SuiteError::Values {
                backend: backend.name(),
                what: what(),
                worst,
                tolerance,
            });
        }
    }
    Ok(())
}

/// The tiny targets' prompt logits agree with the reference backend's to 10× the f32
/// accumulating tolerance (a whole forward: two or three layers of composed ops).
pub fn logits_match_reference<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    logits_match_reference_within(
        backend,
        Tolerance::accumulating(mtp_core::DType::F32).scaled(10.0),
    )
}
