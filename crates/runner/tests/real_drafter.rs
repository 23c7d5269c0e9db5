//! The drafter trained for the real model (`models/gemma-3-270m-drafter`, a Gemma 4 assistant
//! drafting for Gemma 3 270M Q4_K_M through the target's last sliding and full layers): greedy
//! speculation with it equals plain greedy decoding token for token, on candle-cpu and on the
//! reference backend, and its drafts are accepted.
//!
//! The target GGUF is not committed: `tools/real_models/fetch.py` downloads it (`.ci/run`
//! does). When it is absent every test here prints "skipped: … not fetched" and passes.

mod gguf_support;

use std::path::PathBuf;

use gguf_support::{json_ids, llama_cpp_reference, real_model};
use mtp_core::engine::{CancelToken, DiscardSink, GenerateRequest};
use mtp_core::options::DraftOverrides;
use mtp_core::Backend;
use runner::loading::LoadOptions;
use runner::{ModelPaths, Pipeline};

fn drafter_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/gemma-3-270m-drafter")
}

fn load<B: Backend>(backend: B, test: &str) -> Option<Pipeline<B>> {
    let target = real_model(test)?;
    let paths = ModelPaths {
        target,
        drafter: Some(drafter_dir()),
        draft_centroids: None,
        tokenizer: None,
        chat_template: None,
    };
    let pipeline = Pipeline::load(backend, &paths, &LoadOptions::default())
        .unwrap_or_else(|e| panic!("the real model and its drafter load: {e}"));
    Some(pipeline)
}

/// The recorded prompts' ids (`tests/fixtures/real_models/gemma3_270m_llama_cpp.json`), by name.
fn prompts(names: &[&str]) -> Vec<(String, Vec<u32>)> {
    let reference = llama_cpp_reference();
    let all = reference["prompts"].as_array().expect("prompts");
    names
        .iter()
        .map(|name| {
            let p = all
                .iter()
                .find(|p| p["name"] == *name)
                .unwrap_or_else(|| panic!("no recorded prompt {name}"));
            (name.to_string(), json_ids(&p["prompt_ids"]))
        })
        .collect()
}

/// Greedy, EOS ignored: plain (`depth` None) or drafting `depth` tokens every round.
fn greedy<B: Backend>(
    p: &Pipeline<B>,
    prompt: &[u32],
    n: usize,
    depth: Option<usize>,
) -> (Vec<u32>, usize) {
    let mut request = GenerateRequest::greedy(prompt.to_vec(), n);
    request.draft = match depth {
        None => DraftOverrides {
            enabled: Some(false),
            ..DraftOverrides::default()
        },
        Some(k) => DraftOverrides::constant(k),
    };
    let response = p
        .generate(&request, &mut DiscardSink, &CancelToken::new())
        .expect("generation succeeds");
    let accepted = response.mtp.as_ref().map_or(0, |m| m.accepted);
    (response.tokens, accepted)
}

/// Greedy speculation at each of `depths` equals plain greedy on every prompt of `names`;
/// returns the drafted tokens accepted.
fn speculation_is_plain<B: Backend>(
    pipeline: &Pipeline<B>,
    names: &[&str],
    n: usize,
    depths: &[usize],
) -> usize {
    let mut accepted = 0;
    for (name, ids) in prompts(names) {
        let (plain, _) = greedy(pipeline, &ids, n, None);
        for &depth in depths {
            let (drafted, a) = greedy(pipeline, &ids, n, Some(depth));
            assert_eq!(
                drafted, plain,
                "{name}: greedy MTP at depth {depth} differs from plain"
            );
            accepted += a;
        }
    }
    accepted
}

#[test]
fn candle_cpu_greedy_with_the_trained_drafter_is_plain() {
    let test = "candle_cpu_greedy_with_the_trained_drafter_is_plain";
    let Some(pipeline) = load(backend_candle::CandleBackend::cpu(), test) else {
        return;
    };
    let names = ["story", "list", "repetition", "turns"];
    let accepted = speculation_is_plain(&pipeline, &names, 48, &[1, 3]);
    eprintln!("{test}: {accepted} drafted tokens accepted");
    assert!(
        accepted > 0,
        "the trained drafter never drafted a right token"
    );
}

/// The reference backend (exact, slow: a few seconds a token in a debug build): one prompt, a
/// few tokens, drafting 3 a round.
#[test]
fn reference_greedy_with_the_trained_drafter_is_plain() {
    let test = "reference_greedy_with_the_trained_drafter_is_plain";
    let Some(pipeline) = load(mtp_core::reference::ReferenceBackend::default(), test) else {
        return;
    };
    let accepted = speculation_is_plain(&pipeline, &["repetition"], 10, &[3]);
    eprintln!("{test}: {accepted} drafted tokens accepted");
}
