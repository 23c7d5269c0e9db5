//! `mtp bench --quick` end to end on a fixture pair: the table, every JSON field, finite ratios,
//! and greedy MTP reproducing plain decode. No timing assertions: performance is measured by
//! the benchmark, never asserted here.

mod cli_common;

use std::path::Path;

use cli_common::{assert_fails_with, mtp, Case};
use serde_json::Value;

/// Prompts in the fixture vocabulary (`w0` ... `w63`), of varied length.
const PROMPTS: &str =
    "# fixture prompts\nw43 w43 w38 w60\n\nw12 w43 w40 w40 w44 w49 w31 w25\nw41\n";

fn run_quick(backend: &str, dir: &Path, extra: &[&str]) -> (String, Value) {
    let case = Case::named("copy_drafter");
    let prompts = dir.join("prompts.txt");
    std::fs::write(&prompts, PROMPTS).expect("write prompts");
    let json = dir.join(format!("bench-{backend}.json"));
    let out = mtp()
        .arg("bench")
        .arg("--target")
        .arg(case.target())
        .arg("--assistant")
        .arg(case.assistant())
        .args(["--backend", backend, "--quick", "--prompts"])
        .arg(&prompts)
        .arg("--json")
        .arg(&json)
        .args(extra)
        .output()
        .expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mtp bench failed: {stderr}");
    let table = String::from_utf8(out.stdout).expect("utf-8 stdout");
    let text = std::fs::read_to_string(&json).expect("the JSON report is written");
    let report: Value = serde_json::from_str(&text).expect("the report is JSON");
    (table, report)
}

fn finite(v: &Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite(), "{what} = {x}");
    x
}

fn spread(v: &Value, what: &str) -> f64 {
    let min = finite(&v["min"], what);
    let median = finite(&v["median"], what);
    let max = finite(&v["max"], what);
    assert!(min <= median && median <= max, "{what}: {v}");
    median
}

