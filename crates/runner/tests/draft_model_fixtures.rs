//! The draft-model proposer against HF transformers' assisted generation with a draft model as
//! `assistant_model` (tests/fixtures/gemma4/draft_model_assisted.json, recorded by
//! tools/gemma4_fixtures/record_draft_model.py): greedy output identical to HF's, on the
//! reference backend and candle-cpu, alone and beside prompt lookup (several proposers at once,
//! counted per proposer); and a draft model with another vocabulary is refused.

use std::path::{Path, PathBuf};

use mtp_core::engine::{CancelToken, DiscardSink, GenerateRequest};
use mtp_core::options::DraftOverrides;
use mtp_core::proposer::{NgramOptions, ProposerKind};
use mtp_core::Backend;
use runner::{ModelPaths, Pipeline, PipelineError};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    target: String,
    draft_model: String,
    prompt_ids: Vec<u32>,
    max_new_tokens: usize,
    num_assistant_tokens: usize,
    assisted_ids: Vec<u32>,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma4")
}

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(fixtures().join("draft_model_assisted.json"))
        .expect("the fixture is committed");
    let fixture: Fixture = serde_json::from_str(&text).expect("fixture JSON");
    assert!(fixture.cases.len() >= 6);
    fixture.cases
}

fn pipeline<B: Backend>(backend: B, case: &Case, ngram: Option<NgramOptions>) -> Pipeline<B> {
    let paths = ModelPaths {
        target: fixtures().join(&case.target),
        drafter: None,
        draft_centroids: None,
        tokenizer: None,
        chat_template: None,
    };
    let options = Default::default();
    Pipeline::load(backend, &paths, &options)
        .expect("the target loads")
        .with_draft_model(Some(&fixtures().join(&case.draft_model)), &options)
        .expect("the draft model loads")
        .with_ngram(ngram)
}

fn check<B: Backend>(backend: impl Fn() -> B) {
    let mut drafted = 0;
    let mut accepted = 0;
    let mut lookup_rounds = 0;
    for case in cases() {
        let mut request = GenerateRequest::greedy(case.prompt_ids.clone(), case.max_new_tokens);
        request.draft = DraftOverrides::constant(case.num_assistant_tokens);
        let label = format!("{} drafted by {}", case.target, case.draft_model);
        // Alone, then beside prompt lookup.
        for ngram in [None, Some(NgramOptions::default())] {
            let pipeline = pipeline(backend(), &case, ngram);
            let out = pipeline
                .generate(&request, &mut DiscardSink, &CancelToken::new())
                .expect("generates");
            assert_eq!(out.tokens, case.assisted_ids, "{label}, ngram {ngram:?}");
            let stats = out.mtp.expect("speculative");
            assert_eq!(stats.proposer, ProposerKind::Model);
            let kinds: Vec<ProposerKind> = stats.per_proposer.iter().map(|p| p.proposer).collect();
            let rounds: usize = stats.per_proposer.iter().map(|p| p.rounds).sum();
            assert_eq!(
                rounds,
                stats.batched_rounds + stats.serial_rounds,
                "every drafting round is one proposer's"
            );
            let counted: usize = stats.per_proposer.iter().map(|p| p.accepted).sum();
            assert_eq!(counted, stats.accepted);
            match ngram {
                None => {
                    assert_eq!(kinds, [ProposerKind::Model]);
                    drafted += stats.drafted;
                    accepted += stats.accepted;
                }
                Some(_) => {
                    assert_eq!(kinds, [ProposerKind::Model, ProposerKind::Ngram]);
                    lookup_rounds += stats.per_proposer[1].rounds;
                }
            }
        }
    }
    // Random tiny models agree now and then: some drafts are accepted, many rejected.
    assert!(
        accepted > 0 && accepted < drafted,
        "{accepted} of {drafted}"
    );
    // Prompt lookup drafted some rounds (the self-repeating prompts).
    assert!(lookup_rounds > 0, "prompt lookup never drafted");
}

#[test]
fn draft_model_output_equals_hf_assisted_generation_on_reference() {
    check(mtp_core::reference::ReferenceBackend::default);
}

#[cfg(feature = "candle")]
#[test]
fn draft_model_output_equals_hf_assisted_generation_on_candle_cpu() {
    check(backend_candle::CandleBackend::cpu);
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused() {
    let paths = ModelPaths {
        target: fixtures().join("e2b_like/target"),
        drafter: None,
        draft_centroids: None,
        tokenizer: None,
        chat_template: None,
    };
    let options = Default::default();
    let loaded = Pipeline::load(
        mtp_core::reference::ReferenceBackend::default(),
        &paths,
        &options,
    )
    .expect("the target loads");
    let err = loaded
        .with_draft_model(Some(&fixtures().join("k_eq_v/target")), &options)
        .expect_err("a 96-token vocabulary for a 128-token target");
    assert!(
        matches!(
            err,
            PipelineError::DraftVocabulary {
                draft: 96,
                target: 128,
                ..
            }
        ),
        "{err}"
    );
    let missing = Pipeline::load(
        mtp_core::reference::ReferenceBackend::default(),
        &paths,
        &options,
    )
    .expect("the target loads")
    .with_draft_model(Some(&fixtures().join("no_such_case/target")), &options)
    .expect_err("a missing directory");
    assert!(missing.to_string().contains("does not exist"), "{missing}");
}
