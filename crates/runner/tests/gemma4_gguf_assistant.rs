//! The Gemma 4 assistant from the GGUF files llama.cpp's converter writes
//! (`tests/fixtures/gemma4_gguf`): it drafts as the HF checkpoint it was converted from, takes
//! back HF's centroid-routed head from the HF directory (`--draft-centroids`), and greedy MTP
//! with it gives plain greedy decoding's tokens — the tokens llama.cpp's `draft-mtp` gives on the
//! same files, at every depth.

mod common;
mod gemma4_gguf_support;

use std::path::Path;
use std::sync::Arc;

use common::{ids_array, max_rel_err, TOLERANCE};
use gemma4_gguf_support::{case_dir, greedy, runs};
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::model::{MtpDrafter, TargetModel};
use mtp_core::options::DraftOverrides;
use mtp_core::Backend;
use runner::loading::{
    load_assistant, load_gguf_assistant, load_gguf_target, load_target, LoadOptions,
};
use runner::models::{Gemma4Assistant, Gemma4Target};

/// Draft steps chained after each prompt.
const STEPS: usize = 3;

/// The logits and projected hiddens of `STEPS` chained draft steps after `prompt`, each step
/// fed its own greedy token.
fn draft_chain<B: Backend>(
    b: &B,
    target: &Gemma4Target<B>,
    assistant: &Gemma4Assistant<B>,
    prompt: &[u32],
) -> (Vec<f32>, Vec<f32>, Vec<u32>) {
    let mut caches = target.new_caches(b).unwrap();
    let out = target
        .forward(b, &ids_array(b, prompt), 0, &mut caches)
        .unwrap();
    let last = prompt.len() - 1;
    let logits = target
        .unembed(b, &b.slice(&out.hidden, 1, last, 1).unwrap())
        .unwrap();
    let mut token = b.to_vec_u32(&b.argmax(&logits, 2).unwrap()).unwrap()[0];
    let mut h = b.slice(&out.draft_hidden, 1, last, 1).unwrap();
    let (mut all_logits, mut all_projected, mut tokens) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..STEPS {
        let embed = target.token_embeddings(b, &ids_array(b, &[token])).unwrap();
        let input = b.concat(&[&embed, &h], 2).unwrap();
        let step = assistant
            .draft_step(b, &input, prompt.len(), &caches)
            .unwrap();
        all_logits.extend(b.to_vec_f32(&step.logits).unwrap());
        all_projected.extend(b.to_vec_f32(&step.projected).unwrap());
        token = b.to_vec_u32(&b.argmax(&step.logits, 2).unwrap()).unwrap()[0];
        tokens.push(token);
        h = step.projected;
    }
    (all_logits, all_projected, tokens)
}

/// The HF target and the HF assistant in `hf/<assistant>` of the f32 case.
fn hf_pair<B: Backend>(b: &B, assistant: &str) -> (Gemma4Target<B>, Gemma4Assistant<B>) {
    let hf = case_dir("e2b_like").join("hf");
    let options = LoadOptions::default();
    let target = load_target(b, &hf.join("target"), &options).expect("HF target");
    let assistant =
        load_assistant(b, &hf.join(assistant), &target, &options).expect("HF assistant");
    (target, assistant)
}

/// The GGUF target and assistant `file` of the f32 case, with centroids from `centroids`.
fn gguf_pair<B: Backend>(
    b: &B,
    file: &str,
    centroids: Option<&Path>,
) -> (Gemma4Target<B>, Gemma4Assistant<B>) {
    let dir = case_dir("e2b_like");
    let options = LoadOptions::default();
    let target = load_gguf_target(b, &dir.join("target-f32.gguf"), &options).expect("target");
    let assistant = load_gguf_assistant(b, &dir.join(file), &target, &options, centroids)
        .expect("the converter's assistant GGUF loads");
    (target, assistant)
}

