//! `mtp serve`'s HTTP APIs on the committed default pair (candle CPU, MTP on): every endpoint
//! streaming and not, greedy text equal to what the pipeline (`mtp generate`) produces, errors in
//! each API's shape, stop strings across speculative rounds, client disconnects, a busy queue,
//! API keys, a fuzzed-body run (no 5xx, no panic), a real TCP server with graceful shutdown, and
//! 32 concurrent streaming clients over sockets beside one killed mid-stream. Requests go
//! through the router in-process (`tower::ServiceExt::oneshot`) except the TCP tests.

mod server_support;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use backend_candle::CandleBackend;
use http_body_util::BodyExt;
use mtp_core::engine::{CancelToken, DiscardSink, GenerateRequest};
use runner::server::{
    self, AppState, EngineHandle, EventReceiver, FinishReason, GenerationEvent, GenerationJob,
    ModelInfo, ServerConfig, SubmitError, WorkerEngine,
};
use runner::tokenizer::{ChatMessage, ChatOptions, ChatTemplate, Tokenizer};
use runner::{Pipeline, PromptFormat};
use serde_json::{json, Value};
use server_support::{batched_worker, call, json_of, pair, runtime, sse, worker, NAME};
use tower::ServiceExt;

const PROMPT: &str = "In the beginning God created";

/// The pipeline `mtp generate` runs, for reference outputs.
fn pipeline() -> &'static Mutex<Pipeline<CandleBackend>> {
    static P: OnceLock<Mutex<Pipeline<CandleBackend>>> = OnceLock::new();
    P.get_or_init(|| {
        Mutex::new(Pipeline::load(CandleBackend::cpu(), &pair(), &Default::default()).unwrap())
    })
}

/// Greedy text and token count of `prompt` with the model's EOS, as `mtp generate` makes it.
fn reference(prompt: &[u32], n: usize) -> (String, usize) {
    let p = pipeline().lock().unwrap();
    let mut request = GenerateRequest::greedy(prompt.to_vec(), n);
    request.eos = p.tokenizer().eos_ids().to_vec();
    let out = p
        .generate_text(
            &request,
            &mut |_| mtp_core::engine::SinkFlow::Continue,
            &CancelToken::new(),
        )
        .unwrap();
    (out.text, out.response.eval_count)
}

fn raw_ids(text: &str) -> Vec<u32> {
    pipeline()
        .lock()
        .unwrap()
        .encode(text, PromptFormat::Raw)
        .unwrap()
}

fn chat_ids(messages: &[ChatMessage]) -> Vec<u32> {
    let p = pipeline().lock().unwrap();
    p.encode_chat(messages, &ChatOptions::default()).unwrap()
}

/// Records how each job ended, around a real worker.
struct Recording {
    inner: WorkerEngine,
    ends: Arc<Mutex<Vec<(FinishReason, usize)>>>,
}

#[async_trait]
impl EngineHandle for Recording {
    fn model(&self) -> &ModelInfo {
        self.inner.model()
    }
    fn tokenizer(&self) -> &Tokenizer {
        self.inner.tokenizer()
    }
    fn chat_template(&self) -> Result<&ChatTemplate, String> {
        self.inner.chat_template()
    }
    async fn submit(&self, job: GenerationJob) -> Result<EventReceiver, SubmitError> {
        let mut from_worker = self.inner.submit(job).await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let ends = self.ends.clone();
        tokio::spawn(async move {
            while let Some(event) = from_worker.recv().await {
                if let GenerationEvent::Finished(done) = &event {
                    ends.lock()
                        .unwrap()
                        .push((done.reason, done.completion_tokens));
                }
                let _ = tx.send(event);
            }
        });
        Ok(rx)
    }
    fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }
    fn constraint(
        &self,
        format: &runner::structured::OutputFormat,
    ) -> Result<mtp_core::constraint::ConstraintSource, runner::structured::StructuredError> {
        self.inner.constraint(format)
    }
}

struct Server {
    router: Router,
    ends: Arc<Mutex<Vec<(FinishReason, usize)>>>,
}

fn start(config: ServerConfig, queue: usize) -> Server {
    start_parallel(config, queue, 1)
}

/// [`start`] with a worker generating up to `parallel` requests at once.
fn start_parallel(config: ServerConfig, queue: usize, parallel: usize) -> Server {
    let worker = batched_worker(queue, parallel);
    let ends = Arc::new(Mutex::new(Vec::new()));
    let engine = Recording {
        inner: worker,
        ends: ends.clone(),
    };
    Server {
        router: server::router(AppState::new(Arc::new(engine), config)),
        ends,
    }
}

fn shared() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| start(ServerConfig::default(), 64))
}

fn ndjson(text: &str) -> Vec<Value> {
    text.lines().map(json_of).collect()
}

