//! `mtp generate` errors a user can act on: each exits non-zero with a message on stderr and no
//! panic. Also `--help` and Ctrl-C.

mod cli_common;

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use cli_common::{assert_fails_with, copy_dir, mtp, Case};

fn swa() -> Case {
    Case::named("swa_basic")
}

fn generate_on(target: &std::path::Path) -> assert_cmd::Command {
    let mut cmd = mtp();
    cmd.args(["generate", "--model"]).arg(target);
    cmd
}

#[test]
fn missing_or_unreadable_model_directories() {
    assert_fails_with(
        generate_on("/nonexistent/model".as_ref()).arg("hi"),
        "the target model directory /nonexistent/model does not exist",
    );
    assert_fails_with(
        generate_on(&swa().target()).args(["--draft", "/nonexistent/draft", "hi"]),
        "the drafter model directory /nonexistent/draft does not exist",
    );
    // A directory without config.json (but with a tokenizer).
    let dir = copy_dir(&swa().target());
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    assert_fails_with(generate_on(dir.path()).arg("w5"), "config.json");
}

#[test]
fn bad_config_or_tokenizer() {
    let dir = copy_dir(&swa().target());
    std::fs::write(dir.path().join("config.json"), "{ not json").unwrap();
    assert_fails_with(generate_on(dir.path()).arg("w5"), "bad JSON in");

    let dir = copy_dir(&swa().target());
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    assert_fails_with(generate_on(dir.path()).arg("w5"), "tokenizer.json");

    let dir = copy_dir(&swa().target());
    std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": 3}").unwrap();
    assert_fails_with(generate_on(dir.path()).arg("w5"), "bad tokenizer file");

    let dir = copy_dir(&swa().target());
    std::fs::write(dir.path().join("tokenizer_config.json"), "[1, 2").unwrap();
    assert_fails_with(generate_on(dir.path()).arg("w5"), "tokenizer_config.json");

    // A chat template that does not compile, one that raises, and none at all.
    let dir = copy_dir(&swa().target());
    std::fs::write(dir.path().join("chat_template.jinja"), "{% if %}").unwrap();
    assert_fails_with(
        generate_on(dir.path()).args(["--chat", "w5"]),
        "chat_template.jinja failed",
    );
    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "{{ raise_exception('System role not supported') }}",
    )
    .unwrap();
    assert_fails_with(
        generate_on(dir.path()).args(["--chat", "w5"]),
        "System role not supported",
    );
    std::fs::remove_file(dir.path().join("chat_template.jinja")).unwrap();
    std::fs::write(dir.path().join("tokenizer_config.json"), "{}").unwrap();
    assert_fails_with(
        generate_on(dir.path()).args(["--chat", "w5"]),
        "the model has no chat template",
    );
}

#[test]
fn prompt_longer_than_the_context() {
    let long = vec!["w5"; 300].join(" ");
    assert_fails_with(
        generate_on(&swa().target()).arg(long),
        "the prompt has 300 tokens but at most 255 fit: the model's context holds 256 positions",
    );
    assert_fails_with(
        generate_on(&swa().target()).arg("  "),
        "the prompt is empty",
    );
}

#[test]
fn a_drafter_that_does_not_fit_the_target() {
    let other = Case::named("k_eq_v");
    assert_fails_with(
        generate_on(&swa().target())
            .arg("--draft")
            .arg(other.assistant())
            .arg("w5"),
        "drafter does not fit the target",
    );
}

#[test]
fn unknown_backends_and_devices_not_compiled_in() {
    let target = swa().target();
    if !cfg!(feature = "mlx") {
        assert_fails_with(
            generate_on(&target).args(["--backend", "mlx", "w5"]),
            "this mtp was built without the MLX backend",
        );
    }
    assert_fails_with(
        generate_on(&target).args(["--backend", "tpu", "w5"]),
        "invalid value 'tpu'",
    );
    assert_fails_with(
        generate_on(&target).args(["--backend", "reference", "--device", "cuda", "w5"]),
        "the reference backend runs on the CPU only",
    );
    if !cfg!(feature = "candle") {
        assert_fails_with(
            generate_on(&target).args(["--backend", "candle", "w5"]),
            "built without the candle backend",
        );
        return;
    }
    assert_fails_with(
        generate_on(&target).args(["--device", "quantum", "w5"]),
        "cannot use device `quantum`",
    );
    if !cfg!(feature = "cuda") {
        assert_fails_with(
            generate_on(&target).args(["--device", "cuda:0", "w5"]),
            "--features cuda",
        );
    }
}

