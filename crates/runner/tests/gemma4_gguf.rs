//! Gemma 4 from the GGUF files llama.cpp's converter writes (`tests/fixtures/gemma4_gguf`,
//! made by `tools/gemma4_gguf_fixtures`): the target loads from its `gemma4` GGUF and gives HF
//! transformers' logits and the greedy continuation both HF and llama.cpp produce.

mod common;

use std::path::PathBuf;

use common::{ids_array, max_rel_err, TOLERANCE};
use mtp_core::model::TargetModel;
use mtp_core::Backend;
use runner::loading::{load_gguf_target, LoadOptions};

fn case_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma4_gguf/e2b_like")
}

/// The fixture's runs: prompt ids, HF's last-position logits, HF's greedy ids (which llama.cpp's
/// greedy ids on the same GGUF equal, alone and under draft-mtp).
fn runs() -> Vec<(Vec<u32>, Vec<f32>, Vec<u32>)> {
    let text = std::fs::read_to_string(case_dir().join("reference.json")).expect("reference.json");
    let reference: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect()
    };
    reference["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| {
            assert_eq!(
                run["greedy_ids"], run["llama_greedy_ids"],
                "the fixture's engines agree"
            );
            let logits = run["last_logits"]
                .as_array()
                .expect("logits")
                .iter()
                .map(|x| x.as_f64().expect("logit") as f32)
                .collect();
            (ids(&run["prompt_ids"]), logits, ids(&run["greedy_ids"]))
        })
        .collect()
}

fn gguf_target_matches_hf_and_llama_cpp<B: Backend>(b: &B) {
    let target = load_gguf_target(
        b,
        &case_dir().join("target-f32.gguf"),
        &LoadOptions::default(),
    )
    .expect("the converter's GGUF loads");
    let vocab = target.vocab_size();
    for (prompt, want, greedy) in runs() {
        let mut caches = target.new_caches(b).unwrap();
        let out = target
            .forward(b, &ids_array(b, &prompt), 0, &mut caches)
            .unwrap();
        let logits = b
            .to_vec_f32(&target.unembed(b, &out.hidden).unwrap())
            .unwrap();
        let last = &logits[logits.len() - vocab..];
        let err = max_rel_err(last, &want, vocab);
        eprintln!("{prompt:?}: last logits max rel err {err:.2e}");
        assert!(err < TOLERANCE, "{prompt:?}: last logits rel err {err}");
        let mut next = argmax(last);
        let mut ours = vec![next];
        let mut position = prompt.len();
        while ours.len() < greedy.len() {
            let out = target
                .forward(b, &ids_array(b, &[next]), position, &mut caches)
                .unwrap();
            let row = b
                .to_vec_f32(&target.unembed(b, &out.hidden).unwrap())
                .unwrap();
            next = argmax(&row);
            ours.push(next);
            position += 1;
        }
        assert_eq!(ours, greedy, "{prompt:?}: greedy continuation");
    }
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

per_backend!(gguf_target_matches_hf_and_llama_cpp);
