//! The `mtp serve` binary: starts on the default pair on a free port, answers over TCP, and
//! exits 0 on SIGTERM; bad server options are refused by name.

mod cli_common;
mod gguf_support;
mod server_support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use server_support::{http_get, http_get_with};

/// A running `mtp serve`: the child and its stderr, kept open (a closed pipe would kill the
/// server with SIGPIPE at its next log line).
struct Served {
    child: std::process::Child,
    _stderr: BufReader<std::process::ChildStderr>,
}

/// `mtp serve ARGS` on a free port with `envs`: the server and the address it listens on.
fn spawn_serve(args: &[&str], envs: &[(&str, &str)]) -> (Served, String) {
    let bin = assert_cmd::cargo::cargo_bin("mtp");
    let mut child = std::process::Command::new(bin)
        .args(["serve", "--port", "0", "--name", "tiny"])
        .args(args)
        .envs(envs.iter().copied())
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the server exited early"
        );
        if let Some(rest) = line.split("http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    (
        Served {
            child,
            _stderr: stderr,
        },
        addr,
    )
}

/// SIGTERM the server and check that it exits 0; how long it took to exit.
fn stop(served: Served) -> std::time::Duration {
    let mut child = served.child;
    let started = std::time::Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    started.elapsed()
}

#[cfg(unix)]
#[test]
fn serve_starts_answers_and_exits_zero_on_sigterm() {
    let (child, addr) = spawn_serve(&[], &[]);
    let tags = http_get(&addr, "/api/tags");
    assert!(tags.starts_with("HTTP/1.1 200"), "{tags}");
    assert!(tags.contains("\"name\":\"tiny\""), "{tags}");
    stop(child);
}

#[cfg(unix)]
#[test]
fn model_metadata_is_read_from_the_files() {
    // The default pair: a Gemma 4 directory of safetensors.
    let (child, addr) = spawn_serve(&[], &[]);
    let tags = http_get(&addr, "/api/tags");
    stop(child);
    let body = tags.split("\r\n\r\n").nth(1).unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(body.trim()).expect("tags JSON");
    let model = &json["models"][0];
    assert_eq!(model["details"]["format"], "safetensors", "{json}");
    assert!(
        model["details"]["family"]
            .as_str()
            .unwrap()
            .starts_with("gemma4"),
        "{json}"
    );
    assert!(model["size"].as_u64().unwrap() > 0, "{json}");
    // A Gemma 3 GGUF: its architecture, file type and parameter count.
    let gguf = gguf_support::fixture("gemma3/tiny/model-f32.gguf");
    let (child, addr) = spawn_serve(&["--model", gguf.to_str().unwrap()], &[]);
    let tags = http_get(&addr, "/api/tags");
    stop(child);
    let body = tags.split("\r\n\r\n").nth(1).unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(body.trim()).expect("tags JSON");
    let details = &json["models"][0]["details"];
    assert_eq!(details["format"], "gguf", "{json}");
    assert_eq!(details["family"], "gemma3", "{json}");
    assert!(
        !details["parameter_size"].as_str().unwrap().is_empty(),
        "{json}"
    );
    assert_eq!(
        json["models"][0]["size"].as_u64().unwrap(),
        std::fs::metadata(&gguf).unwrap().len(),
        "{json}"
    );
}

#[cfg(unix)]
#[test]
fn the_api_key_comes_from_a_file_or_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("key");
    std::fs::write(&file, "file-key\nignored second line\n").unwrap();
    let file_arg = file.to_str().unwrap();
    for (args, envs, key) in [
        (vec!["--api-key-file", file_arg], vec![], "file-key"),
        (vec![], vec![("MTP_API_KEY", "env-key")], "env-key"),
    ] {
        let (child, addr) = spawn_serve(&args, &envs);
        let refused = http_get(&addr, "/api/tags");
        assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
        let wrong = http_get_with(&addr, "/api/tags", "authorization: Bearer file-kez\r\n");
        assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
        let header = format!("authorization: Bearer {key}\r\n");
        let ok = http_get_with(&addr, "/api/tags", &header);
        assert!(ok.starts_with("HTTP/1.1 200"), "{args:?} {envs:?}: {ok}");
        stop(child);
    }
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    cli_common::assert_fails_with(
        cli_common::mtp().args(["serve", "--api-key-file", empty.to_str().unwrap()]),
        "the API key is empty",
    );
    cli_common::assert_fails_with(
        cli_common::mtp().args(["serve", "--api-key-file", "/nonexistent/key"]),
        "/nonexistent/key",
    );
    cli_common::assert_fails_with(
        cli_common::mtp().args(["serve", "--api-key", "a", "--api-key-file", file_arg]),
        "cannot be used with",
    );
}

#[test]
fn bad_server_options_are_refused() {
    cli_common::assert_fails_with(
        cli_common::mtp().args(["serve", "--queue", "0"]),
        "must be between 1 and 4096",
    );
    cli_common::assert_fails_with(
        cli_common::mtp().args(["serve", "--request-timeout", "0"]),
        "must be a number of seconds > 0",
    );
    cli_common::assert_fails_with(
        cli_common::mtp().args(["serve", "--host", "not a host", "--port", "1"]),
        "cannot resolve --host",
    );
}

/// SIGTERM while a long prompt is being prefilled: after a grace period of one second the server
/// cancels the request between two prefill chunks and exits 0 within seconds, instead of
/// finishing a prefill of about a minute first (the real model, 24k prompt tokens on a 2-core
/// machine).
#[cfg(unix)]
#[test]
fn sigterm_during_a_long_prefill_stops_within_a_chunk() {
    use std::io::{Read, Write};
    use std::time::Duration;

    let test = "sigterm_during_a_long_prefill_stops_within_a_chunk";
    let Some(model) = gguf_support::real_model(test) else {
        return;
    };
    let (served, addr) = spawn_serve(
        &[
            "--model",
            model.to_str().unwrap(),
            "--shutdown-grace",
            "1",
            "--no-draft",
        ],
        &[],
    );
    let words = ["river", "stone", "lantern", "meadow", "copper", "harbor"];
    let prompt: Vec<&str> = (0..24_000).map(|i| words[(i * 7 + i / 5) % 6]).collect();
    let body = serde_json::json!({
        "model": "tiny",
        "prompt": prompt.join(" "),
        "raw": true,
        "stream": false,
        "options": {"num_predict": 1},
    })
    .to_string();
    let client = std::thread::spawn(move || {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(300)))
            .unwrap();
        let head = format!(
            "POST /api/generate HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    });
    // Tokenizing 24k words takes well under a second; then the prefill runs.
    std::thread::sleep(Duration::from_secs(4));
    assert!(!client.is_finished(), "the prefill was still running");
    let took = stop(served);
    let answer = client.join().unwrap();
    eprintln!("{test}: exited {took:?} after SIGTERM; the client got {answer:.200}");
    assert!(
        took < Duration::from_secs(20),
        "the server took {took:?} to stop: the prefill was not cancelled between chunks"
    );
    assert!(
        !answer.contains("\"done_reason\":\"length\""),
        "the cancelled request did not complete: {answer:.300}"
    );
}
