//! OpenAI's request and response bodies for `/v1/chat/completions`, `/v1/completions` and
//! `/v1/models` (the fields this server reads or writes).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use mtp_core::engine::MtpStats;

/// A string or a list of strings (`stop`, `prompt`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// `stream_options`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// What both completion endpoints share.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Common {
    pub model: String,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub stop: Option<OneOrMany>,
    pub seed: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub n: Option<i64>,
    pub logprobs: Option<Value>,
    pub top_logprobs: Option<i64>,
    pub response_format: Option<Value>,
    pub tools: Option<Vec<Value>>,
    pub functions: Option<Vec<Value>>,
    pub logit_bias: Option<Value>,
}

/// A message content part (`{"type": "text", "text": ...}`).
#[derive(Debug, Clone, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

/// A message's content: text, parts, or null (an assistant turn with tool calls).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// A chat message.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessageIn {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub tool_calls: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionBody {
    pub messages: Vec<ChatMessageIn>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(flatten)]
    pub common: Common,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionBody {
    pub prompt: OneOrMany,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub best_of: Option<i64>,
    #[serde(flatten)]
    pub common: Common,
}

/// Token counts.
#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

/// How many of the prompt tokens were served from the cache (prefix reuse).
#[derive(Debug, Clone, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

/// An assistant message or a stream delta.
#[derive(Debug, Clone, Serialize)]
pub struct MessageOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// The text (`null` beside tool calls; left out of a delta that has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// Calls the model made (OpenAI's shape; in a stream chunk, with their `index`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
}

/// A choice of a chat completion (`message`) or of a chunk (`delta`).
#[derive(Debug, Clone, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<MessageOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<MessageOut>,
    pub logprobs: Option<Value>,
    pub finish_reason: Option<&'static str>,
}

/// A choice of a text completion (whole or chunk).
#[derive(Debug, Clone, Serialize)]
pub struct TextChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<Value>,
    pub finish_reason: Option<&'static str>,
}

/// A response or a stream chunk of either endpoint.
#[derive(Debug, Clone, Serialize)]
pub struct Completion<C> {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: &'static str,
    pub choices: Vec<C>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Speculative statistics of the generation; not in OpenAI's API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtp: Option<MtpStats>,
    /// `"incomplete"` when a structured output's grammar was still open as generation ended
    /// (`finish_reason` is then `length` and the text does not parse); not in OpenAI's API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<&'static str>,
}
