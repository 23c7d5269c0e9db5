//! The MTP loop: draft, verify, accept — one round at a time.

use std::time::Instant;

use super::session::Session;
use super::stats::MtpStats;
use crate::acceptance::{AcceptanceRules, RoundEnd, Verdict};
use crate::model::MtpDrafter;
use crate::options::{DecodeMode, MtpOptions, ValidationMode};
use crate::sampling::Distribution;
use crate::schedule::{new_schedule, DraftSchedule, RoundReport};
use crate::Backend;

/// One round's proposal.
pub(super) struct Proposal<B: Backend> {
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
}

impl<'r, 's, B: Backend> SpeculativeRun<'r, 's, B> {
    pub fn new(
        session: &'r mut Session<'s, B>,
        drafter: &'r dyn MtpDrafter<B>,
        options: &MtpOptions,
        rules: AcceptanceRules,
        mode: DecodeMode,
    ) -> Self {
        let schedule = new_schedule(
            options.schedule,
            options.initial_draft_tokens,
            options.max_draft_tokens,
        );
        let stats = MtpStats {
            schedule: options.schedule,
            ..MtpStats::default()
        };
        Self {
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
        match self.options.validation {
            _ if !self.session.caches.can_speculate() => ValidationMode::Serial,
            other => other,
        }
    }

    pub fn run(&mut self) -> Result<(), B::Error> {
        self.session.prefill()?;
        while !self.session.is_done() && !self.session.cancelled() {
            let started = Instant::now();
            let validation = self.validation();
            let remaining = self.session.remaining();
            let mut depth = self
                .schedule
                .depth()
                .min(self.options.max_draft_tokens)
                .min(remaining.saturating_sub(1));
            // Sampled speculation needs a rollback-capable batched verify (as in the seed).
            if self.mode == DecodeMode::SampledMtp && validation != ValidationMode::Batched {
                depth = 0;
            }
            let accepted = if depth == 0 {
                self.session.plain_step()?;
                0
            } else {
                let t0 = Instant::now();
                let proposal = self.propose(depth)?;
                self.stats.draft_duration += t0.elapsed();
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
                self.finish_round(&verdict, &drafts);
                verdict.accepted
            };
            self.stats.record_round(depth, accepted);
            self.schedule.observe(&RoundReport {
                drafted: depth,
                accepted,
                elapsed: started.elapsed(),
            });
        }
        Ok(())
    }

    /// Draft `depth` tokens from `current` with the single-position chain.
    fn propose(&mut self, depth: usize) -> Result<Proposal<B>, B::Error> {
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
                _ => backend.reshape(&backend.argmax(&step.logits, 2)?, &[1, 1])?,
            };
            arrays.push(token.clone());
        }
        let refs: Vec<&B::Array> = arrays.iter().collect();
        let tokens = backend.concat(&refs, 1)?;
        let host = (self.mode == DecodeMode::SampledMtp).then_some(host);
        Ok(Proposal {
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
