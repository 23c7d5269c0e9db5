//! The MTP loop: draft, verify, accept — one round at a time.

use std::time::{Duration, Instant};

use super::overlap::EvalOverlap;
use super::phases::{PhaseClock, RoundParts};
use super::session::Session;
use super::stats::{MtpStats, ProposerCounts};
use super::SpeculationSwitch;
use crate::acceptance::{AcceptanceRules, RoundEnd, Verdict};
use crate::constraint::{Constraint, DraftGuide, DraftMasks, TokenMask};
use crate::options::{DecodeMode, MtpOptions, ValidationMode};
use crate::proposer::{DraftMode, ProposerKind, ProposerRun, RoundContext};
use crate::sampling::Distribution;
use crate::schedule::{
    new_schedule, DraftSchedule, RoundRecord, RoundReport, ScheduleKey, ScheduleMemory,
};
use crate::Backend;

/// Weight of the newest round in an arm's running expected accepted length.
const EXPECTED_WEIGHT: f64 = 0.25;
/// Rounds an arm may go unchosen (while another drafts) before it is tried again.
const RETRY_AFTER: usize = 16;
/// Most tokens a constraint's forced continuation drafts in one round.
pub const FORCED_DRAFT_MAX: usize = 16;

/// One proposer of a run, with its own schedule and running estimate.
pub(super) struct Arm<'r, B: Backend> {
    kind: ProposerKind,
    run: Box<dyn ProposerRun<B> + 'r>,
    schedule: Box<dyn DraftSchedule>,
    /// Running expected accepted drafts per round it drafted (an exponential moving average);
    /// `None` until it has drafted once.
    expected: Option<f64>,
    /// Rounds drafted by other arms since this one last drafted.
    passed_over: usize,
}

/// One round's proposal.
pub(super) struct Proposal<B: Backend> {
    /// The arm (proposer) that drafted it.
    pub arm: usize,
    /// Drafts in it.
    pub depth: usize,
    /// The depth asked of the proposer (it may propose fewer).
    pub requested: usize,
    /// The position it drafted at (`current`'s).
    pub position: usize,
    /// Time spent building it (and, on eager backends, computing it).
    pub drafting: Duration,
    /// Draft ids `[1, k]` (`U32`).
    pub tokens: B::Array,
    /// The same ids on the host, when drafting already read them (sampled mode).
    pub host: Option<Vec<u32>>,
    /// The draft distributions (sampled mode; point masses for a proposer without them).
    pub dists: Vec<Distribution>,
    /// With a constraint: the mask of each verification row (`depth + 1`); empty without.
    pub masks: Vec<TokenMask>,
    /// Whether the drafts are the constraint's forced continuation (no proposer drafted).
    pub forced: bool,
}

/// A speculative generation in progress.
pub(super) struct SpeculativeRun<'r, 's, B: Backend> {
    pub session: &'r mut Session<'s, B>,
    /// The proposers, in the engine's order (at least one).
    arms: Vec<Arm<'r, B>>,
    /// The prompt and every committed token, ending with `current` (what proposers see).
    pub history: Vec<u32>,
    pub options: MtpOptions,
    pub rules: AcceptanceRules,
    pub mode: DecodeMode,
    pub stats: MtpStats,
    /// Whether the evaluation overlap is on (see [`EvalOverlap`]).
    overlap: bool,
    /// Asked before each round whether to draft (see [`SpeculationSwitch`]).
    switch: Option<&'r dyn SpeculationSwitch>,
}

