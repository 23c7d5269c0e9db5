//! What `mtp generate` settles before loading: the memory it will need (printed, and a refusal
//! above the available memory unless `--ignore-memory-limit`) and the `--dtype auto` choice.

mod cli_common;

use cli_common::{assert_fails_with, copy_dir, mtp, Case};

#[test]
fn memory_is_printed_before_loading() {
    let case = Case::named("mm_e2b_bf16_sharded");
    let out = mtp()
        .arg("generate")
        .arg("--model")
        .arg(case.target())
        .args(["--num-predict", "2", &case.prompt_text])
        .output()
        .expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The bf16 checkpoint is computed in f32 on the CPU (`--dtype auto`).
    assert!(
        stderr.contains("memory: ") && stderr.contains("GiB of weights (f32)"),
        "{stderr}"
    );
}

#[test]
fn a_model_larger_than_memory_is_refused() {
    let case = Case::named("swa_basic");
    let dir = copy_dir(&case.target());
    // A context so long that its KV cache cannot fit in any machine's memory.
    let config = dir.path().join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    json["max_position_embeddings"] = (1u64 << 44).into();
    std::fs::write(&config, json.to_string()).unwrap();
    let huge = (1u64 << 43).to_string();
    let mut cmd = mtp();
    cmd.arg("generate").arg("--model").arg(dir.path()).args([
        "--num-predict",
        &huge,
        "--temperature",
        "0",
        &case.prompt_text,
    ]);
    assert_fails_with(&mut cmd, "--ignore-memory-limit");
    // The flag is accepted (a run that would exceed memory with it is not something a test can
    // afford: it would try to allocate).
    let out = mtp()
        .arg("generate")
        .arg("--model")
        .arg(dir.path())
        .args([
            "--ignore-memory-limit",
            "--num-predict",
            "2",
            &case.prompt_text,
        ])
        .output()
        .expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
}

#[test]
fn a_draft_model_counts_in_the_memory_check() {
    // The target fits; the draft model (same vocabulary) has a context whose KV cache cannot.
    let target = Case::named("e2b_like");
    let draft = copy_dir(&Case::named("swa_basic").target());
    let config = draft.path().join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    json["max_position_embeddings"] = (1u64 << 44).into();
    std::fs::write(&config, json.to_string()).unwrap();
    let huge = (1u64 << 43).to_string();
    let mut cmd = mtp();
    cmd.arg("generate")
        .arg("--model")
        .arg(target.target())
        .arg("--draft")
        .arg(draft.path())
        .args([
            "--num-predict",
            &huge,
            "--temperature",
            "0",
            &target.prompt_text,
        ]);
    assert_fails_with(&mut cmd, "--ignore-memory-limit");
}
