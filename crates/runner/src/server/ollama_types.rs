//! ollama's request and response bodies, with the field names and types of its `api/types.go`
//! (`GenerateRequest`, `ChatRequest`, `Options`, `GenerateResponse`, `ChatResponse`,
//! `Metrics`, `ListResponse`, `ShowResponse`, `ProcessResponse`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use mtp_core::engine::MtpStats;

/// `POST /api/generate`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct GenerateBody {
    pub model: String,
    pub prompt: String,
    pub suffix: String,
    pub system: Option<String>,
    pub template: Option<String>,
    pub context: Option<Vec<i64>>,
    pub stream: Option<bool>,
    pub raw: bool,
    pub format: Option<Value>,
    pub images: Option<Vec<Value>>,
    pub options: Option<Options>,
    pub keep_alive: Option<Value>,
    pub think: Option<Value>,
    pub logprobs: bool,
    pub top_logprobs: i64,
}

/// `POST /api/chat`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChatBody {
    pub model: String,
    pub messages: Vec<Message>,
    pub stream: Option<bool>,
    pub format: Option<Value>,
    pub keep_alive: Option<Value>,
    pub tools: Option<Vec<Value>>,
    pub options: Option<Options>,
    pub think: Option<Value>,
    pub logprobs: bool,
    pub top_logprobs: i64,
}

/// A chat message (`api.Message`).
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Message {
    pub role: String,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
    /// A tool message's tool (`tool_name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
}

/// The model options of a request (`api.Options`); unknown ones (runner options such as
/// `num_gpu`) are accepted and ignored, as ollama does for options a runner does not use.
/// `num_ctx` is honoured: it caps the prompt and the generated tokens together.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Options {
    pub temperature: Option<f32>,
    pub top_k: Option<i64>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub repeat_last_n: Option<i64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub seed: Option<i64>,
    pub num_predict: Option<i64>,
    pub num_ctx: Option<i64>,
    pub stop: Option<Vec<String>>,
    /// Which tool calls `/api/chat` allows (`auto`, `none`, `required`, or `{"type":
    /// "function", "function": {"name": ...}}`), as OpenAI's `tool_choice`; not in ollama,
    /// whose API has no way to make a model call a tool.
    pub tool_choice: Option<Value>,
    pub typical_p: Option<f32>,
}

/// `api.Metrics`, durations in nanoseconds.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Metrics {
    pub total_duration: u64,
    pub load_duration: u64,
    pub prompt_eval_count: usize,
    pub prompt_eval_duration: u64,
    pub eval_count: usize,
    pub eval_duration: u64,
}

/// `api.TokenLogprob`.
#[derive(Debug, Clone, Serialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
}

/// `api.Logprob`: a token and its alternatives.
#[derive(Debug, Clone, Serialize)]
pub struct Logprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub top_logprobs: Vec<TokenLogprob>,
}

impl Logprob {
    pub fn from_engine(lp: &crate::server::TokenLogprob) -> Self {
        let one = |t: &crate::server::TokenLogprob| TokenLogprob {
            token: t.token.clone(),
            logprob: f64::from(t.logprob),
            bytes: t.token.as_bytes().to_vec(),
        };
        let head = one(lp);
        Self {
            token: head.token,
            logprob: head.logprob,
            bytes: head.bytes,
            top_logprobs: lp.top.iter().map(one).collect(),
        }
    }
}

/// What the last object of a stream adds (and, with log-probabilities, every object).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tail {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<Logprob>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
    /// Speculative statistics (drafted, accepted, per-position acceptance); not in ollama.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtp: Option<MtpStats>,
    /// `"incomplete"` when a structured output's grammar was still open as generation ended
    /// (`done_reason` is then `length` and the text does not parse); not in ollama.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<&'static str>,
}

/// One object of a `/api/generate` stream (or the whole answer with `"stream": false`).
#[derive(Debug, Clone, Serialize)]
pub struct GenerateChunk {
    pub model: String,
    pub created_at: String,
    pub response: String,
    /// The model's reasoning, apart from `response` (with `think`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    pub done: bool,
    #[serde(flatten)]
    pub tail: Tail,
}

/// One object of a `/api/chat` stream.
#[derive(Debug, Clone, Serialize)]
pub struct ChatChunk {
    pub model: String,
    pub created_at: String,
    pub message: Message,
    pub done: bool,
    #[serde(flatten)]
    pub tail: Tail,
}

/// `api.ModelDetails`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelDetails {
    pub parent_model: String,
    pub format: String,
    pub family: String,
    pub families: Vec<String>,
    pub parameter_size: String,
    pub quantization_level: String,
}

/// An entry of `GET /api/tags`.
#[derive(Debug, Clone, Serialize)]
pub struct ListModel {
    pub name: String,
    pub model: String,
    pub modified_at: String,
    pub size: u64,
    pub digest: String,
    pub details: ModelDetails,
}

/// An entry of `GET /api/ps`.
#[derive(Debug, Clone, Serialize)]
pub struct RunningModel {
    pub name: String,
    pub model: String,
    pub size: u64,
    pub digest: String,
    pub details: ModelDetails,
    pub expires_at: String,
    pub size_vram: u64,
    pub context_length: usize,
}

/// `POST /api/show`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ShowBody {
    pub model: String,
    pub name: String,
    pub verbose: bool,
}