/// Chained draft steps of the two pairs agree within the fixtures' tolerance, token for token.
fn assert_same_drafts<B: Backend>(
    b: &B,
    what: &str,
    ours: &(Gemma4Target<B>, Gemma4Assistant<B>),
    theirs: &(Gemma4Target<B>, Gemma4Assistant<B>),
) {
    let vocab = ours.0.vocab_size();
    let width = ours.0.config().config.hidden_size;
    for run in runs("e2b_like") {
        let (la, pa, ta) = draft_chain(b, &ours.0, &ours.1, &run.prompt);
        let (lb, pb, tb) = draft_chain(b, &theirs.0, &theirs.1, &run.prompt);
        let (le, pe) = (max_rel_err(&la, &lb, vocab), max_rel_err(&pa, &pb, width));
        eprintln!(
            "{what} {:?}: logits {le:.2e}, projected {pe:.2e}",
            run.prompt
        );
        assert!(le < TOLERANCE, "{what}: draft logits rel err {le}");
        assert!(pe < TOLERANCE, "{what}: projected rel err {pe}");
        assert_eq!(ta, tb, "{what}: draft tokens");
    }
}

fn gguf_assistant_drafts_as_its_hf_checkpoint<B: Backend>(b: &B) {
    let gguf = gguf_pair(b, "assistant-f32.gguf", None);
    assert!(!gguf.1.config().use_ordered_embeddings);
    assert_same_drafts(b, "dense head", &gguf, &hf_pair(b, "assistant"));
}

/// The converter drops the ordered embedding; taken from the HF directory, it routes the head
/// as HF does, and without it the full-vocabulary head drafts (llama.cpp's behaviour).
fn centroids_from_the_hf_directory_restore_the_ordered_head<B: Backend>(b: &B) {
    let hf_dir = case_dir("e2b_like").join("hf/assistant_ordered");
    let restored = gguf_pair(b, "assistant_ordered-f32.gguf", Some(&hf_dir));
    assert!(restored.1.config().use_ordered_embeddings);
    assert_eq!(restored.1.config().num_centroids, 8);
    assert_same_drafts(
        b,
        "ordered head",
        &restored,
        &hf_pair(b, "assistant_ordered"),
    );

    let dense = gguf_pair(b, "assistant_ordered-f32.gguf", None);
    let run = &runs("e2b_like")[0];
    let (with, _, _) = draft_chain(b, &restored.0, &restored.1, &run.prompt);
    let (without, _, _) = draft_chain(b, &dense.0, &dense.1, &run.prompt);
    assert!(
        max_rel_err(&with, &without, dense.0.vocab_size()) > 1e-2,
        "without centroids the head is the dense one"
    );
}

/// A centroid source that does not fit the assistant is refused, naming the mismatch.
fn a_mismatched_centroid_source_is_refused<B: Backend>(b: &B) {
    let dir = case_dir("e2b_like");
    let options = LoadOptions::default();
    let target = load_gguf_target(b, &dir.join("target-f32.gguf"), &options).unwrap();
    let plain_hf = dir.join("hf/assistant");
    let err = load_gguf_assistant(
        b,
        &dir.join("assistant-f32.gguf"),
        &target,
        &options,
        Some(&plain_hf),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("use_ordered_embeddings"), "{err}");
    let other = case_dir("e2b_like_q8_0").join("hf/assistant");
    let err = load_gguf_assistant(
        b,
        &dir.join("assistant_ordered-f32.gguf"),
        &target,
        &options,
        Some(&other),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("centroid source"), "{err}");
}

/// An assistant GGUF for another target width is refused when paired.
fn a_pair_of_other_widths_is_refused<B: Backend>(b: &B) {
    let options = LoadOptions::default();
    let target = load_gguf_target(b, &case_dir("e2b_like").join("target-f32.gguf"), &options)
        .expect("target");
    let other = case_dir("e2b_like_q8_0").join("assistant-q8_0.gguf");
    let err = load_gguf_assistant(b, &other, &target, &options, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("backbone_hidden_size 64"), "{err}");
}

