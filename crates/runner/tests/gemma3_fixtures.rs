//! Gemma 3 text against HF transformers fixtures (tools/gemma3_fixtures): the safetensors layout
//! and the dense GGUF files llama.cpp's converter made from the same checkpoint give HF's logits
//! and HF's greedy tokens, on every backend.

mod common;
mod gguf_support;

use std::path::{Path, PathBuf};

use common::{ids_array, max_rel_err, prefill_logits};
use gguf_support::fixture;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::model::TargetModel;
use mtp_core::{Backend, DType};
use runner::loading::LoadOptions;
use runner::models::registry::{load_target_model, Family};
use runner::models::LoadedTarget;

/// HF f32 against ours in f32 (relative to each row's largest logit).
const TOLERANCE: f32 = 1e-4;
/// The f16 GGUF against HF's f32 logits (weights rounded to f16).
const F16_TOLERANCE: f32 = 2e-2;

struct Run {
    prompt: Vec<u32>,
    greedy: Vec<u32>,
    /// First position of `logits`.
    logits_from: usize,
    logits: Vec<f32>,
    vocab: usize,
}

fn runs(case: &str) -> Vec<Run> {
    let path = fixture(&format!("gemma3/{case}/reference.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (tools/gemma3_fixtures)", path.display()));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| {
            let rows = run["logits"].as_array().unwrap();
            let vocab = rows[0].as_array().unwrap().len();
            Run {
                prompt: ids(&run["prompt_ids"]),
                greedy: ids(&run["greedy_ids"]),
                logits_from: run["logits_from"].as_u64().unwrap() as usize,
                logits: rows
                    .iter()
                    .flat_map(|r| r.as_array().unwrap().iter())
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect(),
                vocab,
            }
        })
        .collect()
}