#[test]
fn ollama_generate_and_chat_equal_the_pipeline() {
    let s = shared();
    let (want, count) = reference(&raw_ids(PROMPT), 24);
    let rt = runtime();
    rt.block_on(async {
        let body = json!({"model": NAME, "prompt": PROMPT, "raw": true, "stream": false,
                          "options": {"temperature": 0, "num_predict": 24}});
        let (status, text) = call(&s.router, "POST", "/api/generate", Some(body.clone())).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v = json_of(&text);
        assert_eq!(v["response"], want);
        assert_eq!(v["done"], true);
        assert_eq!(v["eval_count"], count);
        // Evaluated prompt tokens: all of them, or fewer when an earlier request on this shared
        // server left the prompt's prefix in the caches (prefix reuse).
        let evaluated = v["prompt_eval_count"].as_u64().unwrap() as usize;
        assert!((1..=raw_ids(PROMPT).len()).contains(&evaluated), "{v}");
        assert!(v["total_duration"].as_u64().unwrap() > 0);
        assert!(v["mtp"]["drafted"].as_u64().unwrap() > 0, "{v}");
        assert!(v["done_reason"] == "length" || v["done_reason"] == "stop");

        let mut body = body;
        body["stream"] = json!(true);
        let (status, text) = call(&s.router, "POST", "/api/generate", Some(body)).await;
        assert_eq!(status, StatusCode::OK);
        let lines = ndjson(&text);
        let streamed: String = lines.iter().map(|l| l["response"].as_str().unwrap()).collect();
        assert_eq!(streamed, want);
        assert!(lines[..lines.len() - 1].iter().all(|l| l["done"] == false));
        let last = lines.last().unwrap();
        assert_eq!(last["done"], true);
        assert_eq!(last["eval_count"], count);
        assert!(last["mtp"]["per_position_acceptance"].is_array());

        // Chat: the model's template over the messages (system included).
        let messages = [
            ChatMessage::text("system", "Speak as the KJV."),
            ChatMessage::text("user", "Who made the light?"),
        ];
        let (want, _) = reference(&chat_ids(&messages), 16);
        let body = json!({"model": NAME, "messages": [
                {"role": "system", "content": "Speak as the KJV."},
                {"role": "user", "content": "Who made the light?"}],
            "options": {"temperature": 0, "num_predict": 16}});
        let (status, text) = call(&s.router, "POST", "/api/chat", Some(body.clone())).await;
        assert_eq!(status, StatusCode::OK);
        let streamed: String = ndjson(&text)
            .iter()
            .map(|l| l["message"]["content"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(streamed, want);
        let mut body = body;
        body["stream"] = json!(false);
        let (_, text) = call(&s.router, "POST", "/api/chat", Some(body)).await;
        let v = json_of(&text);
        assert_eq!(v["message"]["content"], want);
        assert_eq!(v["message"]["role"], "assistant");

        // /api/generate without raw renders the template with `system`.
        let body = json!({"model": NAME, "prompt": "Who made the light?", "system": "Speak as the KJV.",
                          "stream": false, "options": {"temperature": 0, "num_predict": 16}});
        let (_, text) = call(&s.router, "POST", "/api/generate", Some(body)).await;
        assert_eq!(json_of(&text)["response"], want);
    });
}

#[test]
fn openai_chat_and_completions_equal_the_pipeline() {
    let s = shared();
    let rt = runtime();
    let messages = [ChatMessage::text("user", "Who made the light?")];
    let (want, count) = reference(&chat_ids(&messages), 20);
    rt.block_on(async {
        let body = json!({"model": NAME, "messages": [{"role": "user", "content": "Who made the light?"}],
                          "temperature": 0, "max_tokens": 20});
        let (status, text) = call(&s.router, "POST", "/v1/chat/completions", Some(body.clone())).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v = json_of(&text);
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["content"], want);
        assert_eq!(v["usage"]["completion_tokens"], count);
        // OpenAI counts every prompt token; those served by prefix reuse are also in
        // `prompt_tokens_details.cached_tokens`.
        assert_eq!(v["usage"]["prompt_tokens"], chat_ids(&messages).len());
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
        assert!(cached < chat_ids(&messages).len() as u64, "{v}");
        assert_eq!(v["model"], NAME);

        let mut body = body;
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let (status, text) = call(&s.router, "POST", "/v1/chat/completions", Some(body)).await;
        assert_eq!(status, StatusCode::OK);
        let (frames, done) = sse(&text);
        assert!(done, "the stream ends with data: [DONE]");
        assert_eq!(frames[0]["choices"][0]["delta"]["role"], "assistant");
        let streamed: String = frames
            .iter()
            .filter_map(|f| f["choices"].get(0)?["delta"]["content"].as_str().map(String::from))
            .collect();
        assert_eq!(streamed, want);
        let usage = frames.last().unwrap();
        assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
        assert_eq!(usage["usage"]["completion_tokens"], count);
        assert!(frames[frames.len() - 2]["choices"][0]["finish_reason"].is_string());

        // Content as parts renders like the string (one text part).
        let body = json!({"model": NAME, "messages": [{"role": "user", "content": [{"type": "text", "text": "Who made the light?"}]}],
                          "temperature": 0, "max_completion_tokens": 20});
        let (_, text) = call(&s.router, "POST", "/v1/chat/completions", Some(body)).await;
        assert_eq!(json_of(&text)["choices"][0]["message"]["content"], want);

        // Completions: raw text.
        let (want, _) = reference(&raw_ids(PROMPT), 12);
        let body = json!({"model": NAME, "prompt": PROMPT, "temperature": 0, "max_tokens": 12});
        let (_, text) = call(&s.router, "POST", "/v1/completions", Some(body.clone())).await;
        let v = json_of(&text);
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], want);
        let mut body = body;
        body["stream"] = json!(true);
        let (_, text) = call(&s.router, "POST", "/v1/completions", Some(body)).await;
        let (frames, done) = sse(&text);
        assert!(done);
        let streamed: String = frames
            .iter()
            .filter_map(|f| f["choices"].get(0)?["text"].as_str().map(String::from))
            .collect();
        assert_eq!(streamed, want);
    });
}

