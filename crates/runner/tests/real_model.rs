//! The real model — Gemma 3 270M Q4_K_M, GGUF — against llama.cpp's recorded outputs
//! (`tests/fixtures/real_models/gemma3_270m_llama_cpp.json`, written by
//! `tools/real_models/record_llama_cpp.py` with llama-cpp-python 0.3.36 on the same file):
//! the prompt token ids, the top-5 logits at every position of the prompt and of llama.cpp's
//! continuation (fed as given), and 32 greedy tokens; and greedy MTP with prompt lookup against
//! plain greedy on the quantized model.
//!
//! The model is not committed: `tools/real_models/fetch.py` downloads it (`.ci/run` does). When
//! it is absent every test here prints "skipped: … not fetched" and passes.
//!
//! Why not bit-identical: llama.cpp and candle multiply a Q4_K / Q5_0 / Q6_K / Q8_0 weight by
//! first quantizing the activation row to 8 bits (Q8_K / Q8_0 blocks) and summing integer dot
//! products; the order of the float sums and the thread split differ between the two
//! libraries. Logits therefore agree to a few hundredths, not to the last bit, and a greedy
//! continuation can take the other branch where two tokens are within that distance.

mod common;
mod gguf_support;

use common::ids_array;
use gguf_support::{llama_cpp_reference, real_model};
use mtp_core::engine::{CancelToken, DiscardSink, GenerateRequest};
use mtp_core::model::TargetModel;
use mtp_core::options::{DraftOverrides, ValidationMode};
use mtp_core::proposer::NgramOptions;
use mtp_core::schedule::ScheduleKind;
use mtp_core::Backend;
use runner::loading::LoadOptions;
use runner::{ModelPaths, Pipeline, PromptFormat};

/// |our logit − llama.cpp's| for llama.cpp's top-5 tokens, at every position of the 10 recorded
/// prompts and continuations (logits are about 15..30 here). Measured on candle-cpu: see
/// [`matches_llama_cpp`]. This bounds today's agreement; it is not the goal (issue 15 asks
/// for greedy continuations identical on 90 % of the prompts, which is not reached yet).
const LOGIT_TOLERANCE: f32 = 3.0;
/// A top-1 flip is allowed only where llama.cpp's own top-1/top-2 margin is below this.
const FLIP_MARGIN: f32 = 1.0;
/// Prompts whose 32 greedy tokens must equal llama.cpp's, today. Measured on candle-cpu over the
/// 10 prompts: 4 identical (story diverges at token 4, leading_spaces 0, turns 9, list 13,
/// code 23, numbers 26); logits of llama.cpp's top-5 within 2.41 over 613 positions; top-1
/// agrees at 587/613 positions, every flip at a llama.cpp margin ≤ 0.81 (most below 0.2).
const GREEDY_IDENTICAL_AT_LEAST: usize = 3;

struct Case {
    name: String,
    text: String,
    prompt_ids: Vec<u32>,
    greedy_ids: Vec<u32>,
    /// Per position of `prompt_ids ++ greedy_ids` (the last excepted): llama.cpp's top-5
    /// (id, logit).
    top5: Vec<Vec<(u32, f32)>>,
}

fn cases() -> Vec<Case> {
    let reference = llama_cpp_reference();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect()
    };
    reference["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| Case {
            name: p["name"].as_str().expect("name").to_string(),
            text: p["text"].as_str().expect("text").to_string(),
            prompt_ids: ids(&p["prompt_ids"]),
            greedy_ids: ids(&p["greedy_ids"]),
            top5: p["top5"]
                .as_array()
                .expect("top5")
                .iter()
                .map(|row| {
                    row.as_array()
                        .expect("row")
                        .iter()
                        .map(|pair| {
                            (
                                pair[0].as_u64().expect("id") as u32,
                                pair[1].as_f64().expect("logit") as f32,
                            )
                        })
                        .collect()
                })
                .collect(),
        })
        .collect()
}

fn load<B: Backend>(backend: B, test: &str) -> Option<Pipeline<B>> {
    let path = real_model(test)?;
    let paths = ModelPaths {
        target: path,
        drafter: None,
        tokenizer: None,
    };
    let pipeline = Pipeline::load(backend, &paths, &LoadOptions::default())
        .unwrap_or_else(|e| panic!("the real model loads: {e}"));
    Some(pipeline.with_ngram(Some(NgramOptions::default())))
}

