//! Shared by the Gemma 4 GGUF tests: the fixtures `tools/gemma4_gguf_fixtures` makes
//! (`tests/fixtures/gemma4_gguf/<case>`) and what HF transformers and llama.cpp recorded on them.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::model::TargetModel;
use mtp_core::Backend;

/// The directory of fixture `case`.
pub fn case_dir(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gemma4_gguf")
        .join(case)
}

/// The engine's plain greedy continuation of `prompt`, `n` tokens (EOS does not stop it).
pub fn greedy<B: Backend, T: TargetModel<B>>(
    b: &B,
    target: &T,
    prompt: &[u32],
    n: usize,
) -> Vec<u32> {
    let request = GenerateRequest::greedy(prompt.to_vec(), n);
    Engine::new(b, target)
        .generate(&request, &mut DiscardSink, &CancelToken::new())
        .unwrap()
        .tokens
}

/// llama.cpp's greedy run under `--spec-type draft-mtp --spec-draft-n-max k`.
pub struct DraftMtpRun {
    /// The tokens it generated.
    pub ids: Vec<u32>,
    /// Draft tokens it proposed.
    pub drafted: u64,
    /// Draft tokens it accepted.
    pub accepted: u64,
}

/// One prompt of a fixture.
pub struct Run {
    /// The prompt's ids (BOS first).
    pub prompt: Vec<u32>,
    /// HF's logits at the prompt's last position (f32 weights).
    pub hf_logits: Vec<f32>,
    /// HF's greedy continuation.
    pub hf_greedy: Vec<u32>,
    /// llama.cpp's greedy continuation on the case's GGUF, alone.
    pub llama_greedy: Vec<u32>,
    /// llama.cpp's greedy continuation with the assistant GGUF under draft-mtp (its default
    /// depth).
    pub llama_draft_mtp: Vec<u32>,
    /// The same at each fixed depth `k` (1..=4).
    pub llama_by_depth: BTreeMap<usize, DraftMtpRun>,
    /// llama.cpp's best tokens and their log-probabilities at each position of its plain
    /// greedy continuation (best first); `None` where its server gives none (a token that ends
    /// in the middle of a character).
    pub llama_top: Vec<Option<Vec<(u32, f32)>>>,
}

/// How far apart two engines' choices are where their greedy continuations part.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Margin {
    /// llama.cpp's log-probability of its token minus that of ours (`None`: ours is not among
    /// its recorded best).
    Llama(Option<f32>),
    /// llama.cpp recorded nothing at that position.
    Unrecorded,
}

impl Run {
    /// Where `ours` first leaves llama.cpp's plain greedy continuation, and the margin there.
    /// `None` when they agree.
    pub fn divergence_from_llama(&self, ours: &[u32]) -> Option<(usize, Margin)> {
        let at = ours
            .iter()
            .zip(&self.llama_greedy)
            .position(|(a, b)| a != b)?;
        let margin = match self.llama_top.get(at).and_then(Option::as_ref) {
            Some(top) => Margin::Llama(
                top.iter()
                    .find(|(id, _)| *id == ours[at])
                    .map(|(_, lp)| top[0].1 - lp),
            ),
            None => Margin::Unrecorded,
        };
        Some((at, margin))
    }
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// The fixture's runs (`reference.json`).
pub fn runs(case: &str) -> Vec<Run> {
    let text =
        std::fs::read_to_string(case_dir(case).join("reference.json")).expect("reference.json");
    let reference: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    reference["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| {
            let logits = run["last_logits"]
                .as_array()
                .expect("logits")
                .iter()
                .map(|x| x.as_f64().expect("logit") as f32)
                .collect();
            let by_depth = run["llama_draft_mtp_by_depth"]
                .as_object()
                .expect("draft-mtp by depth")
                .iter()
                .map(|(k, v)| {
                    let run = DraftMtpRun {
                        ids: ids(&v["ids"]),
                        drafted: v["drafted"].as_u64().expect("drafted"),
                        accepted: v["accepted"].as_u64().expect("accepted"),
                    };
                    (k.parse().expect("a depth"), run)
                })
                .collect();
            Run {
                prompt: ids(&run["prompt_ids"]),
                hf_logits: logits,
                hf_greedy: ids(&run["greedy_ids"]),
                llama_greedy: ids(&run["llama_greedy_ids"]),
                llama_draft_mtp: ids(&run["llama_draft_mtp_greedy_ids"]),
                llama_by_depth: by_depth,
                llama_top: run["llama_top_logprobs"]
                    .as_array()
                    .expect("top log-probabilities")
                    .iter()
                    .map(|position| {
                        position.as_array().map(|best| {
                            best.iter()
                                .map(|pair| {
                                    let id = pair[0].as_u64().expect("id") as u32;
                                    (id, pair[1].as_f64().expect("logprob") as f32)
                                })
                                .collect()
                        })
                    })
                    .collect(),
            }
        })
        .collect()
}
