//! The ollama API: `POST /api/generate`, `POST /api/chat` (NDJSON streams by default,
//! `"stream": false` for one object), `GET /api/tags`, `POST /api/show`, `GET /api/ps`,
//! `GET /api/version`.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use mtp_core::sampling::SamplerOptions;
use serde::Serialize;
use serde_json::json;

use super::body::parse;
use super::engine::TokenLogprob;
use super::engine::{Finished, GenerationEvent, GenerationJob};
use super::error::{Api, ApiError};
use super::ollama_types::Logprob;
use super::ollama_types::{
    ChatBody, ChatChunk, GenerateBody, GenerateChunk, ListModel, Message, Metrics, ModelDetails,
    Options, RunningModel, ShowBody, Tail,
};
use super::request::{in_range, top_logprobs, AppState};
use super::stream;
use super::structured::{incomplete, ollama_format};
use super::tool_calls::{ollama_call, read_tools, template_call, ReplySplitter};
use crate::thinking::ThinkingSyntax;
use crate::tokenizer::{ChatMessage, ChatOptions};

const API: Api = Api::Ollama;

/// ollama's defaults for options a request leaves out (`api.DefaultOptions`).
fn sampling(options: &Options) -> Result<SamplerOptions, ApiError> {
    let defaults = SamplerOptions {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.0,
        repeat_penalty: 1.0,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
        repeat_last_n: 64,
        seed: None,
    };
    let nonneg = |name: &str, v: Option<i64>, default: usize| -> Result<usize, ApiError> {
        match v {
            None => Ok(default),
            Some(v) if v <= 0 => Ok(0),
            Some(v) => usize::try_from(v)
                .map_err(|_| ApiError::bad_request(API, format!("{name} is too large"))),
        }
    };
    let finite = |name: &str, v: Option<f32>, default: f32| -> Result<f32, ApiError> {
        match v {
            None => Ok(default),
            Some(v) => in_range(API, name, v, f32::MIN, f32::MAX),
        }
    };
    let unit = |name: &str, v: Option<f32>, default: f32| -> Result<f32, ApiError> {
        match v {
            None => Ok(default),
            Some(v) => in_range(API, name, v, 0.0, 1.0),
        }
    };
    if options.typical_p.is_some_and(|p| p != 1.0) {
        return Err(ApiError::bad_request(API, "typical_p is not supported"));
    }
    Ok(SamplerOptions {
        temperature: finite("temperature", options.temperature, defaults.temperature)?,
        top_k: nonneg("top_k", options.top_k, defaults.top_k)?,
        top_p: unit("top_p", options.top_p, defaults.top_p)?,
        min_p: unit("min_p", options.min_p, defaults.min_p)?,
        repeat_penalty: finite(
            "repeat_penalty",
            options.repeat_penalty,
            defaults.repeat_penalty,
        )?,
        presence_penalty: finite("presence_penalty", options.presence_penalty, 0.0)?,
        frequency_penalty: finite("frequency_penalty", options.frequency_penalty, 0.0)?,
        // ollama: -1 means the whole context; the penalty window is then the history kept.
        repeat_last_n: match options.repeat_last_n {
            Some(-1) => usize::MAX / 2,
            v => nonneg("repeat_last_n", v, defaults.repeat_last_n)?,
        },
        // ollama: -1 (or any negative seed) means random.
        seed: options.seed.and_then(|s| u64::try_from(s).ok()),
    })
}

/// `num_predict`: negative (ollama's -1 and -2) means as many as fit.
fn num_predict(options: &Options) -> Option<usize> {
    options.num_predict.and_then(|n| usize::try_from(n).ok())
}