#[test]
fn invalid_option_values() {
    let target = swa().target();
    for (args, needle) in [
        (
            &["--temperature", "-1"][..],
            "temperature = -1: must be >= 0",
        ),
        (&["--min-p", "2"], "min_p"),
        (&["--top-k", "many"], "invalid value 'many'"),
        (&["--draft-tokens", "0"], "must be at least 1"),
        (&["--max-draft-tokens", "0"], "must be at least 1"),
        (
            &["--max-draft-tokens", "10000"],
            "above the largest draft depth, 64",
        ),
        (
            &["--draft-tokens", "99999999999999999999999"],
            "above the largest draft depth, 64",
        ),
        (&["--draft-schedule", "fastest"], "invalid value 'fastest'"),
        (&["--dtype", "f8"], "invalid value 'f8'"),
        (
            &["--serial-validate", "--compare-serial-validate"],
            "cannot be used with",
        ),
        (&["--eos", "x"], "invalid value 'x'"),
        (&["--threads", "0"], "must be at least 1"),
        (&["--threads", "100000"], "more than the 256 allowed"),
        (&["--threads", "two"], "expected a whole number"),
    ] {
        assert_fails_with(generate_on(&target).args(args).arg("w5"), needle);
    }
}

#[test]
fn a_valid_thread_count_runs() {
    generate_on(&swa().target())
        .args(["--threads", "1", "-n", "2", "--temperature", "0", "w5"])
        .assert()
        .success();
}

#[test]
fn an_environment_draft_depth_above_the_limit_is_an_error() {
    // Once a panic ("capacity overflow") with the adaptive schedule.
    let case = swa();
    assert_fails_with(
        generate_on(&case.target())
            .arg("--draft")
            .arg(case.assistant())
            .env("MTP_MAX_DRAFT_TOKENS", "18446744073709551615")
            .args(["--draft-schedule", "adaptive", "-n", "4", "w5"]),
        "MTP_MAX_DRAFT_TOKENS = 18446744073709551615 is above the largest draft depth, 64",
    );
}

#[test]
fn no_default_model_says_what_is_missing() {
    assert_fails_with(
        mtp()
            .env("MTP_MODEL_DIR", "/nonexistent/pair")
            .args(["generate", "w5"]),
        "MTP_MODEL_DIR=/nonexistent/pair does not hold a model pair",
    );
    let checkout = runner::defaults::workspace_default_dir();
    if !checkout.join("target").is_dir() {
        assert_fails_with(
            mtp().args(["generate", "w5"]),
            "no default model yet: `models/default/` is not in this checkout",
        );
    }
}

#[test]
fn help_documents_every_option_with_its_default() {
    let out = mtp().args(["generate", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--model",
        "--draft ",
        "--backend",
        "--device",
        "--dtype",
        "--threads",
        "--temperature",
        "--top-k",
        "--top-p",
        "--min-p",
        "--repeat-penalty",
        "--presence-penalty",
        "--frequency-penalty",
        "--repeat-last-n",
        "--seed",
        "--num-predict",
        "--eos",
        "--ignore-eos",
        "--chat",
        "--system",
        "--draft-tokens",
        "--max-draft-tokens",
        "--draft-schedule",
        "--serial-validate",
        "--compare-serial-validate",
        "--no-draft",
        "--json",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
    // Every option that takes a value states its default (in the block up to the next option).
    let lines: Vec<&str> = help.lines().collect();
    let is_option = |l: &str| {
        let t = l.trim_start();
        t.starts_with("--") || (t.starts_with('-') && t.contains(", --"))
    };
    for (i, line) in lines.iter().enumerate() {
        if is_option(line) && line.contains('<') {
            let block: Vec<&str> = lines[i..]
                .iter()
                .enumerate()
                .take_while(|(j, l)| *j == 0 || !is_option(l))
                .map(|(_, l)| *l)
                .collect();
            assert!(
                block.join(" ").contains("[default: "),
                "no default for: {line}\n{help}"
            );
        }
    }
}

#[test]
fn ctrl_c_stops_cleanly_and_prints_the_partial_stats() {
    // A copy of the target with a long context, so generation outlasts the signal.
    let case = swa();
    let dir = copy_dir(&case.target());
    let config_path = dir.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["max_position_embeddings"] = 100_000.into();
    std::fs::write(&config_path, config.to_string()).unwrap();

    let bin = assert_cmd::cargo::cargo_bin("mtp");
    let mut child = std::process::Command::new(bin)
        .args(["generate", "--ignore-eos", "-n", "99000", "--model"])
        .arg(dir.path())
        .arg("--draft")
        .arg(case.assistant())
        .arg(&case.prompt_text)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    let n = stdout.read(&mut first).unwrap();
    assert!(n > 0, "generation started");
    let killed = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "mtp did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("done: cancelled"), "{stderr}");
    assert!(stderr.contains("mtp: drafted"), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
