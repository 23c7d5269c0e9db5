//! A Gemma 4 assistant drafting for a Gemma 3 target (tools/gemma3_fixtures/
//! make_assistant_fixture.py): loaded through the drafter registry for the tiny Gemma 3 (its HF
//! directory and llama.cpp's f32 GGUF of it), each draft step's logits are HF's
//! `Gemma4AssistantForCausalLM` fed the target's last sliding and last full layer as
//! `shared_kv_states`, and greedy speculation with it emits exactly plain greedy decoding, on
//! every backend.

mod common;
mod gguf_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{ids_array, max_rel_err, TOLERANCE};
use gguf_support::fixture;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::model::{MtpDrafter, TargetModel};
use mtp_core::options::DraftOverrides;
use mtp_core::{Backend, DType};
use runner::loading::{LoadError, LoadOptions};
use runner::models::registry::{load_drafter_model, load_target_model, Family};
use runner::models::{LoadedDrafter, LoadedTarget};

/// One recorded chain: the prompt, the target's first token and each step's logits.
struct Chain {
    prompt: Vec<u32>,
    first_token: u32,
    steps: Vec<(u32, Vec<f32>)>,
}

fn chains() -> Vec<Chain> {
    let path = fixture("gemma3/tiny/assistant_reference.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (tools/gemma3_fixtures)", path.display()));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let num = |v: &serde_json::Value| v.as_u64().unwrap() as u32;
    json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| Chain {
            prompt: run["prompt_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(num)
                .collect(),
            first_token: num(&run["first_token"]),
            steps: run["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let logits = s["logits"].as_array().unwrap();
                    let logits = logits.iter().map(|x| x.as_f64().unwrap() as f32).collect();
                    (num(&s["argmax"]), logits)
                })
                .collect(),
        })
        .collect()
}

/// The tiny Gemma 3 from both of its sources.
fn targets() -> Vec<PathBuf> {
    vec![
        fixture("gemma3/tiny/hf"),
        fixture("gemma3/tiny/model-f32.gguf"),
    ]
}

fn load<B: Backend>(b: &B, path: &Path) -> (LoadedTarget<B>, LoadedDrafter<B>) {
    let options = LoadOptions::with_dtype(DType::F32);
    let (target, _) = load_target_model(b, path, &options, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(target.family(), Family::Gemma3);
    let drafter = load_drafter_model(b, &fixture("gemma3/tiny/assistant"), &target, &options)
        .unwrap_or_else(|e| panic!("assistant for {}: {e}", path.display()));
    (target, drafter)
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// After the prompt, the chain HF's assistant drafted: the same logits at every step.
fn draft_steps_match_hf<B: Backend>(b: &B) {
    for path in targets() {
        let (target, drafter) = load(b, &path);
        for (k, chain) in chains().iter().enumerate() {
            let mut caches = target.new_caches(b).unwrap();
            let n = chain.prompt.len();
            let out = target
                .forward(b, &ids_array(b, &chain.prompt), 0, &mut caches)
                .unwrap();
            let logits = b
                .to_vec_f32(&target.unembed(b, &out.hidden).unwrap())
                .unwrap();
            let vocab = target.vocab_size();
            let mut token = argmax(&logits[(n - 1) * vocab..]);
            assert_eq!(token, chain.first_token, "{}: run {k}", path.display());
            let mut hidden = b.slice(&out.draft_hidden, 1, n - 1, 1).unwrap();
            for (s, (hf_argmax, hf_logits)) in chain.steps.iter().enumerate() {
                let embedded = target.token_embeddings(b, &ids_array(b, &[token])).unwrap();
                let input = b.concat(&[&embedded, &hidden], 2).unwrap();
                let step = drafter.draft_step(b, &input, n, &caches).unwrap();
                let ours = b.to_vec_f32(&step.logits).unwrap();
                let err = max_rel_err(&ours, hf_logits, vocab);
                eprintln!("{} run {k} step {s}: max rel err {err:.2e}", path.display());
                assert!(
                    err < TOLERANCE,
                    "{}: run {k} step {s}: {err}",
                    path.display()
                );
                token = argmax(&ours);
                assert_eq!(token, *hf_argmax, "{}: run {k} step {s}", path.display());
                hidden = step.projected;
            }
        }
    }
}

/// Greedy speculation with the assistant emits plain greedy decoding's tokens, at every depth.
fn greedy_speculation_is_plain_greedy<B: Backend>(b: &B) {
    for path in targets() {
        let (target, drafter) = load(b, &path);
        let no_env = Arc::new(|_: &str| None);
        for chain in chains() {
            let plain = GenerateRequest::greedy(chain.prompt.clone(), 24);
            let expected = Engine::new(b, &target)
                .with_env(no_env.clone())
                .generate(&plain, &mut DiscardSink, &CancelToken::new())
                .unwrap()
                .tokens;
            for depth in 1..=3 {
                let mut request = plain.clone();
                request.draft = DraftOverrides::constant(depth);
                let response = Engine::new(b, &target)
                    .with_drafter(&drafter)
                    .with_env(no_env.clone())
                    .generate(&request, &mut DiscardSink, &CancelToken::new())
                    .unwrap();
                let stats = response.mtp.expect("an MTP run");
                assert!(stats.drafted > 0, "depth {depth}: nothing drafted");
                assert_eq!(
                    response.tokens,
                    expected,
                    "{}: depth {depth}",
                    path.display()
                );
            }
        }
    }
}

per_backend!(draft_steps_match_hf, greedy_speculation_is_plain_greedy);

/// An assistant whose sliding window reads more positions than the Gemma 3 target's cache
/// keeps between forwards is refused, saying the largest window that fits.
#[test]
fn an_assistant_window_wider_than_the_target_keeps_is_refused() {
    let b = mtp_core::reference::ReferenceBackend::default();
    let dir = tempfile::tempdir().unwrap();
    let source = fixture("gemma3/tiny/assistant");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).unwrap())
            .unwrap();
    // The target's window is 8: HF's cache keeps 7 positions, a window of 6 reads 7.
    for (window, fits) in [(6, true), (7, false)] {
        config["text_config"]["sliding_window"] = serde_json::json!(window);
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        std::fs::copy(
            source.join("model.safetensors"),
            dir.path().join("model.safetensors"),
        )
        .unwrap();
        let options = LoadOptions::with_dtype(DType::F32);
        let (target, _) =
            load_target_model(&b, &fixture("gemma3/tiny/hf"), &options, &mut |_, _| {}).unwrap();
        match load_drafter_model(&b, dir.path(), &target, &options) {
            Ok(_) => assert!(fits, "window {window} loaded"),
            Err(LoadError::DrafterMismatch { reason }) => {
                assert!(!fits, "window {window}: {reason}");
                for part in ["sliding_window 7", "keeps 7", "at most 6"] {
                    assert!(reason.contains(part), "{part:?} missing: {reason}");
                }
            }
            Err(other) => panic!("window {window}: {other}"),
        }
    }
}
