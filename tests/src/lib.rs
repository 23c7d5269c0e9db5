//! # mtp-tests
//!
//! The cross-backend suite of mtp-rs, written once and generic over
//! [`Backend`](mtp_core::Backend); each file in `tests/` instantiates it for one backend (the
//! host reference backend always; candle and MLX when their features land).
//!
//! Today the suite holds the engine-level checks every backend must pass: on the tiny
//! test models, greedy MTP equals plain greedy decode token for token, under every validation
//! mode, and the model's logits agree with the reference backend's.

use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::model::TargetModel;
use mtp_core::options::{DraftOverrides, ValidationMode};
use mtp_core::reference::ReferenceBackend;
use mtp_core::testing::{TinyConfig, TinyDrafter, TinyDrafterConfig, TinyTarget};
use mtp_core::Backend;

/// A failed check, with what differed.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// A backend op or model call failed.
    #[error("{backend}: {message}")]
    Backend {
        /// The backend's name.
        backend: String,
        /// The error, as text.
        message: String,
    },
    /// Two results that must agree did not.
    #[error("{backend}: {check} differs: {detail}")]
    Mismatch {
        /// The backend's name.
        backend: String,
        /// Which check.
        check: &'static str,
        /// What differed.
        detail: String,
    },
}

fn op<B: Backend, T>(backend: &B, r: Result<T, B::Error>) -> Result<T, SuiteError> {
    r.map_err(|e| SuiteError::Backend {
        backend: backend.name(),
        message: e.to_string(),
    })
}

/// Greedy MTP equals plain greedy decode on `backend`, for a few tiny models, under batched,
/// serial and compare-serial validation.
pub fn greedy_mtp_matches_plain<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    for seed in 0..6 {
        let target = op(
            backend,
            TinyTarget::new(
                backend,
                TinyConfig {
                    seed,
                    ..TinyConfig::default()
                },
            ),
        )?;
        let drafter = op(
            backend,
            TinyDrafter::new(backend, &target, TinyDrafterConfig::default()),
        )?;
        let mut request = GenerateRequest::greedy(vec![1, 2, 3, 4, 5], 24);
        let no_env: mtp_core::engine::EnvLookup = std::sync::Arc::new(|_| None);
        let plain = op(
            backend,
            Engine::new(backend, &target)
                .with_env(no_env.clone())
                .generate(&request, &mut DiscardSink, &CancelToken::new()),
        )?;
        for validation in [
            ValidationMode::Batched,
            ValidationMode::Serial,
            ValidationMode::CompareSerial,
        ] {
            request.draft = DraftOverrides {
                validation: Some(validation),
                ..DraftOverrides::default()
            };
            let engine = Engine::new(backend, &target)
                .with_drafter(&drafter)
                .with_env(no_env.clone());
            let mtp = op(
                backend,
                engine.generate(&request, &mut DiscardSink, &CancelToken::new()),
            )?;
            if mtp.tokens != plain.tokens {
                return Err(SuiteError::Mismatch {
                    backend: backend.name(),
                    check: "greedy MTP vs plain greedy",
                    detail: format!(
                        "seed {seed}, {validation:?}: {:?} vs {:?}",
                        mtp.tokens, plain.tokens
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The tiny target's prompt logits on `backend` are within `rel_tol` (relative to the largest
/// logit magnitude) of the reference backend's.
pub fn logits_match_reference<B: Backend>(backend: &B, rel_tol: f32) -> Result<(), SuiteError> {
    let reference = ReferenceBackend::default();
    let prompt = [3u32, 1, 4, 1, 5, 9, 2, 6, 5, 3];
    let logits = |b: &B| -> Result<Vec<f32>, B::Error> {
        let t = TinyTarget::new(b, TinyConfig::default())?;
        let mut caches = t.new_caches(b)?;
        let ids = b.from_u32(&prompt, &[1, prompt.len()])?;
        let out = t.forward(b, &ids, 0, &mut caches)?;
        b.to_vec_f32(&t.unembed(b, &out.hidden)?)
    };
    let ours = op(backend, logits(backend))?;
    let theirs = {
        let t = op(
            &reference,
            TinyTarget::new(&reference, TinyConfig::default()),
        )?;
        let mut caches = op(&reference, t.new_caches(&reference))?;
        let ids = op(&reference, reference.from_u32(&prompt, &[1, prompt.len()]))?;
        let out = op(&reference, t.forward(&reference, &ids, 0, &mut caches))?;
        op(
            &reference,
            reference.to_vec_f32(&op(&reference, t.unembed(&reference, &out.hidden))?),
        )?
    };
    let scale = theirs.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
    let worst = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| (a - b).abs() / scale)
        .fold(0f32, f32::max);
    if ours.len() != theirs.len() || worst > rel_tol {
        return Err(SuiteError::Mismatch {
            backend: backend.name(),
            check: "tiny target logits",
            detail: format!("worst relative error {worst:e} (tolerance {rel_tol:e})"),
        });
    }
    Ok(())
}
