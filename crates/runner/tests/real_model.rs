//! The real model — Gemma 3 270M Q4_K_M, GGUF — against llama.cpp's recorded outputs
//! (`tests/fixtures/real_models/gemma3_270m_llama_cpp.json`, written by
//! `tools/real_models/record_llama_cpp.py` with llama-cpp-python 0.3.36 on the same file):
//! the prompt token ids, the top-5 logits at every position of the prompt and of llama.cpp's
//! continuation (fed as given), and 32 greedy tokens; and greedy MTP with prompt lookup equal
//! to plain greedy on the quantized model, batched and serially, on 24 grounded prompts.
//!
//! The model is not committed: `tools/real_models/fetch.py` downloads it (`.ci/run` does). When
//! it is absent every test here prints "skipped: … not fetched" and passes.
//!
//! Why not bit-identical: llama.cpp and candle multiply a Q4_K / Q5_0 / Q6_K / Q8_0 weight by
//! first quantizing the activation row to 8 bits (Q8_K / Q8_0 blocks) and summing integer dot
//! products; the order of the float sums and the thread split differ between the two
//! libraries; llama.cpp also keeps its KV cache in f16. Logits therefore differ by tenths (up to
//! 2.4 here), and a greedy continuation can take the other branch at a near-tie. With the
//! weights decoded exactly (`--dequantize`) the model matches HF transformers running the same
//! GGUF to 1e-4 (`gemma3_270m_hf_transformers.json`, `tools/real_models/record_hf_gguf.py`).

mod common;
mod gguf_support;

use common::ids_array;
use gguf_support::{hf_transformers_reference, json_ids, llama_cpp_reference, real_model};
use mtp_core::engine::{CancelToken, DiscardSink, GenerateRequest};
use mtp_core::model::TargetModel;
use mtp_core::options::{DraftOverrides, ValidationMode};
use mtp_core::proposer::NgramOptions;
use mtp_core::schedule::ScheduleKind;
use mtp_core::Backend;
use runner::loading::{LoadOptions, StoredQuant};
use runner::{ModelPaths, Pipeline, PromptFormat};

/// |our logit − llama.cpp's| for llama.cpp's top-5 tokens, at every position of the 10 recorded
/// prompts and continuations (logits are about 15..30 here). Measured on candle-cpu: see
/// [`matches_llama_cpp`]. This bounds today's agreement; it is not the goal (the target is
/// greedy continuations identical on 90 % of the prompts, which is not reached yet). For
/// scale: HF transformers on the same file, dequantized, is up to 3.1 from llama.cpp's logits
/// and greedy-identical to it on 7/10 prompts, while our dequantized model is within 1e-4 of HF
/// ([`dequantized_matches_hf_transformers`]). With Q8_0 / Q5_0 in the interleaved layout (one
/// integer sum per block, ggml's reference order, where llama.cpp's AVX2 kernel sums eight
/// partial sums per block) the worst position moved from 2.41 to 3.48; with the per-row layout
/// (`MTP_QMATMUL_LAYOUT=rows`, llama.cpp's order) it is 2.41.
const LOGIT_TOLERANCE: f32 = 3.6;
/// A top-1 flip is allowed only where llama.cpp's own top-1/top-2 margin is below this.
const FLIP_MARGIN: f32 = 1.0;
/// Prompts whose 32 greedy tokens must equal llama.cpp's, today. Measured on candle-cpu (the
/// batched quantized kernel, Q8_0 / Q5_0 interleaved) over the 10 prompts: 4 identical; logits
/// of llama.cpp's top-5 within 3.48 over 613 positions; top-1 agrees at 584/613 positions,
/// every flip at a llama.cpp margin ≤ 0.61 (most below 0.2). Per-row layout: 4 identical,
/// within 2.41, 588/613, margins ≤ 0.81. With Q4_K / Q6_K interleaved too (one integer sum per
/// block, ggml's reference order): 5 identical, within 3.48, 584/613, margins ≤ 0.81.
/// Tried and not kept: rounding q, k and v to f16 (llama.cpp keeps K and V in an f16
/// cache, and ggml's f16 matmul converts its f32 operand, the queries, to f16): worst 3.48 → 2.66
/// (rows layout 2.82), top-1 585/613 (rows 593/613), still 4/10 identical. The flips sit at
/// llama.cpp margins down to 0.002; not tried: f16 softmax probabilities (ggml's `V × KQ`),
/// llama.cpp's summation order and thread split.
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

