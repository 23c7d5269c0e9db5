//! `mtp generate|bench --model T.gguf --draft A.gguf` on the Gemma 4 GGUF files llama.cpp's
//! converter writes (`tests/fixtures/gemma4_gguf`): the target's embedded `gemma4` tokenizer,
//! the assistant drafting (and a GGUF draft model), llama.cpp's greedy tokens, the
//! full-vocabulary-head notice and `--draft-centroids`.

mod cli_common;
mod gemma4_gguf_support;

use cli_common::{assert_fails_with, ids, mtp};
use gemma4_gguf_support::{case_dir, runs};

fn generate(extra: &[&str], prompt: &str, n: usize) -> (serde_json::Value, String) {
    let dir = case_dir("e2b_like");
    let out = mtp()
        .arg("generate")
        .arg("--model")
        .arg(dir.join("target-f32.gguf"))
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
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "mtp failed: {stderr}");
    let json = serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
    (json, stderr)
}

/// The prompt text of the fixture's first run, and llama.cpp's greedy continuation of it.
fn first_run() -> (String, Vec<u32>) {
    let text = std::fs::read_to_string(case_dir("e2b_like").join("reference.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let run = &runs("e2b_like")[0];
    (
        json["runs"][0]["text"].as_str().unwrap().to_string(),
        run.llama_greedy.clone(),
    )
}

#[test]
fn a_gguf_pair_generates_llama_cpps_greedy_tokens() {
    let (prompt, greedy) = first_run();
    let dir = case_dir("e2b_like");
    let assistant = dir.join("assistant-f32.gguf");
    let assistant = assistant.to_str().unwrap();
    let (plain, _) = generate(&[], &prompt, greedy.len());
    assert_eq!(ids(&plain["tokens"]), greedy, "plain");
    for backend in ["reference", "candle"] {
        let (json, stderr) = generate(
            &["--draft", assistant, "--backend", backend],
            &prompt,
            greedy.len(),
        );
        assert_eq!(json["mode"], "greedy-mtp", "{json}");
        assert_eq!(ids(&json["tokens"]), greedy, "{backend}: MTP");
        assert!(
            stderr.contains("full-vocabulary head"),
            "the first lines say the head is the dense one: {stderr}"
        );
    }
    // The target's own GGUF as a draft model (a target-family file, not an assistant).
    let target = dir.join("target-f32.gguf");
    let (json, _) = generate(
        &[
            "--draft",
            target.to_str().unwrap(),
            "--draft-schedule",
            "constant",
        ],
        &prompt,
        greedy.len(),
    );
    assert_eq!(json["mtp"]["proposer"], "model", "{json}");
    assert_eq!(ids(&json["tokens"]), greedy, "a GGUF draft model");
    let centroids = dir.join("hf/assistant_ordered");
    let ordered = dir.join("assistant_ordered-f32.gguf");
    let (json, stderr) = generate(
        &[
            "--draft",
            ordered.to_str().unwrap(),
            "--draft-centroids",
            centroids.to_str().unwrap(),
        ],
        &prompt,
        greedy.len(),
    );
    assert_eq!(ids(&json["tokens"]), greedy, "MTP through the centroids");
    assert!(!stderr.contains("full-vocabulary head"), "{stderr}");
}

#[test]
fn bad_gguf_pairs_are_refused_with_reasons() {
    let dir = case_dir("e2b_like");
    let path = |p: std::path::PathBuf| p.to_str().unwrap().to_string();
    let target = path(dir.join("target-f32.gguf"));
    let assistant = path(dir.join("assistant-f32.gguf"));
    let cases: [(Vec<String>, &str); 4] = [
        // The assistant passed as the target.
        (
            vec!["--model".into(), assistant.clone()],
            "gemma4-assistant",
        ),
        // An assistant of another target width.
        (
            vec![
                "--model".into(),
                target.clone(),
                "--draft".into(),
                path(case_dir("e2b_like_q8_0").join("assistant-q8_0.gguf")),
            ],
            "backbone_hidden_size 64",
        ),
        // Centroids from an assistant without an ordered embedding.
        (
            vec![
                "--model".into(),
                target.clone(),
                "--draft".into(),
                assistant,
                "--draft-centroids".into(),
                path(dir.join("hf/assistant")),
            ],
            "use_ordered_embeddings",
        ),
        // Centroids without a drafter.
        (
            vec![
                "--model".into(),
                target,
                "--draft-centroids".into(),
                path(dir.join("hf/assistant_ordered")),
            ],
            "--draft",
        ),
    ];
    for (args, expected) in cases {
        assert_fails_with(mtp().arg("generate").args(&args).arg("hi"), expected);
    }
}

#[test]
fn the_bench_runs_a_gguf_pair() {
    let dir = case_dir("e2b_like");
    let prompts = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(prompts.path(), "In the beginning\nThe quick brown fox\n").unwrap();
    let json_out = tempfile::NamedTempFile::new().unwrap();
    let out = mtp()
        .arg("bench")
        .arg("--model")
        .arg(dir.join("target-f32.gguf"))
        .arg("--draft")
        .arg(dir.join("assistant-f32.gguf"))
        .arg("--prompts")
        .arg(prompts.path())
        .args(["-n", "8", "--reps", "1", "--warmup", "0", "--depths", "2"])
        .args(["--schedules", "constant", "--quick", "--json"])
        .arg(json_out.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json_out.path()).unwrap()).unwrap();
    assert_eq!(report["greedy_identical"], true, "{report}");
}
