//! The MTP loop: draft, verify, accept — one round at a time.

use std::time::{Duration, Instant};

use super::overlap::EvalOverlap;
use super::session::Session;
use super::stats::MtpStats;
use crate::acceptance::{AcceptanceRules, RoundEnd, Verdict};
use crate::model::MtpDrafter;
use crate::options::{DecodeMode, MtpOptions, ValidationMode};
use crate::sampling::Distribution;
use crate::schedule::{DraftSchedule, RoundRecord, RoundReport, ScheduleKey, ScheduleMemory};
use crate::Backend;

/// One round's proposal.
pub(super) struct Proposal<B: Backend> {
    /// Drafts in it.
    pub depth: usize,
    /// The position it drafted at (`current`'s).
    pub position: usize,
    /// Time spent building it (and, on eager backends, computing it).
    pub drafting: Duration,
    /// Draft ids `[1, k]` (`U32`).
    pub tokens: B::Array,
    /// The same ids on the host, when drafting already read them (sampled mode).
    pub host: Option<Vec<u32>>,
    /// The draft distributions (sampled mode).
    pub dists: Vec<Distribution>,
}

/// A speculative generation in progress.
pub(super) struct SpeculativeRun<'r, 's, B: Backend> {
    pub session: &'r mut Session<'s, B>,
    pub drafter: &'r dyn MtpDrafter<B>,
    pub options: MtpOptions,
    pub rules: AcceptanceRules,
    pub mode: DecodeMode,
    pub schedule: Box<dyn DraftSchedule>,
    pub stats: MtpStats,
    /// Whether the evaluation overlap is on (see [`EvalOverlap`]).
    overlap: bool,
}

/// The proposer name the MTP assistant's schedule state is kept under.
pub(super) const ASSISTANT_PROPOSER: &str = "mtp-assistant";

impl<'r, 's, B: Backend> SpeculativeRun<'r, 's, B> {
    pub fn new(
        session: &'r mut Session<'s, B>,
        drafter: &'r dyn MtpDrafter<B>,
        options: &MtpOptions,
        rules: AcceptanceRules,
        mode: DecodeMode,
        overlap: EvalOverlap,
        schedules: &ScheduleMemory,
    ) -> Self {
        let key = ScheduleKey {
            proposer: ASSISTANT_PROPOSER.to_string(),
            backend: session.backend.name(),
            mode,
            validation: validation_for(options, session),
            overlap: overlap.is_active(session.backend),
        };
        let schedule = schedules.schedule(
            &key,
            options.schedule,
            options.initial_draft_tokens,
            options.max_draft_tokens,
        );
        let stats = MtpStats {
            schedule: options.schedule,
            ..MtpStats::default()
        };
        let overlap = overlap.is_active(session.backend);
        Self {
            overlap,
            session,
            drafter,
            options: *options,
            rules,
            mode,
            schedule,
            stats,
        }
    }

    pub fn into_stats(self) -> MtpStats {
        let mut stats = self.stats;
        stats.target_duration += self.session.target_time;
        stats
    }

    /// How this round validates, given what the caches can do.
    fn validation(&self) -> ValidationMode {
        validation_for(&self.options, self.session)
    }

    /// The depth of a round that may still emit `remaining` tokens.
    fn depth(&mut self, validation: ValidationMode, remaining: usize) -> usize {
        // Sampled speculation needs a rollback-capable batched verify (as in the seed).
        if self.mode == DecodeMode::SampledMtp && validation != ValidationMode::Batched {
            return 0;
        }
        self.schedule
            .depth()
            .min(self.options.max_draft_tokens)
            .min(remaining.saturating_sub(1))
    }

