//! The OpenAI API: `POST /v1/chat/completions`, `POST /v1/completions` (server-sent events
//! ending with `data: [DONE]` when streaming) and `GET /v1/models`.

use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self as futures_stream, StreamExt};
use mtp_core::sampling::SamplerOptions;
use serde::Serialize;
use serde_json::json;

use super::body::parse;
use super::engine::{Finished, GenerationEvent, GenerationJob, TokenLogprob};
use super::error::{Api, ApiError};
use super::openai_types::{
    ChatChoice, ChatCompletionBody, Common, Completion, CompletionBody, Content, ContentPart,
    MessageOut, PromptTokensDetails, TextChoice, Usage,
};
use super::request::{in_range, top_logprobs, AppState};
use super::stream;
use super::structured::{incomplete, openai_response_format};
use super::tool_calls::{openai_call, openai_cut_call, read_tools, template_call, ReplySplitter};
use crate::tokenizer::{ChatContent, ChatMessage};
use serde_json::Value;

const API: Api = Api::OpenAi;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn request_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{:x}{n:06x}", unix_now())
}

/// OpenAI's defaults (temperature 1, top-p 1, no penalties) and ranges.
fn sampling(c: &Common) -> Result<SamplerOptions, ApiError> {
    let opt = |name: &str, v: Option<f32>, default: f32, lo: f32, hi: f32| match v {
        None => Ok(default),
        Some(v) => in_range(API, name, v, lo, hi),
    };
    Ok(SamplerOptions {
        temperature: opt("temperature", c.temperature, 1.0, 0.0, 2.0)?,
        top_p: opt("top_p", c.top_p, 1.0, 0.0, 1.0)?,
        presence_penalty: opt("presence_penalty", c.presence_penalty, 0.0, -2.0, 2.0)?,
        frequency_penalty: opt("frequency_penalty", c.frequency_penalty, 0.0, -2.0, 2.0)?,
        seed: c.seed.map(|s| s as u64),
        ..SamplerOptions::default()
    })
}

/// Refuse what this server does not do, each with a clear 400.
fn refuse_unsupported(c: &Common) -> Result<(), ApiError> {
    if c.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request(API, "only n = 1 is supported"));
    }
    if c.functions.as_ref().is_some_and(|f| !f.is_empty()) {
        return Err(ApiError::bad_request(
            API,
            "`functions` (the deprecated form of function calling) is not supported; use `tools`",
        )
        .with_param("functions"));
    }
    if c.logit_bias
        .as_ref()
        .is_some_and(|b| b.as_object().is_some_and(|m| !m.is_empty()))
    {
        return Err(ApiError::bad_request(API, "logit_bias is not supported"));
    }
    Ok(())
}

fn max_tokens(c: &Common) -> Result<Option<usize>, ApiError> {
    match c.max_completion_tokens.or(c.max_tokens) {
        None => Ok(None),
        Some(n) if n < 1 => Err(ApiError::bad_request(API, "max_tokens must be at least 1")),
        Some(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
    }
}

/// Which endpoint's `logprobs` convention a request follows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    /// `logprobs: bool` with `top_logprobs: 0..=20`.
    Chat,
    /// `logprobs: N` (the number of alternatives, 0..=5 in OpenAI's docs; up to 20 here).
    Completions,
}

fn logprobs(c: &Common, endpoint: Endpoint) -> Result<Option<usize>, ApiError> {
    let value = c.logprobs.clone().unwrap_or(serde_json::Value::Null);
    match endpoint {
        Endpoint::Chat => match value {
            serde_json::Value::Null => top_logprobs(API, false, c.top_logprobs),
            serde_json::Value::Bool(b) => top_logprobs(API, b, c.top_logprobs),
            _ => Err(ApiError::bad_request(API, "logprobs must be true or false")),
        },
        Endpoint::Completions => match value {
            serde_json::Value::Null => Ok(None),
            v => match v.as_i64() {
                Some(n) => top_logprobs(API, true, Some(n)),
                None => Err(ApiError::bad_request(API, "logprobs must be an integer")),
            },
        },
    }
}

