//! `mtp serve`: load the pair on a worker thread, then serve the ollama and OpenAI APIs.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use mtp_core::engine::batch::{BatchOptions, SpeculationPolicy};
use mtp_core::engine::PrefixReuse;
use runner::proposers::ProposerChoice;
use runner::server::{self, AppState, ServerConfig, WorkerEngine, WorkerOptions};

use super::args::{bounded, DraftArgs, ModelArgs};
use super::backend::{with_backend, AnyBackend};
use super::load_plan::prepare_load;
use super::progress::load_pipeline;
use super::proposer_args::ProposerArgs;

/// `mtp serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where the models are and what runs them.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Speculative decoding (applies to every request).
    #[command(flatten)]
    pub draft: DraftArgs,
    /// What drafts (as for `generate`).
    #[command(flatten)]
    pub proposers: ProposerArgs,
    /// Server options.
    #[command(flatten)]
    pub server: ServerArgs,
}

fn seconds(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e7 => Ok(Duration::from_secs_f64(v)),
        Ok(_) => Err("must be a number of seconds > 0".to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Where the server listens and how it treats requests.
#[derive(Debug, Args)]
#[command(next_help_heading = "Server")]
pub struct ServerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one; the address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// The model name requests must use [default: the target directory's name].
    #[arg(long)]
    pub name: Option<String>,
    /// Require `Authorization: Bearer KEY` on every request. On the command line the key is
    /// visible to every user of the machine (`ps`, `/proc/*/cmdline`): prefer --api-key-file or
    /// the MTP_API_KEY environment variable [default: no key].
    #[arg(long, value_name = "KEY", env = "MTP_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Read the API key from the first line of FILE (the rest of the file is ignored; at most
    /// 4 KiB are read).
    #[arg(long, value_name = "FILE", conflicts_with = "api_key")]
    pub api_key_file: Option<std::path::PathBuf>,
    /// Requests that may wait for the engine; more get 503 with Retry-After.
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = bounded(1, 4096))]
    pub queue: usize,
    /// Requests generated at once: continuous batching, each target pass serving every running
    /// request (new ones join between passes); 1 serves one request at a time. Each holds its
    /// own KV caches (the memory check counts them).
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = bounded(1, 256))]
    pub parallel: usize,
    /// The most prompt tokens one request evaluates per batched pass (longer prompts are
    /// evaluated in chunks, so running streams keep flowing).
    #[arg(long, default_value_t = 128, value_name = "N", value_parser = bounded(1, 1 << 16))]
    pub prefill_chunk: usize,
    /// With --parallel above 1: whether batched requests speculate. `measured` predicts, at
    /// each batch size, tokens per second with speculation on and off from a cost model of the
    /// batch's own passes and runs the better.
    #[arg(long, value_enum, default_value_t = BatchSpeculation::Measured)]
    pub batch_speculation: BatchSpeculation,
    /// Evaluate every prompt from the start instead of keeping the last request's KV caches
    /// and reusing the prefix a new prompt shares with them (a chat turn resends the history)
    /// [default: reuse on].
    #[arg(long)]
    pub no_prefix_reuse: bool,
    /// End a request (queue wait included) after this many seconds.
    #[arg(long, default_value = "600", value_name = "SECS", value_parser = seconds)]
    pub request_timeout: Duration,
    /// Connections open at once; more wait until one closes.
    #[arg(long, default_value_t = 512, value_name = "N", value_parser = bounded(1, 65536))]
    pub max_connections: usize,
    /// Disconnect a client that takes longer than this to send a request's headers, or pauses
    /// longer than this within its body.
    #[arg(long, default_value = "10", value_name = "SECS", value_parser = seconds)]
    pub read_timeout: Duration,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 4 << 20, value_name = "BYTES", value_parser = bounded(1024, 1 << 30))]
    pub max_body: usize,
    /// Most tokens one request may generate (larger num_predict / max_tokens are clamped).
    #[arg(long, default_value_t = 8192, value_name = "N", value_parser = bounded(1, 1 << 20))]
    pub max_tokens: usize,
    /// After SIGTERM / Ctrl-C, seconds in-flight requests may still run before they are
    /// cancelled.
    #[arg(long, default_value = "10", value_name = "SECS", value_parser = seconds)]
    pub shutdown_grace: Duration,
}

/// `--batch-speculation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BatchSpeculation {
    /// Predict on and off at each batch size from a cost model of the batch's passes and run
    /// the better.
    Measured,
    /// Always speculate (each request's schedule picks the depth).
    Always,
    /// Never speculate in a batch.
    Never,
}

impl BatchSpeculation {
    fn policy(self) -> SpeculationPolicy {
        match self {
            Self::Measured => SpeculationPolicy::Measured,
            Self::Always => SpeculationPolicy::Always,
            Self::Never => SpeculationPolicy::Never,
        }
    }
}

