//! `mtp bench`: plain decode against MTP (every schedule and fixed depth) on a prompt set,
//! interleaved in one process, with the verify-cost curve, the ideal speedup, host overhead,
//! prefill rate and peak RSS; prints a table and writes JSON (layout in BENCHMARKS.md).

pub mod args;
mod cost;
mod host;
mod measure;
pub(crate) mod plan;
mod report;
mod rounds;
mod spread;
mod table;
mod timed;
mod variant;

use std::path::Path;
use std::process::ExitCode;

use std::sync::Arc;

use anyhow::{bail, Context as _};
use mtp_core::engine::Engine;
use mtp_core::model::{MtpDrafter, TargetModel};
use mtp_core::proposer::DraftModel;
use mtp_core::Backend;
use runner::loading::{LoadOptions, StoredQuant};
use runner::proposers::ProposerChoice;
use runner::{ModelPaths, Pipeline};

use self::args::BenchArgs;
use self::cost::CostModels;
use self::measure::{deepest_draft, run_passes, Workload};
use self::plan::Plan;
use self::report::{Context, ControllerReport, Report, Setup};
use self::timed::{ModelClock, ModelRole, TimedDrafter, TimedTarget};
use super::backend::{with_backend, AnyBackend};
use super::console;
use super::load_plan::prepare_load;
use super::progress::load_pipeline;

