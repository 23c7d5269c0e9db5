//! The command line, as clap derive types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mtp_core::options::{DraftOverrides, ValidationMode, MAX_DRAFT_TOKENS_LIMIT};
use mtp_core::sampling::SamplerOptions;
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
    Generate(GenerateArgs),
    /// Benchmark plain decode against MTP (schedules and fixed depths) on a prompt set, with the
    /// verify-cost curve and the ideal speedup; prints a table and writes JSON.
    Bench(super::bench::args::BenchArgs),
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
            }),
            None => {
                let mut pair = default_pair()?;
                if let Some(draft) = &self.draft {
                    pair.drafter = Some(draft.clone());
                }
                Ok(pair)
            }
        }
    }
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
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// bfloat16.
    Bf16,
}

impl From<DTypeChoice> for DType {
    fn from(d: DTypeChoice) -> Self {
        match d {
            DTypeChoice::F32 => DType::F32,
            DTypeChoice::F16 => DType::F16,
            DTypeChoice::Bf16 => DType::BF16,
        }
    }
}

/// Model, backend and device.
#[derive(Debug, Args)]
#[command(next_help_heading = "Model")]
pub struct ModelArgs {
    /// Target model directory (HF layout: config.json, *.safetensors, tokenizer.json)
    /// [default: the pair in $MTP_MODEL_DIR, else models/default/ of the checkout].
    #[arg(long, visible_alias = "target", value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Drafter directory; its config.json model_type says what it is (a Gemma 4 assistant
    /// drafts as an MTP head; see --draft-kind) [default: none with --model, so plain decoding;
    /// the default pair's assistant without --model].
    #[arg(long, visible_alias = "assistant", value_name = "DIR")]
    pub draft: Option<PathBuf>,
    /// Backend to run on.
    #[arg(long, value_enum, default_value = BackendChoice::DEFAULT)]
    pub backend: BackendChoice,
    /// Device: cpu, cuda, cuda:N, metal or metal:N (GPUs need the candle backend built with the
    /// matching feature).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Compute dtype of the weights.
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: DTypeChoice,
}

/// Sampling options (the defaults are greedy decoding).
#[derive(Debug, Args)]
#[command(next_help_heading = "Sampling")]
pub struct SamplingArgs {
    /// Softmax temperature; 0 is greedy (argmax).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Keep only the K most likely tokens; 0 is off.
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub top_k: usize,
    /// Nucleus sampling threshold; <= 0 or >= 1 is off.
    #[arg(
        long,
        default_value_t = 1.0,
        allow_negative_numbers = true,
        value_name = "P"
    )]
    pub top_p: f32,
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
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub repeat_last_n: usize,
    /// Seed of the sampler's random stream [default: random].
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The sampler options (not yet validated).
    pub fn options(&self) -> SamplerOptions {
        SamplerOptions {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
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
    #[arg(long, short = 'n', default_value_t = 128, value_name = "N")]
    pub num_predict: usize,
    /// Token id that ends generation; repeat or separate with commas [default: the model's EOS
    /// ids from config.json / generation_config.json / tokenizer_config.json].
    #[arg(long, value_name = "ID", value_delimiter = ',')]
    pub eos: Vec<u32>,
    /// Never stop at an EOS token.
    #[arg(long, conflicts_with = "eos")]
    pub ignore_eos: bool,
    /// Wrap the prompt in the model's chat template (one user turn; Gemma's turn format is the
    /// only one supported).
    #[arg(long)]
    pub chat: bool,
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
fn draft_depth(s: &str) -> Result<usize, String> {
    let above = || {
        format!(
            "above the largest draft depth, {MAX_DRAFT_TOKENS_LIMIT}: use a depth from 1 to \
             {MAX_DRAFT_TOKENS_LIMIT}"
        )
    };
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(v) if v > MAX_DRAFT_TOKENS_LIMIT => Err(above()),
        Ok(v) => Ok(v),
        Err(_) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => Err(above()),
        Err(e) => Err(e.to_string()),
    }
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
    /// How the draft depth changes between rounds [default: constant].
    #[arg(long, value_enum)]
    pub draft_schedule: Option<ScheduleChoice>,
    /// Validate drafts one token at a time instead of in one batched forward.
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
}