impl<'r, 's, B: Backend> SpeculativeRun<'r, 's, B> {
    pub fn new(
        session: &'r mut Session<'s, B>,
        proposers: Vec<(ProposerKind, Box<dyn ProposerRun<B> + 'r>)>,
        prompt: &[u32],
        options: &MtpOptions,
        rules: AcceptanceRules,
        mode: DecodeMode,
        overlap: EvalOverlap,
    ) -> Self {
        let arms: Vec<Arm<'r, B>> = proposers
            .into_iter()
            .map(|(kind, run)| Arm {
                kind,
                run,
                schedule: new_schedule(
                    options.schedule,
                    options.initial_draft_tokens,
                    options.max_draft_tokens,
                ),
                expected: None,
                passed_over: 0,
            })
            .collect();
        let stats = MtpStats {
            schedule: options.schedule,
            proposer: arms.first().map(|a| a.kind).unwrap_or_default(),
            per_proposer: arms
                .iter()
                .map(|a| ProposerCounts {
                    proposer: a.kind,
                    ..ProposerCounts::default()
                })
                .collect(),
            ..MtpStats::default()
        };
        let overlap = overlap.is_active(session.backend);
        Self {
            overlap,
            session,
            arms,
            history: prompt.to_vec(),
            options: *options,
            rules,
            mode,
            stats,
            switch: None,
        }
    }

    /// Ask `switch` before each round whether to draft (`None`: always).
    pub fn with_switch(mut self, switch: Option<&'r dyn SpeculationSwitch>) -> Self {
        self.switch = switch;
        self
    }

    /// Keep each proposer's schedule state in `schedules`, under the key of the proposer
    /// (its kind's name, the backend, the decode mode, the validation, the overlap): an
    /// adaptive schedule then starts where earlier requests with the same key left off.
    pub fn keep_schedule_in(mut self, schedules: &ScheduleMemory) -> Self {
        let validation = self.validation();
        for arm in &mut self.arms {
            let key = ScheduleKey {
                proposer: arm.kind.name().to_string(),
                backend: self.session.backend.name(),
                mode: self.mode,
                validation,
                overlap: self.overlap,
            };
            arm.schedule = schedules.schedule(
                &key,
                self.options.schedule,
                self.options.initial_draft_tokens,
                self.options.max_draft_tokens,
            );
        }
        self
    }

    pub fn into_stats(self) -> MtpStats {
        let mut stats = self.stats;
        stats.target_duration += self.session.target_time;
        stats
    }

    /// How this round validates, given what the caches can do.
    fn validation(&self) -> ValidationMode {
        match self.options.validation {
            _ if !self.session.caches.can_speculate() => ValidationMode::Serial,
            other => other,
        }
    }

    /// The depth arm `arm` drafts at in a round that may still emit `remaining` tokens.
    fn depth(&mut self, arm: usize, validation: ValidationMode, remaining: usize) -> usize {
        // Sampled speculation needs a rollback-capable batched verify (as in the seed).
        if self.mode == DecodeMode::SampledMtp && validation != ValidationMode::Batched {
            return 0;
        }
        let max = self.options.max_draft_tokens;
        match self.arms.get_mut(arm) {
            Some(a) => a.schedule.depth().min(max).min(remaining.saturating_sub(1)),
            None => 0,
        }
    }

    /// The arms in the order a round asks them: one not yet tried first, then one passed over
    /// for [`RETRY_AFTER`] rounds, then by running expected accepted length (highest first;
    /// the engine's order on ties).
    fn order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.arms.len()).collect();
        let rank = |a: &Arm<'r, B>| match a.expected {
            None => f64::INFINITY,
            Some(_) if a.passed_over >= RETRY_AFTER => f64::MAX,
            Some(e) => e,
        };
        order.sort_by(|&x, &y| rank(&self.arms[y]).total_cmp(&rank(&self.arms[x])));
        order
    }

    /// The drafts of the first arm (in [`Self::order`]) that drafts at a depth above 0 and
    /// has something to propose; `None` (a plain round) when none does. `asked` gets every arm
    /// asked, in order.
    fn propose_best(
        &mut self,
        validation: ValidationMode,
        remaining: usize,
        asked: &mut Vec<(usize, usize)>,
    ) -> Result<Option<Proposal<B>>, B::Error> {
        if self.switch.is_some_and(|s| !s.speculate()) {
            return Ok(None);
        }
        for arm in self.order() {
            let depth = self.depth(arm, validation, remaining);
            asked.push((arm, depth));
            if depth == 0 {
                continue;
            }
            if let Some(proposal) = self.propose(arm, depth)? {
                return Ok(Some(proposal));
            }
        }
        Ok(None)
    }

    /// Update the arms' estimates after arm `drafter` drafted a round that accepted `accepted`.
    fn learn(&mut self, drafter: usize, drafted: usize, accepted: usize) {
        for (i, arm) in self.arms.iter_mut().enumerate() {
            if i == drafter {
                let sample = accepted as f64;
                arm.expected = Some(match arm.expected {
                    None => sample,
                    Some(e) => e + EXPECTED_WEIGHT * (sample - e),
                });
                arm.passed_over = 0;
            } else {
                arm.passed_over += 1;
            }
        }
        if let Some(counts) = self.stats.per_proposer.get_mut(drafter) {
            counts.rounds += 1;
            counts.drafted += drafted;
            counts.accepted += accepted;
        }
    }

    pub fn run(&mut self) -> Result<(), B::Error> {
        self.session.prefill()?;
        if !self.session.is_done() {
            self.history.push(self.session.current);
        }
        // Drafts for the next round, built before this round's tokens were emitted.
        let mut early: Option<Proposal<B>> = None;
        while !self.session.is_done()
            && !self.session.cancelled()
            && !self.session.constraint_exhausted()?
        {
            let started = RoundTimer::start(self.switch);
            let clock = PhaseClock::start(self.session.phases);
            let validation = self.validation();
            let remaining = self.session.remaining();
            // Early drafts serve only the round they were built for.
            let early_drafts = match early.take() {
                Some(d)
                    if d.position == self.session.position
                        && d.requested == self.depth(d.arm, validation, remaining) =>
                {
                    Some(d)
                }
                _ => None,
            };
            let mut asked = Vec::new();
            // A round's cost includes its drafting, also when that ran before the round began.
            let drafted = match early_drafts {
                Some(drafts) => {
                    let drafting = drafts.drafting;
                    Some((drafts, drafting))
                }
                None => match self.propose_forced(validation, remaining)? {
                    Some(forced) => Some((forced, Duration::ZERO)),
                    None => self
                        .propose_best(validation, remaining, &mut asked)?
                        .map(|p| (p, Duration::ZERO)),
                },
            };
            let Some((proposal, drafted_before)) = drafted else {
                // Nothing drafted (depth 0, or no proposer had anything): a plain step, timed
                // like a drafting round: up to the verdict, before emission; every proposer
                // asked learns of it.
                let verifying = Instant::now();
                let next = self.session.plain_token()?;
                let verify = verifying.elapsed();
                self.history.push(next);
                self.end_round(
                    &asked,
                    RoundReport {
                        planned: 0,
                        asked: 0,
                        drafted: 0,
                        judged: 0,
                        accepted: 0,
                        elapsed: started.elapsed(self.switch),
                    },
                );
                let emitting = Instant::now();
                self.session.emit(next);
                let parts = RoundParts {
                    verify,
                    emit: emitting.elapsed(),
                    ..RoundParts::default()
                };
                self.time_last_round(&clock, &started, parts);
                continue;
            };
            self.stats.draft_duration += proposal.drafting;
            let draft = proposal.drafting;
            let t0 = Instant::now();
            let target_before = self.session.target_time;
            let (verdict, drafts) = match validation {
                ValidationMode::Serial => {
                    self.stats.serial_rounds += 1;
                    self.verify_serial(&proposal)?
                }
                ValidationMode::Batched | ValidationMode::CompareSerial => {
                    self.stats.batched_rounds += 1;
                    self.verify_batched(&proposal, validation)?
                }
            };
            let spent = t0.elapsed();
            let in_target = self.session.target_time - target_before;
            self.stats.validate_duration += spent.saturating_sub(in_target);
            // Drafts after an accepted EOS were cut, not judged.
            let judged = match verdict.end {
                RoundEnd::AcceptedEos => verdict.accepted,
                RoundEnd::Continue => proposal.depth,
            };
            // A forced round is the grammar's, not a proposer's: no schedule or estimate
            // learns from it.
            let drafter: &[(usize, usize)] = if proposal.forced {
                self.stats.forced += proposal.depth;
                self.stats.forced_accepted += verdict.accepted;
                &[]
            } else {
                &[(proposal.arm, proposal.requested)]
            };
            self.end_round(
                drafter,
                RoundReport {
                    planned: 0,
                    asked: 0,
                    drafted: proposal.depth,
                    judged,
                    accepted: verdict.accepted,
                    elapsed: started.elapsed(self.switch) + drafted_before,
                },
            );
            if !proposal.forced {
                self.learn(proposal.arm, proposal.depth, verdict.accepted);
            }
            self.commit_history(&verdict, &drafts);
            // The round is committed: its tokens are emitted even if early drafting fails.
            let drafted = if self.overlap && self.session.constraint.is_none() {
                self.draft_early(&verdict, validation)
            } else {
                Ok(None)
            };
            let emitting = Instant::now();
            self.finish_round(&verdict, &drafts);
            let parts = RoundParts {
                draft,
                drafted_before,
                verify: spent,
                emit: emitting.elapsed(),
                drafted_ahead: match &drafted {
                    Ok(Some(next)) => next.drafting,
                    _ => Duration::ZERO,
                },
            };
            self.time_last_round(&clock, &started, parts);
            early = drafted?;
        }
        Ok(())
    }

    /// Records where the round just logged spent its time ([`crate::schedule::RoundPhases`]).
    fn time_last_round(&mut self, clock: &PhaseClock, started: &RoundTimer, parts: RoundParts) {
        let elapsed = started.elapsed(self.switch);
        let phases = clock.phases(self.session.phases, elapsed, parts);
        if let Some(last) = self.stats.round_log.last_mut() {
            last.phases = phases;
        }
    }

    /// Count a finished round, log it and report it to the schedules of `arms` (the drafter,
    /// or every proposer asked for a plain round), each with the depth it planned and the
    /// depth the engine asked of it (`elapsed`: from the round's start to its verdict, emission
    /// excluded). A round drafted below the planned depth (the token budget, a validation that
    /// cannot draft, a proposer with fewer drafts) is logged as capped.
    fn end_round(&mut self, arms: &[(usize, usize)], mut report: RoundReport) {
        self.stats.record_round(report.drafted, report.accepted);
        let mut chosen = None;
        for &(i, asked) in arms {
            if let Some(arm) = self.arms.get_mut(i) {
                report.planned = arm.schedule.depth();
                report.asked = asked;
                chosen.get_or_insert(report.planned);
                arm.schedule.observe(&report);
            }
        }
        let chosen = chosen.unwrap_or(0);
        self.stats.round_log.push(RoundRecord {
            chosen,
            drafted: report.drafted,
            accepted: report.accepted,
            secs: report.elapsed.as_secs_f64(),
            capped: report.drafted < chosen,
            // Filled in once the round's tokens are emitted (`time_last_round`).
            phases: Default::default(),
        });
    }

    /// With the evaluation overlap: the next round's greedy drafts, built (and their evaluation
    /// started) before `verdict`'s tokens are emitted, or `None` when emitting them ends the
    /// generation or the next round drafts nothing. The caches and `hidden` already hold the
    /// verdict; `current` becomes the verdict's next token here as [`Self::finish_round`] would
    /// make it.
    fn draft_early(
        &mut self,
        verdict: &Verdict,
        validation: ValidationMode,
    ) -> Result<Option<Proposal<B>>, B::Error> {
        let next = match (verdict.end, verdict.next) {
            (RoundEnd::Continue, Some(next)) => next,
            _ => return Ok(None),
        };
        let s = &*self.session;
        let emitted = verdict.accepted + 1;
        let remaining = s.remaining();
        if self.mode != DecodeMode::GreedyMtp
            || s.eos.contains(&next)
            || s.cancel_requested()
            || remaining <= emitted
        {
            return Ok(None);
        }
        self.session.current = next;
        self.propose_best(validation, remaining - emitted, &mut Vec::new())
    }

    /// Append a verdict's accepted drafts and its next token to the history.
    fn commit_history(&mut self, verdict: &Verdict, drafts: &[u32]) {
        self.history
            .extend_from_slice(&drafts[..verdict.accepted.min(drafts.len())]);
        if verdict.end == RoundEnd::Continue {
            self.history.extend(verdict.next);
        }
    }

    /// Ask arm `arm`'s proposer for up to `depth` drafts from `current`; `None` when it has
    /// none.
    /// Sampled rounds get the drafts on the host and a distribution per draft (point masses
    /// for a proposer without distributions).
    fn propose(&mut self, arm: usize, depth: usize) -> Result<Option<Proposal<B>>, B::Error> {
        let started = Instant::now();
        let s = &mut *self.session;
        let backend = s.backend;
        let position = s.position;
        let mode = match self.mode {
            DecodeMode::SampledMtp => DraftMode::Sampled,
            _ => DraftMode::Greedy,
        };
        let mut guide = s
            .constraint
            .as_mut()
            .map(|c| DraftGuide::new(c as &mut dyn Constraint));
        let mut round = RoundContext {
            backend,
            target: s.target,
            history: &self.history,
            current: s.current,
            hidden: s.hidden.as_ref(),
            position,
            caches: &*s.caches,
            sampler: &mut s.sampler,
            mode,
            overlap: self.overlap,
            guide: guide.as_mut().map(|g| g as &mut dyn DraftMasks),
        };
        let Some(proposer) = self.arms.get_mut(arm) else {
            return Ok(None);
        };
        let Some(mut draft) = proposer.run.propose(&mut round, depth)? else {
            return Ok(None);
        };
        let mut masks = Vec::new();
        if let Some(guide) = guide {
            // Cut the drafts where the constraint's masks forbid them; keep every row's mask.
            let host = match draft.host.take() {
                Some(ids) => ids,
                None => backend.to_vec_u32(&draft.tokens)?,
            };
            let guided = guide.follow(&host)?;
            self.stats.cut += host.len().saturating_sub(guided.kept);
            if guided.kept == 0 {
                return Ok(None);
            }
            if guided.kept < host.len() {
                draft.tokens = backend.from_u32(&host[..guided.kept], &[1, guided.kept])?;
                if let Some(dists) = &mut draft.dists {
                    dists.truncate(guided.kept);
                }
            }
            draft.host = Some(host[..guided.kept].to_vec());
            masks = guided.masks;
        }
        let k = draft.len(backend);
        if k == 0 {
            return Ok(None);
        }
        if k > depth {
            return Err(crate::CoreError::Model(format!(
                "a proposer proposed {k} drafts for a depth of {depth}"
            ))
            .into());
        }
        let (host, dists) = match mode {
            DraftMode::Greedy => (draft.host, Vec::new()),
            DraftMode::Sampled => {
                let host = match draft.host {
                    Some(ids) => ids,
                    None => backend.to_vec_u32(&draft.tokens)?,
                };
                let dists = match draft.dists {
                    Some(dists) if dists.len() == k => dists,
                    Some(dists) => {
                        return Err(crate::CoreError::Model(format!(
                            "a proposer gave {} distributions for {k} drafts",
                            dists.len()
                        ))
                        .into())
                    }
                    None => {
                        let vocab = s.target.vocab_size();
                        host.iter()
                            .map(|&id| Distribution::point(vocab, id))
                            .collect::<Result<_, _>>()?
                    }
                };
                (Some(host), dists)
            }
        };
        Ok(Some(Proposal {
            arm,
            depth: k,
            requested: depth,
            position,
            drafting: started.elapsed(),
            tokens: draft.tokens,
            host,
            dists,
            masks,
            forced: false,
        }))
    }

    /// The constraint's forced continuation as this round's drafts (no proposer call), or
    /// `None` when nothing is forced, there is no constraint, or the round cannot draft
    /// (sampled rounds need batched validation) or the batch's switch turned drafting off. At
    /// most [`FORCED_DRAFT_MAX`] tokens, the request's maximum draft depth, and fewer than
    /// `remaining`.
    fn propose_forced(
        &mut self,
        validation: ValidationMode,
        remaining: usize,
    ) -> Result<Option<Proposal<B>>, B::Error> {
        if self.mode == DecodeMode::SampledMtp && validation != ValidationMode::Batched {
            return Ok(None);
        }
        // A batch that turned drafting off at its size verifies no forced drafts either.
        if self.switch.is_some_and(|s| !s.speculate()) {
            return Ok(None);
        }
        let cap = FORCED_DRAFT_MAX
            .min(self.options.max_draft_tokens)
            .min(remaining.saturating_sub(1));
        let s = &mut *self.session;
        let Some(constraint) = s.constraint.as_mut() else {
            return Ok(None);
        };
        let started = Instant::now();
        let mut forced = constraint.forced()?;
        forced.truncate(cap);
        if forced.is_empty() {
            return Ok(None);
        }
        let guided = DraftGuide::new(constraint).follow(&forced)?;
        forced.truncate(guided.kept);
        if forced.is_empty() {
            return Ok(None);
        }
        let backend = s.backend;
        let vocab = s.target.vocab_size();
        let dists = match self.mode {
            DecodeMode::SampledMtp => forced
                .iter()
                .map(|&id| Distribution::point(vocab, id))
                .collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        Ok(Some(Proposal {
            arm: 0,
            depth: forced.len(),
            requested: forced.len(),
            position: s.position,
            drafting: started.elapsed(),
            tokens: backend.from_u32(&forced, &[1, forced.len()])?,
            host: Some(forced),
            dists,
            masks: guided.masks,
            forced: true,
        }))
    }

    /// Emit the accepted drafts and the next token; `next` becomes `current`.
    fn finish_round(&mut self, verdict: &Verdict, drafts: &[u32]) {
        for &id in &drafts[..verdict.accepted.min(drafts.len())] {
            if !self.session.emit(id) {
                return;
            }
        }
        if verdict.end == RoundEnd::AcceptedEos {
            return;
        }
        if let Some(next) = verdict.next {
            self.session.current = next;
            self.session.emit(next);
        }
    }
}

/// The time of a round as its schedule learns it: wall time less what the sequence spent
/// waiting on others ([`SpeculationSwitch::others_time`]).
struct RoundTimer {
    started: Instant,
    others: Duration,
}

impl RoundTimer {
    fn start(switch: Option<&dyn SpeculationSwitch>) -> Self {
        Self {
            started: Instant::now(),
            others: switch.map(|s| s.others_time()).unwrap_or_default(),
        }
    }

    fn elapsed(&self, switch: Option<&dyn SpeculationSwitch>) -> Duration {
        let others = switch.map(|s| s.others_time()).unwrap_or_default();
        self.started
            .elapsed()
            .saturating_sub(others.saturating_sub(self.others))
    }
}
