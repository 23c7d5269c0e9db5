//! The resolved benchmark plan: prompts, lengths, repetitions and the variants to run.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use mtp_core::sampling::SamplerOptions;
use mtp_core::schedule::ScheduleKind;
use runner::structured::OutputFormat;
use runner::PromptFormat;

use super::args::PlanArgs;
use super::timed::ClockMode;
use super::variant::{ControllerChoice, Decode, Variant};

/// Prompts used by a warm-up pass.
const WARMUP_PROMPTS: usize = 3;

/// Everything a benchmark run does, after `--quick` and the defaults are applied.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The prompt file.
    pub prompts_file: PathBuf,
    /// The prompts, in file order.
    pub prompts: Vec<String>,
    /// Tokens to generate per prompt.
    pub num_predict: usize,
    /// Measured repetitions.
    pub reps: usize,
    /// Warm-up passes.
    pub warmup: usize,
    /// The variants, plain first.
    pub variants: Vec<Variant>,
    /// The widest verify forward of the cost curve.
    pub max_width: usize,
    /// Timed calls per cost-curve point.
    pub cost_reps: usize,
    /// Sampling options shared by every variant.
    pub sampling: SamplerOptions,
    /// Whether an EOS token ends a prompt's generation.
    pub eos: EosPolicy,
    /// Whether this is the `--quick` smoke run.
    pub quick: bool,
    /// How model calls are timed.
    pub model_clock: ClockMode,
    /// How each prompt is turned into tokens (raw text, or one chat turn).
    pub format: PromptFormat,
    /// The structured output every variant but `plain-free` is constrained to.
    pub structured: Option<OutputFormat>,
}

/// What an EOS token does during the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EosPolicy {
    /// Generation continues past EOS (every prompt generates `num_predict` tokens).
    Ignore,
    /// The model's EOS tokens end a prompt's generation.
    Stop,
}

/// `<workspace>/models/prompts.txt`, located from this crate's source directory.
pub fn default_prompts_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/prompts.txt")
}

impl Plan {
    /// Resolve `args` (reading the prompt file) with the shared `sampling` options.
    pub fn resolve(args: &PlanArgs, sampling: SamplerOptions) -> anyhow::Result<Self> {
        let prompts_file = args.prompts.clone().unwrap_or_else(default_prompts_file);
        let mut prompts = read_prompts(&prompts_file)?;
        let schedules: Vec<ScheduleKind> = args.schedules.iter().map(|&s| s.into()).collect();
        let (num_predict, reps, warmup, depths, cost_reps) = if args.quick {
            prompts.truncate(WARMUP_PROMPTS);
            (8, 2, 1, vec![1, 2], 2)
        } else {
            (
                args.num_predict,
                args.reps,
                args.warmup,
                args.depths.clone(),
                args.cost_reps,
            )
        };
        let sync_depths = &args.sync_depths;
        if num_predict < 2 {
            bail!("--num-predict must be at least 2 (one token comes from the prefill)");
        }
        if reps == 0 || cost_reps == 0 {
            bail!("--reps and --cost-reps must be at least 1");
        }
        if depths.contains(&0) {
            bail!("--depths must be at least 1 (depth 0 is plain decode, always measured)");
        }
        let structured = args.structured.output_format()?;
        let mut variants = vec![Variant::PLAIN];
        if structured.is_some() {
            variants.push(Variant::new(Decode::Unconstrained));
        }
        let controllers = if args.fresh_schedules {
            vec![ControllerChoice::Fresh]
        } else {
            args.controllers.clone()
        };
        for kind in schedules {
            let variant = Variant::new(Decode::Schedule(kind));
            match kind {
                ScheduleKind::Adaptive => {
                    variants.extend(controllers.iter().map(|&c| variant.with_controller(c)))
                }
                _ => variants.push(variant),
            }
        }
        variants.extend(depths.iter().map(|&k| Variant::new(Decode::Depth(k))));
        variants.extend(sync_depths.iter().map(|&k| Variant::sync_at(k)));
        let mut unique = Vec::with_capacity(variants.len());
        for v in variants {
            if !unique.contains(&v) {
                unique.push(v);
            }
        }
        let variants = unique;
        let deepest = depths.iter().chain(sync_depths).copied().max().unwrap_or(0);
        Ok(Self {
            prompts_file,
            prompts,
            num_predict,
            reps,
            warmup,
            variants,
            max_width: args.max_width.max(deepest + 1),
            cost_reps,
            sampling,
            eos: if args.stop_at_eos {
                EosPolicy::Stop
            } else {
                EosPolicy::Ignore
            },
            quick: args.quick,
            model_clock: args.model_clock,
            format: if args.chat {
                PromptFormat::Chat
            } else {
                PromptFormat::Raw
            },
            structured,
        })
    }

