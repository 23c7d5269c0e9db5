//! `mtp bench-batch`: throughput and per-stream latency with 1, 2, 4, ... concurrent clients,
//! one request at a time (the engine alone) against a continuous batch, with speculation off,
//! always on, and as the batch's measured policy chooses; prints a table and writes JSON.
//!
//! Each client sends `--requests` greedy requests one after another (a closed loop: the next
//! as soon as the last one ended), every request generating `--num-predict` tokens (EOS
//! ignored, so every variant does the same work). One at a time, requests wait in a queue and
//! are served in arrival order; batched, up to `clients` run at once.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use mtp_core::engine::batch::{self, BatchOptions, PolicyMemory, SizeReport, SpeculationPolicy};
use mtp_core::engine::{CancelToken, Engine, GenerateRequest, SinkFlow, TokenSink};
use mtp_core::options::DraftOverrides;
use mtp_core::Backend;
use runner::PromptFormat;
use serde::Serialize;

use super::args::{bounded, ModelArgs};
use super::backend::{with_backend, AnyBackend};
use super::bench::plan::{default_prompts_file, read_prompts};
use super::console;
use super::load_plan::prepare_load;
use super::progress::load_pipeline;
use super::proposer_args::ProposerArgs;

/// `mtp bench-batch` arguments.
#[derive(Debug, Args)]
pub struct BatchBenchArgs {
    /// Where the models are and what runs them.
    #[command(flatten)]
    pub model: ModelArgs,
    /// What drafts in the speculative variants.
    #[command(flatten)]
    pub proposers: ProposerArgs,
    /// Concurrent clients to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16", value_parser = bounded(1, 256))]
    pub clients: Vec<usize>,
    /// Requests each client sends, one after another.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = bounded(1, 1000))]
    pub requests: usize,
    /// Tokens each request generates.
    #[arg(long, short = 'n', default_value_t = 64, value_name = "N", value_parser = bounded(1, 1 << 16))]
    pub num_predict: usize,
    /// Prompt set, one per line (request i uses prompt i mod count)
    /// [default: models/prompts.txt of the checkout].
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    /// The most prompt tokens a request evaluates per batched pass.
    #[arg(long, default_value_t = 128, value_name = "N", value_parser = bounded(1, 1 << 16))]
    pub prefill_chunk: usize,
    /// The least time each variant runs at each concurrency, its repetitions together: clients
    /// send more requests than `--requests` where that would end sooner (sized from a
    /// calibration run of every variant, one request per client, before the repetitions;
    /// 0: exactly `--requests`).
    #[arg(long, default_value_t = 0, value_name = "SECONDS", value_parser = bounded(0, 3600))]
    pub seconds: usize,
    /// Repetitions of every variant at every concurrency, interleaved (the median is reported).
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = bounded(1, 100))]
    pub reps: usize,
    /// Where to write the JSON report.
    #[arg(long, default_value = "mtp-bench-batch.json", value_name = "PATH")]
    pub json: PathBuf,
}

/// How a variant serves the clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Variant {
    /// One request at a time, plain decode.
    SerialPlain,
    /// One request at a time, speculative.
    SerialMtp,
    /// A continuous batch, no speculation.
    BatchPlain,
    /// A continuous batch, every round may draft.
    BatchMtp,
    /// A continuous batch with the measured policy.
    BatchMeasured,
}

impl Variant {
    const ALL: [Variant; 5] = [
        Variant::SerialPlain,
        Variant::SerialMtp,
        Variant::BatchPlain,
        Variant::BatchMtp,
        Variant::BatchMeasured,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::SerialPlain => "serial-plain",
            Variant::SerialMtp => "serial-mtp",
            Variant::BatchPlain => "batch-plain",
            Variant::BatchMtp => "batch-mtp",
            Variant::BatchMeasured => "batch-measured",
        }
    }

    fn policy(self) -> Option<SpeculationPolicy> {
        match self {
            Variant::SerialPlain | Variant::SerialMtp => None,
            Variant::BatchPlain => Some(SpeculationPolicy::Never),
            Variant::BatchMtp => Some(SpeculationPolicy::Always),
            Variant::BatchMeasured => Some(SpeculationPolicy::Measured),
        }
    }
}

