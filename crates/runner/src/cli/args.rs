//! The command line, as clap derive types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mtp_core::options::{DraftOverrides, ValidationMode, MAX_DRAFT_TOKENS_LIMIT};
use mtp_core::quant::QuantScheme;
use mtp_core::sampling::{SamplerOptions, MAX_TOP_LOGPROBS};
use mtp_core::schedule::ScheduleKind;
use mtp_core::DType;
use runner::defaults::{default_pair, DefaultModelError};
use runner::ModelPaths;

/// Multi-token-prediction speculative decoding: a Gemma 4 target verified against its
/// "assistant" drafter. Greedy output is exactly what the target alone would produce.
#[derive(Debug, Parser)]
#[command(name = "mtp", version, propagate_version = true)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate a continuation of a prompt; text streams to stdout, statistics go to stderr.
    #[command(allow_negative_numbers = true)]
    Generate(GenerateArgs),
    /// Benchmark plain decode against MTP (schedules and fixed depths) on a prompt set, with the
    /// verify-cost curve and the ideal speedup; prints a table and writes JSON.
    #[command(allow_negative_numbers = true)]
    Bench(super::bench::args::BenchArgs),
    /// Benchmark continuous batching: total and per-stream rates with 1, 2, 4, ... concurrent
    /// clients, one request at a time against a batch, speculation off, on and measured.
    BenchBatch(super::bench_batch::BatchBenchArgs),
    /// Serve the ollama API (/api/*) and the OpenAI API (/v1/*) on one port over one model pair.
    #[cfg(feature = "server")]
    Serve(Box<super::serve::ServeArgs>),
}

impl Command {
    /// `--threads` of the subcommand.
    pub fn threads(&self) -> Option<usize> {
        match self {
            Command::Generate(args) => args.model.threads,
            Command::Bench(args) => args.model.threads,
            Command::BenchBatch(args) => args.model.threads,
            #[cfg(feature = "server")]
            Command::Serve(args) => args.model.threads,
        }
    }
}

/// `mtp generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The prompt text [default: read from standard input].
    pub prompt: Option<String>,
    /// Where the models are and what runs them.
    #[command(flatten)]
    pub model: ModelArgs,
    /// How tokens are chosen.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// How much is generated and when it stops.
    #[command(flatten)]
    pub length: LengthArgs,
    /// Speculative decoding.
    #[command(flatten)]
    pub draft: DraftArgs,
    /// What proposes the drafts.
    #[command(flatten)]
    pub proposers: super::proposer_args::ProposerArgs,
    /// Start the adaptive schedule from nothing instead of from what earlier runs of the same
    /// models, backend and options on this machine learned (kept in the cache directory's
    /// `schedules/`); what this run learns is kept all the same.
    #[arg(long, help_heading = "Speculative decoding")]
    pub forget_schedule: bool,
    /// Structured output (a grammar on the generated text).
    #[command(flatten)]
    pub structured: super::format_args::FormatArgs,
    /// Output format.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Backends the command knows about (whether compiled in or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// The host reference backend of mtp-core (CPU, slow, exact).
    Reference,
    /// Candle (CPU; CUDA / Metal when built with the `cuda` / `metal` features).
    Candle,
    /// MLX (Metal on macOS, CPU on Linux) when built with the `mlx` feature.
    Mlx,
}

impl ModelArgs {
    /// `--model`/`--draft`, or the default pair (with `--draft` replacing its drafter).
    pub fn paths(&self) -> Result<ModelPaths, DefaultModelError> {
        match &self.model {
            Some(target) => Ok(ModelPaths {
                target: target.clone(),
                drafter: self.draft.clone(),
                draft_centroids: self.draft_centroids.clone(),
                tokenizer: self.tokenizer.clone(),
                chat_template: self.chat_template.clone(),
            }),
            None => {
                let mut pair = default_pair()?;
                if let Some(draft) = &self.draft {
                    pair.drafter = Some(draft.clone());
                }
                pair.draft_centroids = self.draft_centroids.clone();
                pair.tokenizer = self.tokenizer.clone();
                pair.chat_template = self.chat_template.clone();
                Ok(pair)
            }
        }
    }
}

