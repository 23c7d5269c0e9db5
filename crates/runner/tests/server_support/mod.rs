//! Shared by the server tests: the committed default pair and a worker serving it.
#![allow(dead_code)]

use std::path::Path;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use backend_candle::CandleBackend;
use http_body_util::BodyExt;
use mtp_core::engine::batch::BatchOptions;
use runner::server::{WorkerEngine, WorkerOptions};
use runner::{ModelPaths, Pipeline};
use serde_json::Value;
use tower::ServiceExt;

/// The name requests must give.
pub const NAME: &str = "default";

/// The committed default pair (target + assistant).
pub fn pair() -> ModelPaths {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default");
    ModelPaths {
        target: dir.join("target"),
        drafter: Some(dir.join("assistant")),
        draft_centroids: None,
        tokenizer: None,
        chat_template: None,
    }
}

/// A worker over the default pair on candle's CPU, with a queue of `queue` requests, serving
/// one request at a time.
pub fn worker(queue: usize) -> WorkerEngine {
    batched_worker(queue, 1)
}

/// A worker over the default pair on candle's CPU, with a queue of `queue` requests, generating
/// up to `parallel` at once (continuous batching; speculation measured per batch size).
pub fn batched_worker(queue: usize, parallel: usize) -> WorkerEngine {
    worker_over(pair(), queue, parallel)
}

/// A worker over `paths` on candle's CPU (see [`batched_worker`]).
pub fn worker_over(paths: ModelPaths, queue: usize, parallel: usize) -> WorkerEngine {
    let load = paths.clone();
    WorkerEngine::spawn(
        &paths,
        WorkerOptions {
            name: NAME.into(),
            queue_depth: queue,
            // The seed's constant schedule: these tests check what speculation does to the
            // responses, so drafting must happen (the adaptive default may settle on plain
            // decoding for the tiny pair).
            env: [("MTP_DRAFT_SCHEDULE".to_string(), "constant".to_string())].into(),
            prefix_reuse: Default::default(),
            batch: BatchOptions {
                max_batch: parallel,
                ..BatchOptions::default()
            },
        },
        move |seat| {
            seat.run(
                Pipeline::load(CandleBackend::cpu(), &load, &Default::default())
                    .map_err(Into::into),
            )
        },
    )
    .unwrap()
}

/// One in-process request to `router` (JSON `body`): the status and the body text.
pub async fn call(
    router: &Router,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// `GET path` over a new TCP connection to `addr` with extra header lines (each ending in
/// `\r\n`): the whole answer as text (status line, headers, body).
pub fn http_get_with(addr: &str, path: &str, headers: &str) -> String {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nhost: x\r\n{headers}connection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    tcp.read_to_string(&mut text).unwrap();
    text
}

/// `GET path` over a new TCP connection to `addr`.
pub fn http_get(addr: &str, path: &str) -> String {
    http_get_with(addr, path, "")
}

/// A small multi-threaded runtime for a test's requests.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// `text` as JSON, or a panic that shows it.
pub fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The JSON frames of a server-sent-events body (`data: ...` lines) and whether it ended with
/// `data: [DONE]`.
pub fn sse(text: &str) -> (Vec<Value>, bool) {
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    let done = data.last() == Some(&"[DONE]");
    let frames = data
        .iter()
        .filter(|d| **d != "[DONE]")
        .map(|d| json_of(d))
        .collect();
    (frames, done)
}
