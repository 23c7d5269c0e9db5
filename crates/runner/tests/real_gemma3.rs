//! The Gemma 3 model code on the real Gemma 3 270M Q4_K_M weights against llama.cpp's recorded
//! outputs (tools/real_models), on candle's CPU device. Since main wired GGUF quantized tensors
//! into `Linear` / `Embedding`, the quantized tensors load as quantized weights (the backend's
//! quantized matmul) and the `dequantize` hook passed here is only a fallback that no tensor of
//! this file reaches. Logits differ a little from llama.cpp's (other kernels, f32 KV cache): the
//! test bounds the top-1 logit difference and checks that every top-1 flip is a near-tie.
//!
//! Skipped (passing, with a "skipped" line) when the model has not been fetched.

mod gguf_support;

use backend_candle::CandleBackend;
use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType};
use candle_core::Device;
use gguf_support::{llama_cpp_reference, real_model};
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::model::TargetModel;
use mtp_core::{Backend, DType};
use runner::loading::gguf::{GgufFile, RawTensor};
use runner::loading::LoadOptions;
use runner::models::gemma3::{load_gguf_with, Gemma3Target};

/// `|our logit - llama.cpp's|` for llama.cpp's top-1 token, at every checked position (logits
/// are about 15..30 here). Measured with the weights dequantized to f32, on the 10 recorded
/// prompts: at most 0.96, except 2.84 at position 2 of the chat-turn prompt (right after
/// `<bos><start_of_turn>user`: a control token the base model was not trained on, whose outlier
/// activations amplify 8-bit rounding); with candle's quantized matmul, 1.21 on the default two.
const TOP1_LOGIT_TOLERANCE: f32 = 3.0;

fn dequantize(raw: &RawTensor<'_>) -> Result<Vec<f32>, String> {
    let dtype = match raw.ggml_type.name {
        "Q4_0" => GgmlDType::Q4_0,
        "Q4_1" => GgmlDType::Q4_1,
        "Q5_0" => GgmlDType::Q5_0,
        "Q5_1" => GgmlDType::Q5_1,
        "Q8_0" => GgmlDType::Q8_0,
        "Q2_K" => GgmlDType::Q2K,
        "Q3_K" => GgmlDType::Q3K,
        "Q4_K" => GgmlDType::Q4K,
        "Q5_K" => GgmlDType::Q5K,
        "Q6_K" => GgmlDType::Q6K,
        other => return Err(format!("no dequantization for {other}")),
    };
    let device = Device::Cpu;
    let q = qtensor_from_ggml(dtype, raw.bytes, raw.shape.to_vec(), &device)
        .map_err(|e| e.to_string())?;
    q.dequantize(&device)
        .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
        .map_err(|e| e.to_string())
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
            if v > best.1 {
                (i, v)
            } else {
                best
            }
        })
        .0
}

fn load(b: &CandleBackend, path: &std::path::Path) -> Gemma3Target<CandleBackend> {
    let file = GgufFile::open(path).unwrap();
    let options = LoadOptions::with_dtype(DType::F32);
    let (model, _) = load_gguf_with(b, &file, &options, &mut |_, _| {}, Some(&dequantize)).unwrap();
    model
}

/// How many prompts the default run checks (`MTP_REAL_PROMPTS=all` for every recorded one).
fn prompt_count(total: usize) -> usize {
    match std::env::var("MTP_REAL_PROMPTS").as_deref() {
        Ok("all") => total,
        _ => 2.min(total),
    }
}

/// llama.cpp's margin between its top-1 and top-2 logits in a `top5` row.
fn margin(row: &serde_json::Value) -> f32 {
    let row = row.as_array().unwrap();
    (row[0][1].as_f64().unwrap() - row[1][1].as_f64().unwrap()) as f32
}

/// Where we may pick another top-1 than llama.cpp: only where llama.cpp's own top-2 is this close.
/// Logits are within about 1.0 of llama.cpp's (see [`TOP1_LOGIT_TOLERANCE`]), so a margin below
/// that can flip: llama.cpp multiplies 8-bit-quantized activations with the quantized blocks and
/// caches K/V in f16, we multiply f32 activations with the dequantized weights and cache f32.
/// Measured (f32-dequantized weights): every flip had a margin under 0.2 but one (0.60, position 1
/// of `leading_spaces`); with candle's quantized matmul one flip at margin 0.81 (`code`).
const NEAR_TIE: f32 = 1.0;

