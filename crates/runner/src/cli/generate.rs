//! `mtp generate`: resolve the models, pick the backend, generate, print.

use std::io::{IsTerminal, Read};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};
use mtp_core::engine::{CancelToken, GenerateRequest, SinkFlow};
use mtp_core::model::TargetModel;
use mtp_core::options::{DecodeMode, LogprobsRequest};
use mtp_core::sampling::SamplerOptions;
use mtp_core::schedule::ScheduleKind;
use mtp_core::Backend;
use runner::loading::LoadOptions;
use runner::logprobs::TokenLogprob;
use runner::proposers::ProposerChoice;
use runner::sampling_defaults::sampling_defaults;
use runner::schedule_store::{cpu_identity, file_identity, ScheduleStore};
use runner::tokenizer::{ChatMessage, ChatOptions};
use runner::{ModelPaths, PromptFormat};

use super::args::GenerateArgs;
use super::backend::{with_backend, AnyBackend};
use super::console;
use super::load_plan::prepare_load;
use super::output::{print_json, summary, RunInfo, TextStream};
use super::progress::load_pipeline;

/// The exit status after Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: u8 = 130;

/// Run `mtp generate`.
pub fn run(args: GenerateArgs) -> anyhow::Result<ExitCode> {
    // The flags alone first, so that a bad value is reported before anything is loaded.
    args.sampling
        .options()
        .validate()
        .context("invalid sampling option")?;
    let backend = AnyBackend::open(&args.model)?;
    let prompt = read_prompt(args.prompt.as_deref())?;
    let (paths, proposers) = model_paths(&args)?;
    let defaults = sampling_defaults(&paths.target)?;
    let sampling = args.sampling.options_over(&defaults.options);
    sampling.validate().context("invalid sampling option")?;
    tracing::info!(source = %defaults.source, ?sampling, "sampling");
    // The context the run needs at most: no prompt has more tokens than bytes (+ BOS).
    let context = prompt.len().saturating_add(1 + args.length.num_predict);
    let run = Inputs {
        args: &args,
        prompt: &prompt,
        paths: &paths,
        proposers: &proposers,
        sampling,
    };
    with_backend!(backend, |b| {
        let options = prepare_load(
            &b,
            &args.model,
            &paths,
            proposers.model.as_deref(),
            (context, 1),
        )?;
        run_on(b, &run, &options)
    })
}

/// What [`run_on`] works from.
struct Inputs<'a> {
    args: &'a GenerateArgs,
    prompt: &'a str,
    paths: &'a ModelPaths,
    proposers: &'a ProposerChoice,
    /// The sampling options: the flags over the model's defaults (no seed drawn yet).
    sampling: SamplerOptions,
}

/// The prompt from the argument, else from standard input (one trailing newline dropped).
fn read_prompt(arg: Option<&str>) -> anyhow::Result<String> {
    let text = match arg {
        Some(text) => text.to_string(),
        None => {
            let mut stdin = std::io::stdin();
            if stdin.is_terminal() {
                bail!("no prompt: pass it as an argument or pipe it on standard input");
            }
            let mut text = String::new();
            stdin
                .read_to_string(&mut text)
                .context("cannot read the prompt from standard input")?;
            let trimmed = text
                .strip_suffix("\r\n")
                .or_else(|| text.strip_suffix('\n'))
                .unwrap_or(&text);
            trimmed.to_string()
        }
    };
    if text.trim().is_empty() {
        bail!("the prompt is empty: give some text");
    }
    Ok(text)
}

/// The pair of `--model`/`--draft` (or the default pair) and the proposers of
/// `--draft-kind` (detected from the draft directory by default); `--no-draft` drops them.
fn model_paths(args: &GenerateArgs) -> anyhow::Result<(ModelPaths, ProposerChoice)> {
    let mut paths = args.model.paths()?;
    super::model_check::check_paths(&paths)?;
    let choice = if args.draft.no_draft {
        ProposerChoice::none()
    } else {
        args.proposers.choice(paths.drafter.as_deref())?
    };
    paths.drafter = choice.mtp.clone();
    if !args.draft.no_draft && !choice.is_speculative() {
        tracing::info!("no --draft: plain decoding with the target alone");
    }
    Ok((paths, choice))
}

