//! `mtp bench` arguments.

use std::path::PathBuf;

use clap::Args;

use super::timed::ClockMode;
use super::variant::ControllerChoice;
use crate::cli::args::{ModelArgs, SamplingArgs, ScheduleChoice};

/// `mtp bench`: plain decode vs MTP on a prompt set, interleaved in one process.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Where the models are and what runs them (a drafter, or --draft-kind ngram, is required).
    #[command(flatten)]
    pub model: ModelArgs,
    /// How tokens are chosen (greedy by default; every variant uses the same settings).
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// What drafts in the MTP variants (one proposer per run).
    #[command(flatten)]
    pub proposers: crate::cli::proposer_args::ProposerArgs,
    /// The benchmark plan.
    #[command(flatten)]
    pub plan: PlanArgs,
}

/// What is measured and how often.
#[derive(Debug, Args)]
#[command(next_help_heading = "Benchmark")]
pub struct PlanArgs {
    /// Prompt set: one prompt per line; blank lines and lines starting with `#` are skipped
    /// [default: models/prompts.txt of the checkout].
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    /// Tokens to generate per prompt.
    #[arg(long, short = 'n', default_value_t = 128, value_name = "N")]
    pub num_predict: usize,
    /// Measured repetitions of every variant over the whole prompt set.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub reps: usize,
    /// Unmeasured warm-up passes of every variant (over the first three prompts) before the
    /// measured repetitions.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub warmup: usize,
    /// Fixed draft depths to measure (constant schedule at that depth).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,3,4,5,6,7,8",
        value_name = "K"
    )]
    pub depths: Vec<usize>,
    /// Depths to measure also with the engine's evaluation overlap off (`mtp-kK-sync`; 0 is
    /// plain decode, `plain-sync`): on a lazy backend (MLX) the overlap's baseline; use with
    /// `--model-clock dispatch`.
    #[arg(long, value_delimiter = ',', value_name = "K")]
    pub sync_depths: Vec<usize>,
    /// How model calls are timed: `eval` forces each call's outputs (exact model times, but a
    /// lazy backend then evaluates call by call); `dispatch` leaves evaluation to the engine
    /// (the decode rates a lazy backend really gets; model times are graph building).
    #[arg(long, value_enum, default_value = "eval")]
    pub model_clock: ClockMode,
    /// Draft schedules to measure at the model's initial and maximum depth.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "constant,heuristic,adaptive"
    )]
    pub schedules: Vec<ScheduleChoice>,
    /// Widest verify forward of the cost curve (raised to cover every measured depth + 1).
    #[arg(long, default_value_t = 16, value_name = "W")]
    pub max_width: usize,
    /// Timed calls per width of the cost curve (and of the drafter step).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub cost_reps: usize,
    /// Render each prompt as one user turn with the model's own chat template (as `mtp
    /// generate --chat` does), ending where the model answers.
    #[arg(long)]
    pub chat: bool,
    /// Which adaptive controllers to measure: `carried` (one whose learned state carries over
    /// from request to request, as in `mtp serve` and `mtp generate` after its first run: the
    /// variant `mtp-adaptive`) and `fresh` (a new one per request, as a first `mtp generate`
    /// has: `mtp-adaptive-fresh`); both may be given.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "carried")]
    pub controllers: Vec<ControllerChoice>,
    /// The same as `--controllers fresh`.
    #[arg(long, conflicts_with = "controllers")]
    pub fresh_schedules: bool,
    /// Stop a prompt at an EOS token [default: ignore EOS, so every prompt generates
    /// --num-predict tokens and every variant does the same work].
    #[arg(long)]
    pub stop_at_eos: bool,
    /// Where to write the JSON report.
    #[arg(long, default_value = "mtp-bench.json", value_name = "PATH")]
    pub json: PathBuf,
    /// A structured output on every variant (the JSON schema, regex or grammar options):
    /// plain decode without it is measured too (`plain-free`).
    #[command(flatten)]
    pub structured: crate::cli::format_args::FormatArgs,
    /// Smoke test: the first 3 prompts, 8 tokens, 2 repetitions, depths 1-2, 2 cost calls per
    /// width (other plan options are ignored). Numbers from it mean nothing.
    #[arg(long)]
    pub quick: bool,
}
