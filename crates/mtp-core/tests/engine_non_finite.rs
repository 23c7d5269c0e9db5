//! A target whose weights are NaN computes NaN logits: every decode mode stops with
//! `CoreError::NonFiniteLogits` instead of emitting arbitrary tokens (greedy rounds read the
//! device-side flag with their argmax ids; host rows are checked before sampling).

mod common;

use common::*;
use mtp_core::cache::CacheSet;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, EvalOverlap, GenerateRequest};
use mtp_core::model::{MtpDrafter, TargetModel, TargetOutput};
use mtp_core::options::ValidationMode;
use mtp_core::sampling::SamplerOptions;
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{TinyConfig, TinyDrafter, TinyDrafterConfig, TinyTarget};
use mtp_core::{Backend, CoreError, DType};

/// A finite target whose hidden states (so its logits) turn NaN from position `from` on: the
/// prompt and the first tokens are fine, later verification rounds meet NaN.
struct NanFrom {
    inner: TinyTarget<B>,
    from: usize,
}

impl TargetModel<B> for NanFrom {
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
    fn max_context(&self) -> usize {
        self.inner.max_context()
    }
    fn new_caches(&self, backend: &B) -> Result<CacheSet<B>, CoreError> {
        self.inner.new_caches(backend)
    }
    fn forward(
        &self,
        backend: &B,
        ids: &<B as Backend>::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, CoreError> {
        let out = self.inner.forward(backend, ids, start, caches)?;
        let t = backend.shape(ids)[1];
        let mask: Vec<f32> = (start..start + t)
            .map(|p| if p >= self.from { f32::NAN } else { 1.0 })
            .collect();
        let mask = backend.from_f32(&mask, &[1, t, 1], DType::F32)?;
        Ok(TargetOutput {
            hidden: backend.mul(&out.hidden, &mask)?,
            draft_hidden: out.draft_hidden,
        })
    }
    fn unembed(
        &self,
        backend: &B,
        hidden: &<B as Backend>::Array,
    ) -> Result<<B as Backend>::Array, CoreError> {
        self.inner.unembed(backend, hidden)
    }
    fn token_embeddings(
        &self,
        backend: &B,
        ids: &<B as Backend>::Array,
    ) -> Result<<B as Backend>::Array, CoreError> {
        self.inner.token_embeddings(backend, ids)
    }
}

#[test]
fn nan_logits_in_a_later_round_stop_every_mode_there() {
    let b = B::default();
    let from = 6;
    let model = NanFrom {
        inner: target(TinyConfig::default()),
        from,
    };
    let drafter =
        TinyDrafter::new(&b, &model.inner, TinyDrafterConfig::default()).expect("drafter");
    every_mode_fails(&model, &drafter, &|position| position >= from);
}

/// Every sampling kind, validation mode and overlap, plain and MTP, on `target` (with
/// `drafter`), stops with `NonFiniteLogits` at a position `expected` accepts.
fn every_mode_fails(
    target: &dyn TargetModel<B>,
    drafter: &dyn MtpDrafter<B>,
    expected: &dyn Fn(usize) -> bool,
) {
    let b = B::default();
    for sampling in [greedy(), penalised(), sampled()] {
        for validation in [
            ValidationMode::Batched,
            ValidationMode::Serial,
            ValidationMode::CompareSerial,
        ] {
            for overlap in [EvalOverlap::Never, EvalOverlap::Always] {
                let mut request = GenerateRequest::greedy(vec![1, 2, 3], 16);
                request.sampling = sampling.clone();
                request.draft = draft(ScheduleKind::Constant, validation, 2);
                let plain = Engine::new(&b, target)
                    .with_env(no_env())
                    .with_overlap(overlap);
                let mtp = plain.clone().with_drafter(drafter);
                for (engine, kind) in [(plain, "plain"), (mtp, "mtp")] {
                    let what = format!("{sampling:?} {kind} {validation:?} {overlap:?}");
                    match engine.generate(&request, &mut DiscardSink, &CancelToken::new()) {
                        Err(CoreError::NonFiniteLogits { position }) => {
                            assert!(expected(position), "{what}: position {position}")
                        }
                        other => panic!("{what}: expected NonFiniteLogits, got {other:?}"),
                    }
                }
            }
        }
    }
}

fn nan_target() -> TinyTarget<B> {
    target(TinyConfig {
        gain: f32::NAN,
        ..TinyConfig::default()
    })
}

fn greedy() -> SamplerOptions {
    SamplerOptions::default()
}

fn penalised() -> SamplerOptions {
    SamplerOptions {
        repeat_penalty: 1.3,
        ..SamplerOptions::default()
    }
}

fn sampled() -> SamplerOptions {
    SamplerOptions {
        temperature: 0.8,
        seed: Some(1),
        ..SamplerOptions::default()
    }
}

#[test]
fn nan_weights_are_an_error_in_every_mode() {
    let b = B::default();
    let target = nan_target();
    let drafter = TinyDrafter::new(&b, &target, TinyDrafterConfig::default()).expect("drafter");
    // The prompt's last position: prefill already fails.
    every_mode_fails(&target, &drafter, &|position| position == 2);
}

#[test]
fn the_error_names_the_problem() {
    let message = CoreError::NonFiniteLogits { position: 7 }.to_string();
    assert!(message.contains("position 7"), "{message}");
    assert!(message.contains("not finite"), "{message}");
}
