//! `mtp generate`: resolve the models, pick the backend, generate, print.

use std::io::{IsTerminal, Read};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};
use mtp_core::engine::{CancelToken, GenerateRequest, SinkFlow};
use mtp_core::options::LogprobsRequest;
use mtp_core::Backend;
use runner::loading::LoadOptions;
use runner::proposers::ProposerChoice;
use runner::{ModelPaths, PromptFormat};

use super::args::GenerateArgs;
use super::backend::{with_backend, AnyBackend};
use super::output::{print_json, summary, TextStream};
use super::progress::load_pipeline;

/// The exit status after Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: u8 = 130;

/// Run `mtp generate`.
pub fn run(args: GenerateArgs) -> anyhow::Result<ExitCode> {
    let sampling = args.sampling.options();
    sampling.validate().context("invalid sampling option")?;
    let backend = AnyBackend::open(&args.model)?;
    let prompt = read_prompt(args.prompt.as_deref())?;
    let (paths, proposers) = model_paths(&args)?;
    let options = LoadOptions {
        dtype: args.model.dtype.into(),
    };
    with_backend!(backend, |b| run_on(
        b, &args, &prompt, &paths, &proposers, &options
    ))
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
    let choice = if args.draft.no_draft {
        ProposerChoice {
            mtp: None,
            ngram: None,
        }
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
    args: &GenerateArgs,
    prompt: &str,
    paths: &ModelPaths,
    proposers: &ProposerChoice,
    options: &LoadOptions,
) -> anyhow::Result<ExitCode> {
    let backend_name = backend.name();
    let pipeline = load_pipeline(backend, paths, options)?.with_ngram(proposers.ngram);

    let format = if args.length.chat {
        PromptFormat::Chat
    } else {
        PromptFormat::Raw
    };
    let prompt_ids = pipeline.encode(prompt, format)?;
    let request = GenerateRequest {
        prompt: prompt_ids.clone(),
        sampling: args.sampling.options(),
        num_predict: args.length.num_predict,
        eos: eos_ids(args, pipeline.tokenizer().eos_ids()),
        draft: args.draft.overrides(),
        logprobs: LogprobsRequest::None,
    };
    let mode = pipeline
        .engine()
        .decode_mode(&request)
        .context("invalid draft option")?;
    tracing::info!(backend = %backend_name, prompt_tokens = prompt_ids.len(), ?mode, "generating");

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
        print_json(&generation, &prompt_ids, &backend_name).context("cannot write the JSON")?;
    } else {
        stream.finish();
    }
    eprint!("{}", summary(&generation.response, &backend_name));
    if interrupted.load(Ordering::SeqCst) {
        eprintln!("interrupted (Ctrl-C): the output above is partial");
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    Ok(ExitCode::SUCCESS)
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