#[test]
fn stop_strings_end_the_text_even_inside_an_accepted_round() {
    let s = shared();
    let (full, _) = reference(&raw_ids(PROMPT), 40);
    // A stop string that starts in the middle of the greedy text and spans several characters
    // (and, with this tokenizer, tokens).
    let chars: Vec<(usize, char)> = full.char_indices().collect();
    let (at, _) = chars[chars.len() / 2];
    let stop: String = full[at..].chars().take(6).collect();
    let first = full.find(&stop).unwrap();
    let want = &full[..first];
    let rt = runtime();
    rt.block_on(async {
        let body = json!({"model": NAME, "prompt": PROMPT, "raw": true, "stream": true,
                          "options": {"temperature": 0, "num_predict": 40, "stop": [stop]}});
        let (_, text) = call(&s.router, "POST", "/api/generate", Some(body)).await;
        let lines = ndjson(&text);
        let streamed: String = lines
            .iter()
            .map(|l| l["response"].as_str().unwrap())
            .collect();
        assert_eq!(streamed, want);
        let last = lines.last().unwrap();
        assert_eq!(last["done_reason"], "stop");
        assert!(
            last["mtp"]["accepted"].as_u64().unwrap() > 0,
            "speculation was on: {last}"
        );

        let body = json!({"model": NAME, "prompt": PROMPT, "temperature": 0, "max_tokens": 40,
                          "stop": stop});
        let (_, text) = call(&s.router, "POST", "/v1/completions", Some(body)).await;
        let v = json_of(&text);
        assert_eq!(v["choices"][0]["text"], want);
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
    });
}

#[test]
fn errors_come_in_each_apis_shape() {
    let s = shared();
    let rt = runtime();
    rt.block_on(async {
        let ollama_err = |(status, text): (StatusCode, String), want: StatusCode, has: &str| {
            assert_eq!(status, want, "{text}");
            let v = json_of(&text);
            let msg = v["error"].as_str().unwrap_or_else(|| panic!("ollama shape: {text}"));
            assert!(msg.contains(has), "{msg}");
        };
        let openai_err = |(status, text): (StatusCode, String), want: StatusCode, has: &str| {
            assert_eq!(status, want, "{text}");
            let v = json_of(&text);
            let msg = v["error"]["message"].as_str().unwrap_or_else(|| panic!("openai shape: {text}"));
            assert!(msg.contains(has), "{msg}");
            assert!(v["error"]["type"].is_string());
        };
        let r = &s.router;
        ollama_err(call(r, "POST", "/api/generate", Some(json!({"model": "nope", "prompt": "x"}))).await,
            StatusCode::NOT_FOUND, "model 'nope' not found");
        openai_err(call(r, "POST", "/v1/chat/completions", Some(json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}))).await,
            StatusCode::NOT_FOUND, "nope");
        ollama_err(call(r, "POST", "/api/chat", Some(json!({"model": NAME, "messages": "x"}))).await,
            StatusCode::BAD_REQUEST, "invalid request body");
        let bad = Request::builder().method("POST").uri("/v1/completions").body(Body::from("{not json")).unwrap();
        let resp = r.clone().oneshot(bad).await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        ollama_err(call(r, "POST", "/api/generate", Some(json!({"model": NAME, "prompt": "x", "format": 42}))).await,
            StatusCode::BAD_REQUEST, "format");
        ollama_err(call(r, "POST", "/api/generate", Some(json!({"model": NAME, "prompt": "x", "options": {"temperature": -1}}))).await,
            StatusCode::BAD_REQUEST, "temperature");
        ollama_err(call(r, "POST", "/api/generate", Some(json!({"model": NAME, "prompt": "x", "options": {"temperature": "hot"}}))).await,
            StatusCode::BAD_REQUEST, "invalid request body");
        openai_err(call(r, "POST", "/v1/chat/completions", Some(json!({"model": NAME, "n": 2, "messages": [{"role": "user", "content": "x"}]}))).await,
            StatusCode::BAD_REQUEST, "n = 1");
        openai_err(call(r, "POST", "/v1/chat/completions", Some(json!({"model": NAME, "tools": [{"type": "function"}], "messages": [{"role": "user", "content": "x"}]}))).await,
            StatusCode::BAD_REQUEST, "tools");
        openai_err(call(r, "POST", "/v1/chat/completions", Some(json!({"model": NAME, "temperature": 3, "messages": [{"role": "user", "content": "x"}]}))).await,
            StatusCode::BAD_REQUEST, "temperature");
        openai_err(call(r, "POST", "/v1/completions", Some(json!({"model": NAME, "prompt": "x", "max_tokens": 0}))).await,
            StatusCode::BAD_REQUEST, "max_tokens");
        openai_err(call(r, "GET", "/v1/nothing", None).await, StatusCode::NOT_FOUND, "no such endpoint");
        ollama_err(call(r, "GET", "/api/generate", None).await, StatusCode::METHOD_NOT_ALLOWED, "not allowed");
        let long = "w ".repeat(5000);
        ollama_err(call(r, "POST", "/api/generate", Some(json!({"model": NAME, "prompt": long, "raw": true}))).await,
            StatusCode::BAD_REQUEST, "context");
        let huge = "x".repeat(5 << 20);
        openai_err(call(r, "POST", "/v1/completions", Some(json!({"model": NAME, "prompt": huge}))).await,
            StatusCode::PAYLOAD_TOO_LARGE, "larger than");
    });
}