fn job(
    state: &AppState,
    c: &Common,
    prompt: Vec<u32>,
    endpoint: Endpoint,
) -> Result<GenerationJob, ApiError> {
    let budget = state.budget(prompt.len(), max_tokens(c)?);
    let stop = c.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
    let logprobs = logprobs(c, endpoint)?;
    state.job(API, prompt, sampling(c)?, budget, stop, logprobs)
}

/// Chat's `logprobs`: `{"content": [{token, logprob, bytes, top_logprobs}]}`.
fn chat_logprobs(lps: &[TokenLogprob]) -> serde_json::Value {
    let one = |t: &TokenLogprob| {
        json!({ "token": t.token, "logprob": t.logprob,
                                         "bytes": t.token.as_bytes() })
    };
    let content: Vec<serde_json::Value> = lps
        .iter()
        .map(|t| {
            let mut v = one(t);
            v["top_logprobs"] = t.top.iter().map(one).collect();
            v
        })
        .collect();
    json!({ "content": content })
}

/// Completions' `logprobs`: `{tokens, token_logprobs, top_logprobs, text_offset}`.
fn completion_logprobs(lps: &[TokenLogprob], start: usize) -> serde_json::Value {
    let mut offset = start;
    let mut offsets = Vec::with_capacity(lps.len());
    for t in lps {
        offsets.push(offset);
        offset += t.token.len();
    }
    let tops: Vec<serde_json::Map<String, serde_json::Value>> = lps
        .iter()
        .map(|t| {
            t.top
                .iter()
                .map(|a| (a.token.clone(), json!(a.logprob)))
                .collect()
        })
        .collect();
    json!({
        "tokens": lps.iter().map(|t| t.token.clone()).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "top_logprobs": tops,
        "text_offset": offsets,
    })
}

fn include_usage(c: &Common) -> bool {
    c.stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false)
}

impl<C> Completion<C> {
    /// With the generation's usage and speculative statistics.
    fn finished(mut self, done: &Finished) -> Self {
        self.usage = Some(usage(done));
        self.mtp = done.mtp.clone();
        self.structured_output = incomplete(done);
        self
    }
}

