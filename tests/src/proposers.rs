//! Speculation with teeth on the backend: drafters that are right a known share of the time,
//! whose accepted counts the suite predicts exactly, and prompt lookup.
//!
//! A [`HiddenKeyedDrafter`] is right at a position with a seeded probability, but only when
//! the engine conditions it on the target hidden at the last kept position: the suite
//! replays the rounds on the host (the constant schedule makes each round's depth known) and
//! demands the engine's drafted and accepted counts equal the replay's, and its tokens plain
//! greedy's. With depth 4 and a share of 0.5–1, most rounds keep several positions, so a
//! window-2 sliding layer replays several kept positions through its rotating cache.

use mtp_core::engine::{CancelToken, DiscardSink, Engine, EnvLookup, GenerateRequest, Response};
use mtp_core::options::{DraftOverrides, ValidationMode};
use mtp_core::proposer::{NgramOptions, NgramProposer};
use mtp_core::schedule::ScheduleKind;
use mtp_core::testing::{HiddenKeyedDrafter, ScriptedDrafter, TinyConfig, TinyTarget};
use mtp_core::Backend;

use crate::engine::models;
use crate::error::{backend_err, SuiteError};

/// Draft depth of every round.
const DEPTH: usize = 4;
/// Tokens generated.
const GENERATED: usize = 24;

fn no_env() -> EnvLookup {
    std::sync::Arc::new(|_| None)
}

fn overrides(validation: ValidationMode) -> DraftOverrides {
    DraftOverrides {
        initial_draft_tokens: Some(DEPTH),
        max_draft_tokens: Some(DEPTH),
        schedule: Some(ScheduleKind::Constant),
        validation: Some(validation),
        enabled: None,
    }
}

/// `(drafted, accepted)` of a constant-depth run whose drafts are `script`'s guesses, replayed
/// on the host: a round at `current`'s position `p` drafts `min(DEPTH, remaining − 1)`
/// guesses for positions `p + 1 ..` and accepts the leading ones that equal the sequence.
pub fn replay(script: &ScriptedDrafter, prompt: usize, generated: usize) -> (usize, usize) {
    let (mut drafted, mut accepted) = (0, 0);
    let (mut position, mut emitted) = (prompt, 1);
    while emitted < generated {
        let depth = DEPTH.min(generated - emitted - 1);
        let right = (0..depth)
            .take_while(|&j| {
                let at = position + 1 + j;
                script.guess(at, position) == script.sequence[at]
            })
            .count();
        drafted += depth;
        accepted += right;
        emitted += right + 1;
        position += right + 1;
    }
    (drafted, accepted)
}

/// Plain greedy decode of `request`.
fn plain<X: Backend>(
    b: &X,
    target: &TinyTarget<X>,
    request: &GenerateRequest,
) -> Result<Response, X::Error> {
    Engine::new(b, target).with_env(no_env()).generate(
        request,
        &mut DiscardSink,
        &CancelToken::new(),
    )
}

/// What one keyed run gives.
struct KeyedRun {
    /// Plain greedy's tokens.
    plain: Vec<u32>,
    /// The speculative response.
    out: Response,
    /// `(drafted, accepted)` of the host replay.
    expected: (usize, usize),
}

/// One keyed run: the plain tokens, the speculative response, and the replayed counts.
fn keyed_run<X: Backend>(
    b: &X,
    config: &TinyConfig,
    prompt: &[u32],
    accuracy: f64,
    validation: ValidationMode,
) -> Result<KeyedRun, X::Error> {
    let target = TinyTarget::new(b, config.clone())?;
    let mut request = GenerateRequest::greedy(prompt.to_vec(), GENERATED);
    let reference = plain(b, &target, &request)?;
    let mut sequence = prompt.to_vec();
    sequence.extend(&reference.tokens);
    let script = ScriptedDrafter {
        sequence,
        accuracy,
        right_steps: None,
        seed: config.seed + 3,
        vocab: config.vocab,
        hidden: config.hidden,
        confidence: 8.0,
    };
    let expected = replay(&script, prompt.len(), reference.tokens.len());
    let drafter = HiddenKeyedDrafter::new(b, &target, script)?;
    request.draft = overrides(validation);
    let out = Engine::new(b, &target)
        .with_drafter(&drafter)
        .with_env(no_env())
        .generate(&request, &mut DiscardSink, &CancelToken::new())?;
    Ok(KeyedRun {
        plain: reference.tokens,
        out,
        expected,
    })
}