/// `--model` / `--draft`: a directory, or a repo id resolved through the HF cache
/// ([`runner::hub::resolve_model`]).
fn model_location(spec: &str) -> Result<PathBuf, String> {
    runner::hub::resolve_model(std::path::Path::new(spec)).map_err(|e| e.to_string())
}

impl BackendChoice {
    /// Candle when compiled in, else the reference backend.
    pub const DEFAULT: &'static str = if cfg!(feature = "candle") {
        "candle"
    } else {
        "reference"
    };
}

/// Compute dtypes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DTypeChoice {
    /// What the backend computes best for the checkpoint: f32 on CPUs (reference, candle cpu),
    /// the checkpoint's own f16/bf16 on GPUs (candle cuda/metal).
    Auto,
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// bfloat16.
    Bf16,
}

impl DTypeChoice {
    /// The dtype asked for; `None` for `auto` (decided per checkpoint and backend).
    pub fn fixed(self) -> Option<DType> {
        match self {
            DTypeChoice::Auto => None,
            DTypeChoice::F32 => Some(DType::F32),
            DTypeChoice::F16 => Some(DType::F16),
            DTypeChoice::Bf16 => Some(DType::BF16),
        }
    }
}

/// Quantization of dense weights at load (`--quantize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QuantizeChoice {
    /// 8 bits per weight: GGUF Q8_0 blocks (32 weights per f16 scale).
    Q8,
    /// 4 bits per weight: GGUF Q4_0 blocks (32 weights per f16 scale).
    Q4,
}

impl QuantizeChoice {
    /// The shared quantizer's scheme.
    pub fn scheme(self) -> QuantScheme {
        match self {
            QuantizeChoice::Q8 => QuantScheme::Q8,
            QuantizeChoice::Q4 => QuantScheme::Q4,
        }
    }
}