/// OpenAI counts every prompt token, the cached ones in `prompt_tokens_details`.
fn usage(done: &Finished) -> Usage {
    let prompt = done.prompt_tokens + done.prompt_cached;
    Usage {
        prompt_tokens: prompt,
        completion_tokens: done.completion_tokens,
        total_tokens: prompt + done.completion_tokens,
        prompt_tokens_details: PromptTokensDetails {
            cached_tokens: done.prompt_cached,
        },
    }
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body: ChatCompletionBody = parse(API, &body)?;
    let c = &body.common;
    state.check_model(API, &c.model)?;
    refuse_unsupported(c)?;
    let format = openai_response_format(c.response_format.as_ref())?;
    if body.messages.is_empty() {
        return Err(ApiError::bad_request(API, "messages must not be empty"));
    }
    let parts_allowed = state
        .engine
        .chat_template()
        .is_ok_and(|t| t.reads_content_parts());
    let tools = read_tools(&state, API, c.tools.as_deref(), body.tool_choice.as_ref())?;
    let forced_call = tools.as_ref().and_then(|t| t.grammar(&state));
    if forced_call.is_some() && format.is_some() {
        return Err(ApiError::bad_request(
            API,
            "a forced tool call (tool_choice required or named) and response_format cannot be combined",
        )
        .with_param("tool_choice"));
    }
    // Tool results name their call by id: the template takes the function's name.
    let mut call_names = std::collections::HashMap::new();
    let mut messages = Vec::with_capacity(body.messages.len());
    for (i, m) in body.messages.iter().enumerate() {
        if (m.tool_calls.as_ref().is_some_and(|t| !t.is_empty()) || m.role == "tool")
            && tools.is_none()
        {
            return Err(ApiError::bad_request(
                API,
                "tool calls and tool messages need the request's `tools`",
            )
            .with_param(format!("messages[{i}]")));
        }
        let content = match &m.content {
            None => ChatContent::Text(String::new()),
            Some(Content::Text(t)) => ChatContent::Text(t.clone()),
            Some(Content::Parts(parts)) => text_parts(parts, parts_allowed)?,
        };
        let mut tool_calls = Vec::new();
        for (j, call) in m.tool_calls.iter().flatten().enumerate() {
            let at = format!("messages[{i}].tool_calls[{j}]");
            let rendered = template_call(API, call, &at)?;
            if let (Some(id), Some(name)) = (
                call.get("id").and_then(Value::as_str),
                rendered.pointer("/function/name").and_then(Value::as_str),
            ) {
                call_names.insert(id.to_string(), name.to_string());
            }
            tool_calls.push(rendered);
        }
        let name = m.name.clone().or_else(|| {
            m.tool_call_id
                .as_ref()
                .and_then(|id| call_names.get(id).cloned())
        });
        messages.push(ChatMessage {
            role: m.role.clone(),
            content,
            reasoning_content: m.reasoning_content.clone(),
            tool_calls,
            name,
        });
    }
    let options = tools.as_ref().map(|t| t.chat_options()).unwrap_or_default();
    let prompt = state.chat_prompt(API, messages, options).await?;
    let constraint = match forced_call {
        Some(grammar) => state.constraint(API, "tool_choice", Some(grammar)).await?,
        None => state.constraint(API, "response_format", format).await?,
    };
    let mut job = job(&state, c, prompt, Endpoint::Chat)?.constrained(constraint);
    if let Some(t) = tools.as_ref().filter(|t| t.parses_calls()) {
        job = job.with_tools(&t.syntax);
    }
    let splitter = ReplySplitter::new(tools.as_ref(), None);
    let with_logprobs = job.with_logprobs();
    let name = state.engine.model().name.clone();
    let id = request_id("chatcmpl");
    let created = unix_now();
    let envelope = move |choices: Vec<ChatChoice>, object: &'static str| Completion {
        id: id.clone(),
        object,
        created,
        model: name.clone(),
        system_fingerprint: "mtp-rs",
        choices,
        usage: None,
        mtp: None,
        structured_output: None,
    };
    if !c.stream.unwrap_or(false) {
        let all = run(&state, job).await?;
        let done = all.done;
        let parts = splitter.push(&all.text, true);
        let (content, calls) = (parts.content, parts.calls);
        let mut tool_calls: Vec<Value> = calls
            .iter()
            .map(|call| openai_call(call, request_id("call")))
            .collect();
        // A call cut short ends with the generation's own reason (`length`).
        let finish = if tool_calls.is_empty() || parts.cut.is_some() {
            done.reason.openai()
        } else {
            "tool_calls"
        };
        if let Some(cut) = &parts.cut {
            tool_calls.push(openai_cut_call(cut, request_id("call")));
        }
        let choice = ChatChoice {
            index: 0,
            message: Some(MessageOut {
                role: Some("assistant"),
                // OpenAI sends `"content": null` beside tool calls.
                content: Some(if content.is_empty() && !tool_calls.is_empty() {
                    Value::Null
                } else {
                    Value::String(content)
                }),
                tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
            }),
            delta: None,
            logprobs: with_logprobs.then(|| chat_logprobs(&all.logprobs)),
            finish_reason: Some(finish),
        };
        return Ok(Json(envelope(vec![choice], "chat.completion").finished(&done)).into_response());
    }
    let include_usage = include_usage(c);
    let delta = |role: Option<&'static str>,
                 content: Option<String>,
                 lps: Option<&[TokenLogprob]>,
                 finish| ChatChoice {
        index: 0,
        message: None,
        delta: Some(MessageOut {
            role,
            content: content.map(Value::String),
            tool_calls: None,
        }),
        logprobs: lps.map(chat_logprobs),
        finish_reason: finish,
    };
    // Calls streamed so far (their `index`).
    let called = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = called.clone();
    // Complete calls, then the call the reply was cut inside (if any), each with its index.
    let stream_calls = move |calls: Vec<crate::tools::ToolCall>,
                             cut: Option<crate::tools::ToolCall>|
          -> Option<Vec<Value>> {
        let shaped: Vec<Value> = calls
            .iter()
            .map(|call| openai_call(call, request_id("call")))
            .chain(
                cut.iter()
                    .map(|call| openai_cut_call(call, request_id("call"))),
            )
            .map(|mut value| {
                let index = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                value["index"] = Value::from(index);
                value
            })
            .collect();
        (!shaped.is_empty()).then_some(shaped)
    };
    let object = "chat.completion.chunk";
    let first = envelope(
        vec![delta(Some("assistant"), Some(String::new()), None, None)],
        object,
    );
    sse(
        &state,
        job,
        first,
        include_usage,
        move |event| match event {
            Piece::Text(text, lps) => {
                let lps = with_logprobs.then_some(lps);
                let parts = splitter.push(&text, false);
                let (content, calls) = (parts.content, parts.calls);
                let mut choice = delta(None, Some(content), lps, None);
                if let Some(d) = choice.delta.as_mut() {
                    d.tool_calls = stream_calls(calls, None);
                }
                envelope(vec![choice], object)
            }
            Piece::End(done) => {
                // What the splitter held back ends the text.
                let parts = splitter.push("", true);
                let (content, calls, cut) = (parts.content, parts.calls, parts.cut);
                let any_call = called.load(std::sync::atomic::Ordering::Relaxed) > 0;
                // A call cut short ends with the generation's own reason (`length`).
                let finish = if (any_call || !calls.is_empty()) && cut.is_none() {
                    "tool_calls"
                } else {
                    done.reason.openai()
                };
                let calls = stream_calls(calls, cut);
                let mut choice = delta(
                    None,
                    (!content.is_empty()).then_some(content),
                    None,
                    Some(finish),
                );
                if let Some(d) = choice.delta.as_mut() {
                    d.tool_calls = calls;
                }
                envelope(vec![choice], object)
            }
            Piece::Usage(done) => envelope(Vec::new(), object).finished(done),
        },
    )
    .await
}

