//! What both APIs share when turning a request into a [`GenerationJob`]: the server's settings,
//! prompt checks, the token budget, and sampling validation.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;

use mtp_core::engine::{CancelToken, GenerateRequest};
use mtp_core::options::{DraftOverrides, LogprobsRequest};
use mtp_core::sampling::SamplerOptions;

use super::engine::{EngineHandle, GenerationJob};
use super::error::{Api, ApiError};
use super::worker::deadline;
use crate::tokenizer::{ChatMessage, ChatOptions, PromptFormat, SpecialTokens};

/// Server settings, resolved once at start.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// When set, every request must carry `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// The most tokens one request may generate (requests asking for more are clamped).
    pub max_tokens: usize,
    /// The most stop strings one request may give, and their longest length in bytes.
    pub max_stop: (usize, usize),
    /// A request still running (or queued) after this long ends with `timeout`.
    pub request_timeout: Option<Duration>,
    /// Draft options for every request (from the command line).
    pub draft: DraftOverrides,
    /// After a shutdown signal, how long in-flight requests may run before they are cancelled.
    pub shutdown_grace: Duration,
    /// Connections open at once (more wait in the listen backlog).
    pub max_connections: usize,
    /// The longest wait for a request's headers, and between two pieces of its body; a client
    /// slower than this is disconnected.
    pub read_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            api_key: None,
            max_body_bytes: 4 << 20,
            max_tokens: 8192,
            max_stop: (16, 256),
            request_timeout: None,
            draft: DraftOverrides::default(),
            shutdown_grace: Duration::from_secs(10),
            max_connections: 512,
            read_timeout: Duration::from_secs(10),
        }
    }
}

/// What handlers share: the engine handle, the settings and the shutdown signal.
#[derive(Clone)]
pub struct AppState {
    /// The engine.
    pub engine: Arc<dyn EngineHandle>,
    /// The settings.
    pub config: Arc<ServerConfig>,
    /// Set when the shutdown grace period is over: running requests are cancelled.
    pub shutdown: CancelToken,
    /// Permits for prompt rendering and tokenization off the async threads.
    tokenizing: Arc<tokio::sync::Semaphore>,
}

/// Prompts rendered and tokenized at once (the rest wait their turn).
pub const TOKENIZING_AT_ONCE: usize = 2;

impl AppState {
    /// A state over `engine` with `config`.
    pub fn new(engine: Arc<dyn EngineHandle>, config: ServerConfig) -> Self {
        Self {
            engine,
            config: Arc::new(config),
            shutdown: CancelToken::new(),
            tokenizing: Arc::new(tokio::sync::Semaphore::new(TOKENIZING_AT_ONCE)),
        }
    }

    /// 404 unless `model` names the loaded pair (an empty name means the loaded one).
    pub fn check_model(&self, api: Api, model: &str) -> Result<(), ApiError> {
        let loaded = &self.engine.model().name;
        if model.is_empty() || model == loaded || model.strip_suffix(":latest") == Some(loaded) {
            Ok(())
        } else {
            Err(ApiError::model_not_found(api, model, loaded))
        }
    }

    /// Prompt ids of a conversation rendered with the model's chat template (rendered and
    /// tokenized off the async threads: see [`Self::off_runtime`]).
    pub async fn chat_prompt(
        &self,
        api: Api,
        messages: Vec<ChatMessage>,
        options: ChatOptions,
    ) -> Result<Vec<u32>, ApiError> {
        let engine = self.engine.clone();
        let ids = self
            .off_runtime(api, move || {
                let template = engine
                    .chat_template()
                    .map_err(|e| ApiError::bad_request(api, e))?;
                engine
                    .tokenizer()
                    .encode_chat(template, &messages, &options)
                    .map_err(|e| ApiError::bad_request(api, e.to_string()))
            })
            .await?;
        self.check_prompt(api, ids)
    }

    /// Prompt ids of raw text (BOS added as the tokenizer configuration says), tokenized off the
    /// async threads.
    pub async fn raw_prompt(&self, api: Api, text: String) -> Result<Vec<u32>, ApiError> {
        let engine = self.engine.clone();
        let ids = self
            .off_runtime(api, move || {
                engine
                    .tokenizer()
                    .encode_prompt(&text, PromptFormat::Raw)
                    .map_err(|e| ApiError::bad_request(api, e.to_string()))
            })
            .await?;
        self.check_prompt(api, ids)
    }

