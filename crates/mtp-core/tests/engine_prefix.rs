//! Prefix reuse across requests (`Engine::generate_reusing`): a second request that resends the
//! first one's prompt and output reuses those positions and generates exactly what a fresh
//! generation of the same prompt gives — plain and speculative, with full and sliding-window
//! layers; a diverging prompt reuses only the common prefix (or, when a wrapped sliding window
//! cannot be cut there, nothing); what was never emitted is never held.

mod common;

use common::*;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest, PrefixCache, Response};
use mtp_core::model::MtpDrafter;
use mtp_core::options::ValidationMode;
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{LayerKind, TinyConfig, TinyTarget};

const FIRST: [u32; 8] = [3, 1, 4, 1, 5, 9, 2, 6];

fn config(layers: Vec<LayerKind>) -> TinyConfig {
    TinyConfig {
        layers,
        ..TinyConfig::default()
    }
}

fn reusing(
    target: &TinyTarget<B>,
    drafter: Option<&dyn MtpDrafter<B>>,
    held: &mut PrefixCache<B>,
    request: &GenerateRequest,
) -> Response {
    let b = B::default();
    let engine = Engine::new(&b, target).with_env(no_env());
    let engine = match drafter {
        Some(d) => engine.with_drafter(d),
        None => engine,
    };
    engine
        .generate_reusing(held, request, &mut DiscardSink, &CancelToken::new())
        .expect("generation runs")
}

fn greedy(prompt: Vec<u32>, n: usize) -> GenerateRequest {
    let mut r = GenerateRequest::greedy(prompt, n);
    r.draft = draft(ScheduleKind::Constant, ValidationMode::Batched, 3);
    r
}

fn layouts() -> [Vec<LayerKind>; 2] {
    [
        vec![LayerKind::Full, LayerKind::Full],
        vec![LayerKind::Sliding { window: 4 }, LayerKind::Full],
    ]
}

#[test]
fn a_second_turn_reuses_the_first_and_equals_a_fresh_generation() {
    for layers in layouts() {
        let t = target(config(layers.clone()));
        let mut held = PrefixCache::new();
        let first = reusing(&t, None, &mut held, &greedy(FIRST.to_vec(), 12));
        assert_eq!(first.prompt_cached, 0, "{layers:?}: nothing held yet");
        assert_eq!(first.tokens, plain(&t, &greedy(FIRST.to_vec(), 12)).tokens);
        // The caches hold the prompt and every emitted token but the last (never forwarded).
        let fed = FIRST.len() + first.tokens.len() - 1;
        assert_eq!(held.tokens().len(), fed, "{layers:?}");

        let mut second: Vec<u32> = FIRST.to_vec();
        second.extend(&first.tokens);
        second.extend([7, 8, 2]);
        let reused = reusing(&t, None, &mut held, &greedy(second.clone(), 10));
        assert_eq!(
            reused.prompt_cached, fed,
            "{layers:?}: the whole history reused"
        );
        assert_eq!(reused.prompt_eval_count, second.len() - fed);
        let fresh = plain(&t, &greedy(second.clone(), 10));
        assert_eq!(
            reused.tokens, fresh.tokens,
            "{layers:?}: as a fresh generation"
        );
        assert_eq!(fresh.prompt_cached, 0);
    }
}

#[test]
fn speculative_turns_reuse_and_stay_exact() {
    for layers in layouts() {
        let t = target(config(layers.clone()));
        let mut held = PrefixCache::new();
        let first_request = greedy(FIRST.to_vec(), 14);
        let drafter = scripted(&t, &first_request, 0.7);
        let first = reusing(&t, Some(&drafter), &mut held, &first_request);
        assert_eq!(first.tokens, plain(&t, &first_request).tokens);
        assert!(first.mtp.as_ref().is_some_and(|m| m.accepted > 0));
        let mut second: Vec<u32> = FIRST.to_vec();
        second.extend(&first.tokens);
        second.extend([11, 4]);
        let second_request = greedy(second.clone(), 12);
        let drafter = scripted(&t, &second_request, 0.7);
        let reused = reusing(&t, Some(&drafter), &mut held, &second_request);
        assert!(reused.prompt_cached > FIRST.len(), "{layers:?}: {reused:?}");
        assert_eq!(
            reused.tokens,
            plain(&t, &second_request).tokens,
            "{layers:?}"
        );
    }
}

#[test]
fn a_diverging_prompt_reuses_only_what_can_be_cut_back_exactly() {
    for layers in layouts() {
        let t = target(config(layers.clone()));
        let mut held = PrefixCache::new();
        reusing(&t, None, &mut held, &greedy(FIRST.to_vec(), 12));
        let diverging: Vec<u32> = FIRST[..5].iter().copied().chain([30, 31, 12]).collect();
        let out = reusing(&t, None, &mut held, &greedy(diverging.clone(), 10));
        let wrapped = layers.contains(&LayerKind::Sliding { window: 4 });
        // 19 positions were held: a window of 4 has wrapped past position 5, so it cannot be
        // cut there and the prompt is evaluated from the start.
        assert_eq!(out.prompt_cached, if wrapped { 0 } else { 5 }, "{layers:?}");
        assert_eq!(out.tokens, plain(&t, &greedy(diverging.clone(), 10)).tokens);
        // A prompt equal to the held tokens still evaluates its last token: the caches are cut
        // by one position (a wrapped window cannot be, so it starts over).
        let again = held.tokens().to_vec();
        let out = reusing(&t, None, &mut held, &greedy(again.clone(), 4));
        let expected = if wrapped { 0 } else { again.len() - 1 };
        assert_eq!(out.prompt_cached, expected, "{layers:?}");
        assert_eq!(out.tokens, plain(&t, &greedy(again, 4)).tokens);
    }
}

#[test]
fn a_stopped_generation_holds_only_what_was_emitted() {
    let t = target(config(vec![LayerKind::Full, LayerKind::Full]));
    let mut held = PrefixCache::new();
    let request = greedy(FIRST.to_vec(), 20);
    let drafter = scripted(&t, &request, 1.0);
    let b = B::default();
    let engine = Engine::new(&b, &t)
        .with_drafter(&drafter)
        .with_env(no_env());
    // The sink stops after 5 tokens, in the middle of a fully accepted round.
    let mut count = 0;
    let mut sink = |_id: u32| {
        count += 1;
        if count >= 5 {
            mtp_core::engine::SinkFlow::Stop
        } else {
            mtp_core::engine::SinkFlow::Continue
        }
    };
    let out = engine
        .generate_reusing(&mut held, &request, &mut sink, &CancelToken::new())
        .unwrap();
    assert_eq!(out.tokens.len(), 5);
    let emitted: Vec<u32> = FIRST.iter().chain(&out.tokens).copied().collect();
    assert!(held.tokens().len() <= emitted.len());
    assert_eq!(held.tokens(), &emitted[..held.tokens().len()]);
}