/// Logits `[t, vocab]` of every position of `prompt`, from one forward over it.
fn prompt_logits<B: Backend>(p: &Pipeline<B>, prompt: &[u32]) -> (Vec<f32>, usize) {
    let (b, model) = (p.backend(), p.target());
    let mut caches = model.new_caches(b).expect("caches");
    let out = model
        .forward(b, &ids_array(b, prompt), 0, &mut caches)
        .expect("forward");
    let logits = model.unembed(b, &out.hidden).expect("unembed");
    let vocab = *b.shape(&logits).last().expect("vocab axis");
    (b.to_vec_f32(&logits).expect("logits"), vocab)
}

/// Greedy, EOS ignored; `lookup` with prompt-lookup MTP at depth 4 (`validation` as given).
fn greedy<B: Backend>(
    p: &Pipeline<B>,
    prompt: &[u32],
    n: usize,
    lookup: Option<ValidationMode>,
) -> (Vec<u32>, usize) {
    let mut request = GenerateRequest::greedy(prompt.to_vec(), n);
    request.draft = match lookup {
        None => DraftOverrides {
            enabled: Some(false),
            ..DraftOverrides::default()
        },
        Some(validation) => DraftOverrides {
            initial_draft_tokens: Some(4),
            max_draft_tokens: Some(4),
            schedule: Some(ScheduleKind::Constant),
            validation: Some(validation),
            ..DraftOverrides::default()
        },
    };
    let response = p
        .generate(&request, &mut DiscardSink, &CancelToken::new())
        .expect("generation succeeds");
    let accepted = response.mtp.as_ref().map_or(0, |m| m.accepted);
    (response.tokens, accepted)
}

/// Tokenization, the logits of llama.cpp's top-5 at every position, and the greedy
/// continuations. Everything is measured and printed before the bounds are checked.
fn matches_llama_cpp<B: Backend>(backend: B, test: &str) {
    let Some(pipeline) = load(backend, test) else {
        return;
    };
    let cases = cases();
    let (mut worst, mut top1_agree, mut positions) = (0f32, 0usize, 0usize);
    let (mut flips, mut identical) = (Vec::new(), 0usize);
    for case in &cases {
        let ids = pipeline
            .encode(&case.text, PromptFormat::Raw)
            .expect("encode");
        assert_eq!(ids, case.prompt_ids, "{}: prompt ids", case.name);
        let n = case.greedy_ids.len();
        let fed: Vec<u32> = ids
            .iter()
            .chain(&case.greedy_ids[..n - 1])
            .copied()
            .collect();
        assert_eq!(case.top5.len(), fed.len(), "{}: top-5 rows", case.name);
        let (logits, vocab) = prompt_logits(&pipeline, &fed);
        for (pos, top5) in case.top5.iter().enumerate() {
            let row = &logits[pos * vocab..(pos + 1) * vocab];
            for &(id, theirs) in top5 {
                worst = worst.max((row[id as usize] - theirs).abs());
            }
            let ours_top1 = row
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, _)| i as u32);
            positions += 1;
            if ours_top1 == Some(top5[0].0) {
                top1_agree += 1;
            } else {
                flips.push((case.name.clone(), pos, top5[0].1 - top5[1].1));
            }
        }
        let (plain, _) = greedy(&pipeline, &ids, n, None);
        if plain == case.greedy_ids {
            identical += 1;
        } else {
            let at = plain
                .iter()
                .zip(&case.greedy_ids)
                .position(|(a, b)| a != b)
                .unwrap_or(n);
            eprintln!(
                "{}: greedy differs from llama.cpp at token {at} (ours {:?}, llama.cpp {:?})",
                case.name,
                plain.get(at),
                case.greedy_ids.get(at)
            );
        }
    }
    eprintln!(
        "{test}: logits of llama.cpp's top-5 within {worst:.4} over {positions} positions; top-1 \
         agrees at {top1_agree}/{positions} (flips at llama.cpp margins {flips:?}); greedy 32 \
         tokens identical on {identical}/{} prompts",
        cases.len()
    );
    assert!(
        worst <= LOGIT_TOLERANCE,
        "max |logit diff| {worst} > {LOGIT_TOLERANCE}"
    );
    for (name, pos, margin) in &flips {
        assert!(
            *margin <= FLIP_MARGIN,
            "{name} position {pos}: top-1 differs from llama.cpp's, whose margin is {margin}"
        );
    }
    assert!(
        identical >= GREEDY_IDENTICAL_AT_LEAST,
        "greedy identical on only {identical} of {} prompts",
        cases.len()
    );
}

