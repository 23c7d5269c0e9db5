//! A closed stdout or stderr ends `mtp generate` and `mtp bench` quietly with status 141
//! (128 + SIGPIPE, what shells report for `seq 1 1000000 | head -1`), never with a panic. Every
//! test closes a real pipe: the read end is dropped before the command writes.

mod cli_common;

use std::io::Read;
use std::process::{Command, Stdio};

use cli_common::Case;

const EXIT_CLOSED_PIPE: i32 = 141;

fn mtp_path() -> std::path::PathBuf {
    assert_cmd::cargo::cargo_bin("mtp")
}

/// `mtp generate` on a fixture target + drafter, greedy, long enough to write many pieces.
fn generate(extra: &[&str]) -> Command {
    let case = Case::named("copy_drafter");
    let mut cmd = Command::new(mtp_path());
    cmd.env_remove("RUST_LOG")
        .env_remove("MTP_MODEL_DIR")
        .arg("generate")
        .arg("--model")
        .arg(case.target())
        .arg("--draft")
        .arg(case.assistant())
        .args(["--temperature", "0", "-n", "48", "--ignore-eos"])
        .args(extra)
        .arg(&case.prompt_text);
    cmd
}

/// Which of the command's output streams is closed before it writes.
#[derive(Clone, Copy, Debug)]
enum Closed {
    Stdout,
    Stderr,
    Both,
}

/// Run `cmd` with `closed` dropped at once; returns (exit code, what the open stream got).
fn run_closed(mut cmd: Command, closed: Closed) -> (Option<i32>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mtp starts");
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    match closed {
        Closed::Stdout => drop(stdout.take()),
        Closed::Stderr => drop(stderr.take()),
        Closed::Both => {
            drop(stdout.take());
            drop(stderr.take());
        }
    }
    let mut open = String::new();
    if let Some(mut s) = stdout {
        s.read_to_string(&mut open).expect("read stdout");
    }
    if let Some(mut s) = stderr {
        s.read_to_string(&mut open).expect("read stderr");
    }
    let status = child.wait().expect("mtp exits");
    (status.code(), open)
}

fn assert_quiet_pipe_exit(cmd: Command, closed: Closed) {
    let (code, open) = run_closed(cmd, closed);
    assert_eq!(code, Some(EXIT_CLOSED_PIPE), "{closed:?} closed: {open}");
    assert!(!open.contains("panicked"), "{closed:?} closed: {open}");
    assert!(!open.contains("error:"), "{closed:?} closed: {open}");
}

#[test]
fn generate_ends_quietly_on_a_closed_stdout_or_stderr() {
    for closed in [Closed::Stdout, Closed::Stderr, Closed::Both] {
        assert_quiet_pipe_exit(generate(&[]), closed);
        assert_quiet_pipe_exit(generate(&["--json"]), closed);
    }
}

#[test]
fn bench_ends_quietly_on_a_closed_stdout_or_stderr() {
    let dir = tempfile::tempdir().expect("temp dir");
    let case = Case::named("copy_drafter");
    let prompts = dir.path().join("prompts.txt");
    std::fs::write(&prompts, format!("{}\n", case.prompt_text)).expect("prompts");
    for closed in [Closed::Stdout, Closed::Stderr] {
        let mut cmd = Command::new(mtp_path());
        cmd.env_remove("RUST_LOG")
            .arg("bench")
            .arg("--quick")
            .arg("--model")
            .arg(case.target())
            .arg("--draft")
            .arg(case.assistant())
            .arg("--prompts")
            .arg(&prompts)
            .arg("--json")
            .arg(dir.path().join("bench.json"));
        assert_quiet_pipe_exit(cmd, closed);
    }
}

/// Run `script` in bash with `$0` the mtp binary, `$1`/`$2` the fixture target/drafter and `$3`
/// its prompt; returns stdout.
#[cfg(unix)]
fn bash(script: &str) -> String {
    let case = Case::named("copy_drafter");
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg(mtp_path())
        .arg(case.target())
        .arg(case.assistant())
        .arg(&case.prompt_text)
        .env_remove("RUST_LOG")
        .output()
        .expect("bash runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `mtp generate` in real shell pipelines: `mtp generate … 2>&1 | head -3` (whether mtp
/// still writes after `head` left is a race: 0 or 141, never a panic) and
/// `mtp generate --json … | true` (`true` is gone before the model has loaded: 141).
#[cfg(unix)]
#[test]
fn generate_into_head_and_true_in_shell_pipelines() {
    let args = r#"generate --model "$1" --draft "$2" --temperature 0 -n 48 --ignore-eos "$3""#;
    let head = bash(&format!(
        r#""$0" {args} 2>&1 | head -3; echo "status=${{PIPESTATUS[0]}}""#
    ));
    assert!(!head.contains("panicked"), "{head}");
    assert!(
        head.contains("status=0") || head.contains("status=141"),
        "{head}"
    );
    let json = bash(&format!(
        r#""$0" {args} --json 2>&1 | true; echo "status=${{PIPESTATUS[0]}}""#
    ));
    assert_eq!(json.trim(), "status=141");
}
