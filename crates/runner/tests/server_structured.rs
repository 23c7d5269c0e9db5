//! Structured outputs through `mtp serve` on the committed default pair (MTP on): ollama's
//! `format` (`"json"` and a schema) on `/api/generate` and `/api/chat`, OpenAI's
//! `response_format` (`json_object`, `json_schema`) on `/v1/chat/completions`, streamed and
//! not; greedy outputs equal the pipeline's constrained plain decoding; bad formats are 400s
//! naming the field; a schema cut by the token budget says so.

mod server_support;

use std::sync::{Mutex, OnceLock};

use axum::http::StatusCode;
use axum::Router;
use backend_candle::CandleBackend;
use mtp_core::engine::{CancelToken, GenerateRequest, SinkFlow};
use mtp_core::options::DraftOverrides;
use runner::server::{self, AppState, ServerConfig};
use runner::structured::OutputFormat;
use runner::{Pipeline, PromptFormat};
use serde_json::{json, Value};
use server_support::{call, json_of, pair, runtime, sse, worker, NAME};

const PROMPT: &str = "And God said, ";

fn router() -> &'static Router {
    static R: OnceLock<Router> = OnceLock::new();
    R.get_or_init(|| {
        server::router(AppState::new(
            std::sync::Arc::new(worker(16)),
            ServerConfig::default(),
        ))
    })
}

fn pipeline() -> &'static Mutex<Pipeline<CandleBackend>> {
    static P: OnceLock<Mutex<Pipeline<CandleBackend>>> = OnceLock::new();
    P.get_or_init(|| {
        Mutex::new(Pipeline::load(CandleBackend::cpu(), &pair(), &Default::default()).unwrap())
    })
}

/// Greedy constrained plain decoding of the raw `prompt` by the pipeline.
fn reference(prompt: &str, format: &OutputFormat, n: usize) -> String {
    let p = pipeline().lock().unwrap();
    let ids = p.encode(prompt, PromptFormat::Raw).unwrap();
    let mut request = GenerateRequest::greedy(ids, n);
    request.eos = p.tokenizer().eos_ids().to_vec();
    request.constraint = Some(p.constraint(format).unwrap());
    request.draft = DraftOverrides {
        enabled: Some(false),
        ..DraftOverrides::default()
    };
    p.generate_text(&request, &mut |_| SinkFlow::Continue, &CancelToken::new())
        .unwrap()
        .text
}

fn person() -> Value {
    json!({"type": "object",
           "properties": {"name": {"type": "string", "maxLength": 12},
                          "age": {"type": "integer", "minimum": 0, "maximum": 120},
                          "kind": {"enum": ["man", "woman"]}},
           "required": ["name", "age", "kind"], "additionalProperties": false})
}

fn check_person(text: &str) {
    let v = json_of(text);
    assert!(
        v["name"].as_str().is_some_and(|s| s.chars().count() <= 12),
        "{v}"
    );
    assert!(
        v["age"].as_i64().is_some_and(|a| (0..=120).contains(&a)),
        "{v}"
    );
    assert!(v["kind"] == "man" || v["kind"] == "woman", "{v}");
    assert_eq!(v.as_object().unwrap().len(), 3, "{v}");
}