/// Run `mtp serve`.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Before the models load: a bad key file is said at once.
    let key = api_key(&args.server)?;
    let mut paths = args.model.paths()?;
    let choice = if args.draft.no_draft {
        ProposerChoice::none()
    } else {
        args.proposers.choice(paths.drafter.as_deref())?
    };
    paths.drafter = choice.mtp.clone();
    let (ngram, draft_model) = (choice.ngram, choice.model.clone());
    let name = match &args.server.name {
        Some(name) => name.clone(),
        None => model_name(&paths.target),
    };
    let addr: SocketAddr = format!("{}:{}", args.server.host, args.server.port)
        .parse()
        .or_else(|_| {
            use std::net::ToSocketAddrs;
            (args.server.host.as_str(), args.server.port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or(())
        })
        .map_err(|_| anyhow::anyhow!("cannot resolve --host {}", args.server.host))?;
    let backend_args: ModelArgs = args.model;
    let parallel = args.server.parallel;
    let load_paths = paths.clone();
    // The running sequences hold their caches, and prefix reuse keeps up to as many ended
    // requests' caches besides.
    let cached_sequences = if args.server.no_prefix_reuse {
        parallel
    } else {
        2 * parallel
    };
    let worker = WorkerEngine::spawn(
        &paths,
        WorkerOptions {
            prefix_reuse: if args.server.no_prefix_reuse {
                PrefixReuse::Off
            } else {
                PrefixReuse::On
            },
            batch: BatchOptions {
                max_batch: parallel,
                prefill_chunk: args.server.prefill_chunk,
                policy: args.server.batch_speculation.policy(),
            },
            ..WorkerOptions::from_process_env(name.clone(), args.server.queue)
        },
        move |seat| match AnyBackend::open(&backend_args) {
            Err(e) => seat.fail(e.into()),
            // The memory check counts the KV cache at the model's whole context (the estimate
            // clamps to it): any request may use all of it; one per running sequence and one
            // per request kept for prefix reuse.
            Ok(backend) => with_backend!(backend, |b| {
                match prepare_load(
                    &b,
                    &backend_args,
                    &load_paths,
                    draft_model.as_deref(),
                    (usize::MAX, cached_sequences),
                ) {
                    Err(e) => seat.fail(e.into()),
                    Ok(options) => seat.run(
                        load_pipeline(b, &load_paths, &options)
                            .and_then(|p| p.with_draft_model(draft_model.as_deref(), &options))
                            .map(|p| p.with_ngram(ngram))
                            .map_err(Into::into),
                    ),
                }
            }),
        },
    )
    .map_err(|e| anyhow::anyhow!(e))
    .context("cannot start the model worker")?;
    let config = ServerConfig {
        api_key: key,
        max_body_bytes: args.server.max_body,
        max_tokens: args.server.max_tokens,
        request_timeout: Some(args.server.request_timeout),
        max_connections: args.server.max_connections,
        read_timeout: args.server.read_timeout,
        draft: args.draft.overrides(),
        shutdown_grace: args.server.shutdown_grace,
        ..ServerConfig::default()
    };
    let state = AppState::new(std::sync::Arc::new(worker), config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr().context("no local address")?;
        eprintln!(
            "mtp serve: model `{name}` on http://{local} (ollama /api/*, OpenAI /v1/*, /metrics)"
        );
        server::serve(listener, state, server::shutdown_signal())
            .await
            .context("the server failed")
    })?;
    eprintln!("mtp serve: stopped");
    Ok(ExitCode::SUCCESS)
}

/// The directory's name (`models/default/target` is named after its parent: `default`).
fn model_name(target: &std::path::Path) -> String {
    let canonical = target
        .canonicalize()
        .unwrap_or_else(|_| target.to_path_buf());
    let base = canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_string());
    if base == "target" {
        if let Some(parent) = canonical.parent().and_then(|p| p.file_name()) {
            return parent.to_string_lossy().into_owned();
        }
    }
    base
}

/// The largest API key file read.
const MAX_API_KEY_FILE: u64 = 4096;

/// The API key from `--api-key` / `MTP_API_KEY` or the first line of `--api-key-file`; `None`
/// when neither is given. An empty key (or key file) is refused: it would look like protection
/// and give none.
fn api_key(args: &ServerArgs) -> anyhow::Result<Option<String>> {
    let key = match (&args.api_key, &args.api_key_file) {
        (Some(key), _) => key.clone(),
        (None, Some(path)) => {
            let size = std::fs::metadata(path)
                .with_context(|| format!("cannot read the API key file {}", path.display()))?
                .len();
            if size > MAX_API_KEY_FILE {
                anyhow::bail!(
                    "the API key file {} has {size} bytes; a key file may have at most \
                     {MAX_API_KEY_FILE}",
                    path.display()
                );
            }
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the API key file {}", path.display()))?;
            text.lines().next().unwrap_or_default().trim().to_string()
        }
        (None, None) => return Ok(None),
    };
    if key.is_empty() {
        anyhow::bail!("the API key is empty: give a non-empty key, or none to serve without one");
    }
    Ok(Some(key))
}
