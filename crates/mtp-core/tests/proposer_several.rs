//! Several proposers at once ([`Engine::also_proposer`]): each round drafts with the proposer
//! whose running expected accepted length is highest. Greedy output stays plain greedy's; the
//! better proposer drafts most rounds; one with nothing to propose yields to the next; every
//! drafting round is counted for exactly one proposer; each proposer keeps its own adaptive
//! schedule state.

mod common;

use common::*;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest, ProposerCounts};
use mtp_core::options::ValidationMode;
use mtp_core::proposer::{
    Draft, DraftModel, NgramOptions, NgramProposer, Proposer, ProposerKind, ProposerRun,
    RoundContext,
};
use mtp_core::schedule::{ScheduleKind, ScheduleMemory};
use mtp_core::testing::TinyConfig;

/// A proposer that never has anything to propose.
#[derive(Debug, Clone, Copy)]
struct Silent;

impl Proposer<B> for Silent {
    fn kind(&self) -> ProposerKind {
        ProposerKind::Ngram
    }
    fn start<'p>(
        &'p self,
        _backend: &B,
        _prompt: &[u32],
    ) -> Result<Box<dyn ProposerRun<B> + 'p>, mtp_core::CoreError> {
        Ok(Box::new(*self))
    }
}

impl ProposerRun<B> for Silent {
    fn propose(
        &mut self,
        _round: &mut RoundContext<'_, B>,
        _depth: usize,
    ) -> Result<Option<Draft<B>>, mtp_core::CoreError> {
        Ok(None)
    }
}

fn counts(per: &[ProposerCounts], kind: ProposerKind) -> ProposerCounts {
    per.iter()
        .copied()
        .find(|c| c.proposer == kind)
        .unwrap_or_default()
}

#[test]
fn the_better_proposer_drafts_most_rounds_and_the_output_stays_plain() {
    let b = B::default();
    let config = TinyConfig {
        vocab: 24,
        gain: 1.5,
        ..TinyConfig::default()
    };
    let t = target(config.clone());
    // A draft model that is the target (always right) beside prompt lookup (often wrong on a
    // prompt that does not repeat).
    let same = target(config);
    let model = DraftModel::new(&same, 24).unwrap();
    let ngram = NgramProposer::new(NgramOptions::new(1, 2).unwrap());
    for validation in [ValidationMode::Batched, ValidationMode::Serial] {
        let mut request = GenerateRequest::greedy(vec![3, 9, 4, 17, 3, 11], 80);
        request.draft = draft(ScheduleKind::Constant, validation, 3);
        let expected = plain(&t, &request);
        let out = Engine::new(&b, &t)
            .with_proposer(&ngram)
            .also_proposer(&model)
            .with_env(no_env())
            .generate(&request, &mut DiscardSink, &CancelToken::new())
            .unwrap();
        assert_eq!(out.tokens, expected.tokens, "{validation:?}");
        let stats = out.mtp.unwrap();
        assert_eq!(stats.proposer, ProposerKind::Ngram, "the first one given");
        let per = &stats.per_proposer;
        assert_eq!(per.len(), 2);
        let (lookup, drafter) = (
            counts(per, ProposerKind::Ngram),
            counts(per, ProposerKind::Model),
        );
        assert_eq!(
            lookup.rounds + drafter.rounds,
            stats.batched_rounds + stats.serial_rounds
        );
        assert_eq!(lookup.drafted + drafter.drafted, stats.drafted);
        assert_eq!(lookup.accepted + drafter.accepted, stats.accepted);
        assert_eq!(
            drafter.accepted, drafter.drafted,
            "the target drafting itself"
        );
        assert!(
            drafter.rounds > 3 * lookup.rounds,
            "the draft model should win most rounds: {per:?}"
        );
        assert!(lookup.rounds >= 1, "prompt lookup was tried: {per:?}");
    }
}

#[test]
fn a_proposer_with_nothing_yields_to_the_next() {
    let b = B::default();
    let t = target(TinyConfig::default());
    let request = {
        let mut r = GenerateRequest::greedy(vec![1, 2, 3, 1, 2, 3, 1, 2], 40);
        r.draft = draft(ScheduleKind::Constant, ValidationMode::Batched, 4);
        r
    };
    let expected = plain(&t, &request);
    let ngram = NgramProposer::new(NgramOptions::default());
    let alone = Engine::new(&b, &t)
        .with_proposer(&ngram)
        .with_env(no_env())
        .generate(&request, &mut DiscardSink, &CancelToken::new())
        .unwrap();
    let out = Engine::new(&b, &t)
        .with_proposer(&Silent)
        .also_proposer(&ngram)
        .with_env(no_env())
        .generate(&request, &mut DiscardSink, &CancelToken::new())
        .unwrap();
    assert_eq!(out.tokens, expected.tokens);
    let (with_silent, alone) = (out.mtp.unwrap(), alone.mtp.unwrap());
    // The silent proposer never drafts; lookup drafts exactly as it does alone.
    assert_eq!(with_silent.per_proposer[0].rounds, 0);
    assert_eq!(
        with_silent.per_proposer[1].rounds,
        alone.per_proposer[0].rounds
    );
    assert_eq!(with_silent.drafted, alone.drafted);
    assert_eq!(with_silent.accepted, alone.accepted);
}

#[test]
fn each_proposer_keeps_its_own_adaptive_state() {
    let b = B::default();
    let config = TinyConfig {
        vocab: 24,
        ..TinyConfig::default()
    };
    let t = target(config.clone());
    let same = target(config);
    let model = DraftModel::new(&same, 24).unwrap();
    let ngram = NgramProposer::new(NgramOptions::default());
    let memory = ScheduleMemory::new();
    let mut request = GenerateRequest::greedy(vec![5, 6, 7, 5, 6, 7, 5, 6], 48);
    request.draft = draft(ScheduleKind::Adaptive, ValidationMode::Batched, 4);
    let expected = plain(&t, &request);
    let out = Engine::new(&b, &t)
        .with_proposer(&model)
        .also_proposer(&ngram)
        .with_schedule_memory(memory.clone())
        .with_env(no_env())
        .generate(&request, &mut DiscardSink, &CancelToken::new())
        .unwrap();
    assert_eq!(out.tokens, expected.tokens);
    let keys: Vec<String> = memory
        .snapshot()
        .into_iter()
        .map(|(key, _)| key.proposer)
        .collect();
    assert_eq!(keys, ["model", "ngram"], "one controller per proposer");
}
