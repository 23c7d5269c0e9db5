//! `mtp generate` on a single GGUF file (the converter-made Gemma 3 fixture, its tokenizer
//! embedded): HF's greedy tokens, with the n-gram drafter too, and `--tokenizer FILE`.

mod cli_common;
mod gguf_support;

use cli_common::{ids, mtp};
use gguf_support::fixture;
use runner::loading::gguf::GgufFile;
use runner::Tokenizer;

/// The first run of the `tiny` case: prompt text and HF's greedy ids.
fn reference() -> (String, Vec<u32>) {
    let text = std::fs::read_to_string(fixture("gemma3/tiny/reference.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let run = &json["runs"][0];
    (
        run["text"].as_str().unwrap().to_string(),
        ids(&run["greedy_ids"]),
    )
}

fn generate(extra: &[&str], prompt: &str, n: usize) -> serde_json::Value {
    let gguf = fixture("gemma3/tiny/model-f32.gguf");
    let out = mtp()
        .arg("generate")
        .arg("--model")
        .arg(&gguf)
        .args([
            "--temperature",
            "0",
            "--num-predict",
            &n.to_string(),
            "--json",
        ])
        .args(extra)
        .arg(prompt)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mtp failed: {stderr}");
    serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap()
}

#[test]
fn a_gguf_file_runs_alone_and_gives_hf_greedy() {
    let (prompt, greedy) = reference();
    for extra in [
        &["--backend", "reference"][..],
        &["--backend", "candle"],
        &["--draft-kind", "ngram"],
    ] {
        let json = generate(extra, &prompt, greedy.len());
        assert_eq!(ids(&json["tokens"]), greedy, "{extra:?}");
        if extra[0] == "--draft-kind" {
            assert_eq!(json["mode"], "greedy-mtp", "{json}");
        }
    }
}

#[test]
fn tokenizer_flag_replaces_the_embedded_vocabulary() {
    let (prompt, greedy) = reference();
    let file = GgufFile::open(&fixture("gemma3/tiny/model-f32.gguf")).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("tokenizer.json");
    tokenizer.inner().save(&json_path, false).unwrap();
    let json = generate(
        &["--tokenizer", json_path.to_str().unwrap()],
        &prompt,
        greedy.len(),
    );
    assert_eq!(ids(&json["tokens"]), greedy);
    // A tokenizer file that does not exist is an error naming it.
    let out = mtp()
        .arg("generate")
        .arg("--model")
        .arg(fixture("gemma3/tiny/model-f32.gguf"))
        .args(["--tokenizer", "/nonexistent/tokenizer.json", "hello"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/tokenizer.json"), "{stderr}");
}

#[test]
fn chat_template_flag_gives_a_base_gguf_a_template() {
    let (prompt, greedy) = reference();
    let gguf = fixture("gemma3/tiny/model-f32.gguf");
    // The converter-made file has no template: --chat is refused, pointing at the flag.
    let out = mtp()
        .arg("generate")
        .arg("--model")
        .arg(&gguf)
        .args(["--chat", "hello"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--chat-template"), "{stderr}");
    // A template that renders the prompt as the raw encoding does (BOS, then the text) gives
    // the raw prompt's greedy tokens; one that adds text gives a longer prompt.
    let dir = tempfile::tempdir().unwrap();
    let same = dir.path().join("same.jinja");
    std::fs::write(&same, "{{ bos_token }}{{ messages[0]['content'] }}").unwrap();
    let json = generate(
        &["--chat", "--chat-template", same.to_str().unwrap()],
        &prompt,
        greedy.len(),
    );
    assert_eq!(ids(&json["tokens"]), greedy, "{json}");
    let raw = generate(&[], &prompt, 1);
    assert_eq!(
        json["prompt_eval_count"], raw["prompt_eval_count"],
        "{json}"
    );
    let longer = dir.path().join("longer.jinja");
    std::fs::write(
        &longer,
        "{{ bos_token }}Question: {{ messages[0]['content'] }} Answer:",
    )
    .unwrap();
    let json = generate(
        &["--chat", "--chat-template", longer.to_str().unwrap()],
        &prompt,
        1,
    );
    let (with, without) = (
        json["prompt_eval_count"].as_u64().unwrap(),
        raw["prompt_eval_count"].as_u64().unwrap(),
    );
    assert!(with > without, "{with} vs {without}");
    // A missing file is an error naming it.
    let out = mtp()
        .arg("generate")
        .arg("--model")
        .arg(&gguf)
        .args(["--chat", "--chat-template", "/nonexistent/t.jinja", "hello"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/t.jinja"), "{stderr}");
}