fn run_on<B: Backend>(
    backend: B,
    inputs: &Inputs<'_>,
    options: &LoadOptions,
) -> anyhow::Result<ExitCode> {
    let args = inputs.args;
    let backend_name = backend.name();
    let pipeline = load_pipeline(backend, inputs.paths, options)?
        .with_draft_model(inputs.proposers.model.as_deref(), options)?
        .with_ngram(inputs.proposers.ngram);

    let prompt_ids = if args.length.chat {
        let mut messages = Vec::new();
        if let Some(system) = &args.length.system {
            messages.push(ChatMessage::text("system", system));
        }
        messages.push(ChatMessage::text("user", inputs.prompt));
        pipeline.encode_chat(&messages, &ChatOptions::default())?
    } else {
        pipeline.encode(inputs.prompt, PromptFormat::Raw)?
    };
    check_eos_flags(&args.length.eos, pipeline.target().vocab_size())?;
    let mut sampling = inputs.sampling.clone();
    if !sampling.is_greedy() && sampling.seed.is_none() {
        sampling.seed = Some(random_seed());
    }
    let request = GenerateRequest {
        prompt: prompt_ids.clone(),
        sampling,
        num_predict: args.length.num_predict,
        eos: eos_ids(args, pipeline.tokenizer().eos_ids()),
        draft: args.draft.overrides(),
        logprobs: match args.output.logprobs {
            Some(top) => LogprobsRequest::Top(top),
            None => LogprobsRequest::None,
        },
        constraint: match args.structured.output_format()? {
            Some(format) => Some(pipeline.constraint(&format)?),
            None => None,
        },
    };
    let mode = pipeline
        .engine()
        .decode_mode(&request)
        .context("invalid draft option")?;
    let sampled = (!request.sampling.is_greedy()).then_some(&request.sampling);
    let run = RunInfo {
        backend: &backend_name,
        seed: sampled.and_then(|o| o.seed),
        sampled,
    };
    tracing::info!(backend = %backend_name, prompt_tokens = prompt_ids.len(), ?mode, "generating");

    let store = keeps_schedule(&pipeline, &request, mode)?.then(|| schedule_store(inputs, options));
    if let Some(store) = &store {
        if !args.forget_schedule {
            match store.load_into(pipeline.schedule_memory()) {
                Ok(taken) => {
                    tracing::info!(taken, path = %store.path().display(), "schedule state")
                }
                Err(e) => tracing::warn!("starting the draft schedule afresh: {e}"),
            }
        }
    }

    let cancel = CancelToken::new();
    let interrupted = install_ctrl_c(&cancel);
    let mut stream = TextStream::new();
    let json = args.output.json;
    let generation = pipeline.generate_text(
        &request,
        &mut |piece| {
            if json {
                SinkFlow::Continue
            } else {
                stream.piece(piece)
            }
        },
        &cancel,
    )?;
    if json {
        let logprobs = args.output.logprobs.map(|_| {
            let tokenizer = pipeline.tokenizer();
            let entries = &generation.response.logprobs;
            entries
                .iter()
                .map(|lp| TokenLogprob::from_engine(lp, tokenizer))
                .collect::<Vec<_>>()
        });
        print_json(&generation, &prompt_ids, &run, logprobs.as_deref())
            .context("cannot write the JSON")?;
    } else {
        stream.finish().context("cannot write the text")?;
    }
    if let Some(store) = &store {
        if let Err(e) = store.save(pipeline.schedule_memory()) {
            tracing::warn!("the draft schedule's state is not kept for the next run: {e}");
        }
    }
    console::err(&summary(&generation.response, &run))?;
    if interrupted.load(Ordering::SeqCst) {
        console::err("interrupted (Ctrl-C): the output above is partial\n")?;
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--eos` ids must name tokens of the model.
fn check_eos_flags(eos: &[u32], vocab: usize) -> anyhow::Result<()> {
    if let Some(id) = eos.iter().find(|&&id| id as usize >= vocab) {
        bail!(
            "--eos {id} is outside the model's vocabulary of {vocab} tokens (ids 0 to {})",
            vocab.saturating_sub(1)
        );
    }
    Ok(())
}

/// A seed for a sampled run that was given none: fresh per process (the standard library's
/// hasher keys come from the operating system's randomness), printed in the statistics so the
/// run can be repeated with `--seed`.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

fn eos_ids(args: &GenerateArgs, model_eos: &[u32]) -> Vec<u32> {
    if args.length.ignore_eos {
        return Vec::new();
    }
    if !args.length.eos.is_empty() {
        return args.length.eos.clone();
    }
    if model_eos.is_empty() {
        tracing::warn!("the model names no EOS token: generation stops at --num-predict only");
    }
    model_eos.to_vec()
}

/// Ctrl-C cancels the generation (the engine stops at its next round and the partial statistics
/// are printed); a second Ctrl-C exits at once. Returns whether Ctrl-C was pressed.
fn install_ctrl_c(cancel: &CancelToken) -> Arc<AtomicBool> {
    let pressed = Arc::new(AtomicBool::new(false));
    let flag = pressed.clone();
    let cancel = cancel.clone();
    let installed = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(i32::from(EXIT_INTERRUPTED));
        }
        cancel.cancel();
    });
    if let Err(e) = installed {
        tracing::warn!(error = %e, "cannot install the Ctrl-C handler");
    }
    pressed
}

/// Whether `request`, decoded in `mode`, runs the adaptive schedule (speculation on), whose
/// learned state is kept between runs.
fn keeps_schedule<B: Backend>(
    pipeline: &runner::Pipeline<B>,
    request: &GenerateRequest,
    mode: DecodeMode,
) -> anyhow::Result<bool> {
    let options = pipeline
        .engine()
        .mtp_options(request)
        .context("invalid draft option")?;
    Ok(mode != DecodeMode::Plain && options.schedule == ScheduleKind::Adaptive)
}

/// The store of this run's setup: the models, proposers, backend, load options, threads, CPU
/// and version (see [`ScheduleStore`]).
fn schedule_store(inputs: &Inputs<'_>, options: &LoadOptions) -> ScheduleStore {
    let args = inputs.args;
    let mut setup = vec![
        format!("mtp {}", env!("CARGO_PKG_VERSION")),
        format!("target {}", file_identity(&inputs.paths.target)),
        format!(
            "backend {:?} device {:?}",
            args.model.backend, args.model.device
        ),
        format!("load {options:?}"),
        format!("threads {:?}", args.model.threads),
        format!("cpu {}", cpu_identity()),
    ];
    if let Some(drafter) = &inputs.paths.drafter {
        setup.push(format!("assistant {}", file_identity(drafter)));
    }
    if let Some(centroids) = &inputs.paths.draft_centroids {
        setup.push(format!("centroids {}", file_identity(centroids)));
    }
    if let Some(model) = &inputs.proposers.model {
        setup.push(format!("draft model {}", file_identity(model)));
    }
    if let Some(ngram) = inputs.proposers.ngram {
        setup.push(format!("prompt lookup {ngram:?}"));
    }
    ScheduleStore::in_cache(setup)
}
