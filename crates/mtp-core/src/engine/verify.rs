//! Verification of a proposal: batched (one fused forward in a cache transaction), serial (one
//! token at a time on the live caches), and the compare-serial debug check.

use std::time::Instant;

use super::session::{check_row, first};
use super::speculative::{Proposal, SpeculativeRun};
use crate::acceptance::{RoundEnd, SampledRound, Verdict};
use crate::cache::{CacheSet, SpeculationSupport};
use crate::constraint::{masked_logits, TokenMask};
use crate::options::{DecodeMode, ValidationMode};
use crate::sampling::HostRows;
use crate::{Backend, CoreError};

/// Positions the caches keep after a verdict: `current` plus the accepted drafts, except an
/// accepted EOS.
fn kept_positions(verdict: &Verdict) -> usize {
    match verdict.end {
        RoundEnd::AcceptedEos => verdict.accepted,
        RoundEnd::Continue => verdict.accepted + 1,
    }
}

/// An acceptance rule accepts at most the `k` drafts it was given.
fn check_accepted(verdict: &Verdict, k: usize) -> Result<(), CoreError> {
    if verdict.accepted > k {
        return Err(CoreError::Model(format!(
            "acceptance rule accepted {} of {k} drafts",
            verdict.accepted
        )));
    }
    Ok(())
}

/// The tokens a verdict emits, in order: the accepted drafts (an accepted EOS last, which
/// emission then drops), then the next token unless an EOS ended the round. Token `j` was
/// judged by verification row `j`.
fn emitted<'a>(verdict: &'a Verdict, drafts: &'a [u32]) -> impl Iterator<Item = u32> + 'a {
    let next = match verdict.end {
        RoundEnd::Continue => verdict.next,
        RoundEnd::AcceptedEos => None,
    };
    drafts[..verdict.accepted.min(drafts.len())]
        .iter()
        .copied()
        .chain(next)
}