/// Greedy MTP with the assistant GGUF at each fixed depth gives plain greedy decoding's tokens
/// (f32, f16, Q8_0 and Q4_K_M files) and, on the f32 files, llama.cpp's `draft-mtp` tokens at the same depth, drafting and
/// accepting as many tokens: the E2B-like, 31B-like and MoE pairs.
fn greedy_mtp_with_the_gguf_assistant_equals_plain<B: Backend>(b: &B) {
    for (case, outtype) in [
        ("e2b_like", "f32"),
        ("dense_like", "f32"),
        ("moe_like", "f32"),
        ("e2b_like_f16", "f16"),
        ("e2b_like_q8_0", "q8_0"),
        ("wide_q4_k_m", "q4_k_m"),
    ] {
        let dir = case_dir(case);
        let options = LoadOptions::default();
        let target = load_gguf_target(b, &dir.join(format!("target-{outtype}.gguf")), &options)
            .expect("target");
        let assistant = load_gguf_assistant(
            b,
            &dir.join(format!("assistant-{outtype}.gguf")),
            &target,
            &options,
            None,
        )
        .expect("assistant");
        for run in runs(case) {
            let n = run.llama_greedy.len();
            let plain = greedy(b, &target, &run.prompt, n);
            // llama.cpp's greedy draft-mtp equals its plain decoding on float files; on
            // quantized ones its batched verification may round differently (printed).
            for (&depth, theirs) in &run.llama_by_depth {
                if theirs.ids != run.llama_greedy {
                    eprintln!(
                        "{case} {:?}: llama.cpp's draft-mtp at k={depth} leaves its own plain \
                         greedy tokens",
                        run.prompt
                    );
                    assert_ne!(
                        outtype, "f32",
                        "{case}: llama.cpp's f32 draft-mtp is its plain"
                    );
                }
            }
            for (&depth, theirs) in &run.llama_by_depth {
                let mut request = GenerateRequest::greedy(run.prompt.clone(), n);
                request.draft = DraftOverrides::constant(depth);
                let response = Engine::new(b, &target)
                    .with_drafter(&assistant)
                    .with_env(Arc::new(|_| None))
                    .generate(&request, &mut DiscardSink, &CancelToken::new())
                    .unwrap();
                let stats = response.mtp.as_ref().expect("an MTP run");
                eprintln!(
                    "{case} {:?} k={depth}: ours drafted {} accepted {}; llama.cpp drafted {} \
                     accepted {}",
                    run.prompt, stats.drafted, stats.accepted, theirs.drafted, theirs.accepted
                );
                assert!(stats.drafted > 0, "{case}: the drafter ran");
                assert_eq!(response.tokens, plain, "{case} k={depth}: MTP vs plain");
                // Where llama.cpp's plain decoding is ours (all f32 runs but one MoE prompt,
                // where its kernels leave HF's continuation at token 10).
                if outtype == "f32" && plain == run.llama_greedy {
                    assert_eq!(
                        response.tokens, theirs.ids,
                        "{case} k={depth}: ours vs llama.cpp's draft-mtp"
                    );
                    assert_eq!(
                        (stats.drafted as u64, stats.accepted as u64),
                        (theirs.drafted, theirs.accepted),
                        "{case} k={depth}: drafted and accepted, ours vs llama.cpp's"
                    );
                }
            }
        }
    }
}

per_backend!(
    gguf_assistant_drafts_as_its_hf_checkpoint,
    centroids_from_the_hf_directory_restore_the_ordered_head,
    a_mismatched_centroid_source_is_refused,
    a_pair_of_other_widths_is_refused,
    greedy_mtp_with_the_gguf_assistant_equals_plain
);

/// The memory estimate of a GGUF pair counts the assistant's tensors beside the target's, and
/// the KV cache of the target's own (not KV-shared) layers.
#[test]
fn the_memory_estimate_counts_both_gguf_files() {
    let dir = case_dir("e2b_like");
    let options = LoadOptions::default();
    let target = dir.join("target-f32.gguf");
    let alone = runner::loading::estimate_memory(&target, None, &options, 64).unwrap();
    let paired = runner::loading::estimate_memory(
        &target,
        Some(&dir.join("assistant-f32.gguf")),
        &options,
        64,
    )
    .unwrap();
    let file = runner::loading::gguf::GgufFile::open(&dir.join("assistant-f32.gguf")).unwrap();
    let assistant_bytes: u64 = file.tensors().values().map(|t| t.len as u64).sum();
    assert_eq!(paired.weights - alone.weights, assistant_bytes);
    assert_eq!(paired.kv_cache, alone.kv_cache);
    // Two own layers (sliding: window 8 + 1 positions, 1 KV head of 16; full: 64 positions,
    // 1 KV head of 32), keys and values in f32.
    assert_eq!(alone.kv_cache, (9 * 16 + 64 * 32) * 2 * 4);
}
