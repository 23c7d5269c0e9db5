//! The target's greedy choices in a verification forward, with or without penalties.
//!
//! Without penalties the choice of row `i` is the argmax of its logits, read from the device
//! together with the draft ids and each row's non-finite flag (one host read per round). With
//! penalties (temperature 0, so top-k / top-p / min-p cannot matter) penalised greedy decoding
//! is still deterministic: row `i` is judged against the argmax of its logits after the
//! penalties of the history followed by `drafts[..i]` — exactly the context plain penalised
//! greedy decode would have at that position had it emitted those drafts — so greedy MTP under
//! penalties emits exactly the tokens of plain penalised greedy decode. That path reads the
//! `k + 1` logits rows to the host, as sampled verification does.

use super::session::{check_flags, check_row};
use super::speculative::SpeculativeRun;
use crate::acceptance::Verdict;
use crate::constraint::{masked_logits, TokenMask};
use crate::sampling::Distribution;
use crate::Backend;

/// What a greedy verification read: the drafts, the target's choice at each row and, when they
/// were read to the host, the rows `[k + 1, vocab]` flat.
pub(super) struct GreedyChoices {
    pub drafts: Vec<u32>,
    pub targets: Vec<u32>,
    pub rows: Option<Vec<f32>>,
}

impl<B: Backend> SpeculativeRun<'_, '_, B> {
    /// The draft ids and the target's greedy choices at rows `0..=k` of `logits` (`[1, k + 1,
    /// v]`, row 0 at position `before`), with the rows themselves when they were read to the
    /// host (penalties); an error when a row's logits are not finite.
    ///
    /// `(logits, masks)`: with `masks` (one per row, a constraint's, not yet applied to the
    /// logits) the unmasked argmax of every row is read first; where a row's choice is not
    /// allowed by its mask, the rows are masked and read again. An allowed unmasked argmax is
    /// the masked argmax (the first maximum overall, allowed, is the first allowed maximum), so
    /// the mask's cost is paid only on the rows where it changes the choice.
    pub(super) fn greedy_choices(
        &self,
        drafts: &B::Array,
        host_drafts: Option<&[u32]>,
        (logits, masks): (&B::Array, &[TokenMask]),
        before: usize,
    ) -> Result<GreedyChoices, B::Error> {
        let s = &*self.session;
        let backend = s.backend;
        let k = backend.shape(drafts)[1];
        if s.device_argmax() {
            let (ids, flags) = s.checked_argmax(logits)?;
            let read = backend.to_vec_u32(&backend.concat(&[drafts, &ids, &flags], 1)?)?;
            let (drafts, rest) = read.split_at(k);
            let (targets, flags) = rest.split_at(k + 1);
            check_flags(flags, before)?;
            let allowed =
                masks.is_empty() || targets.iter().zip(masks).all(|(&id, mask)| mask.allows(id));
            let targets = if allowed {
                targets.to_vec()
            } else {
                let masked = masked_logits(backend, logits, masks)?;
                let (ids, flags) = s.checked_argmax(&masked)?;
                let read = backend.to_vec_u32(&backend.concat(&[&ids, &flags], 1)?)?;
                let (targets, flags) = read.split_at(k + 1);
                check_flags(flags, before)?;
                targets.to_vec()
            };
            return Ok(GreedyChoices {
                drafts: drafts.to_vec(),
                targets,
                rows: None,
            });
        }
        let masked;
        let logits = if masks.is_empty() {
            logits
        } else {
            masked = masked_logits(backend, logits, masks)?;
            &masked
        };
        let drafts = match host_drafts {
            Some(ids) => ids.to_vec(),
            None => backend.to_vec_u32(drafts)?,
        };
        let flat = backend.to_vec_f32(logits)?;
        let vocab = (flat.len() / (k + 1)).max(1);
        let rows: Vec<&[f32]> = flat.chunks(vocab).collect();
        for (i, row) in rows.iter().enumerate() {
            check_row(row, before + i)?;
        }
        let dists = s.sampler.verification_distributions(&rows, &drafts)?;
        let targets = dists.iter().map(Distribution::argmax).collect();
        Ok(GreedyChoices {
            drafts,
            targets,
            rows: Some(flat),
        })
    }

    /// Queue the log-probabilities of a greedy verdict's emitted tokens (`tokens`: the accepted
    /// drafts, then the next token unless an EOS ended the round), token `j` from row `j` of
    /// `logits` with the drafts before it as its penalty prefix. `rows` are the host rows when
    /// [`Self::greedy_choices`] read them; otherwise the rows of `tokens` are read now.
    pub(super) fn queue_greedy_logprobs(
        &mut self,
        top: usize,
        logits: &B::Array,
        rows: Option<Vec<f32>>,
        drafts: &[u32],
        tokens: &[u32],
    ) -> Result<(), B::Error> {
        if tokens.is_empty() {
            return Ok(());
        }
        let s = &mut *self.session;
        let backend = s.backend;
        let vocab = backend.shape(logits).last().copied().unwrap_or(1).max(1);
        let flat = match rows {
            Some(flat) => flat,
            None => backend.to_vec_f32(&backend.slice(logits, 1, 0, tokens.len())?)?,
        };
        for (j, (&id, row)) in tokens.iter().zip(flat.chunks(vocab)).enumerate() {
            let prefix = &drafts[..j.min(drafts.len())];
            let lp = s.sampler.greedy_logprobs(row, prefix, id, top)?;
            s.queue_logprobs(lp);
        }
        Ok(())
    }

    /// The greedy choice of logits `[1, 1, v]` after the history and `prefix`, without
    /// committing it (compare-serial's check).
    pub(super) fn greedy_choice(
        &self,
        logits: &B::Array,
        prefix: &[u32],
        position: usize,
    ) -> Result<u32, B::Error> {
        let s = &*self.session;
        let backend = s.backend;
        if s.device_argmax() {
            return s.device_choice(logits, position);
        }
        let row = backend.to_vec_f32(logits)?;
        check_row(&row, position)?;
        Ok(s.sampler.distribution(&row, prefix)?.argmax())
    }

    /// Append a greedy verdict's tokens (accepted drafts, then the next token) to the penalty
    /// history.
    pub(super) fn commit_greedy(&mut self, drafts: &[u32], verdict: &Verdict) {
        let accepted = &drafts[..verdict.accepted.min(drafts.len())];
        let s = &mut *self.session;
        s.sampler.commit(accepted);
        if let Some(next) = verdict.next {
            s.sampler.commit(&[next]);
        }
    }
}