/// `think`: `true` (or a level, `"high"`, `"medium"`, `"low"`) turns the model's reasoning on,
/// where its chat template can (Gemma 4's `enable_thinking`); the thinking's markers. `false`
/// or nothing: off.
fn thinking(
    state: &AppState,
    think: &Option<serde_json::Value>,
) -> Result<Option<ThinkingSyntax>, ApiError> {
    let on = match think {
        None | Some(serde_json::Value::Null) | Some(serde_json::Value::Bool(false)) => false,
        Some(serde_json::Value::Bool(true)) => true,
        Some(serde_json::Value::String(level))
            if ["high", "medium", "low"].contains(&level.as_str()) =>
        {
            true
        }
        Some(other) => {
            return Err(ApiError::bad_request(
                API,
                format!(
                    "`think` must be true, false, \"high\", \"medium\" or \"low\", got {other}"
                ),
            ))
        }
    };
    if !on {
        return Ok(None);
    }
    let template = state
        .engine
        .chat_template()
        .map_err(|e| ApiError::bad_request(API, format!("`think`: {e}")))?;
    template
        .thinking_syntax()
        .cloned()
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(
                API,
                format!(
                    "`think`: the model's chat template ({}) cannot turn thinking on",
                    template.path().display()
                ),
            )
        })
}

/// A grammar on the reply (`format`, a forced tool call) leaves no room for the reasoning
/// channel: with `think` on it is refused rather than the thinking silently dropped.
fn refuse_grammar_with_thinking(
    think: &Option<ThinkingSyntax>,
    grammar: bool,
) -> Result<(), ApiError> {
    if think.is_some() && grammar {
        return Err(ApiError::bad_request(
            API,
            "`think` cannot be combined with `format` or a forced tool call (the grammar would \
             leave no room for the reasoning)",
        ));
    }
    Ok(())
}

/// The chat options of thinking on (`enable_thinking`) added to `options`.
fn with_thinking(mut options: ChatOptions, thinking: &Option<ThinkingSyntax>) -> ChatOptions {
    if thinking.is_some() {
        options
            .extra
            .insert("enable_thinking".into(), minijinja::Value::from(true));
    }
    options
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn metrics(done: &Finished, total: Duration) -> Metrics {
    Metrics {
        total_duration: nanos(total),
        load_duration: 0,
        prompt_eval_count: done.prompt_tokens,
        prompt_eval_duration: nanos(done.prompt_eval_duration),
        eval_count: done.completion_tokens,
        eval_duration: nanos(done.eval_duration),
    }
}

/// `POST /api/generate`.
pub async fn generate(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let mut body: GenerateBody = parse(API, &body)?;
    state.check_model(API, &body.model)?;
    let think = thinking(&state, &body.think)?;
    if think.is_some() && body.raw {
        return Err(ApiError::bad_request(
            API,
            "`think` needs the chat template; a `raw` prompt has none",
        ));
    }
    let format = ollama_format(body.format.as_ref())?;
    refuse_grammar_with_thinking(&think, format.is_some())?;
    let logprobs = top_logprobs(API, body.logprobs, Some(body.top_logprobs))?;
    if body.images.as_ref().is_some_and(|i| !i.is_empty()) {
        return Err(ApiError::bad_request(
            API,
            "images are not supported (text models only)",
        ));
    }
    if !body.suffix.is_empty() {
        return Err(ApiError::bad_request(
            API,
            "`suffix` (fill-in-the-middle) is not supported",
        ));
    }
    if body.context.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(ApiError::bad_request(
            API,
            "`context` is not supported; send the conversation to /api/chat",
        ));
    }
    if body.template.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::bad_request(
            API,
            "`template` overrides (Go templates) are not supported; the model's own chat \
             template is used, or send `raw: true` with a formatted prompt",
        ));
    }
    let name = state.engine.model().name.clone();
    if body.prompt.is_empty() {
        // ollama answers an empty prompt by loading the model.
        return Ok(Json(GenerateChunk {
            model: name,
            created_at: now_rfc3339(),
            response: String::new(),
            thinking: None,
            done: true,
            tail: Tail::loaded(),
        })
        .into_response());
    }
    let options = body.options.clone().unwrap_or_default();
    let prompt = if body.raw || state.engine.chat_template().is_err() {
        state
            .raw_prompt(API, std::mem::take(&mut body.prompt))
            .await?
    } else {
        let mut messages = Vec::new();
        if let Some(system) = body.system.as_deref().filter(|s| !s.is_empty()) {
            messages.push(ChatMessage::text("system", system));
        }
        messages.push(ChatMessage::text("user", &body.prompt));
        state
            .chat_prompt(API, messages, with_thinking(ChatOptions::default(), &think))
            .await?
    };
    let constraint = state.constraint(API, "format", format).await?;
    let mut job = job(&state, prompt, &options, logprobs)?.constrained(constraint);
    if think.is_some() {
        job = job.keeping_special_tokens();
    }
    let splitter = ReplySplitter::new(None, think);
    let frame = move |text: String, lps: Option<&[TokenLogprob]>, done: Done<'_>| {
        let parts = splitter.push(&text, done.is_some());
        GenerateChunk {
            model: name.clone(),
            created_at: now_rfc3339(),
            response: parts.content,
            thinking: (!parts.thinking.is_empty()).then_some(parts.thinking),
            done: done.is_some(),
            tail: Tail::of(lps, done),
        }
    };
    respond(&state, job, body.stream.unwrap_or(true), started, frame).await
}