fn cases(reference: &serde_json::Value) -> Vec<Case> {
    reference["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| Case {
            name: p["name"].as_str().expect("name").to_string(),
            text: p["text"].as_str().unwrap_or_default().to_string(),
            prompt_ids: json_ids(&p["prompt_ids"]),
            greedy_ids: json_ids(&p["greedy_ids"]),
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
    load_with(backend, test, StoredQuant::Keep)
}

fn load_with<B: Backend>(backend: B, test: &str, stored: StoredQuant) -> Option<Pipeline<B>> {
    let path = real_model(test)?;
    let paths = ModelPaths {
        target: path,
        drafter: None,
        draft_centroids: None,
        tokenizer: None,
        chat_template: None,
    };
    let options = LoadOptions {
        stored_quant: stored,
        ..LoadOptions::default()
    };
    let pipeline = Pipeline::load(backend, &paths, &options)
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

/// How our logits and greedy continuations agree with a reference's.
#[derive(Debug)]
struct Agreement {
    /// max |ours − theirs| over the reference's top-5 logits at every position.
    worst: f32,
    positions: usize,
    top1_agree: usize,
    /// (prompt, position, the reference's top-1/top-2 margin) where our top-1 differs.
    flips: Vec<(String, usize, f32)>,
    /// Prompts whose greedy continuation equals the reference's, of `prompts`.
    identical: usize,
    prompts: usize,
}

/// Our logits of the reference's top-5 at every position of each prompt and its recorded
/// continuation (one forward over it), and our greedy continuations. With `text`, the prompt
/// is also encoded by our tokenizer and checked against the recorded ids.
fn agreement<B: Backend>(pipeline: &Pipeline<B>, cases: &[Case], text: Encode) -> Agreement {
    let mut a = Agreement {
        worst: 0.0,
        positions: 0,
        top1_agree: 0,
        flips: Vec::new(),
        identical: 0,
        prompts: cases.len(),
    };
    for case in cases {
        if text == Encode::Check {
            let ids = pipeline
                .encode(&case.text, PromptFormat::Raw)
                .expect("encode");
            assert_eq!(ids, case.prompt_ids, "{}: prompt ids", case.name);
        }
        let n = case.greedy_ids.len();
        let fed: Vec<u32> = case
            .prompt_ids
            .iter()
            .chain(&case.greedy_ids[..n - 1])
            .copied()
            .collect();
        assert_eq!(case.top5.len(), fed.len(), "{}: top-5 rows", case.name);
        let (logits, vocab) = prompt_logits(pipeline, &fed);
        for (pos, top5) in case.top5.iter().enumerate() {
            let row = &logits[pos * vocab..(pos + 1) * vocab];
            for &(id, theirs) in top5 {
                a.worst = a.worst.max((row[id as usize] - theirs).abs());
            }
            let ours_top1 = row
                .iter()
                .enumerate()
                .max_by(|x, y| x.1.total_cmp(y.1))
                .map(|(i, _)| i as u32);
            a.positions += 1;
            if ours_top1 == Some(top5[0].0) {
                a.top1_agree += 1;
            } else {
                a.flips
                    .push((case.name.clone(), pos, top5[0].1 - top5[1].1));
            }
        }
        let (plain, _) = greedy(pipeline, &case.prompt_ids, n, None);
        if plain == case.greedy_ids {
            a.identical += 1;
        } else {
            let at = plain
                .iter()
                .zip(&case.greedy_ids)
                .position(|(x, y)| x != y)
                .unwrap_or(n);
            eprintln!(
                "{}: greedy differs at token {at} (ours {:?}, reference {:?})",
                case.name,
                plain.get(at),
                case.greedy_ids.get(at)
            );
        }
    }
    a
}

/// Whether [`agreement`] also checks our tokenizer against the recorded prompt ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encode {
    Check,
    Skip,
}

impl Agreement {
    fn print(&self, test: &str, reference: &str) {
        eprintln!(
            "{test}: logits of {reference}'s top-5 within {:.4} over {} positions; top-1 agrees \
             at {}/{} (flips at {reference} margins {:?}); greedy 32 tokens identical on {}/{} \
             prompts",
            self.worst,
            self.positions,
            self.top1_agree,
            self.positions,
            self.flips,
            self.identical,
            self.prompts
        );
    }

    /// Every top-1 flip is where the reference's own margin is at most `margin`.
    fn assert_flips_within(&self, margin: f32) {
        for (name, pos, m) in &self.flips {
            assert!(
                *m <= margin,
                "{name} position {pos}: top-1 differs from the reference's, whose margin is {m}"
            );
        }
    }
}

/// Tokenization, the logits of llama.cpp's top-5 at every position, and the greedy
/// continuations. Everything is measured and printed before the bounds are checked.
fn matches_llama_cpp<B: Backend>(backend: B, test: &str) {
    let Some(pipeline) = load(backend, test) else {
        return;
    };
    let a = agreement(&pipeline, &cases(&llama_cpp_reference()), Encode::Check);
    a.print(test, "llama.cpp");
    assert!(
        a.worst <= LOGIT_TOLERANCE,
        "max |logit diff| {} > {LOGIT_TOLERANCE}",
        a.worst
    );
    a.assert_flips_within(FLIP_MARGIN);
    assert!(
        a.identical >= GREEDY_IDENTICAL_AT_LEAST,
        "greedy identical on only {} of {} prompts",
        a.identical,
        a.prompts
    );
}

#[test]
fn candle_cpu_matches_llama_cpp() {
    matches_llama_cpp(
        backend_candle::CandleBackend::cpu(),
        "candle_cpu_matches_llama_cpp",
    );
}

/// |ours − HF| over HF's top-5 logits at every position, with the GGUF decoded exactly
/// (`--dequantize`) on both sides: f32 sums in a different order, nothing else. Measured on
/// candle-cpu: within 1e-4 at all 613 positions (logits of 15..30), top-1 equal at all of them,
/// greedy identical on 10/10 prompts.
const DEQUANTIZED_TOLERANCE: f32 = 1e-3;
/// A top-1 flip against HF is allowed only at a near-exact tie of HF's own logits.
const DEQUANTIZED_FLIP_MARGIN: f32 = 1e-3;

/// The model on the real weights, decoded exactly, against HF transformers running the same
/// GGUF dequantized to f32 (`tools/real_models/record_hf_gguf.py`): the logits agree to f32
/// rounding and so do the greedy continuations, on every prompt. This is the model's
/// correctness on the real checkpoint; the distance to llama.cpp is the distance between two
/// different computations (llama.cpp rounds every activation row to 8 bits before a quantized
/// matmul and keeps its KV cache in f16), which HF transformers shows too (the llama.cpp
/// fixture against the HF one, printed below: greedy identical on 7/10 prompts, first
/// differences at tokens 4, 9 and 27).
#[test]
fn dequantized_matches_hf_transformers() {
    let test = "dequantized_matches_hf_transformers";
    let Some(pipeline) = load_with(
        backend_candle::CandleBackend::cpu(),
        test,
        StoredQuant::Dequantize,
    ) else {
        return;
    };
    let hf = cases(&hf_transformers_reference());
    let a = agreement(&pipeline, &hf, Encode::Skip);
    a.print(test, "HF transformers");
    print_llama_cpp_against_hf(&hf);
    assert!(
        a.worst <= DEQUANTIZED_TOLERANCE,
        "max |logit diff| {} > {DEQUANTIZED_TOLERANCE}",
        a.worst
    );
    a.assert_flips_within(DEQUANTIZED_FLIP_MARGIN);
    assert_eq!(
        a.identical, a.prompts,
        "greedy identical to HF transformers"
    );
}

/// How far llama.cpp's recorded run is from HF transformers' on the same file: the greedy
/// prefix they share per prompt (context for [`GREEDY_IDENTICAL_AT_LEAST`]).
fn print_llama_cpp_against_hf(hf: &[Case]) {
    let llama = cases(&llama_cpp_reference());
    let mut identical = 0;
    let shared: Vec<(String, usize)> = llama
        .iter()
        .zip(hf)
        .map(|(l, h)| {
            assert_eq!(l.prompt_ids, h.prompt_ids, "{}: same prompt ids", l.name);
            let n = l
                .greedy_ids
                .iter()
                .zip(&h.greedy_ids)
                .take_while(|(x, y)| x == y)
                .count();
            identical += usize::from(n == l.greedy_ids.len());
            (l.name.clone(), n)
        })
        .collect();
    eprintln!(
        "llama.cpp vs HF transformers on the same GGUF: greedy identical on {identical}/{} \
         prompts; shared prefix per prompt {shared:?}",
        llama.len()
    );
}

/// The input-grounded prompts of the speed race (`tools/bench_peers/prompts/grounded.txt`: a
/// text, then the start of a copy or light edit of it, where prompt lookup drafts well).
fn grounded_prompts() -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/bench_peers/prompts/grounded.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// Tokens each grounded prompt decodes in the exactness check.
const EXACT_TOKENS: usize = 32;

/// Prompt-lookup greedy MTP on the quantized model (Q4_K_M: Q4_K, Q6_K and Q8_0 matrices, each
/// activation row quantized to 8 bits before a quantized matmul) emits plain greedy's tokens,
/// token for token, with batched verification (the default) and with serial validation, on 24
/// input-grounded prompts: a verify forward of `k + 1` rows gives each row the bits a one-row
/// forward gives it (row-invariant CPU kernels, the `invariance::` conformance cases), so no
/// near-tie can tip. Real drafts are accepted.
#[test]
fn greedy_prompt_lookup_is_plain_greedy_batched_and_serially() {
    let test = "greedy_prompt_lookup_is_plain_greedy_batched_and_serially";
    let Some(pipeline) = load(backend_candle::CandleBackend::cpu(), test) else {
        return;
    };
    let prompts = grounded_prompts();
    assert!(prompts.len() >= 24, "{} grounded prompts", prompts.len());
    let mut accepted = 0;
    for (i, text) in prompts.iter().take(24).enumerate() {
        let ids = pipeline
            .encode(text, PromptFormat::Raw)
            .expect("the prompt encodes");
        let (plain, _) = greedy(&pipeline, &ids, EXACT_TOKENS, None);
        let (batched, a) = greedy(&pipeline, &ids, EXACT_TOKENS, Some(ValidationMode::Batched));
        assert_eq!(batched, plain, "grounded prompt {i}: batched MTP == plain");
        accepted += a;
        let (serial, a) = greedy(&pipeline, &ids, EXACT_TOKENS, Some(ValidationMode::Serial));
        assert_eq!(
            serial, plain,
            "grounded prompt {i}: serially verified MTP == plain"
        );
        accepted += a;
    }
    eprintln!("{test}: {accepted} prompt-lookup drafts accepted over 24 prompts");
    assert!(
        accepted > 24 * 8,
        "prompt lookup accepted {accepted} drafts"
    );
}