/// Model, backend and device.
#[derive(Debug, Args)]
#[command(next_help_heading = "Model")]
pub struct ModelArgs {
    /// Target model directory (HF layout: config.json, *.safetensors, tokenizer.json), a GGUF
    /// file (*.gguf, its tokenizer embedded), or HF repo id (owner/name[@revision], from the
    /// local HF cache)
    /// [default: the pair in $MTP_MODEL_DIR, else models/default/ of the checkout].
    #[arg(long, visible_alias = "target", value_name = "DIR|FILE|REPO", value_parser = model_location)]
    pub model: Option<PathBuf>,
    /// A tokenizer.json to use instead of the model's own tokenizer; special tokens still come
    /// from the model [default: the target directory's tokenizer.json, or the vocabulary a GGUF
    /// file embeds].
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// A Jinja chat template file to use instead of the model's own (for --chat and the
    /// server's chat endpoints; a base model's GGUF has none), e.g. the chat_template.jinja of
    /// the instruction-tuned model of the same family [default: the model's own].
    #[arg(long, value_name = "FILE")]
    pub chat_template: Option<PathBuf>,
    /// Drafter directory, Gemma 4 assistant GGUF file (gemma4-assistant, as llama.cpp's
    /// converter writes it) or HF repo id; a directory's config.json model_type says what it is
    /// (a Gemma 4 assistant drafts as an MTP head; see --draft-kind) [default: none with
    /// --model, so plain decoding; the default pair's assistant without --model].
    #[arg(long, visible_alias = "assistant", value_name = "DIR|FILE|REPO", value_parser = model_location)]
    pub draft: Option<PathBuf>,
    /// The HF assistant directory whose ordered-embedding centroids a GGUF assistant (--draft
    /// A.gguf) drafts through: llama.cpp's converter drops them, so without this flag a GGUF
    /// assistant drafts through its full-vocabulary head (as llama.cpp does), slower for
    /// assistants made with centroids (E2B/E4B) [default: none].
    #[arg(long, value_name = "DIR", requires = "draft")]
    pub draft_centroids: Option<PathBuf>,
    /// Backend to run on.
    #[arg(long, value_enum, default_value = BackendChoice::DEFAULT)]
    pub backend: BackendChoice,
    /// Device: cpu, cuda, cuda:N, metal or metal:N (GPUs need the candle backend built with the
    /// matching feature).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Compute dtype of the weights [auto: f32 on CPUs (every backend decodes fastest in f32
    /// there); on GPUs (candle CUDA/Metal, MLX Metal) the checkpoint's own f16/bf16].
    #[arg(long, value_enum, default_value = "auto")]
    pub dtype: DTypeChoice,
    /// Load even when the weights and KV cache need more memory than is available.
    #[arg(long)]
    pub ignore_memory_limit: bool,
    /// CPU threads for candle's kernels (its matmul and quantized-matmul pools and the rayon
    /// global pool), 1 to 256; MLX and the reference backend ignore it [default:
    /// RAYON_NUM_THREADS when set, else the machine's cores].
    #[arg(long, value_name = "N", value_parser = super::threads::parse)]
    pub threads: Option<usize>,
    /// Quantize the dense projection and embedding weights at load, as ollama does at import:
    /// q8 (GGUF Q8_0) or q4 (GGUF Q4_0). candle computes with its quantized kernels, MLX with
    /// affine groups of 32, the reference backend by exact dequantization. Weights a checkpoint
    /// already stores quantized stay as stored; MoE expert stacks are quantized one expert
    /// at a time [default: none, the weights as stored].
    #[arg(long, value_enum, value_name = "SCHEME")]
    pub quantize: Option<QuantizeChoice>,
    /// Decode weights the checkpoint stores quantized (GGUF blocks, MLX affine) to dense
    /// weights of the compute dtype at load, exactly: the computation the file stands for, as
    /// HF transformers runs a GGUF, without the 8-bit activation rounding of quantized kernels.
    /// Slower, and needs the dense weights' memory [default: off, quantized kernels].
    #[arg(long, conflicts_with = "quantize")]
    pub dequantize: bool,
}

/// Sampling options. Unset temperature / top-k / top-p come from the model's
/// `generation_config.json` as HF reads it (greedy unless `do_sample` is true), else ollama's
/// defaults; `mtp bench` starts from greedy instead.
#[derive(Debug, Args)]
#[command(next_help_heading = "Sampling")]
pub struct SamplingArgs {
    /// Softmax temperature; 0 is greedy (argmax), the exact-greedy guarantee of MTP
    /// [default: the model's generation_config.json, else 0.8; mtp bench: 0].
    #[arg(long, allow_negative_numbers = true)]
    pub temperature: Option<f32>,
    /// Keep only the K most likely tokens; 0 is off [default: the model's
    /// generation_config.json, else 40; mtp bench: 0].
    #[arg(long, value_name = "K", value_parser = whole::<usize>)]
    pub top_k: Option<usize>,
    /// Nucleus sampling threshold, 0 to 1; 0 or 1 is off [default: the model's
    /// generation_config.json, else 0.9; mtp bench: 1].
    #[arg(long, allow_negative_numbers = true, value_name = "P")]
    pub top_p: Option<f32>,
    /// Drop tokens below P x the largest probability; 0 is off.
    #[arg(
        long,
        default_value_t = 0.0,
        allow_negative_numbers = true,
        value_name = "P"
    )]
    pub min_p: f32,
    /// Repeat penalty over the last --repeat-last-n tokens; 1 is off.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub repeat_penalty: f32,
    /// Subtracted once from the logit of every token seen in the penalty window.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per occurrence in the penalty window.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Size of the penalty window in tokens; 0 disables all penalties.
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = whole::<usize>)]
    pub repeat_last_n: usize,
    /// Seed of the sampler's random stream [default: random, printed in the statistics so the
    /// run can be repeated]. A sampled run repeats token for token under a fixed draft depth
    /// (`--draft-schedule constant`, or `--no-draft`); the default adaptive schedule picks
    /// depths from measured timings, so its draws (not their distribution) can differ.
    #[arg(long, value_parser = whole::<u64>)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The sampler options over greedy defaults (`mtp bench`; not yet validated).
    pub fn options(&self) -> SamplerOptions {
        self.options_over(&SamplerOptions::default())
    }

    /// The sampler options: the flags given, the rest from `base` (a model's defaults; not yet
    /// validated).
    pub fn options_over(&self, base: &SamplerOptions) -> SamplerOptions {
        SamplerOptions {
            temperature: self.temperature.unwrap_or(base.temperature),
            top_k: self.top_k.unwrap_or(base.top_k),
            top_p: self.top_p.unwrap_or(base.top_p),
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: self.seed,
        }
    }
}