impl<B: Backend> SpeculativeRun<'_, '_, B> {
    /// One target forward over `[current, drafts]` inside a speculation transaction.
    pub(super) fn verify_batched(
        &mut self,
        proposal: &Proposal<B>,
        validation: ValidationMode,
    ) -> Result<(Verdict, Vec<u32>), B::Error> {
        let compare =
            validation == ValidationMode::CompareSerial && self.mode == DecodeMode::GreedyMtp;
        let s = &mut *self.session;
        let backend = s.backend;
        let fork = if compare {
            Some(s.caches.fork(backend)?)
        } else {
            None
        };
        if s.caches.begin_speculation(backend)? != SpeculationSupport::Started {
            return Err(CoreError::Cache(
                "batched validation on caches that cannot speculate".into(),
            )
            .into());
        }
        let before = s.position;
        let current = s.ids(&[s.current])?;
        let input = backend.concat(&[&current, &proposal.tokens], 1)?;
        let t0 = Instant::now();
        let out = s.target.forward(backend, &input, before, s.caches)?;
        let t1 = Instant::now();
        let logits = s.target.unembed(backend, &out.hidden)?;
        s.target_time += t0.elapsed();
        s.phases.forward += t1 - t0;
        s.phases.unembed += t1.elapsed();
        // Row i sees the constraint after drafts[..i]. Greedy rounds read the unmasked argmax
        // first and mask only when a row's choice is not allowed (see `greedy_choices`); the
        // rest mask every row here.
        let lazy_mask = self.mode == DecodeMode::GreedyMtp
            && s.device_argmax()
            && s.top_logprobs().is_none()
            && !compare;
        let logits = if proposal.masks.is_empty() || lazy_mask {
            logits
        } else {
            masked_logits(backend, &logits, &proposal.masks)?
        };
        let lazy_masks: &[TokenMask] = if lazy_mask { &proposal.masks } else { &[] };
        let k = backend.shape(&proposal.tokens)[1];

        let (verdict, drafts, target_ids) = match self.mode {
            DecodeMode::SampledMtp => {
                let drafts = proposal.host.clone().unwrap_or_default();
                // The top candidates of each row when top-k makes that exact, else every logit.
                let host = HostRows::read(backend, &logits, s.sampler.options(), before)?;
                if let Some(flat) = host.dense() {
                    let vocab = flat.len() / host.len().max(1);
                    for (i, row) in flat.chunks(vocab.max(1)).enumerate() {
                        check_row(row, before + i)?;
                    }
                }
                let target_dists = s
                    .sampler
                    .verification_distributions_of(&host.all(), &drafts)?;
                let round = SampledRound {
                    drafts: &drafts,
                    draft_dists: &proposal.dists,
                    target_dists: &target_dists,
                    eos: s.eos,
                };
                let sampler = &mut s.sampler;
                let verdict = (self.rules.sampled)(&round, &mut || sampler.uniform())?;
                check_accepted(&verdict, k)?;
                if let Some(top) = s.top_logprobs() {
                    // Token j of the round came from row j's target distribution (the
                    // correction too: it is reported under p, not the residual it was drawn
                    // from).
                    for (j, id) in emitted(&verdict, &drafts).enumerate() {
                        let lp = target_dists[j].logprobs(id, top);
                        s.queue_logprobs(lp);
                    }
                }
                let mut committed = drafts
                    .get(..verdict.accepted)
                    .unwrap_or(&drafts[..])
                    .to_vec();
                committed.extend(verdict.next);
                s.sampler.commit(&committed);
                (verdict, drafts, Vec::new())
            }
            _ => {
                let host = proposal.host.as_deref();
                let choices =
                    self.greedy_choices(&proposal.tokens, host, (&logits, lazy_masks), before)?;
                let (drafts, target_ids) = (choices.drafts, choices.targets);
                let verdict = (self.rules.greedy)(&drafts, &target_ids, self.session.eos)?;
                check_accepted(&verdict, k)?;
                if let Some(top) = self.session.top_logprobs() {
                    // Before commit_greedy: row j's penalty context is the history and
                    // drafts[..j].
                    let tokens: Vec<u32> = emitted(&verdict, &drafts).collect();
                    self.queue_greedy_logprobs(top, &logits, choices.rows, &drafts, &tokens)?;
                }
                (verdict, drafts, target_ids)
            }
        };
        if self.session.constraint.is_some() {
            let tokens: Vec<u32> = emitted(&verdict, &drafts).collect();
            self.session.advance_constraint(&tokens)?;
        }
        let keep = kept_positions(&verdict);
        if keep == 0 {
            return Err(
                CoreError::Model("acceptance rule ended a round before any draft".into()).into(),
            );
        }
        if let Some(fork) = fork {
            let judged = Judged {
                drafts: &drafts,
                batched: &target_ids,
                logits: &logits,
                masks: &proposal.masks,
            };
            self.compare_serial(fork, before, &judged, &verdict)?;
        }
        if self.mode != DecodeMode::SampledMtp {
            // After compare-serial, which judges against the history before this round.
            self.commit_greedy(&drafts, &verdict);
        }
        let s = &mut *self.session;
        let t0 = Instant::now();
        s.caches.commit_speculation(backend, keep)?;
        s.position = before + keep;
        s.hidden = Some(backend.slice(&out.draft_hidden, 1, keep - 1, 1)?);
        s.phases.commit += t0.elapsed();
        Ok((verdict, drafts))
    }