/// One request of a run.
#[derive(Debug, Clone)]
struct Job {
    index: usize,
    request: GenerateRequest,
}

/// When one request arrived, produced its first token and ended, and what it emitted.
#[derive(Debug, Clone)]
struct Timing {
    arrived: Instant,
    first: Option<Instant>,
    ended: Instant,
    tokens: Vec<u32>,
    drafted: usize,
    rounds: usize,
}

/// One variant at one concurrency.
#[derive(Debug, Clone, Serialize)]
struct Row {
    clients: usize,
    variant: Variant,
    /// Requests each client sent per run.
    requests_per_client: usize,
    /// Each repetition's wall time, in run order.
    runs_secs: Vec<f64>,
    /// Generated tokens per second over the run, all clients together (the median run's).
    total_tokens_per_sec: f64,
    /// The same for every repetition, in run order.
    runs_tokens_per_sec: Vec<f64>,
    /// Mean time from a request's arrival to its first token.
    mean_ttft_secs: f64,
    /// The largest such time.
    max_ttft_secs: f64,
    /// Mean decode rate of one stream after its first token.
    mean_stream_tokens_per_sec: f64,
    /// Drafted tokens per round (0: no speculation).
    mean_depth: f64,
    /// Every request's tokens equal the one-at-a-time plain run's for its prompt.
    identical: bool,
    /// What the batch's policy measured (batched variants).
    policy: Vec<SizeReport>,
    /// Target passes made and work items they served (batched variants).
    passes: usize,
    items: usize,
}

/// The JSON report.
#[derive(Debug, Serialize)]
struct Report {
    target: String,
    backend: String,
    prompts: usize,
    requests_per_client: usize,
    /// The least seconds per variant and concurrency asked for (0: none).
    seconds: usize,
    num_predict: usize,
    prefill_chunk: usize,
    reps: usize,
    rows: Vec<Row>,
}

/// Records when the first token came.
struct FirstToken<'a>(&'a mut Option<Instant>);

impl TokenSink for FirstToken<'_> {
    fn token(&mut self, _id: u32) -> SinkFlow {
        self.0.get_or_insert_with(Instant::now);
        SinkFlow::Continue
    }
}

/// Run one request, timing it from `arrived`.
fn timed<B: Backend>(
    engine: &Engine<'_, B>,
    job: &Job,
    arrived: Instant,
) -> anyhow::Result<Timing> {
    let mut first = None;
    let response = engine
        .generate(
            &job.request,
            &mut FirstToken(&mut first),
            &CancelToken::new(),
        )
        .with_context(|| format!("request {}", job.index))?;
    let (drafted, rounds) = response
        .mtp
        .as_ref()
        .map_or((0, 0), |m| (m.drafted, m.iterations));
    Ok(Timing {
        arrived,
        first,
        ended: Instant::now(),
        tokens: response.tokens,
        drafted,
        rounds,
    })
}