/// `POST /api/chat`.
pub async fn chat(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let body: ChatBody = parse(API, &body)?;
    state.check_model(API, &body.model)?;
    let think = thinking(&state, &body.think)?;
    let format = ollama_format(body.format.as_ref())?;
    let logprobs = top_logprobs(API, body.logprobs, Some(body.top_logprobs))?;
    let tool_choice = body.options.as_ref().and_then(|o| o.tool_choice.as_ref());
    let tools = read_tools(&state, API, body.tools.as_deref(), tool_choice)?;
    let forced_call = tools.as_ref().and_then(|t| t.grammar(&state));
    refuse_grammar_with_thinking(&think, format.is_some() || forced_call.is_some())?;
    if forced_call.is_some() && format.is_some() {
        return Err(ApiError::bad_request(
            API,
            "a forced tool call (options.tool_choice required or named) and `format` cannot be \
             combined",
        ));
    }
    let name = state.engine.model().name.clone();
    if body.messages.is_empty() {
        return Ok(Json(ChatChunk {
            model: name,
            created_at: now_rfc3339(),
            message: assistant(String::new()),
            done: true,
            tail: Tail::loaded(),
        })
        .into_response());
    }
    let mut messages = Vec::with_capacity(body.messages.len());
    for m in &body.messages {
        if m.images.as_ref().is_some_and(|i| !i.is_empty()) {
            return Err(ApiError::bad_request(
                API,
                "images are not supported (text models only)",
            ));
        }
        if (m.tool_calls.as_ref().is_some_and(|t| !t.is_empty()) || m.role == "tool")
            && tools.is_none()
        {
            return Err(ApiError::bad_request(
                API,
                "tool calls and tool messages need the request's `tools`",
            ));
        }
        let mut message = ChatMessage::text(&m.role.to_lowercase(), &m.content);
        message.reasoning_content = m.thinking.clone().filter(|t| !t.is_empty());
        for (j, call) in m.tool_calls.iter().flatten().enumerate() {
            message
                .tool_calls
                .push(template_call(API, call, &format!("tool_calls[{j}]"))?);
        }
        message.name = m.tool_name.clone();
        messages.push(message);
    }
    let options = body.options.clone().unwrap_or_default();
    let chat_options = with_thinking(
        tools.as_ref().map(|t| t.chat_options()).unwrap_or_default(),
        &think,
    );
    let prompt = state.chat_prompt(API, messages, chat_options).await?;
    let constraint = match forced_call {
        Some(grammar) => state.constraint(API, "tool_choice", Some(grammar)).await?,
        None => state.constraint(API, "format", format).await?,
    };
    let mut job = job(&state, prompt, &options, logprobs)?.constrained(constraint);
    if let Some(t) = tools.as_ref().filter(|t| t.parses_calls()) {
        job = job.with_tools(&t.syntax);
    }
    if think.is_some() {
        job = job.keeping_special_tokens();
    }
    let splitter = ReplySplitter::new(tools.as_ref(), think);
    let frame = move |text: String, lps: Option<&[TokenLogprob]>, done: Done<'_>| {
        let parts = splitter.push(&text, done.is_some());
        let mut message = assistant(parts.content);
        message.thinking = (!parts.thinking.is_empty()).then_some(parts.thinking);
        // A call cut short comes last, with the arguments written in full (`done_reason`
        // says `length`).
        let calls: Vec<_> = parts
            .calls
            .iter()
            .chain(&parts.cut)
            .map(ollama_call)
            .collect();
        if !calls.is_empty() {
            message.tool_calls = Some(calls);
        }
        ChatChunk {
            model: name.clone(),
            created_at: now_rfc3339(),
            message,
            done: done.is_some(),
            tail: Tail::of(lps, done),
        }
    };
    respond(&state, job, body.stream.unwrap_or(true), started, frame).await
}