/// Length, stopping and prompt format.
#[derive(Debug, Args)]
#[command(next_help_heading = "Generation")]
pub struct LengthArgs {
    /// Most tokens to generate (also capped by the model's context).
    #[arg(
        long,
        short = 'n',
        default_value_t = 128,
        value_name = "N",
        value_parser = whole::<usize>
    )]
    pub num_predict: usize,
    /// Token id that ends generation; repeat or separate with commas [default: the model's EOS
    /// ids from config.json / generation_config.json / tokenizer_config.json].
    #[arg(long, value_name = "ID", value_delimiter = ',', value_parser = whole::<u32>)]
    pub eos: Vec<u32>,
    /// Never stop at an EOS token.
    #[arg(long, conflicts_with = "eos")]
    pub ignore_eos: bool,
    /// Render the prompt as one user turn with the model's own chat template
    /// (chat_template.jinja, else tokenizer_config.json's), ending where the model answers.
    #[arg(long)]
    pub chat: bool,
    /// A system message before the user turn (with --chat) [default: none].
    #[arg(long, value_name = "TEXT", requires = "chat")]
    pub system: Option<String>,
}

/// Draft schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScheduleChoice {
    /// Always draft the initial depth.
    Constant,
    /// +2 after a fully accepted round, -1 after a miss.
    Heuristic,
    /// Cost-aware: the depth with the most expected tokens per second.
    Adaptive,
}

impl From<ScheduleChoice> for ScheduleKind {
    fn from(s: ScheduleChoice) -> Self {
        match s {
            ScheduleChoice::Constant => ScheduleKind::Constant,
            ScheduleChoice::Heuristic => ScheduleKind::Heuristic,
            ScheduleChoice::Adaptive => ScheduleKind::Adaptive,
        }
    }
}

/// A draft depth: an integer from 1 to [`MAX_DRAFT_TOKENS_LIMIT`].
/// A whole number from `lo` to `hi` (clap value parser).
pub fn bounded(lo: usize, hi: usize) -> impl Fn(&str) -> Result<usize, String> + Clone {
    move |s: &str| match s.parse::<usize>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        Ok(_) => Err(format!("must be between {lo} and {hi}")),
        Err(e) => Err(e.to_string()),
    }
}

fn draft_depth(s: &str) -> Result<usize, String> {
    let above = || {
        format!(
            "above the largest draft depth, {MAX_DRAFT_TOKENS_LIMIT}: use a depth from 1 to \
             {MAX_DRAFT_TOKENS_LIMIT}"
        )
    };
    let s = s.trim();
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(v) if v > MAX_DRAFT_TOKENS_LIMIT => Err(above()),
        Ok(v) => Ok(v),
        Err(_) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => Err(above()),
        Err(_) => whole::<usize>(s),
    }
}

