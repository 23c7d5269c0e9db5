//! Helpers of the `mtp` command tests: the fixture cases, running the binary, temp copies of
//! model directories.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// The fixture root `<workspace>/tests/fixtures/gemma4`.
pub fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma4")
}

/// One fixture case: its directories and the reference prompt and greedy continuation.
pub struct Case {
    /// Case name.
    pub name: String,
    /// Case directory.
    pub dir: PathBuf,
    /// `reference.json` `prompt_text`.
    pub prompt_text: String,
    /// `reference.json` `greedy_ids` (HF greedy continuation, EOS disabled).
    pub greedy_ids: Vec<u32>,
}

impl Case {
    /// The case called `name`.
    pub fn named(name: &str) -> Case {
        let dir = fixture_root().join(name);
        let text = std::fs::read_to_string(dir.join("reference.json")).expect("reference.json");
        let json: Value = serde_json::from_str(&text).expect("reference.json parses");
        let prompt_text = json["prompt_text"]
            .as_str()
            .expect("prompt_text")
            .to_string();
        let greedy_ids = ids(&json["greedy_ids"]);
        Case {
            name: name.to_string(),
            dir,
            prompt_text,
            greedy_ids,
        }
    }

    /// Target directory.
    pub fn target(&self) -> PathBuf {
        self.dir.join("target")
    }

    /// Assistant directory.
    pub fn assistant(&self) -> PathBuf {
        self.dir.join("assistant")
    }
}

/// Every fixture case, sorted.
pub fn cases() -> Vec<Case> {
    let mut names: Vec<String> = std::fs::read_dir(fixture_root())
        .expect("fixtures are committed")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("reference.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(!names.is_empty());
    names.iter().map(|n| Case::named(n)).collect()
}

/// A JSON array of ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// The `mtp` binary, with a clean environment for the settings it reads.
pub fn mtp() -> Command {
    let mut cmd = Command::cargo_bin("mtp").expect("the mtp binary is built");
    for key in [
        "RUST_LOG",
        "MTP_MODEL_DIR",
        "MTP_INITIAL_DRAFT_TOKENS",
        "MTP_MAX_DRAFT_TOKENS",
        "MTP_DRAFT_SCHEDULE",
        "MTP_SERIAL_VALIDATE",
        "MTP_COMPARE_SERIAL_VALIDATE",
    ] {
        cmd.env_remove(key);
    }
    // The seed's constant schedule (these tests check what speculation does, so drafting
    // must happen; `--draft-schedule` still overrides it), and a cache of this test process's
    // own, so no run starts from adaptive schedule state that another test run kept.
    cmd.env("MTP_DRAFT_SCHEDULE", "constant");
    cmd.env("XDG_CACHE_HOME", test_cache_dir());
    cmd
}

/// This test process's cache directory (emptied on first use; the embedded pair is written
/// there once).
fn test_cache_dir() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mtp-cli-test-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    })
    .clone()
}

/// `mtp generate --model <case target> [--draft <case assistant>] <prompt_text> --json`
/// plus `extra`, greedy (`--temperature 0`) unless `extra` sets a temperature (the fixtures
/// have no generation_config.json, so they would sample with ollama's defaults); returns the
/// parsed JSON (the command must succeed).
pub fn generate_json(case: &Case, with_draft: bool, extra: &[&str]) -> Value {
    let mut cmd = mtp();
    cmd.arg("generate").arg("--model").arg(case.target());
    if with_draft {
        cmd.arg("--draft").arg(case.assistant());
    }
    if !extra.contains(&"--temperature") {
        cmd.args(["--temperature", "0"]);
    }
    cmd.arg(&case.prompt_text).arg("--json").args(extra);
    let out = cmd.output().expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: mtp failed: {stderr}", case.name);
    let stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Copy a model directory's files into a fresh temporary directory.
pub fn copy_dir(src: &Path) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("temp dir");
    for entry in std::fs::read_dir(src).expect("source dir") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).expect("copy");
    }
    tmp
}

/// Run the command, expect a failure with `needle` on stderr and no panic.
pub fn assert_fails_with(cmd: &mut Command, needle: &str) {
    let out = cmd.output().expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr: {stderr}"
    );
    assert!(
        stderr.contains(needle),
        "stderr does not mention {needle:?}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
}

/// Overwrite every value of the F32 tensor `name` in `dir/model.safetensors` with NaN.
pub fn poison(dir: &Path, name: &str) {
    let path = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&path).expect("weights");
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Value =
        serde_json::from_slice(&bytes[8..8 + header_len]).expect("header JSON");
    let info = &header[name];
    assert_eq!(info["dtype"], "F32", "{name}");
    let offsets = &info["data_offsets"];
    let start = 8 + header_len + offsets[0].as_u64().expect("start") as usize;
    let end = 8 + header_len + offsets[1].as_u64().expect("end") as usize;
    for chunk in bytes[start..end].chunks_exact_mut(4) {
        chunk.copy_from_slice(&f32::NAN.to_le_bytes());
    }
    std::fs::write(&path, bytes).expect("write weights");
}

/// `mtp generate --backend BACKEND` on the `copy_drafter` target with a NaN planted in a norm
/// weight before projections quantized at load (`--quantize q8|q4`), activations in f32, f16
/// and bf16: each run fails with the non-finite error.
pub fn nan_before_a_quantized_product_fails_on(backend: &str) {
    let case = Case::named("copy_drafter");
    let target = copy_dir(&case.target());
    poison(target.path(), "model.layers.0.input_layernorm.weight");
    for (scheme, dtype) in [("q8", "f32"), ("q4", "f32"), ("q8", "f16"), ("q4", "bf16")] {
        let mut cmd = mtp();
        cmd.args(["generate", "--backend", backend, "--quantize", scheme])
            .args(["--dtype", dtype, "--model"])
            .arg(target.path())
            .args(["--no-draft", "--temperature", "0"])
            .arg(&case.prompt_text);
        assert_fails_with(&mut cmd, "logits at position");
    }
}
