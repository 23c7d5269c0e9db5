//! The `mtp serve` binary: starts on the default pair on a free port, answers over TCP, and
//! exits 0 on SIGTERM; bad server options are refused by name.

mod cli_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::time::Duration;

fn http_get(addr: &str, path: &str) -> String {
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    tcp.read_to_string(&mut text).unwrap();
    text
}

#[cfg(unix)]
#[test]
fn serve_starts_answers_and_exits_zero_on_sigterm() {
    let bin = assert_cmd::cargo::cargo_bin("mtp");
    let mut child = std::process::Command::new(bin)
        .args(["serve", "--port", "0", "--name", "tiny"])
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
    let tags = http_get(&addr, "/api/tags");
    assert!(tags.starts_with("HTTP/1.1 200"), "{tags}");
    assert!(tags.contains("\"name\":\"tiny\""), "{tags}");
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
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