#[test]
fn ollama_format_schema_and_json() {
    let want = reference(PROMPT, &OutputFormat::JsonSchema(person()), 200);
    check_person(&want);
    runtime().block_on(async {
        let body = json!({"model": NAME, "prompt": PROMPT, "raw": true, "stream": false,
                          "format": person(), "options": {"temperature": 0, "num_predict": 200}});
        let (status, text) = call(router(), "POST", "/api/generate", Some(body.clone())).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v = json_of(&text);
        assert_eq!(v["response"], want.as_str());
        assert_eq!(v["done_reason"], "stop");
        assert!(v.get("structured_output").is_none(), "{v}");
        assert!(v["mtp"]["forced"].as_u64().unwrap() > 0, "{v}");

        let mut streamed = body;
        streamed["stream"] = json!(true);
        let (status, text) = call(router(), "POST", "/api/generate", Some(streamed)).await;
        assert_eq!(status, StatusCode::OK);
        let joined: String = text
            .lines()
            .map(|l| json_of(l)["response"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(joined, want);

        // Sampled: still valid.
        for seed in 0..4 {
            let body = json!({"model": NAME, "prompt": PROMPT, "raw": true, "stream": false,
                              "format": person(),
                              "options": {"temperature": 1.0, "seed": seed, "num_predict": 200}});
            let (status, text) = call(router(), "POST", "/api/generate", Some(body)).await;
            assert_eq!(status, StatusCode::OK, "{text}");
            check_person(json_of(&text)["response"].as_str().unwrap());
        }

        let body = json!({"model": NAME, "stream": false, "format": "json",
                          "messages": [{"role": "user", "content": "Who was Adam?"}],
                          "options": {"temperature": 0, "num_predict": 300}});
        let (status, text) = call(router(), "POST", "/api/chat", Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v = json_of(&text);
        let content = v["message"]["content"].as_str().unwrap();
        if v["done_reason"] == "stop" {
            assert!(json_of(content).is_object(), "{content}");
        } else {
            assert_eq!(v["structured_output"], "incomplete", "{v}");
        }
    });
}

#[test]
fn openai_response_format() {
    let want = reference(PROMPT, &OutputFormat::JsonSchema(person()), 200);
    runtime().block_on(async {
        let body = json!({"model": NAME, "prompt": PROMPT, "temperature": 0, "max_tokens": 200,
                          "response_format": {"type": "json_schema",
                                              "json_schema": {"name": "person", "strict": true,
                                                              "schema": person()}}});
        let (status, text) = call(router(), "POST", "/v1/completions", Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v = json_of(&text);
        assert_eq!(v["choices"][0]["text"], want.as_str());
        assert_eq!(v["choices"][0]["finish_reason"], "stop");

        for stream in [false, true] {
            let body = json!({"model": NAME, "stream": stream, "temperature": 0.7, "seed": 3,
                              "max_tokens": 200,
                              "messages": [{"role": "user", "content": "Name a person."}],
                              "response_format": {"type": "json_schema",
                                                  "json_schema": {"name": "person",
                                                                  "schema": person()}}});
            let (status, text) = call(router(), "POST", "/v1/chat/completions", Some(body)).await;
            assert_eq!(status, StatusCode::OK, "{text}");
            let content = if stream {
                sse(&text)
                    .0
                    .iter()
                    .filter_map(|f| f["choices"][0]["delta"]["content"].as_str())
                    .collect::<String>()
            } else {
                json_of(&text)["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap()
                    .to_string()
            };
            check_person(&content);
        }

        // Cut by a stop string: the text the client gets is not the schema's, and it is said.
        let body = json!({"model": NAME, "prompt": PROMPT, "temperature": 0, "max_tokens": 200,
                          "stop": ["}"],
                          "response_format": {"type": "json_schema",
                                              "json_schema": {"name": "person", "schema": person()}}});
        let (status, text) = call(router(), "POST", "/v1/completions", Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v = json_of(&text);
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert!(!v["choices"][0]["text"].as_str().unwrap().contains('}'), "{v}");
        assert_eq!(v["structured_output"], "incomplete", "{v}");

        // Cut by max_tokens: finish_reason length, and said.
        let body = json!({"model": NAME, "temperature": 0, "max_tokens": 4,
                          "messages": [{"role": "user", "content": "x"}],
                          "response_format": {"type": "json_object"}});
        let (status, text) = call(router(), "POST", "/v1/chat/completions", Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v = json_of(&text);
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["structured_output"], "incomplete", "{v}");
    });
}

#[test]
fn bad_formats_are_400s_naming_the_field() {
    runtime().block_on(async {
        let ollama = [
            (json!(42), "format"),
            (json!("yaml"), "format"),
            (json!({"type": "objectx"}), "objectx"),
            (json!({"type": "object", "if": {}}), "if"),
        ];
        for (format, named) in ollama {
            let body = json!({"model": NAME, "prompt": "x", "format": format});
            let (status, text) = call(router(), "POST", "/api/generate", Some(body)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
            let msg = json_of(&text)["error"].as_str().unwrap().to_string();
            assert!(msg.contains("format") && msg.contains(named), "{msg}");
        }
        let openai = [
            (json!({"type": "xml"}), "response_format.type"),
            (json!({}), "response_format.type"),
            (
                json!({"type": "json_schema"}),
                "response_format.json_schema",
            ),
            (
                json!({"type": "json_schema", "json_schema": {"schema": {}}}),
                "response_format.json_schema.name",
            ),
            (
                json!({"type": "json_schema", "json_schema": {"name": "x", "schema": 3}}),
                "response_format.json_schema.schema",
            ),
            (
                json!({"type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "object", "if": {}}}}),
                "response_format",
            ),
        ];
        for (format, param) in openai {
            let body = json!({"model": NAME, "messages": [{"role": "user", "content": "x"}],
                              "response_format": format});
            let (status, text) = call(router(), "POST", "/v1/chat/completions", Some(body)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
            let v = json_of(&text);
            assert_eq!(v["error"]["param"], param, "{v}");
            assert_eq!(v["error"]["type"], "invalid_request_error");
        }
    });
}