/// Run `mtp bench-batch`.
pub fn run(args: BatchBenchArgs) -> anyhow::Result<ExitCode> {
    let mut paths = args.model.paths()?;
    let proposers = args.proposers.choice(paths.drafter.as_deref())?;
    paths.drafter = proposers.mtp.clone();
    let prompts_file = args.prompts.clone().unwrap_or_else(default_prompts_file);
    let prompts = read_prompts(&prompts_file)?;
    let most = args.clients.iter().copied().max().unwrap_or(1);
    let backend = AnyBackend::open(&args.model)?;
    let report = with_backend!(backend, |b| {
        let context = args.num_predict.saturating_add(4096);
        let options = prepare_load(
            &b,
            &args.model,
            &paths,
            proposers.model.as_deref(),
            (context, most),
        )?;
        let pipeline = load_pipeline(b, &paths, &options)?
            .with_draft_model(proposers.model.as_deref(), &options)?
            .with_ngram(proposers.ngram);
        let ids = prompts
            .iter()
            .map(|p| pipeline.encode(p, PromptFormat::Raw))
            .collect::<Result<Vec<_>, _>>()?;
        let engine = pipeline.engine();
        let mut rows = Vec::new();
        // Warm up (caches, allocator, threads) on a short run of each kind.
        let warm = jobs_for(&ids, 2, args.num_predict.min(8), true);
        let mut scratch = PolicyMemory::new(SpeculationPolicy::Always);
        run_variant(
            &engine,
            Variant::SerialMtp,
            2,
            &warm,
            (args.prefill_chunk, &mut scratch),
        )?;
        run_variant(
            &engine,
            Variant::BatchMtp,
            2,
            &warm,
            (args.prefill_chunk, &mut scratch),
        )?;
        for &clients in &args.clients {
            let mut reference: Option<Vec<Vec<u32>>> = None;
            let mut runs: Vec<Vec<Row>> = vec![Vec::new(); Variant::ALL.len()];
            // The measured policy keeps what it learned from one repetition to the next, as a
            // server's batch keeps it for the worker's lifetime (repetition 0 learns from
            // nothing; every repetition's rate is in the report).
            let mut memories: Vec<PolicyMemory> = Variant::ALL
                .iter()
                .map(|v| PolicyMemory::new(v.policy().unwrap_or(SpeculationPolicy::Never)))
                .collect();
            let requests = match args.seconds {
                0 => args.requests,
                seconds => {
                    // Sized by the fastest variant, so the slower ones run longer still (with
                    // a margin: the calibration's single requests run slower than a long run).
                    let fastest = calibrate(&engine, &ids, clients, &args, &mut memories)?;
                    let tokens = 1.25 * seconds as f64 * fastest / args.reps as f64;
                    let per_client = (tokens / (clients * args.num_predict) as f64).ceil();
                    (per_client as usize).clamp(args.requests, 1000)
                }
            };
            // Repetitions interleaved, each in a rotated order, so drift in the machine's speed
            // spreads over every variant; the row reported is the median run.
            for rep in 0..args.reps {
                for k in 0..Variant::ALL.len() {
                    let v = (k + rep) % Variant::ALL.len();
                    let variant = Variant::ALL[v];
                    let speculate = !matches!(variant, Variant::SerialPlain | Variant::BatchPlain);
                    let jobs = jobs_for(&ids, clients * requests, args.num_predict, speculate);
                    let (timings, started, report) = run_variant(
                        &engine,
                        variant,
                        clients,
                        &jobs,
                        (args.prefill_chunk, &mut memories[v]),
                    )?;
                    let tokens: Vec<Vec<u32>> = timings.iter().map(|t| t.tokens.clone()).collect();
                    let identical = reference.as_ref().is_none_or(|r| *r == tokens);
                    reference.get_or_insert(tokens);
                    let row = summarise(clients, variant, &timings, started, identical, report);
                    console::err(&format!(
                        "{clients:>3} clients  rep {rep}  {:<15} {:>8.1} tok/s  ttft {:>6.3} s  stream {:>7.1} tok/s  depth {:.2}{}\n",
                        variant.name(),
                        row.total_tokens_per_sec,
                        row.mean_ttft_secs,
                        row.mean_stream_tokens_per_sec,
                        row.mean_depth,
                        if row.identical { "" } else { "  OUTPUT DIFFERS" },
                    ))?;
                    runs[v].push(row);
                }
            }
            for variant_runs in runs {
                rows.push(median_row(variant_runs));
            }
        }
        anyhow::Ok(Report {
            target: paths.target.display().to_string(),
            backend: pipeline.backend().name(),
            prompts: ids.len(),
            requests_per_client: args.requests,
            seconds: args.seconds,
            num_predict: args.num_predict,
            prefill_chunk: args.prefill_chunk,
            reps: args.reps,
            rows,
        })
    })?;
    console::out(&render(&report))?;
    let json = serde_json::to_string_pretty(&report).context("cannot serialise the report")?;
    std::fs::write(&args.json, json + "\n")
        .with_context(|| format!("cannot write {}", args.json.display()))?;
    console::err(&format!("wrote {}\n", args.json.display()))?;
    if report.rows.iter().any(|r| !r.identical) {
        console::err("error: a variant changed the greedy output\n")?;
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The fastest variant's rate (tokens/s) at `clients`, each client sending one request.
fn calibrate<B: Backend>(
    engine: &Engine<'_, B>,
    ids: &[Vec<u32>],
    clients: usize,
    args: &BatchBenchArgs,
    memories: &mut [PolicyMemory],
) -> anyhow::Result<f64> {
    let mut fastest: f64 = 0.0;
    for (v, variant) in Variant::ALL.into_iter().enumerate() {
        let speculate = !matches!(variant, Variant::SerialPlain | Variant::BatchPlain);
        let jobs = jobs_for(ids, clients, args.num_predict, speculate);
        let (timings, started, _) = run_variant(
            engine,
            variant,
            clients,
            &jobs,
            (args.prefill_chunk, &mut memories[v]),
        )?;
        let row = summarise(clients, variant, &timings, started, true, None);
        fastest = fastest.max(row.total_tokens_per_sec);
    }
    Ok(fastest.max(1e-9))
}

/// `count` greedy requests over the prompts in turn, EOS ignored, speculation on or off.
fn jobs_for(ids: &[Vec<u32>], count: usize, num_predict: usize, speculate: bool) -> Vec<Job> {
    (0..count)
        .map(|index| {
            let mut request = GenerateRequest::greedy(ids[index % ids.len()].clone(), num_predict);
            request.draft = DraftOverrides {
                enabled: Some(speculate),
                ..DraftOverrides::default()
            };
            Job { index, request }
        })
        .collect()
}

type Run = (Vec<Timing>, Instant, Option<batch::BatchReport>);

/// Serve `jobs` to `clients` closed-loop clients (job i belongs to client i mod clients).
fn run_variant<B: Backend>(
    engine: &Engine<'_, B>,
    variant: Variant,
    clients: usize,
    jobs: &[Job],
    (prefill_chunk, memory): (usize, &mut PolicyMemory),
) -> anyhow::Result<Run> {
    let started = Instant::now();
    if variant.policy().is_none() {
        // One at a time: job i arrives when its client's previous job ended.
        let mut timings: Vec<Timing> = Vec::with_capacity(jobs.len());
        for job in jobs {
            let arrived = match job.index.checked_sub(clients) {
                Some(previous) => timings[previous].ended,
                None => started,
            };
            timings.push(timed(engine, job, arrived)?);
        }
        return Ok((timings, started, None));
    }
    let options = BatchOptions {
        max_batch: clients,
        prefill_chunk,
        ..BatchOptions::default()
    };
    let results: Mutex<Vec<Option<anyhow::Result<Timing>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    let mut queue = jobs.iter().cloned();
    // A job is taken when a place frees, i.e. when one of the clients' previous jobs ended:
    // its arrival.
    let report = batch::serve_with_memory(
        engine,
        &options,
        memory,
        move || queue.next().map(|job| (job, Instant::now())),
        |engine, (job, arrived): (Job, Instant)| {
            let timing = timed(engine, &job, arrived);
            if let Ok(mut r) = results.lock() {
                r[job.index] = Some(timing);
            }
        },
    )?;
    let timings = results
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a batched request panicked"))?
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.unwrap_or_else(|| Err(anyhow::anyhow!("request {i} did not run"))))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((timings, started, Some(report)))
}

/// The run with the median total rate, carrying every run's rate and whether all were
/// identical.
fn median_row(mut runs: Vec<Row>) -> Row {
    let rates: Vec<f64> = runs.iter().map(|r| r.total_tokens_per_sec).collect();
    let secs: Vec<f64> = runs.iter().flat_map(|r| r.runs_secs.clone()).collect();
    let identical = runs.iter().all(|r| r.identical);
    runs.sort_by(|a, b| a.total_tokens_per_sec.total_cmp(&b.total_tokens_per_sec));
    let mut row = runs.swap_remove(runs.len() / 2);
    row.identical = identical;
    row.runs_tokens_per_sec = rates;
    row.runs_secs = secs;
    row
}

fn summarise(
    clients: usize,
    variant: Variant,
    timings: &[Timing],
    started: Instant,
    identical: bool,
    report: Option<batch::BatchReport>,
) -> Row {
    let n = timings.len().max(1) as f64;
    let end = timings.iter().map(|t| t.ended).max().unwrap_or(started);
    let total: usize = timings.iter().map(|t| t.tokens.len()).sum();
    let wall = end.duration_since(started).as_secs_f64().max(1e-9);
    let ttft: Vec<f64> = timings
        .iter()
        .map(|t| {
            t.first
                .unwrap_or(t.ended)
                .saturating_duration_since(t.arrived)
                .as_secs_f64()
        })
        .collect();
    let stream = timings
        .iter()
        .map(|t| {
            let first = t.first.unwrap_or(t.ended);
            let secs = t.ended.saturating_duration_since(first).as_secs_f64();
            if secs > 0.0 {
                t.tokens.len().saturating_sub(1) as f64 / secs
            } else {
                0.0
            }
        })
        .sum::<f64>()
        / n;
    let (drafted, rounds) = timings
        .iter()
        .fold((0, 0), |(d, r), t| (d + t.drafted, r + t.rounds));
    let (policy, passes, items) = match report {
        Some(r) => (r.sizes, r.counts.passes, r.counts.items),
        None => (Vec::new(), 0, 0),
    };
    Row {
        clients,
        variant,
        requests_per_client: timings.len() / clients.max(1),
        runs_secs: vec![wall],
        total_tokens_per_sec: total as f64 / wall,
        runs_tokens_per_sec: Vec::new(),
        mean_ttft_secs: ttft.iter().sum::<f64>() / n,
        max_ttft_secs: ttft.iter().copied().fold(0.0, f64::max),
        mean_stream_tokens_per_sec: stream,
        mean_depth: if rounds > 0 {
            drafted as f64 / rounds as f64
        } else {
            0.0
        },
        identical,
        policy,
        passes,
        items,
    }
}

/// The table: per concurrency, each variant's total rate and its ratio to one-at-a-time plain
/// decode, batched ÷ one-at-a-time, speculation on ÷ off, and the policy against the better of
/// the two batched choices.
fn render(report: &Report) -> String {
    let mut out = format!(
        "mtp bench-batch: {} on {} — at least {} requests per client (and {} s per variant and \
         concurrency), {} tokens each; median of {} interleaved runs\n\n",
        report.target,
        report.backend,
        report.requests_per_client,
        report.seconds,
        report.num_predict,
        report.reps
    );
    out.push_str(
        "clients  variant          tok/s    x serial-plain  ttft s  stream tok/s  depth  secs\n",
    );
    let mut clients: Vec<usize> = report.rows.iter().map(|r| r.clients).collect();
    clients.dedup();
    for c in clients {
        let rows: Vec<&Row> = report.rows.iter().filter(|r| r.clients == c).collect();
        let rate = |v: Variant| {
            rows.iter()
                .find(|r| r.variant == v)
                .map_or(0.0, |r| r.total_tokens_per_sec)
        };
        let base = rate(Variant::SerialPlain).max(1e-9);
        for r in &rows {
            out.push_str(&format!(
                "{c:>7}  {:<15} {:>7.1}  {:>14.2}  {:>6.3}  {:>12.1}  {:>5.2}  {:>4.0}\n",
                r.variant.name(),
                r.total_tokens_per_sec,
                r.total_tokens_per_sec / base,
                r.mean_ttft_secs,
                r.mean_stream_tokens_per_sec,
                r.mean_depth,
                r.runs_secs.iter().sum::<f64>()
            ));
        }
        let better = rate(Variant::BatchPlain)
            .max(rate(Variant::BatchMtp))
            .max(1e-9);
        out.push_str(&format!(
            "         batched/serial {:.2}x (plain) {:.2}x (mtp); batch speculation on/off {:.2}x; \
             measured policy / better choice {:.2}x\n",
            rate(Variant::BatchPlain) / base,
            rate(Variant::BatchMtp) / rate(Variant::SerialMtp).max(1e-9),
            rate(Variant::BatchMtp) / rate(Variant::BatchPlain).max(1e-9),
            rate(Variant::BatchMeasured) / better,
        ));
    }
    out
}
