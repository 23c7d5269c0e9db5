//! Gemma 4 at its published width against HF transformers: E2B's hidden size (1536), vocabulary
//! (262,144), per-layer inputs (256 per layer from a 262,144-row table), head dims (256 sliding,
//! 512 full), MLP (6144, double-wide on the KV-shared layers) and window (512) at reduced depth
//! (4 layers, the last two sharing KV), with E2B's assistant (width 256, 4 layers, the 2048-centroid
//! head choosing 4096 tokens). The weights are regenerated from the rule of
//! `tools/gemma4_fixtures/make_real_size.py` and checked byte for byte against what HF saved;
//! the reference is HF's float64 forward, greedy and assisted generation from them, and each
//! quantity may be off by [`TOLERANCE`] or by [`F32_SLACK`] times HF's own float32 error on it
//! (recorded beside the reference), whichever is larger: at this width the drafting chain
//! amplifies f32 rounding to ~1e-4 in HF too. Candle's CPU device (the host reference backend
//! computes these 10^9 weights too slowly for a unit test).

mod common;
mod real_size_support;

use std::sync::Arc;

use backend_candle::CandleBackend;
use common::{ids_array, max_rel_err, Reference, TOLERANCE};
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::model::{MtpDrafter, TargetModel};
use mtp_core::options::DraftOverrides;
use mtp_core::Backend;
use runner::loading::{estimate_memory, load_assistant, load_target, LoadOptions};
use runner::models::{Gemma4Assistant, Gemma4Target};

const CASE: &str = "e2b_4_layers";

/// How many times HF's own float32 error on a quantity ours may be (see the module doc).
const F32_SLACK: f32 = 4.0;

/// The bound on quantity `name`: [`TOLERANCE`], or [`F32_SLACK`] times HF's float32 error on it.
fn bound(name: &str) -> f32 {
    let text = std::fs::read_to_string(case_dir().join("reference.json")).expect("reference.json");
    let info: serde_json::Value = serde_json::from_str(&text).expect("reference.json");
    let hf = info["hf_float32_max_rel_err"][name]
        .as_f64()
        .unwrap_or_else(|| panic!("reference.json: no hf_float32_max_rel_err.{name}"));
    TOLERANCE.max(F32_SLACK * hf as f32)
}

fn case_dir() -> std::path::PathBuf {
    real_size_support::case_root().join(CASE)
}

fn load() -> (
    CandleBackend,
    Gemma4Target<CandleBackend>,
    Gemma4Assistant<CandleBackend>,
    Reference,
) {
    let case = case_dir();
    let checkpoint = real_size_support::checkpoint(&case);
    let b = CandleBackend::cpu();
    let options = LoadOptions::default();
    let started = std::time::Instant::now();
    let target = load_target(&b, &checkpoint.join("target"), &options).expect("target loads");
    let assistant = load_assistant(&b, &checkpoint.join("assistant"), &target, &options)
        .expect("assistant loads");
    eprintln!("{CASE}: loaded in {:.1} s", started.elapsed().as_secs_f64());
    (b, target, assistant, Reference::open(&case))
}

/// The largest relative error of each logits row at the probed ids.
fn probe_err(ours: &[f32], vocab: usize, probe: &[u32], want: &[f32]) -> f32 {
    let picked: Vec<f32> = ours
        .chunks(vocab)
        .flat_map(|row| probe.iter().map(|&id| row[id as usize]))
        .collect();
    max_rel_err(&picked, want, probe.len())
}

#[test]
fn full_width_e2b_prefill_and_greedy_match_hf() {
    let (b, target, _, mut reference) = load();
    let prompt = reference.ids("prompt_ids");
    let probe = reference.ids("probe_ids");
    let (want_probe, _) = reference.floats("target_logits_probe");
    let (want_last, _) = reference.floats("target_logits_last");
    let top_ids = reference.ids("target_top_ids");
    let (want_hidden, hshape) = reference.floats("target_last_hidden");
    let greedy = reference.ids("greedy_ids");
    let vocab = target.vocab_size();
    assert_eq!(vocab, 262_144);

    let mut caches = target.new_caches(&b).unwrap();
    let out = target
        .forward(&b, &ids_array(&b, &prompt), 0, &mut caches)
        .unwrap();
    let logits = b
        .to_vec_f32(&target.unembed(&b, &out.hidden).unwrap())
        .unwrap();
    let hidden = b.to_vec_f32(&out.draft_hidden).unwrap();
    let probe_error = probe_err(&logits, vocab, &probe, &want_probe);
    let last_error = max_rel_err(&logits[logits.len() - vocab..], &want_last, vocab);
    let hidden_error = max_rel_err(&hidden, &want_hidden, hshape[1]);
    eprintln!(
        "{CASE}: logits at {} probed ids max rel err {probe_error:.2e}, last row {last_error:.2e}, \
         final hidden {hidden_error:.2e}",
        probe.len()
    );
    let (logits_bound, hidden_bound) = (bound("target_logits"), bound("target_last_hidden"));
    assert!(
        probe_error < logits_bound,
        "probed logits rel err {probe_error}"
    );
    assert!(
        last_error < logits_bound,
        "last-row logits rel err {last_error}"
    );
    assert!(
        hidden_error < hidden_bound,
        "final hidden rel err {hidden_error}"
    );
    // HF's top-1 at every position is ours.
    let top_k = top_ids.len() / prompt.len();
    for (p, row) in logits.chunks(vocab).enumerate() {
        let ours = row
            .iter()
            .enumerate()
            .fold((0, f32::MIN), |m, (i, &v)| if v > m.1 { (i, v) } else { m })
            .0;
        assert_eq!(ours as u32, top_ids[p * top_k], "top-1 at position {p}");
    }

    let request = GenerateRequest::greedy(prompt, greedy.len());
    let response = Engine::new(&b, &target)
        .generate(&request, &mut DiscardSink, &CancelToken::new())
        .unwrap();
    assert_eq!(response.tokens, greedy, "plain greedy vs HF");
}