/// Run `mtp bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let sampling = args.sampling.options();
    sampling.validate().context("invalid sampling option")?;
    let plan = Plan::resolve(&args.plan, sampling)?;
    let mut paths = args.model.paths()?;
    let proposers = args.proposers.choice(paths.drafter.as_deref())?;
    if !proposers.is_speculative() {
        bail!(
            "mtp bench compares MTP with plain decode and needs a drafter or another \
             proposer: pass --draft DIR or --draft-kind ngram"
        );
    }
    super::model_check::check_paths(&paths)?;
    check_writable(&args.plan.json)?;
    paths.drafter = proposers.mtp.clone();
    let backend = AnyBackend::open(&args.model)?;
    let report = with_backend!(backend, |b| {
        // Prompts are short; the context is dominated by what the bench generates.
        let context = plan.num_predict.saturating_add(4096);
        let options = prepare_load(
            &b,
            &args.model,
            &paths,
            proposers.model.as_deref(),
            (context, 1),
        )?;
        let dtype = match (options.quantize, options.stored_quant) {
            (Some(scheme), _) => format!("{} (--quantize {scheme})", options.dtype),
            (None, StoredQuant::Dequantize) => format!("{} (--dequantize)", options.dtype),
            (None, StoredQuant::Keep) => options.dtype.to_string(),
        };
        run_on(b, &plan, &paths, &proposers, &options, dtype)
    })?;
    console::out(&table::render(&report))?;
    let json = serde_json::to_string_pretty(&report).context("cannot serialise the report")?;
    std::fs::write(&args.plan.json, json + "\n")
        .with_context(|| format!("cannot write {}", args.plan.json.display()))?;
    console::err(&format!("wrote {}\n", args.plan.json.display()))?;
    if report.greedy_identical == Some(false) {
        console::err("error: greedy MTP changed the output (see greedy_match in the table)\n")?;
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn run_on<B: Backend>(
    backend: B,
    plan: &Plan,
    paths: &ModelPaths,
    proposers: &ProposerChoice,
    options: &LoadOptions,
    dtype: String,
) -> anyhow::Result<Report> {
    let pipeline = load_pipeline(backend, paths, options)?
        .with_draft_model(proposers.model.as_deref(), options)?
        .with_ngram(proposers.ngram);
    let prompt_ids = plan
        .prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            pipeline
                .encode(p, plan.format)
                .with_context(|| format!("prompt {} of {}", i + 1, plan.prompts_file.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let constraint = plan
        .structured
        .as_ref()
        .map(|format| pipeline.constraint(format))
        .transpose()?;
    let work =
        Workload::new(plan, &prompt_ids, pipeline.tokenizer().eos_ids()).constrained(constraint);

    let clock = ModelClock::new(plan.model_clock);
    let timed_target = TimedTarget::new(pipeline.target(), &clock, ModelRole::Target);
    let timed_drafter = pipeline.drafter().map(|d| TimedDrafter::new(d, &clock));
    let timed_draft_model = pipeline
        .draft_model()
        .map(|m| {
            DraftModel::new(
                TimedTarget::new(m, &clock, ModelRole::DraftModel),
                pipeline.target().vocab_size(),
            )
        })
        .transpose()?;
    // The same proposers in the same order as Pipeline::engine, timed; prompt lookup runs on
    // the host: its time is round time outside model calls.
    let mut engine = Engine::new(pipeline.backend(), &timed_target).with_env(Arc::new(|_| None));
    if let Some(drafter) = &timed_drafter {
        engine = engine.also_drafter(drafter);
    }
    if let Some(model) = &timed_draft_model {
        engine = engine.also_proposer(model);
    }
    if let Some(ngram) = pipeline.ngram() {
        engine = engine.also_proposer(ngram);
    }
    let max_width = plan.max_width.max(deepest_draft(&engine, &work)? + 1);
    let context_ids = cost_context(&pipeline, &prompt_ids, plan.num_predict, max_width)?;
    tracing::info!(
        context = context_ids.len(),
        max_width,
        "timing the cost curve"
    );
    let models = CostModels {
        backend: pipeline.backend(),
        target: pipeline.target(),
        drafter: pipeline.drafter().map(|d| d as &dyn MtpDrafter<B>),
    };
    let cost = cost::measure(&models, &context_ids, max_width, plan.cost_reps)
        .context("cannot time the cost curve")?;
    let records = run_passes(&engine, &clock, &work)?;

    let lengths = prompt_ids.iter().map(|p| p.len() as f64);
    let setup = Setup {
        target: absolute(&paths.target),
        drafter: describe_proposers(paths, proposers),
        backend: pipeline.backend().name(),
        dtype,
        prompts_file: absolute(&plan.prompts_file),
        prompts: plan.prompts.len(),
        prompt_tokens: spread::Spread::of(lengths),
        prompt_ids: prompt_ids.clone(),
        num_predict: plan.num_predict,
        reps: plan.reps,
        warmup: plan.warmup,
        eos: plan.eos,
        sampling: plan.sampling.clone(),
        quick: plan.quick,
        model_clock: plan.model_clock,
        structured_output: plan.structured.as_ref().map(|f| f.describe()),
    };
    let mut report = Report::build(
        Context { plan, setup },
        &records,
        &cost,
        host::peak_rss_bytes(),
    );
    report.controllers = engine
        .schedule_memory()
        .snapshot()
        .into_iter()
        .map(|(key, state)| ControllerReport { key, state })
        .collect();
    Ok(report)
}

/// What drafted, for the report's `setup.drafter`: the assistant's directory, `model DIR` for
/// a draft model, `ngram (...)` for prompt lookup, joined by ` + ` when several are on.
fn describe_proposers(paths: &ModelPaths, proposers: &ProposerChoice) -> String {
    let mut parts = Vec::new();
    if let Some(dir) = &paths.drafter {
        parts.push(absolute(dir));
    }
    if let Some(dir) = &proposers.model {
        parts.push(format!("model {}", absolute(dir)));
    }
    if let Some(n) = proposers.ngram {
        parts.push(format!("ngram (prompt lookup, n = {}..={})", n.min, n.max));
    }
    parts.join(" + ")
}

/// Fail now, not after the benchmark, when the JSON report cannot be written to `path`: open it
/// for writing (without truncating an existing report) and remove it again if it is new.
fn check_writable(path: &Path) -> anyhow::Result<()> {
    if path.is_dir() {
        bail!("--json {} is a directory: give a file path", path.display());
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("cannot write the JSON report to {}", path.display()))?;
    if !existed {
        // Only the check created it; a leftover empty file would be harmless.
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// `path` made absolute (as given when that fails), for a report read from another directory.
fn absolute(path: &Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// Token ids for the cost curve's cache: the longest prompt continued (cyclically) to about
/// the middle of a generation, leaving room for the widest verify forward.
fn cost_context<B: Backend>(
    pipeline: &Pipeline<B>,
    prompt_ids: &[Vec<u32>],
    num_predict: usize,
    max_width: usize,
) -> anyhow::Result<Vec<u32>> {
    let longest = prompt_ids.iter().max_by_key(|p| p.len()).cloned();
    let Some(longest) = longest.filter(|p| !p.is_empty()) else {
        bail!("no prompt to build the cost-curve context from");
    };
    let room = pipeline.max_context().saturating_sub(max_width + 1);
    let wanted = (longest.len() + num_predict / 2).min(room);
    if wanted == 0 {
        bail!(
            "the model's context ({}) is too short for a verify forward of {max_width} tokens",
            pipeline.max_context()
        );
    }
    Ok(longest.iter().copied().cycle().take(wanted).collect())
}