/// A whole number (0 or more), with an error that says so (clap's own would be "invalid digit
/// found in string" for `-1`).
pub fn whole<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    let s = s.trim();
    s.parse::<T>().map_err(|_| {
        if s.parse::<u128>().is_ok() {
            format!("{s} is too large")
        } else {
            format!("expected a whole number (0 or more), got {s:?}")
        }
    })
}

/// Speculative-decoding options. Unset values come from the model, then the environment
/// (MTP_INITIAL_DRAFT_TOKENS, MTP_MAX_DRAFT_TOKENS, MTP_DRAFT_SCHEDULE, MTP_SERIAL_VALIDATE,
/// MTP_COMPARE_SERIAL_VALIDATE).
#[derive(Debug, Args)]
#[command(next_help_heading = "Speculative decoding")]
pub struct DraftArgs {
    /// Draft depth of the first round, 1 to 64 [default: the model's, else 4].
    #[arg(long, value_name = "N", value_parser = draft_depth)]
    pub draft_tokens: Option<usize>,
    /// Largest draft depth, 1 to 64 (also capped by the model's context) [default: the
    /// model's, else 16].
    #[arg(long, value_name = "N", value_parser = draft_depth)]
    pub max_draft_tokens: Option<usize>,
    /// How the draft depth changes between rounds: `adaptive` plays the depth (0, plain
    /// decoding, included) with the most tokens per second it has measured, so drafting
    /// that does not pay on this machine is switched off; `constant` always drafts
    /// --draft-tokens (the seed's behaviour) [default: adaptive].
    #[arg(long, value_enum)]
    pub draft_schedule: Option<ScheduleChoice>,
    /// Validate drafts one token at a time instead of in one batched forward: the exact mode
    /// where a backend's kernels are not row-invariant (candle CUDA; candle off x86-64).
    #[arg(long, conflicts_with = "compare_serial_validate")]
    pub serial_validate: bool,
    /// Debug: validate batched, re-check serially and report disagreements.
    #[arg(long)]
    pub compare_serial_validate: bool,
    /// Decode without the drafter (plain decoding; the drafter is not loaded).
    #[arg(long)]
    pub no_draft: bool,
}

impl DraftArgs {
    /// The per-request overrides.
    pub fn overrides(&self) -> DraftOverrides {
        let validation = if self.compare_serial_validate {
            Some(ValidationMode::CompareSerial)
        } else if self.serial_validate {
            Some(ValidationMode::Serial)
        } else {
            None
        };
        DraftOverrides {
            initial_draft_tokens: self.draft_tokens,
            max_draft_tokens: self.max_draft_tokens,
            schedule: self.draft_schedule.map(Into::into),
            validation,
            enabled: if self.no_draft { Some(false) } else { None },
        }
    }
}

/// Output options.
#[derive(Debug, Args)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Print the final response as one JSON object on stdout (generated ids, text, done reason,
    /// counts, durations, MTP statistics) instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// With --json: each generated token's log-probability and its N most likely alternatives
    /// (0 to 20) in `logprobs`, read from the target's own rows with speculation on. At
    /// temperature > 0 they are the sampler's distribution (penalties, top-k, temperature,
    /// top-p, min-p); at temperature 0 the log-softmax of the penalised logits [default: none].
    #[arg(long, value_name = "N", requires = "json", value_parser = top_logprobs)]
    pub logprobs: Option<usize>,
}

/// A number of log-probability alternatives: 0 to [`MAX_TOP_LOGPROBS`].
fn top_logprobs(s: &str) -> Result<usize, String> {
    let n = whole::<usize>(s)?;
    if n > MAX_TOP_LOGPROBS {
        return Err(format!(
            "at most {MAX_TOP_LOGPROBS} alternatives per token, got {n}"
        ));
    }
    Ok(n)
}