    /// Runs `work` (template rendering, tokenization: CPU work that grows with the body) on
    /// tokio's blocking threads, at most [`TOKENIZING_AT_ONCE`] at a time, so that a few large
    /// prompts never stall the streams the async threads are serving.
    pub(super) async fn off_runtime<T: Send + 'static>(
        &self,
        api: Api,
        work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let _permit = self.tokenizing.acquire().await.map_err(|_| {
            ApiError::new(
                api,
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down",
            )
        })?;
        tokio::task::spawn_blocking(work).await.map_err(|e| {
            ApiError::new(
                api,
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("tokenizing the prompt failed: {e}"),
            )
        })?
    }

    fn check_prompt(&self, api: Api, ids: Vec<u32>) -> Result<Vec<u32>, ApiError> {
        let context = self.engine.model().max_context;
        if ids.is_empty() {
            return Err(ApiError::bad_request(api, "the prompt is empty"));
        }
        if ids.len() >= context {
            return Err(ApiError::bad_request(
                api,
                format!(
                    "the prompt has {} tokens but the model's context holds {context} (prompt \
                     and generated tokens together)",
                    ids.len()
                ),
            ));
        }
        Ok(ids)
    }

    /// The token budget: `asked` (`None`: as many as fit), clamped to `--max-tokens` and to the
    /// room left in the context.
    pub fn budget(&self, prompt_len: usize, asked: Option<usize>) -> usize {
        let room = self.engine.model().max_context.saturating_sub(prompt_len);
        asked
            .unwrap_or(usize::MAX)
            .min(self.config.max_tokens)
            .min(room)
    }

    /// Check stop strings against the limits.
    pub fn check_stop(&self, api: Api, stop: &[String]) -> Result<(), ApiError> {
        let (count, len) = self.config.max_stop;
        if stop.len() > count {
            return Err(ApiError::bad_request(
                api,
                format!(
                    "at most {count} stop strings are accepted, got {}",
                    stop.len()
                ),
            ));
        }
        if let Some(s) = stop.iter().find(|s| s.len() > len) {
            return Err(ApiError::bad_request(
                api,
                format!(
                    "a stop string is longer than {len} bytes ({} bytes)",
                    s.len()
                ),
            ));
        }
        Ok(())
    }

    /// A job for the worker, with the validated sampling options.
    pub fn job(
        &self,
        api: Api,
        prompt: Vec<u32>,
        sampling: SamplerOptions,
        num_predict: usize,
        stop: Vec<String>,
        logprobs: Option<usize>,
    ) -> Result<GenerationJob, ApiError> {
        sampling
            .validate()
            .map_err(|e| ApiError::bad_request(api, format!("invalid option: {e}")))?;
        let sampling = greedy_without_truncation(sampling);
        self.check_stop(api, &stop)?;
        Ok(GenerationJob {
            request: GenerateRequest {
                prompt,
                sampling,
                num_predict,
                eos: self.engine.tokenizer().eos_ids().to_vec(),
                draft: self.config.draft.clone(),
                logprobs: match logprobs {
                    Some(top) => LogprobsRequest::Top(top),
                    None => LogprobsRequest::None,
                },
                constraint: None,
            },
            stop,
            // Cancelled by the client going away, or by the end of the shutdown grace period
            // (then a queued job is answered without starting, a running one stops at its next
            // check, between prefill chunks included).
            cancel: CancelToken::child_of(&self.shutdown),
            shutdown: self.shutdown.clone(),
            deadline: deadline(self.config.request_timeout),
            special_tokens: SpecialTokens::Skip,
        })
    }
}

/// At temperature 0 the token is the argmax of the (penalised) logits, which top-k, top-p and
/// min-p always keep: they cannot change it, so they are dropped, and greedy speculation (which
/// needs neutral processing) stays on. ollama's defaults set top_k 40 and top_p 0.9, so a
/// `temperature: 0` request would otherwise decode plainly.
fn greedy_without_truncation(mut sampling: SamplerOptions) -> SamplerOptions {
    if sampling.is_greedy() {
        sampling.top_k = 0;
        sampling.top_p = 1.0;
        sampling.min_p = 0.0;
    }
    sampling
}

/// `top` alternatives asked for with log-probabilities, checked against OpenAI's limit of 20.
pub fn top_logprobs(api: Api, wanted: bool, top: Option<i64>) -> Result<Option<usize>, ApiError> {
    match (wanted, top) {
        (false, None | Some(0)) => Ok(None),
        (false, Some(_)) => Err(ApiError::bad_request(
            api,
            "top_logprobs needs logprobs: true",
        )),
        (true, None) => Ok(Some(0)),
        (true, Some(n)) if (0..=20).contains(&n) => Ok(Some(n as usize)),
        (true, Some(n)) => Err(ApiError::bad_request(
            api,
            format!("top_logprobs must be between 0 and 20, got {n}"),
        )),
    }
}

/// A request option that must be a finite number in a range.
pub fn in_range(api: Api, name: &str, value: f32, lo: f32, hi: f32) -> Result<f32, ApiError> {
    if value.is_finite() && (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(ApiError::bad_request(
            api,
            format!("{name} must be between {lo} and {hi}, got {value}"),
        ))
    }
}