#[test]
fn metadata_endpoints() {
    let s = shared();
    let rt = runtime();
    rt.block_on(async {
        let (status, text) = call(&s.router, "GET", "/api/tags", None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(json_of(&text)["models"][0]["name"], NAME);
        let (_, text) = call(&s.router, "GET", "/api/ps", None).await;
        assert_eq!(json_of(&text)["models"][0]["context_length"], 1024);
        let (_, text) = call(&s.router, "POST", "/api/show", Some(json!({"model": NAME}))).await;
        assert!(json_of(&text)["template"]
            .as_str()
            .unwrap()
            .contains("start_of_turn"));
        let (status, _) = call(&s.router, "POST", "/api/show", Some(json!({"model": "x"}))).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (_, text) = call(&s.router, "GET", "/api/version", None).await;
        assert!(json_of(&text)["version"].is_string());
        let (_, text) = call(&s.router, "GET", "/v1/models", None).await;
        assert_eq!(json_of(&text)["data"][0]["id"], NAME);
        // A request first, so that the counters exist.
        let body = json!({"model": NAME, "prompt": PROMPT, "raw": true, "stream": false,
                          "options": {"temperature": 0, "num_predict": 4}});
        call(&s.router, "POST", "/api/generate", Some(body)).await;
        let (status, text) = call(&s.router, "GET", "/metrics", None).await;
        assert_eq!(status, StatusCode::OK);
        for name in [
            "mtp_requests_total",
            "mtp_generation_tokens_total",
            "mtp_spec_decode_num_draft_tokens_total",
            "mtp_spec_decode_num_accepted_tokens_per_pos_total",
            "mtp_time_to_first_token_seconds",
        ] {
            assert!(text.contains(name), "{name} missing in:\n{text}");
        }
    });
}

#[test]
fn a_disconnected_client_cancels_its_generation() {
    let s = start(ServerConfig::default(), 4);
    let rt = runtime();
    rt.block_on(async {
        let body = json!({"model": NAME, "prompt": PROMPT, "raw": true,
                          "options": {"temperature": 0, "num_predict": 900}});
        let request = Request::builder()
            .method("POST")
            .uri("/api/generate")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = s.router.clone().oneshot(request).await.unwrap();
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert!(first.is_data());
        drop(body); // the client goes away after the first line
        for _ in 0..200 {
            if !s.ends.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let ends = s.ends.lock().unwrap().clone();
        assert_eq!(ends.len(), 1);
        assert_eq!(ends[0].0, FinishReason::Cancelled);
        assert!(ends[0].1 < 900, "stopped early: {ends:?}");
    });
}

#[test]
fn a_full_queue_answers_503_and_keys_are_checked() {
    let s = start(
        ServerConfig {
            api_key: Some("sekret".into()),
            ..ServerConfig::default()
        },
        1,
    );
    let rt = runtime();
    rt.block_on(async {
        let (status, text) = call(&s.router, "GET", "/v1/models", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(json_of(&text)["error"]["code"], "invalid_api_key");
        let with_key = |body: Value| {
            Request::builder()
                .method("POST")
                .uri("/api/generate")
                .header("authorization", "Bearer sekret")
                .body(Body::from(body.to_string()))
                .unwrap()
        };
        let long = json!({"model": NAME, "prompt": PROMPT, "raw": true,
                          "options": {"temperature": 0, "num_predict": 600}});
        // One running, one queued (capacity 1), the third is refused.
        let mut held = Vec::new();
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let response = s
                .router
                .clone()
                .oneshot(with_key(long.clone()))
                .await
                .unwrap();
            statuses.push(response.status());
            if response.status() == StatusCode::SERVICE_UNAVAILABLE {
                assert!(response.headers().contains_key("retry-after"));
            }
            held.push(response);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(statuses[..2], [StatusCode::OK, StatusCode::OK]);
        assert_eq!(statuses[2], StatusCode::SERVICE_UNAVAILABLE);
        drop(held);
    });
}

#[test]
fn sampling_bounds_match_across_apis_and_num_ctx_is_honoured() {
    let s = shared();
    let prompt_len = raw_ids(PROMPT).len();
    let rt = runtime();
    rt.block_on(async {
        for (field, value) in [
            ("top_p", json!(7)),
            ("top_p", json!(-3)),
            ("min_p", json!(1.5)),
        ] {
            let body = json!({"model": NAME, "prompt": PROMPT, "raw": true, "stream": false,
                              "options": {field: value, "num_predict": 2}});
            let (status, text) = call(&s.router, "POST", "/api/generate", Some(body)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{field} {value}: {text}");
            assert!(text.contains(field), "{text}");
            if field == "top_p" {
                let body = json!({"model": NAME, "prompt": PROMPT, "max_tokens": 2, field: value});
                let (status, text) = call(&s.router, "POST", "/v1/completions", Some(body)).await;
                assert_eq!(status, StatusCode::BAD_REQUEST, "{field} {value}: {text}");
            }
        }
        // num_ctx caps the prompt and the generated tokens together.
        let body = json!({"model": NAME, "prompt": PROMPT, "raw": true, "stream": false,
                          "options": {"temperature": 0, "num_predict": 50,
                                      "num_ctx": prompt_len + 3}});
        let (status, text) = call(&s.router, "POST", "/api/generate", Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v = json_of(&text);
        assert!(v["eval_count"].as_u64().unwrap() <= 3, "{v}");
        assert_eq!(v["done_reason"], "length", "{v}");
        for ctx in [json!(prompt_len), json!(0), json!(-5)] {
            let body = json!({"model": NAME, "prompt": PROMPT, "raw": true, "stream": false,
                              "options": {"num_ctx": ctx}});
            let (status, text) = call(&s.router, "POST", "/api/generate", Some(body)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "num_ctx {ctx}: {text}");
            assert!(text.contains("num_ctx"), "{text}");
        }
    });
}

#[test]
fn fuzzed_bodies_never_give_5xx() {
    let s = start(
        ServerConfig {
            max_tokens: 2,
            ..ServerConfig::default()
        },
        64,
    );
    let seeds = [
        json!({"model": NAME, "prompt": "w", "raw": true, "stream": false, "options": {"temperature": 0.5, "top_k": 3, "seed": 7}}),
        json!({"model": NAME, "messages": [{"role": "user", "content": "hi"}], "stream": false}),
        json!({"model": NAME, "prompt": "w", "max_tokens": 2, "stop": ["a", "b"], "temperature": 1.5}),
        json!({"model": NAME, "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}], "top_p": 0.5}),
    ];
    let paths = [
        "/api/generate",
        "/api/chat",
        "/v1/completions",
        "/v1/chat/completions",
        "/api/show",
    ];
    let rt = runtime();
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let junk = [
        json!(null),
        json!(-1),
        json!(1e300),
        json!("x"),
        json!([]),
        json!({}),
        json!(true),
        json!(-9_223_372_036_854_775_807_i64),
        json!(u64::MAX),
        json!([1, "a"]),
        json!(0.0),
    ];
    let keys = [
        "model",
        "prompt",
        "messages",
        "options",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "num_predict",
        "num_ctx",
        "max_tokens",
        "stop",
        "seed",
        "stream",
        "raw",
        "system",
        "n",
        "content",
        "role",
        "repeat_last_n",
        "repeat_penalty",
        "logprobs",
        "format",
        "stream_options",
    ];
    rt.block_on(async {
        let mut fivexx = 0;
        for i in 0..10_000 {
            let path = paths[(next() % paths.len() as u64) as usize];
            let body = if i % 10 == 0 {
                // Random bytes.
                let n = (next() % 64) as usize;
                (0..n).map(|_| (next() % 256) as u8).collect::<Vec<u8>>()
            } else {
                let mut v = seeds[(next() % seeds.len() as u64) as usize].clone();
                for _ in 0..(1 + next() % 3) {
                    let key = keys[(next() % keys.len() as u64) as usize];
                    let value = junk[(next() % junk.len() as u64) as usize].clone();
                    if next() % 2 == 0 {
                        v[key] = value;
                    } else if let Some(o) = v.get_mut("options").and_then(Value::as_object_mut) {
                        o.insert(key.to_string(), value);
                    }
                }
                v.to_string().into_bytes()
            };
            let request = Request::builder()
                .method("POST")
                .uri(path)
                .body(Body::from(body.clone()))
                .unwrap();
            let response = s.router.clone().oneshot(request).await.unwrap();
            let status = response.status();
            let _ = response.into_body().collect().await;
            if status.is_server_error() {
                fivexx += 1;
                eprintln!("{status} on {path}: {}", String::from_utf8_lossy(&body));
            }
        }
        assert_eq!(fivexx, 0);
    });
}

#[test]
fn a_tcp_server_serves_and_shuts_down_gracefully() {
    use std::io::Read;
    let s = shared();
    let rt = runtime();
    let _ = s;
    let worker = worker(8);
    let state = AppState::new(
        Arc::new(worker),
        ServerConfig {
            shutdown_grace: Duration::from_millis(200),
            ..ServerConfig::default()
        },
    );
    let (addr, stop_tx, served) = serve_on_loopback(&rt, state);
    // A streaming request over a real socket, shut down mid-stream: it still ends with a final
    // object (cancelled after the grace period) and the server returns.
    let mut tcp = send_generate(addr, PROMPT, 1000);
    std::thread::sleep(Duration::from_millis(300));
    let _ = stop_tx.send(());
    let mut text = String::new();
    tcp.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"done\":true"), "a final object: {text}");
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), served).await })
        .expect("the server returns after shutdown")
        .unwrap()
        .unwrap();
    let _ = DiscardSink;
}

/// The target's logits rows that chose `tokens` after `prompt`, from one batched
/// (teacher-forced) forward: row `i` follows `prompt ++ tokens[..i]`.
fn teacher_forced_rows(prompt: &[u32], tokens: &[u32]) -> Vec<Vec<f32>> {
    use mtp_core::model::TargetModel;
    use mtp_core::Backend;
    let p = pipeline().lock().unwrap();
    let b = p.backend();
    let all: Vec<u32> = prompt.iter().chain(tokens).copied().collect();
    let mut caches = p.target().new_caches(b).unwrap();
    let ids = b.from_u32(&all, &[1, all.len()]).unwrap();
    let out = p.target().forward(b, &ids, 0, &mut caches).unwrap();
    let vocab = p.target().vocab_size();
    let logits = b
        .to_vec_f32(&p.target().unembed(b, &out.hidden).unwrap())
        .unwrap();
    (0..tokens.len())
        .map(|i| logits[(prompt.len() - 1 + i) * vocab..(prompt.len() + i) * vocab].to_vec())
        .collect()
}

/// Teacher-forced log-probabilities of `tokens` after `prompt`.
fn reference_logprobs(prompt: &[u32], tokens: &[u32]) -> Vec<f32> {
    teacher_forced_rows(prompt, tokens)
        .iter()
        .zip(tokens)
        .map(|(row, &t)| log_softmax(row)[t as usize])
        .collect()
}

/// `x − logsumexp(x)` (f64 sum), the teacher-forced reference.
fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| f64::from(x - max).exp()).sum();
    let log_sum = sum.ln() as f32 + max;
    logits.iter().map(|&x| x - log_sum).collect()
}