/// Text parts as the template takes them: as parts when it reads them, else joined with
/// newlines into one string (as vLLM does for string-only templates). Other part types are
/// refused.
fn text_parts(parts: &[ContentPart], as_parts: bool) -> Result<ChatContent, ApiError> {
    let mut texts = Vec::with_capacity(parts.len());
    for p in parts {
        match p.text.as_deref() {
            Some(text) if p.kind == "text" => texts.push(text),
            _ => {
                return Err(ApiError::bad_request(
                    API,
                    format!("content parts of type `{}` are not supported", p.kind),
                ))
            }
        }
    }
    if !as_parts {
        return Ok(ChatContent::Text(texts.join("\n")));
    }
    let values = texts
        .into_iter()
        .map(|text| {
            minijinja::Value::from_iter([
                ("type", minijinja::Value::from("text")),
                ("text", minijinja::Value::from(text)),
            ])
        })
        .collect();
    Ok(ChatContent::Parts(values))
}

/// `POST /v1/completions`.
pub async fn completions(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let body: CompletionBody = parse(API, &body)?;
    let c = &body.common;
    state.check_model(API, &c.model)?;
    refuse_unsupported(c)?;
    let format = openai_response_format(c.response_format.as_ref())?;
    if c.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::bad_request(
            API,
            "`tools` belong to /v1/chat/completions (the chat template renders them)",
        )
        .with_param("tools"));
    }
    if body.echo == Some(true) {
        return Err(ApiError::bad_request(API, "echo is not supported"));
    }
    if body.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::bad_request(API, "suffix is not supported"));
    }
    if body.best_of.is_some_and(|b| b != 1) {
        return Err(ApiError::bad_request(API, "only best_of = 1 is supported"));
    }
    let prompts = body.prompt.into_vec();
    let Ok::<[String; 1], _>([prompt]) = prompts.try_into() else {
        return Err(ApiError::bad_request(
            API,
            "exactly one prompt is supported",
        ));
    };
    let prompt = state.raw_prompt(API, prompt).await?;
    let constraint = state.constraint(API, "response_format", format).await?;
    let job = job(&state, c, prompt, Endpoint::Completions)?.constrained(constraint);
    let with_logprobs = job.with_logprobs();
    let name = state.engine.model().name.clone();
    let id = request_id("cmpl");
    let created = unix_now();
    let envelope = move |choices: Vec<TextChoice>| Completion {
        id: id.clone(),
        object: "text_completion",
        created,
        model: name.clone(),
        system_fingerprint: "mtp-rs",
        choices,
        usage: None,
        mtp: None,
        structured_output: None,
    };
    let choice = |text: String, logprobs, finish| TextChoice {
        index: 0,
        text,
        logprobs,
        finish_reason: finish,
    };
    if !c.stream.unwrap_or(false) {
        let all = run(&state, job).await?;
        let done = all.done;
        let lps = with_logprobs.then(|| completion_logprobs(&all.logprobs, 0));
        return Ok(Json(
            envelope(vec![choice(all.text, lps, Some(done.reason.openai()))]).finished(&done),
        )
        .into_response());
    }
    let include_usage = include_usage(c);
    let first = None::<Completion<TextChoice>>;
    let sent = std::sync::atomic::AtomicUsize::new(0);
    sse(
        &state,
        job,
        first,
        include_usage,
        move |event| match event {
            Piece::Text(text, lps) => {
                let start = sent.fetch_add(text.len(), std::sync::atomic::Ordering::Relaxed);
                let lps = with_logprobs.then(|| completion_logprobs(lps, start));
                envelope(vec![choice(text, lps, None)])
            }
            Piece::End(done) => envelope(vec![choice(
                String::new(),
                None,
                Some(done.reason.openai()),
            )]),
            Piece::Usage(done) => envelope(Vec::new()).finished(done),
        },
    )
    .await
}

