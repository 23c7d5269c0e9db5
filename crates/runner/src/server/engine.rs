//! The async engine handle the HTTP side talks to, and what flows through it.
//!
//! A worker thread ([`super::worker::WorkerEngine`]) owns the backend and the models (MLX arrays
//! must stay on one thread); requests reach it through a bounded queue and are served in order of
//! arrival, one at a time or several as a continuous batch; text streams back through a channel
//! per request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mtp_core::engine::{CancelToken, GenerateRequest, MtpStats, Response};
use mtp_core::schedule::DraftingOff;
use tokio::sync::mpsc;

pub use crate::logprobs::TokenLogprob;
use crate::structured::{OutputFormat, StructuredError};
use crate::tokenizer::SpecialTokens;
use crate::tokenizer::{ChatTemplate, Tokenizer};
use mtp_core::constraint::ConstraintSource;

/// What the server says about the loaded model pair.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// The name requests must use (the target directory's name, or `--name`).
    pub name: String,
    /// The longest sequence (prompt + generated tokens) the target accepts.
    pub max_context: usize,
    /// The target's vocabulary (its logits' width).
    pub vocab: usize,
    /// Whether an MTP drafter is loaded.
    pub drafter: bool,
    /// The backend's name.
    pub backend: String,
    /// What the target model is: family, format, size of the pair's weight files, parameters,
    /// quantization.
    pub facts: super::model_facts::ModelFacts,
    /// When the server loaded the pair.
    pub loaded_at: std::time::SystemTime,
    /// How long loading took.
    pub load_duration: Duration,
}

/// One generation for the worker.
#[derive(Debug, Clone)]
pub struct GenerationJob {
    /// The engine request (prompt ids, sampling, budget, EOS, draft overrides, whether and how
    /// many log-probabilities).
    pub request: GenerateRequest,
    /// Stop strings; the text stops before the first one.
    pub stop: Vec<String>,
    /// Cancelled when the client goes away.
    pub cancel: CancelToken,
    /// Cancelled when the server's shutdown grace period is over.
    pub shutdown: CancelToken,
    /// The request fails with [`FinishReason::Timeout`] past this instant (queue wait included).
    pub deadline: Option<Instant>,
    /// Whether the streamed text writes special tokens out (a request with tools, whose call
    /// markers may be special tokens).
    pub special_tokens: SpecialTokens,
}

impl GenerationJob {
    /// The same job with tool calls in `syntax` looked for in its text: special tokens are
    /// written out (the markers may be special tokens) and generation stops where the model
    /// would start a tool's response (the application sends it).
    pub fn with_tools(mut self, syntax: &crate::tools::ToolSyntax) -> Self {
        self.special_tokens = SpecialTokens::Keep;
        self.stop.push(syntax.response_start.clone());
        self
    }

    /// The same job with special tokens written out in its text (a reasoning channel's
    /// markers are special tokens).
    pub fn keeping_special_tokens(mut self) -> Self {
        self.special_tokens = SpecialTokens::Keep;
        self
    }

    /// The same job with `constraint` on its generated text (`None`: free text).
    pub fn constrained(mut self, constraint: Option<ConstraintSource>) -> Self {
        self.request.constraint = constraint;
        self
    }

    /// Whether the tokens' log-probabilities are asked for (`request.logprobs`).
    pub fn with_logprobs(&self) -> bool {
        self.request.logprobs.top().is_some()
    }
}

/// What a request receives, in order: text pieces, then one `Finished` or `Failed`.
#[derive(Debug, Clone)]
pub enum GenerationEvent {
    /// Text to send (never a partial character; never text at or after a stop string), with
    /// the log-probabilities of the tokens committed since the previous piece (when asked for).
    Text {
        /// The text.
        text: String,
        /// The tokens' log-probabilities.
        logprobs: Vec<TokenLogprob>,
    },
    /// The generation ended.
    Finished(Box<Finished>),
    /// The generation failed (an engine error).
    Failed(String),
}

/// Why a generation ended, as the APIs report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An EOS token or a stop string.
    Stop,
    /// The token budget (or the context) was reached.
    Length,
    /// The client went away or the server is shutting down.
    Cancelled,
    /// `--request-timeout` passed.
    Timeout,
}