/// The engine's log-probabilities of a plain (speculation off) greedy run of `prompt`.
fn plain_logprobs(prompt: &[u32], n: usize, top: usize) -> Vec<mtp_core::sampling::TokenLogprobs> {
    use mtp_core::options::{DecodeMode, DraftOverrides, LogprobsRequest};
    let p = pipeline().lock().unwrap();
    let mut request = GenerateRequest::greedy(prompt.to_vec(), n);
    request.eos = p.tokenizer().eos_ids().to_vec();
    request.logprobs = LogprobsRequest::Top(top);
    request.draft = DraftOverrides {
        enabled: Some(false),
        ..DraftOverrides::default()
    };
    let out = p
        .generate(&request, &mut DiscardSink, &CancelToken::new())
        .unwrap();
    assert_eq!(out.mode, DecodeMode::Plain);
    out.logprobs
}

#[test]
fn logprobs_under_speculation_are_the_targets() {
    let s = shared();
    let messages = [ChatMessage::text("user", "Who made the light?")];
    let prompt = chat_ids(&messages);
    let (want, count) = reference(&prompt, 16);
    let ids: Vec<u32> = {
        let p = pipeline().lock().unwrap();
        let mut request = GenerateRequest::greedy(prompt.clone(), 16);
        request.eos = p.tokenizer().eos_ids().to_vec();
        p.generate(&request, &mut DiscardSink, &CancelToken::new())
            .unwrap()
            .tokens
    };
    let rt = runtime();
    rt.block_on(async {
        let body = json!({"model": NAME, "messages": [{"role": "user", "content": "Who made the light?"}],
                          "temperature": 0, "max_tokens": 16, "logprobs": true, "top_logprobs": 3});
        let (status, text) = call(&s.router, "POST", "/v1/chat/completions", Some(body.clone())).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v = json_of(&text);
        assert_eq!(v["choices"][0]["message"]["content"], want);
        assert!(v["mtp"]["drafted"].as_u64().unwrap() > 0, "speculation stayed on");
        let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap().clone();
        assert_eq!(content.len(), count);
        // Greedy: each token is the target's most likely one, and its log-probability is the
        // teacher-forced one.
        let expected = reference_logprobs(&prompt, &ids);
        // And, token for token, what plain decode (speculation off) reports.
        let plain = plain_logprobs(&prompt, 16, 3);
        assert_eq!(plain.len(), count);
        let tokenizer = pipeline().lock().unwrap().tokenizer().clone();
        for (i, entry) in content.iter().enumerate() {
            let lp = entry["logprob"].as_f64().unwrap() as f32;
            assert!((lp - expected[i]).abs() < 1e-3, "token {i}: {lp} vs {}", expected[i]);
            assert!((lp - plain[i].logprob).abs() < 1e-4, "token {i}: {lp} vs plain {}", plain[i].logprob);
            assert_eq!(entry["token"], tokenizer.token_text(plain[i].id));
            let top = entry["top_logprobs"].as_array().unwrap();
            assert_eq!(top.len(), 3);
            assert!((top[0]["logprob"].as_f64().unwrap() as f32 - lp).abs() < 1e-6);
            for (alt, want) in top.iter().zip(&plain[i].top) {
                assert_eq!(alt["token"], tokenizer.token_text(want.id), "token {i}");
                assert!((alt["logprob"].as_f64().unwrap() as f32 - want.logprob).abs() < 1e-4);
            }
        }

        // Streaming: the chunks carry the same entries, in order.
        let mut body = body;
        body["stream"] = json!(true);
        let (_, text) = call(&s.router, "POST", "/v1/chat/completions", Some(body)).await;
        let (frames, _) = sse(&text);
        let streamed: Vec<Value> = frames
            .iter()
            .filter_map(|f| f["choices"].get(0)?["logprobs"]["content"].as_array().cloned())
            .flatten()
            .collect();
        // The same tokens and alternatives; the values agree to rounding (the rounds of this
        // run, after prefix reuse, batch the rows differently).
        assert_eq!(streamed.len(), content.len());
        let close = |a: &Value, b: &Value| {
            assert_eq!(a["token"], b["token"]);
            assert_eq!(a["bytes"], b["bytes"]);
            let (x, y) = (a["logprob"].as_f64().unwrap(), b["logprob"].as_f64().unwrap());
            assert!((x - y).abs() < 1e-4, "{x} vs {y}");
        };
        for (a, b) in streamed.iter().zip(&content) {
            close(a, b);
            let (ta, tb) = (a["top_logprobs"].as_array().unwrap(), b["top_logprobs"].as_array().unwrap());
            assert_eq!(ta.len(), tb.len());
            ta.iter().zip(tb).for_each(|(x, y)| close(x, y));
        }

        // ollama: logprobs per token in the final object with stream: false.
        let body = json!({"model": NAME, "messages": [{"role": "user", "content": "Who made the light?"}],
                          "stream": false, "logprobs": true, "options": {"temperature": 0, "num_predict": 16}});
        let (_, text) = call(&s.router, "POST", "/api/chat", Some(body)).await;
        let v = json_of(&text);
        assert_eq!(v["logprobs"].as_array().unwrap().len(), count);
        // Refusals: a bad top_logprobs.
        let body = json!({"model": NAME, "messages": [{"role": "user", "content": "x"}],
                          "logprobs": true, "top_logprobs": 50});
        let (status, _) = call(&s.router, "POST", "/v1/chat/completions", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    });
}

/// Sampled (temperature 0.8, top-k, top-p, a repeat penalty) with speculation on: each
/// token's reported log-probability is the log of the probability the sampler's distribution
/// gives it on the teacher-forced row with its penalty context, and the alternatives are that
/// distribution's best tokens.
#[test]
fn sampled_logprobs_under_speculation_are_the_transformed_distribution() {
    use mtp_core::options::LogprobsRequest;
    use mtp_core::sampling::{Sampler, SamplerOptions};
    let prompt = raw_ids(PROMPT);
    let sampling = SamplerOptions {
        temperature: 0.8,
        top_k: 20,
        top_p: 0.95,
        repeat_penalty: 1.2,
        repeat_last_n: 16,
        seed: Some(11),
        ..SamplerOptions::default()
    };
    let mut request = GenerateRequest::greedy(prompt.clone(), 24);
    request.sampling = sampling.clone();
    request.logprobs = LogprobsRequest::Top(4);
    let job = GenerationJob {
        request,
        stop: Vec::new(),
        cancel: CancelToken::new(),
        shutdown: CancelToken::new(),
        deadline: None,
        special_tokens: Default::default(),
    };
    let w = worker(2);
    let (lps, finished) = runtime().block_on(async {
        let mut events = w.submit(job).await.unwrap();
        let mut lps = Vec::new();
        loop {
            match events.recv().await.expect("a final event") {
                GenerationEvent::Text { logprobs, .. } => lps.extend(logprobs),
                GenerationEvent::Finished(f) => break (lps, f),
                GenerationEvent::Failed(e) => panic!("{e}"),
            }
        }
    });
    let stats = finished.mtp.clone().expect("speculative");
    assert!(
        stats.accepted > 0,
        "speculation stayed on and accepted drafts"
    );
    assert_eq!(lps.len(), finished.completion_tokens);
    let ids: Vec<u32> = lps.iter().map(|l| l.id).collect();
    let sampler = Sampler::new(sampling, &prompt).unwrap();
    for (i, (lp, row)) in lps
        .iter()
        .zip(teacher_forced_rows(&prompt, &ids))
        .enumerate()
    {
        let dist = sampler.distribution(&row, &ids[..i]).unwrap();
        let want = dist.prob(lp.id).ln();
        assert!(
            (f64::from(lp.logprob) - want).abs() < 1e-4,
            "token {i}: {} vs {want}",
            lp.logprob
        );
        let mut support: Vec<(u32, f64)> = dist.support().collect();
        support.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let best: Vec<u32> = support.iter().take(4).map(|s| s.0).collect();
        let top: Vec<u32> = lp.top.iter().map(|t| t.id).collect();
        assert_eq!(top, best, "token {i}");
    }
}

/// `state` served on a free loopback port: its address, the shutdown trigger and the task.
fn serve_on_loopback(
    rt: &tokio::runtime::Runtime,
    state: AppState,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let served = rt.spawn(server::serve(listener, state, async move {
        let _ = stop_rx.await;
    }));
    (addr, stop_tx, served)
}

/// A fresh socket to `addr` that has sent a streaming greedy `/api/generate` of `prompt` (raw)
/// for `num_predict` tokens, `connection: close`.
fn send_generate(
    addr: std::net::SocketAddr,
    prompt: &str,
    num_predict: usize,
) -> std::net::TcpStream {
    use std::io::Write;
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    let body = json!({"model": NAME, "prompt": prompt, "raw": true,
                      "options": {"temperature": 0, "num_predict": num_predict}})
    .to_string();
    write!(tcp, "POST /api/generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len()).unwrap();
    tcp
}

/// The body of a raw HTTP/1.1 response: headers stripped, chunked transfer decoded.
fn http_body(response: &str) -> String {
    let (head, mut rest) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end: {response}"));
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return rest.to_string();
    }
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("chunk size line");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
        if size == 0 {
            return body;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

/// One streaming `/api/generate` request over a fresh socket; the whole raw response.
fn stream_over_tcp(addr: std::net::SocketAddr, prompt: &str, num_predict: usize) -> String {
    use std::io::Read;
    let mut tcp = send_generate(addr, prompt, num_predict);
    let mut text = String::new();
    tcp.read_to_string(&mut text).unwrap();
    text
}

/// 32 concurrent streaming clients over real sockets, and one more killed mid-stream, served
/// concurrently (a continuous batch of up to 8): every one of the 32 gets its complete greedy
/// text, byte-identical to a solo run of the pipeline, with a final object; the killed client
/// disturbs none of them (its job is cancelled at the next round and the queue moves on).
#[test]
fn thirty_two_concurrent_streams_get_their_exact_text_despite_a_killed_client() {
    use std::io::Read;
    const PROMPTS: [&str; 4] = [
        "In the beginning God created",
        "And the LORD spake unto Moses,",
        "Blessed are the poor in spirit:",
        "The LORD is my shepherd;",
    ];
    const N: usize = 24;
    let expected: Vec<String> = PROMPTS
        .iter()
        .map(|p| reference(&raw_ids(p), N).0)
        .collect();
    let rt = runtime();
    let ends = Arc::new(Mutex::new(Vec::new()));
    let engine = Recording {
        inner: batched_worker(40, 8),
        ends: ends.clone(),
    };
    let state = AppState::new(Arc::new(engine), ServerConfig::default());
    let (addr, stop_tx, served) = serve_on_loopback(&rt, state);

    // The client that dies: a long generation, gone after its first bytes.
    let mut killed = send_generate(addr, PROMPTS[0], 2000);
    let mut first = [0u8; 64];
    let got = killed.read(&mut first).unwrap();
    assert!(got > 0, "the killed client saw its stream start");
    killed.shutdown(std::net::Shutdown::Both).unwrap();
    drop(killed);

    let clients: Vec<_> = (0..32)
        .map(|i| std::thread::spawn(move || (i, stream_over_tcp(addr, PROMPTS[i % 4], N))))
        .collect();
    for client in clients {
        let (i, response) = client.join().unwrap();
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "client {i}: {response}"
        );
        let lines = ndjson(&http_body(&response));
        let text: String = lines
            .iter()
            .filter_map(|l| l["response"].as_str())
            .collect();
        let last = lines.last().expect("a final object");
        assert_eq!(last["done"], true, "client {i}: {last}");
        assert_eq!(text, expected[i % 4], "client {i}: text");
    }
    let ends = ends.lock().unwrap().clone();
    assert_eq!(ends.len(), 33, "every job ended: {ends:?}");
    let cancelled: Vec<_> = ends
        .iter()
        .filter(|(reason, _)| *reason == FinishReason::Cancelled)
        .collect();
    assert_eq!(cancelled.len(), 1, "only the killed client's job: {ends:?}");
    assert!(cancelled[0].1 < 2000, "cancelled early: {ends:?}");
    let _ = stop_tx.send(());
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), served).await })
        .expect("the server returns after shutdown")
        .unwrap()
        .unwrap();
}