/// The end of a generation and the request's total time, on the last object only.
type Done<'a> = Option<(&'a Finished, Duration)>;

impl Tail {
    fn of(lps: Option<&[TokenLogprob]>, done: Done<'_>) -> Self {
        Self {
            logprobs: lps.map(|l| l.iter().map(Logprob::from_engine).collect()),
            done_reason: done.map(|(d, _)| d.reason.ollama().to_string()),
            metrics: done.map(|(d, total)| metrics(d, total)),
            mtp: done.and_then(|(d, _)| d.mtp.clone()),
            structured_output: done.and_then(|(d, _)| incomplete(d)),
        }
    }

    /// ollama's answer to a request without a prompt: the model is loaded.
    fn loaded() -> Self {
        Self {
            done_reason: Some("load".into()),
            ..Self::default()
        }
    }
}

/// The job of a generate or chat request: budget, sampling, stop strings, log-probabilities.
fn job(
    state: &AppState,
    prompt: Vec<u32>,
    options: &Options,
    logprobs: Option<usize>,
) -> Result<GenerationJob, ApiError> {
    let mut budget = state.budget(prompt.len(), num_predict(options));
    if let Some(ctx) = options.num_ctx {
        // The context this request may use: the prompt and the generated tokens together (the
        // model's own context still bounds it). ollama truncates a longer prompt; a silent cut
        // changes the answer, so it is refused here instead.
        let ctx = usize::try_from(ctx)
            .ok()
            .filter(|&c| c > 0)
            .ok_or_else(|| ApiError::bad_request(API, format!("num_ctx must be > 0, got {ctx}")))?;
        if prompt.len() >= ctx {
            return Err(ApiError::bad_request(
                API,
                format!(
                    "the prompt has {} tokens: num_ctx {ctx} leaves no room to generate \
                     (raise num_ctx or shorten the prompt)",
                    prompt.len()
                ),
            ));
        }
        budget = budget.min(ctx - prompt.len());
    }
    let stop = options.stop.clone().unwrap_or_default();
    state.job(API, prompt, sampling(options)?, budget, stop, logprobs)
}

fn assistant(content: String) -> Message {
    Message {
        role: "assistant".into(),
        content,
        ..Message::default()
    }
}