const PROMPTS: [&[u32]; 2] = [&[1, 2, 3, 4, 5], &[7, 30, 2, 2, 9, 17, 0, 3, 12]];

/// Drafters right 50 %, 80 % and 100 % of the time (when given the right hidden): the engine
/// emits plain greedy's tokens and accepts exactly the replayed share of drafts, under batched
/// and serial validation, on every tiny model (a window-2 sliding layer and serial-only caches
/// among them); overall at least 40 % of the drafts are accepted.
pub fn scripted_share_is_accepted<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let (mut drafted, mut accepted) = (0, 0);
    for (config, _) in models() {
        for prompt in PROMPTS {
            for accuracy in [0.5, 0.8, 1.0] {
                for validation in [ValidationMode::Batched, ValidationMode::Serial] {
                    let what = || {
                        format!(
                            "keyed drafter, model seed {}, accuracy {accuracy}, {validation:?}",
                            config.seed
                        )
                    };
                    let KeyedRun {
                        plain,
                        out,
                        expected,
                    } = backend_err(
                        backend,
                        what,
                        keyed_run(backend, &config, prompt, accuracy, validation),
                    )?;
                    let stats = out.mtp.clone().unwrap_or_default();
                    let mismatch = |detail: String| SuiteError::Mismatch {
                        backend: backend.name(),
                        check: what(),
                        detail,
                    };
                    if out.tokens != plain {
                        return Err(mismatch(format!(
                            "prompt {prompt:?}: {:?} vs plain {plain:?}",
                            out.tokens
                        )));
                    }
                    if (stats.drafted, stats.accepted) != expected {
                        return Err(mismatch(format!(
                            "prompt {prompt:?}: drafted/accepted {:?}, the replay gives \
                             {expected:?} (a wrong hidden slice or cache replay)",
                            (stats.drafted, stats.accepted)
                        )));
                    }
                    drafted += stats.drafted;
                    accepted += stats.accepted;
                }
            }
        }
    }
    if accepted * 10 < drafted * 4 {
        return Err(SuiteError::Mismatch {
            backend: backend.name(),
            check: "share of accepted keyed drafts".into(),
            detail: format!("{accepted} of {drafted}"),
        });
    }
    Ok(())
}

/// Prompt lookup on prompts that repeat themselves: greedy speculation emits plain greedy's
/// tokens (batched and serial validation) and gets drafts accepted.
pub fn prompt_lookup_matches_plain<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let prompts: [&[u32]; 3] = [
        &[4, 9, 4, 9, 4, 9, 4],
        &[1, 2, 3, 5, 8, 1, 2, 3, 5, 8, 1, 2],
        &[6, 6, 6, 6, 6],
    ];
    let mut accepted = 0;
    for (config, _) in models() {
        for prompt in prompts {
            for validation in [ValidationMode::Batched, ValidationMode::Serial] {
                let what = || format!("prompt lookup, model seed {}, {validation:?}", config.seed);
                let run = || -> Result<(Vec<u32>, Response), B::Error> {
                    let target = TinyTarget::new(backend, config.clone())?;
                    let mut request = GenerateRequest::greedy(prompt.to_vec(), GENERATED);
                    let reference = plain(backend, &target, &request)?;
                    request.draft = overrides(validation);
                    let ngram = NgramProposer::new(NgramOptions::new(1, 3)?);
                    let out = Engine::new(backend, &target)
                        .with_proposer(&ngram)
                        .with_env(no_env())
                        .generate(&request, &mut DiscardSink, &CancelToken::new())?;
                    Ok((reference.tokens, out))
                };
                let (plain, out) = backend_err(backend, what, run())?;
                if out.tokens != plain {
                    return Err(SuiteError::Mismatch {
                        backend: backend.name(),
                        check: what(),
                        detail: format!("prompt {prompt:?}: {:?} vs plain {plain:?}", out.tokens),
                    });
                }
                accepted += out.mtp.map_or(0, |s| s.accepted);
            }
        }
    }
    if accepted == 0 {
        return Err(SuiteError::Mismatch {
            backend: backend.name(),
            check: "prompt lookup acceptance".into(),
            detail: "no draft was ever accepted".into(),
        });
    }
    Ok(())
}
