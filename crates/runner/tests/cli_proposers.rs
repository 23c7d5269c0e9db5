//! `mtp generate` with each proposer on the default target: `--draft-kind ngram` prints exactly
//! plain greedy's text (with acceptance statistics), `--draft DIR` detects the assistant or a
//! draft model, several proposers draft side by side, and kinds that do not fit the directory
//! are clear errors.

mod cli_common;

use std::path::{Path, PathBuf};

use cli_common::{assert_fails_with, mtp};

fn default_pair() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default")
}

/// A grounded prompt (a genealogy whose formula repeats), so prompt lookup drafts.
const PROMPT: &str = "And Adam lived an hundred and thirty years, and begat a son in his own \
    likeness, after his image; and called his name Seth: And the days of Adam after he had \
    begotten Seth were eight hundred years: and he begat sons and daughters: And all the days \
    that Adam lived were nine hundred and thirty years: and he died. And Seth lived an hundred \
    and five years, and begat Enos:";

/// `mtp generate --model <default target> -n 40 --temperature 0 <extra> PROMPT`: stdout and
/// stderr.
fn generate(extra: &[&str]) -> (String, String) {
    let pair = default_pair();
    let mut cmd = mtp();
    cmd.arg("generate")
        .arg("--model")
        .arg(pair.join("target"))
        .args(["-n", "40", "--temperature", "0"])
        .args(extra)
        .arg(PROMPT);
    let out = cmd.output().expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "mtp failed: {stderr}");
    (String::from_utf8(out.stdout).expect("utf-8"), stderr)
}

#[test]
fn ngram_prints_plain_greedy_text_with_stats() {
    let (plain, plain_err) = generate(&[]);
    assert!(plain_err.contains("mode: plain"), "{plain_err}");
    let (ngram, stats) = generate(&["--draft-kind", "ngram"]);
    assert_eq!(ngram, plain);
    assert!(stats.contains("mode: greedy-mtp"), "{stats}");
    assert!(stats.contains("proposer ngram"), "{stats}");
    let accepted = stats
        .split("accepted ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.trim_end_matches(',').parse::<usize>().ok())
        .unwrap_or_else(|| panic!("no acceptance line in {stats}"));
    assert!(accepted > 0, "prompt lookup accepted nothing: {stats}");
    // Other n-gram sizes change the drafts, never the text.
    let (sized, _) = generate(&[
        "--draft-kind",
        "ngram",
        "--ngram-min",
        "1",
        "--ngram-max",
        "8",
    ]);
    assert_eq!(sized, plain);
}

#[test]
fn draft_dir_detects_the_assistant() {
    let pair = default_pair();
    let assistant = pair.join("assistant");
    let assistant = assistant.to_str().expect("utf-8 path");
    let (plain, _) = generate(&[]);
    let (detected, stats) = generate(&["--draft", assistant]);
    assert_eq!(detected, plain);
    assert!(stats.contains("mode: greedy-mtp"), "{stats}");
    assert!(stats.contains("proposer mtp"), "{stats}");
    let (forced, _) = generate(&["--draft", assistant, "--draft-kind", "mtp"]);
    assert_eq!(forced, plain);
}

#[test]
fn a_causal_lm_in_draft_dir_drafts_as_a_draft_model() {
    let pair = default_pair();
    let target = pair.join("target");
    let target = target.to_str().expect("utf-8 path");
    let (plain, _) = generate(&[]);
    // The target drafting for itself: the same text, and every draft accepted.
    let (drafted, stats) = generate(&["--draft", target]);
    assert_eq!(drafted, plain);
    assert!(stats.contains("mode: greedy-mtp"), "{stats}");
    assert!(stats.contains("proposer model"), "{stats}");
    assert!(stats.contains("(100.0%)"), "{stats}");
    let (forced, _) = generate(&["--draft", target, "--draft-kind", "model"]);
    assert_eq!(forced, plain);
}

#[test]
fn several_proposers_draft_side_by_side() {
    let pair = default_pair();
    let assistant = pair.join("assistant");
    let assistant = assistant.to_str().expect("utf-8 path");
    let (plain, _) = generate(&[]);
    let (both, stats) = generate(&["--draft", assistant, "--draft-kind", "mtp,ngram"]);
    assert_eq!(both, plain);
    assert!(stats.contains("mode: greedy-mtp"), "{stats}");
    let shares = stats
        .lines()
        .find(|l| l.starts_with("mtp: proposers:"))
        .unwrap_or_else(|| panic!("no per-proposer line in {stats}"));
    assert!(
        shares.contains("mtp ") && shares.contains("ngram "),
        "{shares}"
    );
}

#[test]
fn mismatched_kinds_are_clear_errors() {
    let pair = default_pair();
    let target = pair.join("target");
    let generate_with = |extra: &[&str]| {
        let mut cmd = mtp();
        cmd.arg("generate")
            .arg("--model")
            .arg(&target)
            .args(extra)
            .arg("hi");
        cmd
    };
    assert_fails_with(
        &mut generate_with(&["--draft-kind", "mtp"]),
        "--draft-kind mtp needs an assistant directory",
    );
    let target_dir = target.to_str().expect("utf-8 path");
    assert_fails_with(
        &mut generate_with(&["--draft", target_dir, "--draft-kind", "mtp"]),
        "holds model weights, not mtp",
    );
    assert_fails_with(
        &mut generate_with(&["--draft-kind", "model"]),
        "--draft-kind model needs the draft model's directory",
    );
    assert_fails_with(
        &mut generate_with(&[
            "--draft-kind",
            "ngram",
            "--ngram-min",
            "3",
            "--ngram-max",
            "2",
        ]),
        "ngram_max",
    );
    assert_fails_with(
        &mut generate_with(&["--draft-kind", "ngram", "--ngram-max", "99"]),
        "must be <= 32",
    );
}

#[test]
fn bench_runs_prompt_lookup() {
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("bench.json");
    let grounded = default_pair().join("../prompts-grounded.txt");
    let out = mtp()
        .arg("bench")
        .arg("--model")
        .arg(default_pair().join("target"))
        .args(["--draft-kind", "ngram", "--quick", "--backend", "reference"])
        .arg("--prompts")
        .arg(&grounded)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mtp bench failed: {stderr}");
    let text = std::fs::read_to_string(&json).expect("the report is written");
    let report: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(report["greedy_identical"], true, "{text}");
    let drafter = report["setup"]["drafter"].as_str().unwrap_or("");
    assert!(drafter.contains("ngram"), "{drafter}");
}