impl FinishReason {
    /// The ollama `done_reason`.
    pub fn ollama(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Timeout => "timeout",
        }
    }

    /// The OpenAI `finish_reason` (its enum has no value for a cut-short generation other than
    /// `length`).
    pub fn openai(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length | FinishReason::Cancelled | FinishReason::Timeout => "length",
        }
    }
}

/// The end of one generation.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Why it ended.
    pub reason: FinishReason,
    /// Prompt tokens evaluated.
    pub prompt_tokens: usize,
    /// Prompt tokens reused from the previous request's caches (prefix reuse), not evaluated.
    pub prompt_cached: usize,
    /// Tokens generated (the ones carrying a stop string included).
    pub completion_tokens: usize,
    /// Time waiting in the queue.
    pub queued: Duration,
    /// Time to evaluate the prompt and choose the first token.
    pub prompt_eval_duration: Duration,
    /// Time generating after the first token.
    pub eval_duration: Duration,
    /// Speculative statistics (MTP modes only).
    pub mtp: Option<MtpStats>,
    /// With a structured output: whether its grammar was complete when generation ended
    /// (`false`: a length limit cut it, the text does not parse); `None` without one.
    pub structured_complete: Option<bool>,
}

impl Finished {
    /// A generation that ended before the engine ran (cancelled or timed out in the queue).
    pub fn before_start(reason: FinishReason, queued: Duration) -> Self {
        Self {
            reason,
            prompt_tokens: 0,
            prompt_cached: 0,
            completion_tokens: 0,
            queued,
            prompt_eval_duration: Duration::ZERO,
            eval_duration: Duration::ZERO,
            mtp: None,
            structured_complete: None,
        }
    }

    /// From the engine's response. The first response whose adaptive schedule settled on
    /// plain decoding logs why, once per process (the controller is shared by requests).
    pub fn from_response(response: Response, reason: FinishReason, queued: Duration) -> Self {
        static DRAFTING_OFF_SAID: AtomicBool = AtomicBool::new(false);
        if let Some(off) = response
            .mtp
            .as_ref()
            .and_then(|m| DraftingOff::from_rounds(&m.round_log))
        {
            if !DRAFTING_OFF_SAID.swap(true, Ordering::Relaxed) {
                tracing::info!(target: "mtp", "{off}");
            }
        }
        Self {
            reason,
            prompt_tokens: response.prompt_eval_count,
            prompt_cached: response.prompt_cached,
            completion_tokens: response.eval_count,
            queued,
            prompt_eval_duration: response.prompt_eval_duration,
            eval_duration: response.eval_duration,
            mtp: response.mtp,
            structured_complete: response.constraint_complete,
        }
    }
}

/// Why a job was not accepted.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SubmitError {
    /// The queue is full; try again later.
    #[error("the server is busy: {depth} requests are queued; retry later")]
    QueueFull {
        /// The queue's capacity.
        depth: usize,
    },
    /// The worker has stopped (shutdown or a fatal engine error).
    #[error("the model worker has stopped")]
    WorkerGone,
}

/// The events of one submitted job.
pub type EventReceiver = mpsc::UnboundedReceiver<GenerationEvent>;

/// The engine as the HTTP handlers see it.
#[async_trait]
pub trait EngineHandle: Send + Sync + 'static {
    /// The loaded pair.
    fn model(&self) -> &ModelInfo;
    /// The target's tokenizer (prompts are tokenized on the HTTP side).
    fn tokenizer(&self) -> &Tokenizer;
    /// The target's chat template, compiled at start, or why there is none.
    fn chat_template(&self) -> Result<&ChatTemplate, String>;
    /// Queue a job; its events arrive on the returned channel.
    async fn submit(&self, job: GenerationJob) -> Result<EventReceiver, SubmitError>;
    /// Jobs waiting in the queue (not counting the running one).
    fn queue_depth(&self) -> usize;
    /// `format` compiled for the loaded model (the vocabulary is built on first use): what a
    /// structured-output request carries; an error naming the problem for an invalid or
    /// unsupported schema, regex or grammar.
    fn constraint(&self, format: &OutputFormat) -> Result<ConstraintSource, StructuredError>;
}