    /// The prompts (indices) of pass `pass`: a warm-up pass uses the first few.
    pub fn prompts_of(&self, pass: Pass) -> std::ops::Range<usize> {
        match pass {
            Pass::Warmup => 0..self.prompts.len().min(WARMUP_PROMPTS),
            Pass::Measured(_) => 0..self.prompts.len(),
        }
    }

    /// Every pass in order: warm-ups, then the measured repetitions.
    pub fn passes(&self) -> impl Iterator<Item = Pass> {
        let warmups = std::iter::repeat_n(Pass::Warmup, self.warmup);
        warmups.chain((0..self.reps).map(Pass::Measured))
    }

    /// The variants in the order turn `index` runs them (a prompt of a pass): rotated by one
    /// each turn, so that drift (thermal, background load) falls on every variant alike.
    pub fn order(&self, index: usize) -> Vec<usize> {
        let n = self.variants.len();
        (0..n).map(|i| (i + index) % n).collect()
    }
}

/// One pass over the variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Not measured.
    Warmup,
    /// Measured repetition `n` (from 0).
    Measured(usize),
}

impl std::fmt::Display for Pass {
    /// The progress label: `warm-up` or `repetition N` (from 1).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pass::Warmup => f.write_str("warm-up"),
            Pass::Measured(rep) => write!(f, "repetition {}", rep + 1),
        }
    }
}

/// Non-empty, non-comment lines of the prompt file, trimmed.
pub fn read_prompts(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the prompt file {}", path.display()))?;
    let prompts: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    if prompts.is_empty() {
        bail!("the prompt file {} holds no prompts", path.display());
    }
    Ok(prompts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pass_rotates_the_variant_order() {
        let plan = Plan {
            prompts_file: PathBuf::new(),
            prompts: vec!["a".into(); 5],
            num_predict: 4,
            reps: 2,
            warmup: 1,
            variants: [Decode::Plain, Decode::Depth(1), Decode::Depth(2)]
                .map(Variant::new)
                .to_vec(),
            max_width: 3,
            cost_reps: 1,
            sampling: SamplerOptions::default(),
            eos: EosPolicy::Ignore,
            quick: false,
            model_clock: ClockMode::Eval,
            format: PromptFormat::Raw,
            structured: None,
        };
        assert_eq!(plan.order(0), vec![0, 1, 2]);
        assert_eq!(plan.order(1), vec![1, 2, 0]);
        assert_eq!(plan.order(3), vec![0, 1, 2]);
        let passes: Vec<Pass> = plan.passes().collect();
        assert_eq!(
            passes,
            vec![Pass::Warmup, Pass::Measured(0), Pass::Measured(1)]
        );
        assert_eq!(plan.prompts_of(Pass::Warmup), 0..3);
        assert_eq!(plan.prompts_of(Pass::Measured(1)), 0..5);
    }

    #[test]
    fn prompt_files_skip_comments_and_blank_lines() {
        let dir = std::env::temp_dir().join(format!("mtp-bench-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("prompts.txt");
        std::fs::write(&file, "# header\n\n  In the beginning \nJesus wept\n").expect("write");
        assert_eq!(
            read_prompts(&file).expect("prompts"),
            vec!["In the beginning".to_string(), "Jesus wept".to_string()]
        );
        std::fs::write(&file, "# only a comment\n").expect("write");
        assert!(read_prompts(&file).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_committed_prompt_set_is_varied() {
        let prompts = read_prompts(&default_prompts_file()).expect("models/prompts.txt");
        assert!(prompts.len() >= 20, "{} prompts", prompts.len());
        let words: Vec<usize> = prompts
            .iter()
            .map(|p| p.split_whitespace().count())
            .collect();
        assert!(words.iter().min() <= Some(&2) && words.iter().max() >= Some(&50));
    }
}