fn check_report(table: &str, r: &Value, backend: &str) {
    for needle in [
        "variant",
        "plain",
        "mtp-adaptive",
        "mtp-k2",
        "t_v ms",
        "peak RSS",
    ] {
        assert!(table.contains(needle), "table lacks {needle:?}:\n{table}");
    }
    assert_eq!(r["schema_version"], 1);
    assert!(r["machine"]["os"].is_string());
    let setup = &r["setup"];
    assert!(setup["backend"]
        .as_str()
        .unwrap_or_default()
        .starts_with(backend));
    assert_eq!(setup["prompts"], 3);
    assert_eq!(setup["num_predict"], 8);
    assert_eq!(setup["quick"], true);
    spread(&r["prefill_tokens_per_second"], "prefill");
    spread(&setup["prompt_tokens"], "prompt tokens");

    let verify = r["cost"]["verify_secs"].as_array().expect("verify_secs");
    assert!(verify.len() >= 3, "widths up to the deepest depth + 1");
    for (i, point) in verify.iter().enumerate() {
        assert_eq!(point["width"], i + 1);
        assert!(spread(&point["secs"], "t_v") > 0.0);
    }
    assert!(spread(&r["cost"]["draft_step_secs"], "t_d") > 0.0);
    assert!(r["cost"]["context_tokens"].as_u64().unwrap_or(0) > 0);

    let names: Vec<&str> = r["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .map(|v| v["name"].as_str().expect("name"))
        .collect();
    let mut expected = vec![
        "plain",
        "mtp-constant",
        "mtp-heuristic",
        "mtp-adaptive",
        "mtp-k1",
        "mtp-k2",
    ];
    // The candle run adds a depth without the evaluation overlap and leaves evaluation to the
    // engine.
    let sync = setup["model_clock"] == "dispatch";
    if sync {
        expected.extend(["plain-sync", "mtp-k2-sync"]);
    } else {
        assert_eq!(setup["model_clock"], "eval");
    }
    assert_eq!(names, expected);
    for v in r["variants"].as_array().expect("variants") {
        let name = v["name"].as_str().unwrap_or_default();
        assert!(spread(&v["decode_tokens_per_second"], name) > 0.0);
        assert!(spread(&v["end_to_end_tokens_per_second"], name) > 0.0);
        assert!(spread(&v["speedup_vs_plain"], name) > 0.0);
        assert!(finite(&v["ideal_speedup"], name) > 0.0);
        assert!(finite(&v["achieved_over_ideal"], name) > 0.0);
        finite(&v["vs_best_fixed_depth"], name);
        spread(&v["host_overhead_per_round_secs"], name);
        spread(&v["target_secs_per_round"], name);
        spread(&v["drafter_secs_per_round"], name);
        assert!(v["rounds"].as_u64().unwrap_or(0) > 0, "{name}");
        let emitted = finite(&v["mean_emitted_per_round"], name);
        let accepted = finite(&v["mean_accepted"], name);
        assert!((emitted - accepted - 1.0).abs() < 1e-9, "{name}");
        let acceptance = finite(&v["acceptance"], name);
        assert!((0.0..=1.0).contains(&acceptance), "{name}");
        assert_eq!(
            v["greedy_match"], true,
            "{name}: greedy MTP changed the output"
        );
        assert_eq!(v["repeatable"], true, "{name}");
        let overlap = if name.ends_with("-sync") {
            "never"
        } else {
            "auto"
        };
        assert_eq!(v["overlap"], overlap, "{name}");
        // Only plain and mtp-k2 have a -sync twin (in the candle run).
        if sync && (name == "plain" || name == "mtp-k2") {
            assert!(spread(&v["overlap_speedup"], name) > 0.0, "{name}");
        } else {
            assert!(v["overlap_speedup"].is_null(), "{name}");
        }
        check_rounds(v, name);
        let positions = v["per_position_acceptance"].as_array().expect("positions");
        match name {
            "plain" | "plain-sync" => {
                assert_eq!(v["mode"], "plain");
                assert!(positions.is_empty());
                assert_eq!(finite(&v["ideal_speedup"], name), 1.0);
            }
            // The adaptive schedule may settle on plain decoding within a quick run.
            "mtp-adaptive" => assert_eq!(v["mode"], "greedy-mtp", "{name}"),
            _ => {
                assert_eq!(v["mode"], "greedy-mtp", "{name}");
                assert!(!positions.is_empty(), "{name}");
            }
        }
    }
    assert_eq!(r["variants"][4]["depth"], 1);
    assert_eq!(
        r["variants"][5]["per_position_acceptance"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(r["greedy_identical"], true);
    assert!(r["best_fixed_depth"].is_u64());
    let controllers = r["controllers"].as_array().expect("controllers");
    assert_eq!(controllers.len(), 1, "the adaptive variant's controller");
    assert_eq!(controllers[0]["key"]["proposer"], "mtp");
    assert!(controllers[0]["state"]["cost_secs"].is_array());
    if sync {
        assert!(r["variants"][6]["depth"].is_null());
        assert_eq!(r["variants"][7]["depth"], 2);
        assert!(table.contains("mtp-k2-sync"), "{table}");
        assert!(table.contains("evaluation overlap"), "{table}");
    }
    if cfg!(target_os = "linux") {
        assert!(r["peak_rss_bytes"].as_u64().unwrap_or(0) > 0);
    }
}

/// The per-round records of a variant: round time by depth for every MTP variant, the full
/// log (depth chosen and drafted, accepted, seconds, capped) for the varying schedules.
fn check_rounds(v: &Value, name: &str) {
    let by_depth = v["round_secs_by_depth"]
        .as_array()
        .expect("round_secs_by_depth");
    assert_eq!(by_depth.is_empty(), name.starts_with("plain"), "{name}");
    for d in by_depth {
        assert!(d["rounds"].as_u64().unwrap_or(0) > 0, "{name}");
        assert!(spread(&d["secs"], name) > 0.0);
    }
    assert!(v["capped_rounds"].is_u64(), "{name}");
    let varying = name == "mtp-heuristic" || name == "mtp-adaptive";
    if !varying {
        assert!(v["round_log"].is_null(), "{name}");
        return;
    }
    let requests = v["round_log"].as_array().expect("round_log");
    assert!(!requests.is_empty(), "{name}");
    let mut rounds = 0;
    for q in requests {
        assert!(q["pass"].is_u64() && q["prompt"].is_u64(), "{name}");
        for r in q["rounds"].as_array().expect("rounds") {
            let (chosen, drafted) = (r["chosen"].as_u64(), r["drafted"].as_u64());
            assert!(drafted <= chosen, "{name}: {r}");
            assert_eq!(r["capped"].as_bool(), Some(drafted < chosen), "{name}: {r}");
            assert!(r["accepted"].as_u64() <= drafted, "{name}: {r}");
            assert!(finite(&r["secs"], name) > 0.0);
            rounds += 1;
        }
    }
    assert_eq!(rounds, v["rounds"].as_u64().unwrap_or(0), "{name}");
}

#[test]
fn quick_bench_on_reference_reports_every_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (table, report) = run_quick("reference", dir.path(), &[]);
    check_report(&table, &report, "reference");
}

#[cfg(feature = "candle")]
#[test]
fn quick_bench_on_candle_reports_every_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (table, report) = run_quick(
        "candle",
        dir.path(),
        &["--sync-depths", "0,2", "--model-clock", "dispatch"],
    );
    check_report(&table, &report, "candle");
}

#[cfg(feature = "candle")]
#[test]
fn quick_bench_runs_quantized_weights_on_candle() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (table, report) = run_quick("candle", dir.path(), &["--quantize", "q8"]);
    check_report(&table, &report, "candle");
    let dtype = report["setup"]["dtype"].as_str().unwrap_or_default();
    assert!(dtype.contains("--quantize q8"), "{dtype}");
}

#[test]
fn bench_measures_a_new_and_a_carried_controller_side_by_side() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (table, report) = run_quick(
        "reference",
        dir.path(),
        &["--schedules", "adaptive", "--controllers", "fresh,carried"],
    );
    let names: Vec<&str> = report["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .map(|v| v["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "plain",
            "mtp-adaptive-fresh",
            "mtp-adaptive",
            "mtp-k1",
            "mtp-k2"
        ]
    );
    assert!(table.contains("mtp-adaptive-fresh"), "{table}");
    for v in report["variants"].as_array().expect("variants") {
        assert_eq!(v["greedy_match"], true, "{}", v["name"]);
    }
}

#[test]
fn bench_needs_a_drafter() {
    let case = Case::named("copy_drafter");
    let mut cmd = mtp();
    cmd.arg("bench").arg("--model").arg(case.target());
    assert_fails_with(&mut cmd, "needs a drafter");
}

/// `mtp bench` on the copy_drafter pair.
fn bench_on_fixture() -> assert_cmd::Command {
    let case = Case::named("copy_drafter");
    let mut cmd = mtp();
    cmd.arg("bench")
        .arg("--model")
        .arg(case.target())
        .arg("--draft")
        .arg(case.assistant());
    cmd
}

#[test]
fn bench_rejects_a_missing_prompt_file_and_depth_zero() {
    let mut cmd = bench_on_fixture();
    cmd.args(["--prompts", "/nonexistent/prompts.txt"]);
    assert_fails_with(&mut cmd, "cannot read the prompt file");
    let mut cmd = bench_on_fixture();
    cmd.args(["--depths", "0,2"]);
    assert_fails_with(&mut cmd, "--depths must be at least 1");
}