#[test]
fn candle_cpu_matches_llama_cpp() {
    matches_llama_cpp(
        backend_candle::CandleBackend::cpu(),
        "candle_cpu_matches_llama_cpp",
    );
}

/// The margin by which `chosen` beats `other` in the logits after `prefix` (one forward over it).
fn margin<B: Backend>(p: &Pipeline<B>, prefix: &[u32], chosen: u32, other: u32) -> f32 {
    let (logits, vocab) = prompt_logits(p, prefix);
    let last = &logits[logits.len() - vocab..];
    last[chosen as usize] - last[other as usize]
}

/// The largest logit margin at which batched verification may pick the other token: its k+1-row
/// forward rounds differently from a one-row forward in the last bits, and the 8-bit
/// quantization of each activation row before a quantized matmul turns such a last-bit
/// difference into a whole quantization step now and then, so a near-tie can flip (measured: the
/// `list` prompt at token 31, where plain greedy led by 0.188).
const NEAR_TIE: f32 = 0.25;

/// Prompt-lookup greedy MTP on the quantized model. Serially verified it is plain greedy, token
/// for token (each draft checked by the one-row forward plain decoding runs). Batched, it is
/// plain greedy except where plain greedy's choice was a near-tie ([`NEAR_TIE`], measured by a
/// fresh forward over the prefix, whose own rounding may even prefer the other token): the first
/// differing token is checked. Real drafts are accepted. (Measured over all ten prompts: 268
/// drafts accepted; batched differed on 3 of 10, at margins 0.188, -0.229 and -0.027 — on
/// `numbers` batched MTP picked llama.cpp's token where plain greedy did not.)
#[test]
fn greedy_prompt_lookup_is_plain_serially_and_differs_only_at_near_ties_batched() {
    let test = "greedy_prompt_lookup_is_plain_serially_and_differs_only_at_near_ties_batched";
    let Some(pipeline) = load(backend_candle::CandleBackend::cpu(), test) else {
        return;
    };
    let (mut accepted, mut diverged) = (0, 0);
    // Four prompts (two that repeat themselves, two open-ended) keep CI's time down; all ten with
    // MTP_REAL_PROMPTS=all.
    let all = std::env::var("MTP_REAL_PROMPTS").is_ok_and(|v| v == "all");
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| all || ["story", "list", "repetition", "turns"].contains(&c.name.as_str()))
        .collect();
    for case in &cases {
        let n = case.greedy_ids.len();
        let (plain, _) = greedy(&pipeline, &case.prompt_ids, n, None);
        let (serial, a) = greedy(&pipeline, &case.prompt_ids, n, Some(ValidationMode::Serial));
        assert_eq!(serial, plain, "{}: serially verified", case.name);
        accepted += a;
        let (batched, a) = greedy(
            &pipeline,
            &case.prompt_ids,
            n,
            Some(ValidationMode::Batched),
        );
        accepted += a;
        if let Some(at) = plain.iter().zip(&batched).position(|(x, y)| x != y) {
            diverged += 1;
            let prefix: Vec<u32> = case
                .prompt_ids
                .iter()
                .chain(&plain[..at])
                .copied()
                .collect();
            let m = margin(&pipeline, &prefix, plain[at], batched[at]);
            eprintln!(
                "{}: batched MTP differs from plain at token {at}: plain {} beats {} by {m:.5}",
                case.name, plain[at], batched[at]
            );
            assert!(
                m.abs() <= NEAR_TIE,
                "{}: batched MTP chose {} where plain greedy's {} led by {m} (not a near-tie)",
                case.name,
                batched[at],
                plain[at]
            );
        }
    }
    eprintln!(
        "{test}: {accepted} prompt-lookup drafts accepted; batched differs from plain on \
         {diverged}/{} prompts (near-ties only)",
        cases.len()
    );
    assert!(accepted > 0, "prompt lookup never drafted a right token");
}