/// Prefix reuse: a second chat turn resends the first turn and its answer; the worker keeps the
/// first turn's caches and evaluates only the new tokens (`prompt_eval_count` counts those), and
/// the answer is exactly the pipeline's fresh greedy answer to the whole conversation. A
/// diverging conversation then reuses only what it shares, and is exact too.
#[test]
fn a_second_chat_turn_reuses_the_first_turns_caches_and_stays_exact() {
    second_chat_turn(1);
}

/// The same with a batching worker: the turn takes the kept caches that share its prefix from
/// the pool.
#[test]
fn a_batching_worker_reuses_caches_too() {
    second_chat_turn(4);
}

fn second_chat_turn(parallel: usize) {
    let s = start_parallel(ServerConfig::default(), 4, parallel);
    let rt = runtime();
    rt.block_on(async {
        let turn = |messages: &[(&str, String)]| {
            let body: Vec<Value> = messages
                .iter()
                .map(|(role, content)| json!({"role": role, "content": content}))
                .collect();
            json!({"model": NAME, "messages": body, "stream": false,
                   "options": {"temperature": 0, "num_predict": 20}})
        };
        let chat = |messages: &[(&str, String)]| {
            let list: Vec<ChatMessage> = messages
                .iter()
                .map(|(role, content)| ChatMessage::text(role, content))
                .collect();
            chat_ids(&list)
        };
        let mut messages = vec![("user", "Who made the light?".to_string())];
        let (_, text) = call(&s.router, "POST", "/api/chat", Some(turn(&messages))).await;
        let first = json_of(&text);
        assert_eq!(first["prompt_eval_count"], chat(&messages).len());
        let answer = first["message"]["content"].as_str().unwrap().to_string();
        messages.push(("assistant", answer));
        messages.push(("user", "And what did he call the darkness?".to_string()));
        let ids = chat(&messages);
        let (want, _) = reference(&ids, 20);
        let (_, text) = call(&s.router, "POST", "/api/chat", Some(turn(&messages))).await;
        let second = json_of(&text);
        let evaluated = second["prompt_eval_count"].as_u64().unwrap() as usize;
        eprintln!(
            "second turn: {evaluated} of {} prompt tokens evaluated",
            ids.len()
        );
        assert!(
            evaluated < ids.len() / 2,
            "the first turn was reused: {evaluated} of {} evaluated",
            ids.len()
        );
        assert_eq!(second["message"]["content"], want);

        // A conversation sharing only the system-free start with what is held.
        let other = vec![("user", "Who made the sea?".to_string())];
        let ids = chat(&other);
        let (want, _) = reference(&ids, 20);
        let (_, text) = call(&s.router, "POST", "/api/chat", Some(turn(&other))).await;
        let third = json_of(&text);
        assert_eq!(third["message"]["content"], want);
        assert!(third["prompt_eval_count"].as_u64().unwrap() as usize <= ids.len());
    });
}

