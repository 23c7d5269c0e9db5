//! The Gemma 4 target against HF transformers fixtures: logits, final hidden, incremental decode
//! through the caches, and greedy continuation with the engine.

mod common;

use common::{cases, ids_array, load_pair, max_rel_err, name, Reference, TOLERANCE};
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::model::TargetModel;
use mtp_core::Backend;

fn prefill_logits_and_hidden_match_hf<B: Backend>(b: &B) {
    let Some(cases) = cases() else { return };
    for dir in cases {
        let case = name(&dir);
        let mut reference = Reference::open(&dir);
        let prompt = reference.ids("prompt_ids");
        let (want_logits, shape) = reference.floats("target_logits");
        let (want_hidden, hshape) = reference.floats("target_last_hidden");
        let (target, _) = load_pair(b, &dir);
        let mut caches = target.new_caches(b).unwrap();
        let out = target
            .forward(b, &ids_array(b, &prompt), 0, &mut caches)
            .unwrap();
        let logits = b
            .to_vec_f32(&target.unembed(b, &out.hidden).unwrap())
            .unwrap();
        let hidden = b.to_vec_f32(&out.draft_hidden).unwrap();
        let logit_err = max_rel_err(&logits, &want_logits, shape[1]);
        let hidden_err = max_rel_err(&hidden, &want_hidden, hshape[1]);
        eprintln!(
            "{case}: target logits max rel err {logit_err:.2e}, last hidden {hidden_err:.2e}"
        );
        assert!(logit_err < TOLERANCE, "{case}: logits rel err {logit_err}");
        assert!(
            hidden_err < TOLERANCE,
            "{case}: hidden rel err {hidden_err}"
        );
    }
}

fn token_by_token_decode_matches_prefill_logits<B: Backend>(b: &B) {
    let Some(cases) = cases() else { return };
    for dir in cases {
        let case = name(&dir);
        let mut reference = Reference::open(&dir);
        let prompt = reference.ids("prompt_ids");
        let (want, shape) = reference.floats("target_logits");
        let (target, _) = load_pair(b, &dir);
        let mut caches = target.new_caches(b).unwrap();
        // A short prefill, then one token at a time: the rotating caches wrap the window.
        let split = 3.min(prompt.len());
        let mut rows = Vec::new();
        let out = target
            .forward(b, &ids_array(b, &prompt[..split]), 0, &mut caches)
            .unwrap();
        rows.extend(
            b.to_vec_f32(&target.unembed(b, &out.hidden).unwrap())
                .unwrap(),
        );
        for (p, &id) in prompt.iter().enumerate().skip(split) {
            let out = target
                .forward(b, &ids_array(b, &[id]), p, &mut caches)
                .unwrap();
            rows.extend(
                b.to_vec_f32(&target.unembed(b, &out.hidden).unwrap())
                    .unwrap(),
            );
        }
        let err = max_rel_err(&rows, &want, shape[1]);
        eprintln!("{case}: incremental logits max rel err {err:.2e}");
        assert!(err < TOLERANCE, "{case}: incremental rel err {err}");
    }
}

fn plain_greedy_continuation_matches_hf<B: Backend>(b: &B) {
    let Some(cases) = cases() else { return };
    for dir in cases {
        let case = name(&dir);
        let mut reference = Reference::open(&dir);
        let prompt = reference.ids("prompt_ids");
        let greedy = reference.ids("greedy_ids");
        let (target, _) = load_pair(b, &dir);
        let request = GenerateRequest::greedy(prompt, greedy.len());
        let response = Engine::new(b, &target)
            .generate(&request, &mut DiscardSink, &CancelToken::new())
            .unwrap();
        assert_eq!(response.tokens, greedy, "{case}: plain greedy");
    }
}

/// Masks are built once per forward per geometry, never per layer: a decode step builds at most
/// one (the sliding store layer's ring keeps one position more than its window, for the
/// assistant), a verify-shaped forward at most three (full, sliding, sliding store).
fn masks_are_built_once_per_forward_per_kind<B: Backend>(b: &B) {
    use mtp_core::attention::mask_tables_built;
    let Some(cases) = cases() else { return };
    for dir in cases {
        let case = name(&dir);
        let prompt = Reference::open(&dir).ids("prompt_ids");
        let (target, _) = load_pair(b, &dir);
        let mut caches = target.new_caches(b).unwrap();
        target
            .forward(b, &ids_array(b, &prompt[..2]), 0, &mut caches)
            .unwrap();
        for (p, &id) in prompt.iter().enumerate().skip(2) {
            let before = mask_tables_built();
            target
                .forward(b, &ids_array(b, &[id]), p, &mut caches)
                .unwrap();
            let built = mask_tables_built() - before;
            assert!(
                built <= 1,
                "{case}: a decode step at {p} built {built} masks"
            );
        }
        let before = mask_tables_built();
        target
            .forward(b, &ids_array(b, &prompt[..3]), prompt.len(), &mut caches)
            .unwrap();
        let built = mask_tables_built() - before;
        assert!(
            (1..=3).contains(&built),
            "{case}: a 3-token forward built {built} masks"
        );
    }
}

per_backend!(
    prefill_logits_and_hidden_match_hf,
    token_by_token_decode_matches_prefill_logits,
    plain_greedy_continuation_matches_hf,
    masks_are_built_once_per_forward_per_kind
);