    pub fn run(&mut self) -> Result<(), B::Error> {
        self.session.prefill()?;
        // Drafts for the next round, built before this round's tokens were emitted.
        let mut early: Option<Proposal<B>> = None;
        while !self.session.is_done() && !self.session.cancelled() {
            let started = Instant::now();
            let validation = self.validation();
            let planned = self.schedule.depth();
            let depth = self.depth(validation, self.session.remaining());
            // Early drafts serve only the round they were built for.
            let early_drafts = early
                .take()
                .filter(|d| d.depth == depth && d.position == self.session.position);
            if depth == 0 {
                // Timed like a drafting round: up to the verdict, before emission.
                let next = self.session.plain_token()?;
                self.end_round(RoundReport {
                    planned,
                    drafted: 0,
                    judged: 0,
                    accepted: 0,
                    elapsed: started.elapsed(),
                });
                self.session.emit(next);
                continue;
            }
            // A round's cost includes its drafting, also when that ran before the round began.
            let (proposal, drafted_before) = match early_drafts {
                Some(drafts) => {
                    let drafting = drafts.drafting;
                    (drafts, drafting)
                }
                None => (self.propose(depth)?, Duration::ZERO),
            };
            self.stats.draft_duration += proposal.drafting;
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
                RoundEnd::Continue => depth,
            };
            self.end_round(RoundReport {
                planned,
                drafted: depth,
                judged,
                accepted: verdict.accepted,
                elapsed: started.elapsed() + drafted_before,
            });
            // The round is committed: its tokens are emitted even if early drafting fails.
            let drafted = if self.overlap {
                self.draft_early(&verdict, validation)
            } else {
                Ok(None)
            };
            self.finish_round(&verdict, &drafts);
            early = drafted?;
        }
        Ok(())
    }

    /// Count a finished round, log it and report it to the schedule (`elapsed`: from the
    /// round's start to its verdict, emission excluded).
    fn end_round(&mut self, report: RoundReport) {
        self.stats.record_round(report.drafted, report.accepted);
        self.stats.round_log.push(RoundRecord {
            chosen: report.planned,
            drafted: report.drafted,
            accepted: report.accepted,
            secs: report.elapsed.as_secs_f64(),
            capped: report.drafted < report.planned,
        });
        self.schedule.observe(&report);
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
        let depth = self.depth(validation, remaining - emitted);
        if depth == 0 {
            return Ok(None);
        }
        self.session.current = next;
        self.propose(depth).map(Some)
    }

    /// Draft `depth` tokens from `current` with the single-position chain.
    fn propose(&mut self, depth: usize) -> Result<Proposal<B>, B::Error> {
        let started = Instant::now();
        let s = &mut *self.session;
        let backend = s.backend;
        let position = s.position;
        let mut hidden = match &s.hidden {
            Some(h) => h.clone(),
            None => {
                return Err(crate::CoreError::Model("no target hidden to draft from".into()).into())
            }
        };
        let mut token = s.ids(&[s.current])?;
        let mut arrays = Vec::with_capacity(depth);
        let mut host = Vec::with_capacity(depth);
        let mut dists = Vec::with_capacity(depth);
        for _ in 0..depth {
            let embedding = s.target.token_embeddings(backend, &token)?;
            let input = backend.concat(&[&embedding, &hidden], 2)?;
            let step = self
                .drafter
                .draft_step(backend, &input, position, s.caches)?;
            hidden = step.projected;
            token = match self.mode {
                DecodeMode::SampledMtp => {
                    let row = backend.to_vec_f32(&step.logits)?;
                    let q = s.sampler.distribution(&row, &host)?;
                    let id = s.sampler.sample(&q);
                    host.push(id);
                    dists.push(q);
                    s.ids(&[id])?
                }
                _ => {
                    let id = backend.reshape(&backend.argmax(&step.logits, 2)?, &[1, 1])?;
                    if self.overlap {
                        backend.async_eval(&[&id, &hidden])?;
                    }
                    id
                }
            };
            arrays.push(token.clone());
        }
        let refs: Vec<&B::Array> = arrays.iter().collect();
        let tokens = backend.concat(&refs, 1)?;
        let host = (self.mode == DecodeMode::SampledMtp).then_some(host);
        Ok(Proposal {
            depth,
            position,
            drafting: started.elapsed(),
            tokens,
            host,
            dists,
        })
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

/// How rounds validate under `options`, given what the session's caches can do.
fn validation_for<B: Backend>(options: &MtpOptions, session: &Session<'_, B>) -> ValidationMode {
    match options.validation {
        _ if !session.caches.can_speculate() => ValidationMode::Serial,
        other => other,
    }
}