    /// Greedy validation one token at a time on the live caches: only accepted tokens are ever
    /// forwarded, so nothing needs rolling back.
    pub(super) fn verify_serial(
        &mut self,
        proposal: &Proposal<B>,
    ) -> Result<(Verdict, Vec<u32>), B::Error> {
        let s = &mut *self.session;
        let backend = s.backend;
        let drafts = match &proposal.host {
            Some(ids) => ids.clone(),
            None => backend.to_vec_u32(&proposal.tokens)?,
        };
        let mut input = s.current;
        let mut verdict = Verdict {
            accepted: 0,
            next: None,
            end: RoundEnd::Continue,
        };
        for step in 0..=drafts.len() {
            let ids = s.ids(&[input])?;
            let out = s.forward_live(&ids)?;
            s.hidden = Some(out.draft_hidden);
            let logits = s.row_logits(&out.hidden, 0)?;
            // Commits the choice (an accepted draft or the next token) to the penalty history.
            let choice = s.choose(&logits)?;
            match drafts.get(step) {
                Some(&draft) if draft == choice => {
                    verdict.accepted += 1;
                    if s.eos.contains(&draft) {
                        verdict.end = RoundEnd::AcceptedEos;
                        break;
                    }
                    input = draft;
                }
                _ => {
                    verdict.next = Some(choice);
                    break;
                }
            }
        }
        Ok((verdict, drafts))
    }

    /// Re-run a batched round one token at a time on `fork` and report the first position where
    /// the serial argmax differs from the batched one.
    fn compare_serial(
        &mut self,
        mut fork: CacheSet<B>,
        before: usize,
        judged: &Judged<'_, B>,
        verdict: &Verdict,
    ) -> Result<(), B::Error> {
        let Judged {
            drafts,
            batched,
            logits,
            masks,
        } = *judged;
        let s = &*self.session;
        let backend = s.backend;
        let rows = kept_positions(verdict);
        let mut input = s.current;
        for row in 0..rows {
            let ids = s.ids(&[input])?;
            let out = s.target.forward(backend, &ids, before + row, &mut fork)?;
            let serial_logits = s.target.unembed(backend, &out.hidden)?;
            let serial_logits = match masks.get(row) {
                Some(mask) => masked_logits(backend, &serial_logits, std::slice::from_ref(mask))?,
                None => serial_logits,
            };
            let prefix = &drafts[..row.min(drafts.len())];
            let serial = self.greedy_choice(&serial_logits, prefix, before + row)?;
            self.stats.compared += 1;
            if batched.get(row) != Some(&serial) {
                self.stats.batch_serial_mismatches += 1;
                if self.stats.batch_serial_mismatches == 1 {
                    let batched_row = backend.slice(logits, 1, row, 1)?;
                    let (b1, b2, b_margin) = top2(backend, &batched_row)?;
                    let (s1, s2, s_margin) = top2(backend, &serial_logits)?;
                    tracing::warn!(
                        target: "mtp",
                        position = before + row,
                        draft = drafts.get(row).map_or(-1, |&d| i64::from(d)),
                        batched = b1,
                        batched_second = b2,
                        batched_margin = b_margin,
                        serial = s1,
                        serial_second = s2,
                        serial_margin = s_margin,
                        "MTP batched validation differs from serial validation"
                    );
                }
                return Ok(());
            }
            match drafts.get(row) {
                Some(&d) => input = d,
                None => break,
            }
        }
        Ok(())
    }
}

/// What a batched round judged, for compare-serial: the drafts, the batched choice of each row,
/// the (masked) verification logits and each row's constraint mask (empty without one).
struct Judged<'a, B: Backend> {
    drafts: &'a [u32],
    batched: &'a [u32],
    logits: &'a B::Array,
    masks: &'a [TokenMask],
}

/// Top-2 token ids of logits `[1, 1, v]` and the logit margin between them.
fn top2<B: Backend>(backend: &B, logits: &B::Array) -> Result<(u32, u32, f32), B::Error> {
    let vocab = backend.shape(logits).last().copied().unwrap_or(0);
    if vocab < 2 {
        let id = first(backend.to_vec_u32(&backend.argmax(logits, 2)?)?)?;
        return Ok((id, id, 0.0));
    }
    let (values, ids) = backend.top_k(logits, 2)?;
    let values = backend.to_vec_f32(&values)?;
    let ids = backend.to_vec_u32(&ids)?;
    match (&ids[..], &values[..]) {
        ([a, b, ..], [va, vb, ..]) => Ok((*a, *b, va - vb)),
        _ => Err(CoreError::Model("top-2 read returned too few values".into()).into()),
    }
}