#[test]
fn full_width_e2b_assistant_matches_hf_and_mtp_is_plain_greedy() {
    let (b, target, assistant, mut reference) = load();
    let prompt = reference.ids("prompt_ids");
    let tokens = reference.ids("draft_token_ids");
    let position = reference.ids("draft_position")[0] as usize;
    let argmax = reference.ids("draft_argmax");
    let chosen = reference.ids("draft_chosen_ids");
    let (chosen_logits, cshape) = reference.floats("draft_chosen_logits");
    let (fill, _) = reference.floats("draft_fill");
    let (want_projected, pshape) = reference.floats("draft_hidden");
    let assisted = reference.ids("assisted_ids");
    let depth = reference.ids("num_assistant_tokens")[0] as usize;
    let vocab = target.vocab_size();
    let (width, k) = (pshape[1], cshape[1]);

    let mut caches = target.new_caches(&b).unwrap();
    let out = target
        .forward(&b, &ids_array(&b, &prompt), 0, &mut caches)
        .unwrap();
    let mut h = b.slice(&out.draft_hidden, 1, prompt.len() - 1, 1).unwrap();
    let (mut logit_err, mut projected_err) = (0f32, 0f32);
    for (j, &token) in tokens.iter().enumerate() {
        // HF's row: its chosen tokens' logits, the fill everywhere else.
        let mut want = vec![fill[j]; vocab];
        for (&id, &v) in chosen[j * k..(j + 1) * k]
            .iter()
            .zip(&chosen_logits[j * k..(j + 1) * k])
        {
            want[id as usize] = v;
        }
        let embed = target
            .token_embeddings(&b, &ids_array(&b, &[token]))
            .unwrap();
        let input = b.concat(&[&embed, &h], 2).unwrap();
        let step = assistant.draft_step(&b, &input, position, &caches).unwrap();
        let logits = b.to_vec_f32(&step.logits).unwrap();
        logit_err = logit_err.max(max_rel_err(&logits, &want, vocab));
        let projected = b.to_vec_f32(&step.projected).unwrap();
        projected_err = projected_err.max(max_rel_err(
            &projected,
            &want_projected[j * width..(j + 1) * width],
            width,
        ));
        let best = b.to_vec_u32(&b.argmax(&step.logits, 2).unwrap()).unwrap()[0];
        assert_eq!(best, argmax[j], "draft step {j} argmax");
        h = step.projected;
    }
    let (logits_bound, hidden_bound) = (bound("draft_logits"), bound("draft_hidden"));
    eprintln!(
        "{CASE}: draft logits max rel err {logit_err:.2e} (bound {logits_bound:.1e}), projected \
         hidden {projected_err:.2e} (bound {hidden_bound:.1e})"
    );
    assert!(logit_err < logits_bound, "draft logits rel err {logit_err}");
    assert!(
        projected_err < hidden_bound,
        "projected hidden rel err {projected_err}"
    );

    let mut request = GenerateRequest::greedy(prompt, assisted.len());
    request.draft = DraftOverrides::constant(depth);
    let response = Engine::new(&b, &target)
        .with_drafter(&assistant)
        .with_env(Arc::new(|_| None))
        .generate(&request, &mut DiscardSink, &CancelToken::new())
        .unwrap();
    let stats = response.mtp.as_ref().expect("an MTP run");
    assert!(stats.drafted > 0, "the assistant drafted");
    assert_eq!(
        response.tokens, assisted,
        "MTP vs HF assisted (== HF greedy)"
    );
}

/// The load plan's estimate of the weights is what loading them takes: the f32 arrays of every
/// tensor the target and assistant read.
#[test]
fn full_width_e2b_memory_estimate_counts_the_weights() {
    let case = case_dir();
    let checkpoint = real_size_support::checkpoint(&case);
    let options = LoadOptions::default();
    let estimate = estimate_memory(
        &checkpoint.join("target"),
        Some(&checkpoint.join("assistant")),
        &options,
        4096,
    )
    .expect("estimate");
    let stored: u64 = real_size_support::manifest(&case)
        .iter()
        .filter(|r| r.dtype == "BF16")
        .map(|r| r.shape.iter().product::<usize>() as u64 * 4)
        .sum();
    eprintln!(
        "{CASE}: estimate {:.2} GB weights, {:.2} GB KV at 4096, f32 weights stored {:.2} GB",
        estimate.weights as f64 / 1e9,
        estimate.kv_cache as f64 / 1e9,
        stored as f64 / 1e9
    );
    // Every f32 weight, less nothing but the assistant's integer token ordering (kept as ids).
    assert!(
        estimate.weights >= stored && estimate.weights <= stored + (4 << 20),
        "estimate {} vs stored {stored}",
        estimate.weights
    );
}
