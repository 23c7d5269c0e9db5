//! What a new user meets in the first hour: statistics that add up, messages that
//! say what is wrong, warnings once, no colours in a pipe, penalised greedy MTP, the reason
//! speculation is off, the sampling defaults and their seed.

mod cli_common;

use cli_common::{assert_fails_with, copy_dir, generate_json, ids, mtp, Case};
use serde_json::Value;

fn swa() -> Case {
    Case::named("swa_basic")
}

/// `mtp generate` on `case` with the drafter and `extra`; (stdout, stderr), must succeed.
fn generate_text(case: &Case, extra: &[&str]) -> (String, String) {
    let out = mtp()
        .arg("generate")
        .arg("--model")
        .arg(case.target())
        .arg("--draft")
        .arg(case.assistant())
        .args(extra)
        .arg(&case.prompt_text)
        .output()
        .expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{extra:?}: {stderr}");
    (String::from_utf8(out.stdout).expect("utf-8"), stderr)
}

fn count(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no count {key} in {v}"))
}

#[test]
fn every_round_is_batched_serial_or_not_drafted() {
    let case = Case::named("copy_drafter");
    for extra in [&["-n", "23"][..], &["-n", "17", "--serial-validate"]] {
        let json = generate_json(&case, true, extra);
        let m = &json["mtp"];
        let classified =
            count(m, "batched_rounds") + count(m, "serial_rounds") + count(m, "undrafted_rounds");
        assert_eq!(classified, count(m, "iterations"), "{extra:?}: {m}");
    }
    let (_, stderr) = generate_text(&case, &["--temperature", "0", "-n", "23"]);
    assert!(stderr.contains("not drafted)"), "{stderr}");
}

#[test]
fn penalised_greedy_speculates_and_equals_plain_penalised_greedy() {
    for case in [Case::named("copy_drafter"), swa()] {
        let args = ["--repeat-penalty", "1.3", "--temperature", "0", "-n", "40"];
        let mtp = generate_json(&case, true, &args);
        assert_eq!(mtp["mode"], "greedy-mtp", "{}", case.name);
        assert!(count(&mtp["mtp"], "drafted") > 0, "{}", case.name);
        let plain = generate_json(&case, false, &args);
        assert_eq!(plain["mode"], "plain");
        assert_eq!(plain["speculation_off"], "no-drafter");
        assert_eq!(mtp["text"], plain["text"], "{}", case.name);
        assert_eq!(ids(&mtp["tokens"]), ids(&plain["tokens"]), "{}", case.name);
        // The penalty changes the output, so the equality says something.
        let unpenalised = generate_json(&case, false, &["--temperature", "0", "-n", "40"]);
        assert_ne!(unpenalised["tokens"], plain["tokens"], "{}", case.name);
        // top-k / top-p / min-p cannot change a greedy choice.
        let filtered = generate_json(
            &case,
            true,
            &[
                &args[..],
                &["--top-k", "3", "--top-p", "0.5", "--min-p", "0.2"],
            ]
            .concat(),
        );
        assert_eq!(filtered["tokens"], plain["tokens"], "{}", case.name);
        assert_eq!(filtered["mode"], "greedy-mtp");
    }
}

#[test]
fn the_reason_speculation_is_off_is_said_once() {
    let case = Case::named("copy_drafter");
    let (_, stderr) = generate_text(&case, &["--temperature", "0", "--no-draft", "-n", "5"]);
    assert_eq!(
        stderr.matches("mtp: off: MTP is disabled").count(),
        1,
        "{stderr}"
    );
    let (_, stderr) = generate_text(
        &case,
        &["--temperature", "0.7", "--serial-validate", "-n", "5"],
    );
    assert_eq!(stderr.matches("mtp: off: sampling").count(), 1, "{stderr}");
    assert!(stderr.contains("needs batched validation"), "{stderr}");
}

#[test]
fn no_rate_from_an_interval_too_short_to_time() {
    let case = Case::named("copy_drafter");
    let (_, stderr) = generate_text(&case, &["--temperature", "0", "-n", "1"]);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("generated: "))
        .unwrap_or_else(|| panic!("no generated line: {stderr}"));
    assert!(line.starts_with("generated: 1 token in "), "{line}");
    assert!(
        !line.contains("tokens/s"),
        "a rate from a sub-millisecond interval: {line}"
    );
    let json = generate_json(&case, true, &["-n", "1"]);
    assert!(json["tokens_per_second"].is_null(), "{json}");
}

#[test]
fn a_full_context_is_reported_as_such() {
    let case = swa();
    let json = generate_json(&case, true, &["-n", "1000", "--ignore-eos"]);
    assert_eq!(json["done_reason"], "length");
    assert_eq!(json["context_full"], true);
    let (_, stderr) = generate_text(&case, &["--temperature", "0", "-n", "1000", "--ignore-eos"]);
    assert!(
        stderr.contains("done: length (the model's context is full)"),
        "{stderr}"
    );
    let json = generate_json(&case, true, &["-n", "5"]);
    assert_eq!(json["context_full"], false);
}