/// What a stream frame is built from.
enum Piece<'a> {
    Text(String, &'a [TokenLogprob]),
    End(&'a Finished),
    Usage(&'a Finished),
}

async fn run(state: &AppState, job: GenerationJob) -> Result<stream::Collected, ApiError> {
    let cancel = job.cancel.clone();
    let receiver = state
        .engine
        .submit(job)
        .await
        .map_err(|e| ApiError::from_submit(API, &e))?;
    stream::collect(receiver, cancel)
        .await
        .map_err(|e| ApiError::new(API, StatusCode::INTERNAL_SERVER_ERROR, e))
}

/// Submit `job` and stream `frame`s as server-sent events: `first` (if any), a frame per text
/// piece, the finish frame, the usage frame when asked for, then `data: [DONE]`.
async fn sse<T, F>(
    state: &AppState,
    job: GenerationJob,
    first: impl Into<Option<T>>,
    include_usage: bool,
    frame: F,
) -> Result<Response, ApiError>
where
    T: Serialize + Send + 'static,
    F: Fn(Piece<'_>) -> T + Send + 'static,
{
    let cancel = job.cancel.clone();
    let receiver = state
        .engine
        .submit(job)
        .await
        .map_err(|e| ApiError::from_submit(API, &e))?;
    let data = |value: &T| {
        Event::default().data(serde_json::to_string(value).unwrap_or_else(|e| {
            json!({ "error": { "message": e.to_string(), "type": "server_error" } }).to_string()
        }))
    };
    let head: Vec<Event> = first.into().iter().map(data).collect();
    let body = stream::events(receiver, cancel).flat_map(move |event| {
        let events: Vec<Event> = match event {
            GenerationEvent::Text { text, logprobs } => {
                vec![data(&frame(Piece::Text(text, &logprobs)))]
            }
            GenerationEvent::Finished(done) => {
                let mut events = vec![data(&frame(Piece::End(&done)))];
                if include_usage {
                    events.push(data(&frame(Piece::Usage(&done))));
                }
                events.push(Event::default().data("[DONE]"));
                events
            }
            GenerationEvent::Failed(e) => vec![
                Event::default().data(
                    json!({ "error": { "message": e, "type": "server_error", "param": null,
                                       "code": null } })
                    .to_string(),
                ),
                Event::default().data("[DONE]"),
            ],
        };
        futures_stream::iter(events)
    });
    let all = futures_stream::iter(head)
        .chain(body)
        .map(Ok::<_, Infallible>);
    Ok(Sse::new(all)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// `GET /v1/models`.
pub async fn models(State(state): State<AppState>) -> Json<serde_json::Value> {
    let model = state.engine.model();
    let created = model
        .loaded_at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Json(json!({
        "object": "list",
        "data": [{ "id": model.name, "object": "model", "created": created, "owned_by": "mtp-rs" }],
    }))
}
