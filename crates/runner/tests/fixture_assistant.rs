//! The Gemma 4 assistant against HF transformers fixtures: the first draft round (logits and
//! projected hidden of every step) and greedy MTP through the engine.

mod common;

use std::sync::Arc;

use common::{cases, ids_array, load_pair, max_rel_err, name, Reference, TOLERANCE};
use mtp_core::engine::{CancelToken, DiscardSink, Engine, EvalOverlap, GenerateRequest};
use mtp_core::model::{MtpDrafter, TargetModel};
use mtp_core::options::DraftOverrides;
use mtp_core::Backend;

fn first_draft_round_matches_hf<B: Backend>(b: &B) {
    let Some(cases) = cases() else { return };
    for dir in cases {
        let case = name(&dir);
        let mut reference = Reference::open(&dir);
        let prompt = reference.ids("prompt_ids");
        let tokens = reference.ids("draft_token_ids");
        let position = reference.ids("draft_position")[0] as usize;
        let argmax = reference.ids("draft_argmax");
        let (want_logits, lshape) = reference.floats("draft_logits");
        let (want_hidden, hshape) = reference.floats("draft_hidden");
        let (want_inputs, _) = reference.floats("draft_input_hidden");
        let (target, assistant) = load_pair(b, &dir);
        assert_eq!(
            position,
            prompt.len(),
            "{case}: the chain runs at current's position"
        );

        let mut caches = target.new_caches(b).unwrap();
        let out = target
            .forward(b, &ids_array(b, &prompt), 0, &mut caches)
            .unwrap();
        let mut h = b.slice(&out.draft_hidden, 1, prompt.len() - 1, 1).unwrap();
        let (vocab, width) = (lshape[1], hshape[1]);
        let (mut logit_err, mut hidden_err, mut input_err) = (0f32, 0f32, 0f32);
        for (j, &token) in tokens.iter().enumerate() {
            let row = |v: &[f32], n: usize| v[j * n..(j + 1) * n].to_vec();
            input_err = input_err.max(max_rel_err(
                &b.to_vec_f32(&h).unwrap(),
                &row(&want_inputs, width),
                width,
            ));
            let embed = target.token_embeddings(b, &ids_array(b, &[token])).unwrap();
            let input = b.concat(&[&embed, &h], 2).unwrap();
            let step = assistant.draft_step(b, &input, position, &caches).unwrap();
            let logits = b.to_vec_f32(&step.logits).unwrap();
            logit_err = logit_err.max(max_rel_err(&logits, &row(&want_logits, vocab), vocab));
            let projected = b.to_vec_f32(&step.projected).unwrap();
            hidden_err = hidden_err.max(max_rel_err(&projected, &row(&want_hidden, width), width));
            let best = b.to_vec_u32(&b.argmax(&step.logits, 2).unwrap()).unwrap()[0];
            assert_eq!(best, argmax[j], "{case}: draft step {j} argmax");
            h = step.projected;
        }
        eprintln!(
            "{case}: draft logits max rel err {logit_err:.2e}, projected {hidden_err:.2e}, \
             chained input hidden {input_err:.2e}"
        );
        assert!(
            logit_err < TOLERANCE,
            "{case}: draft logits rel err {logit_err}"
        );
        assert!(
            hidden_err < TOLERANCE,
            "{case}: projected rel err {hidden_err}"
        );
        assert!(
            input_err < TOLERANCE,
            "{case}: input hidden rel err {input_err}"
        );
    }
}

fn greedy_mtp_equals_hf_assisted_and_plain_greedy<B: Backend>(b: &B) {
    let Some(cases) = cases() else { return };
    for dir in cases {
        let case = name(&dir);
        let mut reference = Reference::open(&dir);
        let prompt = reference.ids("prompt_ids");
        let assisted = reference.ids("assisted_ids");
        let greedy = reference.ids("greedy_ids");
        let depth = reference.ids("num_assistant_tokens")[0] as usize;
        let (target, assistant) = load_pair(b, &dir);
        let mut request = GenerateRequest::greedy(prompt, assisted.len());
        request.draft = DraftOverrides::constant(depth);
        // The backend's default overlap (on for MLX), then forced on and off: the same
        // tokens and the same acceptance every time.
        let mut counts = Vec::new();
        for overlap in [EvalOverlap::Auto, EvalOverlap::Always, EvalOverlap::Never] {
            let engine = Engine::new(b, &target)
                .with_drafter(&assistant)
                .with_env(Arc::new(|_| None))
                .with_overlap(overlap);
            let response = engine
                .generate(&request, &mut DiscardSink, &CancelToken::new())
                .unwrap();
            let stats = response.mtp.as_ref().expect("an MTP run");
            eprintln!(
                "{case} ({overlap:?}): MTP drafted {} accepted {} in {} rounds",
                stats.drafted, stats.accepted, stats.iterations
            );
            assert!(stats.drafted > 0, "{case}: the drafter ran");
            assert_eq!(response.tokens, assisted, "{case}: MTP vs HF assisted");
            assert_eq!(response.tokens, greedy, "{case}: MTP vs plain greedy");
            counts.push((stats.iterations, stats.drafted, stats.accepted));
        }
        assert!(
            counts.windows(2).all(|w| w[0] == w[1]),
            "{case}: the overlap changed acceptance: {counts:?}"
        );
    }
}

per_backend!(
    first_draft_round_matches_hf,
    greedy_mtp_equals_hf_assisted_and_plain_greedy
);