#[test]
fn warnings_once_and_no_colours_in_a_pipe() {
    let case = Case::named("copy_drafter");
    let out = mtp()
        .env("MTP_DRAFT_SCHEDULE", "fastest")
        .args(["generate", "--temperature", "0", "-n", "4", "--model"])
        .arg(case.target())
        .arg("--draft")
        .arg(case.assistant())
        .arg(&case.prompt_text)
        .output()
        .expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("invalid MTP env setting").count(),
        1,
        "{stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "ANSI escapes in a pipe: {stderr:?}"
    );
}

#[test]
fn negative_values_get_a_plain_message_not_a_dash_dash_tip() {
    for (flag, value) in [
        ("--top-k", "-1"),
        ("--num-predict", "-3"),
        ("--repeat-last-n", "-64"),
        ("--seed", "-7"),
        ("--eos", "-1"),
        ("--draft-tokens", "-2"),
    ] {
        let out = mtp()
            .args(["generate", "--model"])
            .arg(swa().target())
            .args([flag, value, "w5"])
            .output()
            .expect("mtp runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} {value}");
        assert!(!stderr.contains("-- "), "{flag} {value}: {stderr}");
        assert!(stderr.contains("whole number"), "{flag} {value}: {stderr}");
    }
}

#[test]
fn model_path_mistakes_are_named() {
    let case = swa();
    let file = case.target().join("config.json");
    assert_fails_with(
        mtp().args(["generate", "--model"]).arg(&file).arg("w5"),
        "is a file: pass the model's directory",
    );
    assert_fails_with(
        mtp()
            .args(["generate", "--model"])
            .arg(case.target())
            .arg("--draft")
            .arg(&file)
            .arg("w5"),
        "--draft",
    );
    assert_fails_with(
        mtp()
            .args(["generate", "--model"])
            .arg(case.assistant())
            .arg("w5"),
        "is an MTP drafter (model_type \"gemma4_assistant\"), not a target: pass it with --draft",
    );
}

#[test]
fn eos_ids_outside_the_vocabulary_are_rejected() {
    assert_fails_with(
        mtp()
            .args(["generate", "--eos", "99999", "--model"])
            .arg(swa().target())
            .arg("w5"),
        "--eos 99999 is outside the model's vocabulary of",
    );
}

#[test]
fn bench_checks_its_json_path_before_running() {
    let case = Case::named("copy_drafter");
    let dir = tempfile::tempdir().expect("temp dir");
    let out = mtp()
        .arg("bench")
        .arg("--quick")
        .arg("--model")
        .arg(case.target())
        .arg("--draft")
        .arg(case.assistant())
        .arg("--json")
        .arg(dir.path().join("no/such/dir/report.json"))
        .output()
        .expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cannot write the JSON report to"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("bench: pass"),
        "checked before any pass: {stderr}"
    );
    assert_fails_with(
        mtp()
            .arg("bench")
            .arg("--model")
            .arg(case.target())
            .arg("--draft")
            .arg(case.assistant())
            .arg("--json")
            .arg(dir.path()),
        "is a directory",
    );
}

#[test]
fn sampling_defaults_come_from_generation_config_else_ollama() {
    // No generation_config.json: ollama's defaults, a random seed printed with them.
    let case = swa();
    let (_, stderr) = generate_text(&case, &["-n", "4"]);
    assert!(
        stderr.contains("sampling: temperature 0.8, top-k 40, top-p 0.9, seed "),
        "{stderr}"
    );
    let seed: u64 = stderr
        .split("seed ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no seed in {stderr}"));
    // The printed seed repeats the run.
    let again = |seed: u64| {
        let json = generate_json(
            &case,
            true,
            &[
                "--temperature",
                "0.8",
                "--seed",
                &seed.to_string(),
                "-n",
                "12",
            ],
        );
        json["tokens"].clone()
    };
    assert_eq!(again(seed), again(seed));
    // A generation_config.json without do_sample is greedy (HF's rule).
    let target = copy_dir(&case.target());
    std::fs::write(
        target.path().join("generation_config.json"),
        r#"{"eos_token_id": 1, "temperature": 0.3}"#,
    )
    .expect("write");
    let greedy = |extra: &[&str]| {
        let out = mtp()
            .args(["generate", "--json", "-n", "6", "--model"])
            .arg(target.path())
            .args(extra)
            .arg(&case.prompt_text)
            .output()
            .expect("mtp runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("JSON")
    };
    let json = greedy(&[]);
    assert_eq!(ids(&json["tokens"]), case.greedy_ids[..6]);
    assert!(json["seed"].is_null());
    // do_sample: true samples, with the file's temperature.
    std::fs::write(
        target.path().join("generation_config.json"),
        r#"{"do_sample": true, "temperature": 0.3, "top_k": 5}"#,
    )
    .expect("write");
    let json = greedy(&[]);
    assert!(json["seed"].is_u64(), "{json}");
    assert_eq!(json["mode"], "plain");
    // A bad file is a clear error.
    std::fs::write(target.path().join("generation_config.json"), "{").expect("write");
    assert_fails_with(
        mtp()
            .args(["generate", "--model"])
            .arg(target.path())
            .arg("w5"),
        "generation_config.json",
    );
}
