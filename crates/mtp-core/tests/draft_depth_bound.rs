//! The bound on the draft depth through the engine: settings above
//! [`MAX_DRAFT_TOKENS_LIMIT`] are errors (no panic, no 10,000-deep round), and the depth is
//! clamped to the target's context.

mod common;

use common::*;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::options::{DraftOverrides, MAX_DRAFT_TOKENS_LIMIT};
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::TinyConfig;
use mtp_core::CoreError;

#[test]
fn an_environment_depth_above_the_limit_is_an_error_for_every_schedule() {
    let b = B::default();
    let t = target(TinyConfig::default());
    let req = GenerateRequest::greedy(vec![1, 2, 3], 8);
    let drafter = scripted(&t, &req, 1.0);
    for schedule in ["constant", "heuristic", "adaptive"] {
        let engine = Engine::new(&b, &t).with_drafter(&drafter).with_env(env(&[
            ("MTP_MAX_DRAFT_TOKENS", "18446744073709551615"),
            ("MTP_DRAFT_SCHEDULE", schedule),
        ]));
        let err = engine
            .generate(&req, &mut DiscardSink, &CancelToken::new())
            .expect_err("a depth of usize::MAX is rejected");
        assert!(
            matches!(
                &err,
                CoreError::DraftDepthTooLarge {
                    name: "MTP_MAX_DRAFT_TOKENS",
                    ..
                }
            ),
            "{schedule}: {err:?}"
        );
        assert!(err.to_string().contains("from 1 to 64"), "{err}");
    }
}

#[test]
fn a_request_depth_above_the_limit_is_an_error() {
    let b = B::default();
    let t = target(TinyConfig::default());
    let mut req = GenerateRequest::greedy(vec![1, 2, 3], 8);
    let drafter = scripted(&t, &req, 1.0);
    req.draft = DraftOverrides {
        max_draft_tokens: Some(10_000),
        schedule: Some(ScheduleKind::Adaptive),
        ..DraftOverrides::default()
    };
    let engine = Engine::new(&b, &t)
        .with_drafter(&drafter)
        .with_env(no_env());
    let err = engine
        .generate(&req, &mut DiscardSink, &CancelToken::new())
        .expect_err("a depth of 10,000 is rejected");
    assert!(
        matches!(
            err,
            CoreError::DraftDepthTooLarge {
                name: "max_draft_tokens",
                max: MAX_DRAFT_TOKENS_LIMIT,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn the_limit_runs_and_is_clamped_to_the_context() {
    let b = B::default();
    let t = target(TinyConfig {
        max_context: 24,
        ..TinyConfig::default()
    });
    let mut req = GenerateRequest::greedy(vec![1, 2, 3], 20);
    let drafter = scripted(&t, &req, 1.0);
    let reference = plain(&t, &req);
    for schedule in [ScheduleKind::Constant, ScheduleKind::Adaptive] {
        req.draft = DraftOverrides {
            initial_draft_tokens: Some(MAX_DRAFT_TOKENS_LIMIT),
            max_draft_tokens: Some(MAX_DRAFT_TOKENS_LIMIT),
            schedule: Some(schedule),
            ..DraftOverrides::default()
        };
        let engine = Engine::new(&b, &t)
            .with_drafter(&drafter)
            .with_env(no_env());
        let options = engine.mtp_options(&req).expect("the limit is accepted");
        assert_eq!(
            options.max_draft_tokens, 23,
            "context 24 holds current + 23 drafts"
        );
        assert_eq!(options.initial_draft_tokens, 23);
        let out = engine
            .generate(&req, &mut DiscardSink, &CancelToken::new())
            .expect("decodes");
        assert_eq!(out.tokens, reference.tokens, "{schedule}");
        let stats = out.mtp.expect("stats");
        assert!(stats.max_draft <= 23, "{schedule}: {}", stats.max_draft);
    }
}
