//! What the server makes of a reply that holds Gemma 4's reasoning channel and a tool call, as
//! the engine streams it: a scripted engine (the default pair's worker for the model facts and
//! the Gemma 4 template, its generations replaced by a fixed text cut into small pieces) answers
//! every job, so the thinking / content / call split is checked end to end through both APIs,
//! streamed and not, independently of what a tiny model happens to write.

mod server_support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::http::StatusCode;
use mtp_core::constraint::ConstraintSource;
use runner::server::{
    self, AppState, EngineHandle, EventReceiver, FinishReason, Finished, GenerationEvent,
    GenerationJob, ModelInfo, ServerConfig, SubmitError, WorkerEngine,
};
use runner::structured::{OutputFormat, StructuredError};
use runner::tokenizer::{ChatTemplate, SpecialTokens, Tokenizer};
use serde_json::{json, Value};
use server_support::{call, json_of, pair, runtime, sse, worker_over, NAME};

/// Answers every job with `reply`, in pieces of `piece` characters; records whether each job
/// asked for special tokens to be written out.
struct Scripted {
    inner: WorkerEngine,
    reply: String,
    piece: usize,
    kept_special: Arc<Mutex<Vec<bool>>>,
}

#[async_trait]
impl EngineHandle for Scripted {
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
        self.kept_special
            .lock()
            .unwrap()
            .push(job.special_tokens == SpecialTokens::Keep);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let chars: Vec<char> = self.reply.chars().collect();
        for chunk in chars.chunks(self.piece) {
            let _ = tx.send(GenerationEvent::Text {
                text: chunk.iter().collect(),
                logprobs: Vec::new(),
            });
        }
        let done = Finished::before_start(FinishReason::Stop, Duration::ZERO);
        let _ = tx.send(GenerationEvent::Finished(Box::new(done)));
        Ok(rx)
    }
    fn queue_depth(&self) -> usize {
        0
    }
    fn constraint(&self, format: &OutputFormat) -> Result<ConstraintSource, StructuredError> {
        self.inner.constraint(format)
    }
}

fn server(reply: &str, piece: usize) -> (axum::Router, Arc<Mutex<Vec<bool>>>) {
    let mut paths = pair();
    paths.chat_template = Some(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/chat_templates/gemma4/chat_template.jinja"),
    );
    let kept_special = Arc::new(Mutex::new(Vec::new()));
    let engine = Scripted {
        inner: worker_over(paths, 4, 1),
        reply: reply.to_string(),
        piece,
        kept_special: kept_special.clone(),
    };
    let router = server::router(AppState::new(Arc::new(engine), ServerConfig::default()));
    (router, kept_special)
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])
}

const THOUGHT_AND_CALL: &str =
    "<|channel>thought\nThe user wants the weather.<channel|>Let me check. \
<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>";

#[test]
fn ollama_splits_thinking_content_and_calls() {
    runtime().block_on(async {
        for piece in [1, 3, 7, 500] {
            let (router, kept) = server(THOUGHT_AND_CALL, piece);
            for stream in [false, true] {
                let body = json!({"model": NAME, "think": true, "tools": tools(), "stream": stream,
                                  "messages": [{"role": "user", "content": "Weather in Paris?"}]});
                let (status, text) = call(&router, "POST", "/api/chat", Some(body)).await;
                assert_eq!(status, StatusCode::OK, "{text}");
                let (mut thinking, mut content, mut calls) =
                    (String::new(), String::new(), Vec::new());
                for line in text.lines() {
                    let m = &json_of(line)["message"];
                    thinking.push_str(m["thinking"].as_str().unwrap_or(""));
                    content.push_str(m["content"].as_str().unwrap_or(""));
                    calls.extend(m["tool_calls"].as_array().cloned().unwrap_or_default());
                }
                assert_eq!(thinking, "The user wants the weather.", "pieces of {piece}");
                assert_eq!(content, "Let me check. ", "pieces of {piece}");
                assert_eq!(
                    calls,
                    vec![
                        json!({"function": {"name": "get_weather", "arguments": {"city": "Paris"}}})
                    ]
                );
            }
            assert!(
                kept.lock().unwrap().iter().all(|&k| k),
                "special tokens written out"
            );
        }
    });
}

#[test]
fn openai_returns_the_call_and_the_text_around_it() {
    let reply = "Sure. <|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>";
    runtime().block_on(async {
        for piece in [1, 4, 500] {
            let (router, _) = server(reply, piece);
            let body = json!({"model": NAME, "tools": tools(),
                              "messages": [{"role": "user", "content": "Weather in Paris?"}]});
            let (status, text) =
                call(&router, "POST", "/v1/chat/completions", Some(body.clone())).await;
            assert_eq!(status, StatusCode::OK, "{text}");
            let v = json_of(&text);
            let message = &v["choices"][0]["message"];
            assert_eq!(message["content"], "Sure. ");
            assert_eq!(message["tool_calls"][0]["function"]["name"], "get_weather");
            assert_eq!(
                json_of(
                    message["tool_calls"][0]["function"]["arguments"]
                        .as_str()
                        .unwrap()
                ),
                json!({"city": "Paris"})
            );
            assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");

            let mut streamed = body;
            streamed["stream"] = json!(true);
            let (status, text) =
                call(&router, "POST", "/v1/chat/completions", Some(streamed)).await;
            assert_eq!(status, StatusCode::OK, "{text}");
            let (frames, _) = sse(&text);
            let content: String = frames
                .iter()
                .filter_map(|f| f["choices"][0]["delta"]["content"].as_str())
                .collect();
            assert_eq!(content, "Sure. ", "pieces of {piece}");
            let calls: Vec<&Value> = frames
                .iter()
                .filter_map(|f| f["choices"][0]["delta"]["tool_calls"].as_array())
                .flatten()
                .collect();
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0]["index"], 0);
            let finish = frames
                .iter()
                .rev()
                .find_map(|f| f["choices"][0]["finish_reason"].as_str());
            assert_eq!(finish, Some("tool_calls"));
        }
    });
}
