//! `mtp bench`: plain decode against MTP (every schedule and fixed depth) on a prompt set,
//! interleaved in one process, with the verify-cost curve, the ideal speedup, host overhead,
//! prefill rate and peak RSS; prints a table and writes JSON (layout in BENCHMARKS.md).

pub mod args;
mod cost;
mod host;
mod measure;
mod plan;
mod report;
mod rounds;
mod spread;
mod table;
mod timed;
mod variant;

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use mtp_core::Backend;
use runner::loading::LoadOptions;
use runner::{ModelPaths, Pipeline, PromptFormat};

use self::args::BenchArgs;
use self::cost::CostModels;
use self::measure::{deepest_draft, run_passes, timed_engine, Workload};
use self::plan::Plan;
use self::report::{Context, ControllerReport, Report, Setup};
use self::timed::{ModelClock, TimedDrafter, TimedTarget};
use super::backend::{with_backend, AnyBackend};
use super::progress::load_pipeline;

/// Run `mtp bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let sampling = args.sampling.options();
    sampling.validate().context("invalid sampling option")?;
    let plan = Plan::resolve(&args.plan, sampling)?;
    let paths = args.model.paths()?;
    if paths.drafter.is_none() {
        bail!("mtp bench compares MTP with plain decode and needs a drafter: pass --draft DIR");
    }
    let backend = AnyBackend::open(&args.model)?;
    let options = LoadOptions {
        dtype: args.model.dtype.into(),
    };
    let dtype = format!("{:?}", args.model.dtype).to_lowercase();
    let report = with_backend!(backend, |b| run_on(b, &plan, &paths, &options, dtype))?;
    print!("{}", table::render(&report));
    let json = serde_json::to_string_pretty(&report).context("cannot serialise the report")?;
    std::fs::write(&args.plan.json, json + "\n")
        .with_context(|| format!("cannot write {}", args.plan.json.display()))?;
    eprintln!("wrote {}", args.plan.json.display());
    if report.greedy_identical == Some(false) {
        eprintln!("error: greedy MTP changed the output (see greedy_match in the table)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn run_on<B: Backend>(
    backend: B,
    plan: &Plan,
    paths: &ModelPaths,
    options: &LoadOptions,
    dtype: String,
) -> anyhow::Result<Report> {
    let pipeline = load_pipeline(backend, paths, options)?;
    let Some(drafter) = pipeline.drafter() else {
        bail!("no drafter was loaded");
    };
    let prompt_ids = plan
        .prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            pipeline
                .encode(p, PromptFormat::Raw)
                .with_context(|| format!("prompt {} of {}", i + 1, plan.prompts_file.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let work = Workload::new(plan, &prompt_ids, pipeline.tokenizer().eos_ids());

    let clock = ModelClock::new(plan.model_clock);
    let timed_target = TimedTarget::new(pipeline.target(), &clock);
    let timed_drafter = TimedDrafter::new(drafter, &clock);
    let engine = timed_engine(&pipeline, &timed_drafter, &timed_target);
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
        drafter,
    };
    let cost = cost::measure(&models, &context_ids, max_width, plan.cost_reps)
        .context("cannot time the cost curve")?;
    let records = run_passes(&engine, &clock, &work)?;

    let lengths = prompt_ids.iter().map(|p| p.len() as f64);
    let setup = Setup {
        target: absolute(&paths.target),
        drafter: paths.drafter.as_deref().map(absolute).unwrap_or_default(),
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