/// Shutdown with several streams open — one generating, the rest waiting in the queue: every
/// stream ends with a final object (`done: true`, the running one cancelled after the grace
/// period, the queued ones before they start), none is cut mid-line, and the server returns.
#[test]
fn shutdown_during_several_streams_ends_each_with_a_final_object() {
    shutdown_during_streams(1);
    // Batched: two generating at once, two queued.
    shutdown_during_streams(2);
}

fn shutdown_during_streams(parallel: usize) {
    use std::io::Read;
    let rt = runtime();
    let state = AppState::new(
        Arc::new(batched_worker(8, parallel)),
        ServerConfig {
            shutdown_grace: Duration::from_millis(200),
            ..ServerConfig::default()
        },
    );
    let (addr, stop_tx, served) = serve_on_loopback(&rt, state);
    let mut streams: Vec<_> = (0..4).map(|_| send_generate(addr, PROMPT, 1000)).collect();
    // Every request has reached the server (a streaming answer's headers go out as soon as the
    // job is queued) — one generating, three queued — before shutdown starts: a connection
    // still in the kernel's backlog when the server stops accepting is reset, as it should be.
    let mut first = vec![[0u8; 1]; streams.len()];
    for (tcp, byte) in streams.iter_mut().zip(&mut first) {
        tcp.read_exact(byte).unwrap();
    }
    let _ = stop_tx.send(());
    for (i, (mut tcp, byte)) in streams.into_iter().zip(first).enumerate() {
        let mut text = String::from_utf8(byte.to_vec()).unwrap();
        tcp.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "stream {i}: {text}");
        let lines = ndjson(&http_body(&text));
        let last = lines
            .last()
            .unwrap_or_else(|| panic!("stream {i}: no object"));
        assert_eq!(last["done"], true, "stream {i}: {last}");
    }
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), served).await })
        .expect("the server returns after shutdown")
        .unwrap()
        .unwrap();
}
