//! Helpers shared by the engine tests.
#![allow(dead_code)]

pub mod chi2;

use std::collections::HashMap;
use std::sync::Arc;

use mtp_core::cache::CacheSet;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, EnvLookup, GenerateRequest, Response};
use mtp_core::model::{MtpDrafter, TargetModel};
use mtp_core::options::{DraftOverrides, ValidationMode};
use mtp_core::reference::ReferenceBackend;
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{ScriptedDrafter, TinyConfig, TinyTarget};

pub type B = ReferenceBackend;

/// An environment with no `MTP_*` settings, so tests do not depend on the caller's shell.
pub fn no_env() -> EnvLookup {
    Arc::new(|_| None)
}

/// An environment with the given settings.
pub fn env(pairs: &[(&str, &str)]) -> EnvLookup {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(move |k| map.get(k).cloned())
}

pub fn target(config: TinyConfig) -> TinyTarget<B> {
    TinyTarget::new(&B::default(), config).expect("test model builds")
}

/// Plain greedy decode (no drafter).
pub fn plain(target: &TinyTarget<B>, request: &GenerateRequest) -> Response {
    let b = B::default();
    Engine::new(&b, target)
        .with_env(no_env())
        .generate(request, &mut DiscardSink, &CancelToken::new())
        .expect("plain decode runs")
}

/// Speculative decode with `drafter`, returning the response and the final caches.
pub fn speculative(
    target: &TinyTarget<B>,
    drafter: &dyn MtpDrafter<B>,
    request: &GenerateRequest,
) -> (Response, CacheSet<B>) {
    let b = B::default();
    let engine = Engine::new(&b, target)
        .with_drafter(drafter)
        .with_env(no_env());
    let mut caches = target.new_caches(&b).expect("caches");
    let response = engine
        .generate_with_caches(&mut caches, request, &mut DiscardSink, &CancelToken::new())
        .expect("speculative decode runs");
    (response, caches)
}

/// A drafter that knows the plain continuation of `request`.
pub fn scripted(
    target: &TinyTarget<B>,
    request: &GenerateRequest,
    accuracy: f64,
) -> ScriptedDrafter {
    let reference = plain(target, request);
    let mut sequence = request.prompt.clone();
    sequence.extend(&reference.tokens);
    ScriptedDrafter {
        sequence,
        accuracy,
        right_steps: None,
        seed: 7,
        vocab: target.config().vocab,
        hidden: target.config().hidden,
        confidence: 8.0,
    }
}

/// Draft overrides for a schedule, validation mode and depth.
pub fn draft(schedule: ScheduleKind, validation: ValidationMode, depth: usize) -> DraftOverrides {
    DraftOverrides {
        initial_draft_tokens: Some(depth),
        max_draft_tokens: Some(depth.max(8)),
        schedule: Some(schedule),
        validation: Some(validation),
        enabled: None,
    }
}