/// Submit `job` and answer with an NDJSON stream of `frame`s, or one object.
async fn respond<T, F>(
    state: &AppState,
    job: GenerationJob,
    streaming: bool,
    started: std::time::Instant,
    frame: F,
) -> Result<Response, ApiError>
where
    T: Serialize + Send + 'static,
    F: Fn(String, Option<&[TokenLogprob]>, Done<'_>) -> T + Send + 'static,
{
    let cancel = job.cancel.clone();
    let with_logprobs = job.with_logprobs();
    let receiver = state
        .engine
        .submit(job)
        .await
        .map_err(|e| ApiError::from_submit(API, &e))?;
    if !streaming {
        let all = stream::collect(receiver, cancel)
            .await
            .map_err(|e| ApiError::new(API, StatusCode::INTERNAL_SERVER_ERROR, e))?;
        let lps = with_logprobs.then_some(all.logprobs.as_slice());
        return Ok(
            Json(frame(all.text, lps, Some((&all.done, started.elapsed())))).into_response(),
        );
    }
    let lines = stream::events(receiver, cancel).map(move |event| {
        let line = match event {
            GenerationEvent::Text { text, logprobs } => {
                let lps = with_logprobs.then_some(logprobs.as_slice());
                serde_json::to_string(&frame(text, lps, None))
            }
            GenerationEvent::Finished(done) => serde_json::to_string(&frame(
                String::new(),
                None,
                Some((&done, started.elapsed())),
            )),
            GenerationEvent::Failed(e) => Ok(json!({ "error": e }).to_string()),
        };
        let mut line = line.unwrap_or_else(|e| json!({ "error": e.to_string() }).to_string());
        line.push('\n');
        Ok::<_, Infallible>(Bytes::from(line))
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response())
}

/// The model's details as ollama reports them, from the files the server loaded.
fn details(state: &AppState) -> ModelDetails {
    let facts = &state.engine.model().facts;
    ModelDetails {
        parent_model: String::new(),
        format: facts.format.clone(),
        family: facts.family.clone(),
        families: if facts.family.is_empty() {
            Vec::new()
        } else {
            vec![facts.family.clone()]
        },
        parameter_size: facts.parameter_size.clone(),
        quantization_level: facts.quantization_level.clone(),
    }
}

fn digest(state: &AppState) -> String {
    use std::hash::{Hash, Hasher};
    let model = state.engine.model();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&model.name, model.facts.size_bytes, model.max_context).hash(&mut h);
    format!("{:016x}", h.finish())
}

fn modified_at(state: &AppState) -> String {
    chrono::DateTime::<chrono::Utc>::from(state.engine.model().loaded_at)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `GET /api/tags`.
pub async fn tags(State(state): State<AppState>) -> Json<serde_json::Value> {
    let model = state.engine.model();
    let entry = ListModel {
        name: model.name.clone(),
        model: model.name.clone(),
        modified_at: modified_at(&state),
        size: model.facts.size_bytes,
        digest: digest(&state),
        details: details(&state),
    };
    Json(json!({ "models": [entry] }))
}

/// `GET /api/ps`.
pub async fn ps(State(state): State<AppState>) -> Json<serde_json::Value> {
    let model = state.engine.model();
    let entry = RunningModel {
        name: model.name.clone(),
        model: model.name.clone(),
        size: model.facts.size_bytes,
        digest: digest(&state),
        details: details(&state),
        // Loaded for the server's lifetime.
        expires_at: "9999-12-31T23:59:59Z".into(),
        size_vram: 0,
        context_length: model.max_context,
    };
    Json(json!({ "models": [entry] }))
}

/// `POST /api/show`.
pub async fn show(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let body: ShowBody = parse(API, &body)?;
    let asked = if body.model.is_empty() {
        &body.name
    } else {
        &body.model
    };
    if asked.is_empty() {
        return Err(ApiError::bad_request(API, "`model` is required"));
    }
    state.check_model(API, asked)?;
    let model = state.engine.model();
    let template = state
        .engine
        .tokenizer()
        .settings()
        .chat_template
        .clone()
        .unwrap_or_default();
    let capabilities = ["completion"];
    let mut model_info = serde_json::Map::new();
    model_info.insert("general.architecture".into(), json!(model.facts.family));
    model_info.insert(
        "general.file_type".into(),
        json!(model.facts.quantization_level),
    );
    model_info.insert(
        format!("{}.context_length", model.facts.family),
        json!(model.max_context),
    );
    model_info.insert("mtp.drafter".into(), json!(model.drafter));
    model_info.insert("mtp.backend".into(), json!(model.backend));
    Ok(Json(json!({
        "modelfile": format!("# served by mtp-rs\nFROM {}\n", model.name),
        "parameters": "",
        "template": template,
        "details": details(&state),
        "model_info": model_info,
        "capabilities": capabilities,
        "modified_at": modified_at(&state),
    }))
    .into_response())
}

/// `GET /api/version`.
pub async fn version() -> Json<serde_json::Value> {
    Json(json!({ "version": env!("CARGO_PKG_VERSION") }))
}