#[test]
fn gemma3_on_real_weights_matches_llama_cpp() {
    let Some(path) = real_model("gemma3_on_real_weights_matches_llama_cpp") else {
        return;
    };
    let b = CandleBackend::cpu();
    let model = load(&b, &path);
    let reference = llama_cpp_reference();
    let prompts = reference["prompts"].as_array().unwrap();
    let vocab = model.vocab_size();
    let (mut identical, mut checked, mut worst) = (0, 0, 0f32);
    let only = std::env::var("MTP_REAL_PROMPT").ok();
    for prompt in &prompts[..prompt_count(prompts.len())] {
        let name = prompt["name"].as_str().unwrap();
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let prompt_ids = ids(&prompt["prompt_ids"]);
        let greedy = ids(&prompt["greedy_ids"]);
        let top5 = prompt["top5"].as_array().unwrap();
        // Teacher-forced on llama.cpp's tokens: one forward over prompt + continuation.
        let mut seq = prompt_ids.clone();
        seq.extend(&greedy[..greedy.len() - 1]);
        assert_eq!(seq.len(), top5.len(), "{name}");
        let mut caches = model.new_caches(&b).unwrap();
        let x = b.from_u32(&seq, &[1, seq.len()]).unwrap();
        let out = model.forward(&b, &x, 0, &mut caches).unwrap();
        let logits = b
            .to_vec_f32(&model.unembed(&b, &out.hidden).unwrap())
            .unwrap();
        let (mut top1_agree, mut max_diff, mut max_at) = (0, 0f32, 0);
        for (p, row) in logits.chunks(vocab).enumerate() {
            let want = top5[p].as_array().unwrap();
            let want_id = want[0][0].as_u64().unwrap() as usize;
            let want_logit = want[0][1].as_f64().unwrap() as f32;
            let diff = (row[want_id] - want_logit).abs();
            if diff > max_diff {
                (max_diff, max_at) = (diff, p);
            }
            if argmax(row) == want_id {
                top1_agree += 1;
            } else {
                let m = margin(&top5[p]);
                eprintln!("{name}: position {p}: top-1 differs; llama.cpp's margin {m:.3}");
                assert!(
                    m < NEAR_TIE,
                    "{name}: position {p}: top-1 differs, margin {m}"
                );
            }
        }
        let request = GenerateRequest::greedy(prompt_ids.clone(), greedy.len());
        let response = Engine::new(&b, &model)
            .generate(&request, &mut DiscardSink, &CancelToken::new())
            .unwrap();
        let same = response
            .tokens
            .iter()
            .zip(&greedy)
            .take_while(|(a, b)| a == b)
            .count();
        let divergence = if same < greedy.len() {
            let m = margin(&top5[prompt_ids.len() - 1 + same]);
            assert!(
                m < NEAR_TIE,
                "{name}: greedy diverges at {same}, margin {m}"
            );
            format!(" (then a near-tie: llama.cpp's margin {m:.3})")
        } else {
            String::new()
        };
        eprintln!(
            "{name}: {} + {} positions, top-1 agrees at {top1_agree}, llama.cpp top-1 logit max \
             |diff| {max_diff:.3} (position {max_at}, after token {}); greedy identical for \
             {same}/{} tokens{divergence}",
            prompt_ids.len(),
            greedy.len() - 1,
            seq[max_at],
            greedy.len()
        );
        worst = worst.max(max_diff);
        checked += 1;
        identical += usize::from(same == greedy.len());
    }
    eprintln!(
        "{identical}/{checked} prompts: {} greedy tokens identical to llama.cpp; worst top-1 \
         logit diff {worst:.3}",
        reference["new_tokens"]
    );
    assert!(worst < TOP1_LOGIT_TOLERANCE, "top-1 logit diff {worst}");
}