fn load<B: Backend>(b: &B, path: &Path) -> LoadedTarget<B> {
    let options = LoadOptions::with_dtype(DType::F32);
    let (model, _) = load_target_model(b, path, &options, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(model.family(), Family::Gemma3);
    model
}

/// Logits of every prompt position, from one forward over the prompt.
fn sources() -> Vec<(PathBuf, &'static str, f32)> {
    vec![
        (fixture("gemma3/tiny/hf"), "tiny", TOLERANCE),
        (fixture("gemma3/scaled/hf"), "scaled", TOLERANCE),
        (fixture("gemma3/multimodal/hf"), "multimodal", TOLERANCE),
        (fixture("gemma3/tiny/model-f32.gguf"), "tiny", TOLERANCE),
        (fixture("gemma3/tiny/model-f16.gguf"), "tiny", F16_TOLERANCE),
    ]
}

fn prefill_logits_match_hf<B: Backend>(b: &B) {
    for (path, case, tolerance) in sources() {
        let model = load(b, &path);
        for (k, run) in runs(case).iter().enumerate() {
            let logits = prefill_logits(b, &model, &run.prompt);
            let got = &logits[run.logits_from * run.vocab..];
            let err = max_rel_err(got, &run.logits, run.vocab);
            eprintln!("{} run {k}: logits max rel err {err:.2e}", path.display());
            assert!(err < tolerance, "{}: run {k} rel err {err}", path.display());
        }
    }
}

fn incremental_decode_matches_hf<B: Backend>(b: &B) {
    for (path, case, tolerance) in sources().into_iter().take(3) {
        let model = load(b, &path);
        let run = &runs(case)[0];
        let mut caches = model.new_caches(b).unwrap();
        // Two tokens, then one at a time: the sliding layers' rings wrap the window.
        let split = 2;
        let out = model
            .forward(b, &ids_array(b, &run.prompt[..split]), 0, &mut caches)
            .unwrap();
        let mut rows = b
            .to_vec_f32(&model.unembed(b, &out.hidden).unwrap())
            .unwrap();
        for (p, &id) in run.prompt.iter().enumerate().skip(split) {
            let out = model
                .forward(b, &ids_array(b, &[id]), p, &mut caches)
                .unwrap();
            rows.extend(
                b.to_vec_f32(&model.unembed(b, &out.hidden).unwrap())
                    .unwrap(),
            );
        }
        let err = max_rel_err(&rows, &run.logits, run.vocab);
        eprintln!(
            "{}: incremental logits max rel err {err:.2e}",
            path.display()
        );
        assert!(
            err < tolerance,
            "{}: incremental rel err {err}",
            path.display()
        );
    }
}

fn greedy_matches_hf<B: Backend>(b: &B) {
    for (path, case, _) in sources() {
        let model = load(b, &path);
        for (k, run) in runs(case).iter().enumerate() {
            let request = GenerateRequest::greedy(run.prompt.clone(), run.greedy.len());
            let response = Engine::new(b, &model)
                .generate(&request, &mut DiscardSink, &CancelToken::new())
                .unwrap();
            assert_eq!(response.tokens, run.greedy, "{}: run {k}", path.display());
        }
    }
}

/// Attention masks cost nothing on a decode step and one table per layer kind on a verify-shaped
/// forward (not one per layer): the count of tables built on this thread tells.
fn decode_builds_no_mask_and_verify_one_per_kind<B: Backend>(b: &B) {
    use mtp_core::attention::mask_tables_built;
    let model = load(b, &fixture("gemma3/tiny/hf"));
    let prompt = &runs("tiny")[0].prompt;
    let mut caches = model.new_caches(b).unwrap();
    model
        .forward(b, &ids_array(b, &prompt[..2]), 0, &mut caches)
        .unwrap();
    let before = mask_tables_built();
    // Single tokens, past the sliding window: full layers see every key, sliding ones their ring.
    for (p, &id) in prompt.iter().enumerate().skip(2) {
        model
            .forward(b, &ids_array(b, &[id]), p, &mut caches)
            .unwrap();
    }
    assert_eq!(mask_tables_built(), before, "a decode step built a mask");
    let at = prompt.len();
    model
        .forward(b, &ids_array(b, &prompt[..3]), at, &mut caches)
        .unwrap();
    let built = mask_tables_built() - before;
    assert!(
        (1..=2).contains(&built),
        "a 3-token forward built {built} masks (one per layer kind at most)"
    );
}

per_backend!(
    prefill_logits_match_hf,
    incremental_decode_matches_hf,
    greedy_matches_hf,
    decode_builds_no_mask_and_verify_one_per_kind
);

/// The multimodal layout's vision tower and projector are skipped, never read: the load reports
/// them as deliberately unused, and a `gemma3` config without its `text_config` is a clear
/// error.
#[test]
fn multimodal_layout_skips_the_vision_tower_and_needs_a_text_config() {
    let b = mtp_core::reference::ReferenceBackend::default();
    let dir = fixture("gemma3/multimodal/hf");
    let (_, report) = load_target_model(&b, &dir, &LoadOptions::default(), &mut |_, _| {}).unwrap();
    assert!(report.stats.skipped_tensors > 0, "{:?}", report.stats);

    let broken = tempfile::tempdir().unwrap();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("text_config");
    std::fs::write(broken.path().join("config.json"), config.to_string()).unwrap();
    std::fs::copy(
        dir.join("model.safetensors"),
        broken.path().join("model.safetensors"),
    )
    .unwrap();
    let Err(err) = load_target_model(&b, broken.path(), &LoadOptions::default(), &mut |_, _| {})
    else {
        panic!("a gemma3 config without text_config loaded");
    };
    assert!(err.to_string().contains("text_config"), "{err}");
}

/// The memory estimate reads Gemma 3 configs (text and multimodal): the text weights only
/// (the vision tower is never loaded) and a KV cache sized from the text config.
#[test]
fn memory_estimate_reads_gemma3_configs() {
    use runner::loading::estimate_memory;
    for case in ["tiny", "multimodal"] {
        let dir = fixture(&format!("gemma3/{case}/hf"));
        let e = estimate_memory(&dir, None, &LoadOptions::default(), 100).unwrap();
        // 6 layers, 1 KV head of 16, f32: 1 full layer at 100 positions, 5 sliding at 9.
        assert_eq!(e.kv_cache, 2 * 16 * 4 * (100 + 5 * 9), "{case}");
        assert!(e.weights > 0, "{case}");
    }
}
