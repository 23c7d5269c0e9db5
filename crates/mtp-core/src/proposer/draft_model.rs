//! [`DraftModel`]: a small causal LM with the target's vocabulary as the proposer — classic
//! draft-target speculative decoding.

use super::{Draft, DraftMode, Proposer, ProposerKind, ProposerRun, RoundContext};
use crate::cache::{CacheSet, SpeculationSupport, Truncation};
use crate::constraint::masked_logits;
use crate::model::TargetModel;
use crate::sampling::HostRows;
use crate::{Backend, CoreError};

/// A draft model (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
/// Decoding"; Chen et al. 2023; HF transformers' `assistant_model`): any loadable causal LM
/// with the target's vocabulary drafts autoregressively from its own caches.
///
/// Each generation prefills the draft model's caches with the prompt. A round feeds the tokens
/// committed since the last round (at least `current`), then drafts `x_1 … x_k`: the argmax of
/// its logits (greedy) or a draw from their distribution under the request's sampler (sampled;
/// that distribution is `q`, with the drafts so far as the penalty prefix, exactly as the
/// target's rows are processed). `x_1 … x_{k-1}` are fed inside a speculation transaction of
/// the draft caches; the next round keeps the prefix of them the target accepted (the same
/// transaction the target's caches use) and rolls the rest back, so the draft caches always
/// hold a prefix of the committed history. When a cache cannot speculate (or the history was
/// rewritten behind it) the run cuts its caches back, or rebuilds them from the history.
///
/// The draft model must share the target's tokenizer; [`DraftModel::new`] checks the
/// vocabulary size.
#[derive(Debug, Clone)]
pub struct DraftModel<M> {
    model: M,
}

impl<M> DraftModel<M> {
    /// `model` as the draft model of a target whose vocabulary has `target_vocab` tokens;
    /// [`CoreError::InvalidOption`] when the vocabularies differ (drafts are target token ids).
    pub fn new<B: Backend>(model: M, target_vocab: usize) -> Result<Self, CoreError>
    where
        M: TargetModel<B>,
    {
        if model.vocab_size() != target_vocab {
            return Err(CoreError::InvalidOption {
                name: "draft model",
                value: format!(
                    "vocabulary of {} tokens for a target of {target_vocab}",
                    model.vocab_size()
                ),
                reason: "a draft model must share the target's vocabulary",
            });
        }
        Ok(Self { model })
    }

    /// The draft model.
    pub fn model(&self) -> &M {
        &self.model
    }
}

impl<B: Backend, M: TargetModel<B>> Proposer<B> for DraftModel<M> {
    fn kind(&self) -> ProposerKind {
        ProposerKind::Model
    }

    fn start<'p>(
        &'p self,
        backend: &B,
        prompt: &[u32],
    ) -> Result<Box<dyn ProposerRun<B> + 'p>, B::Error> {
        let mut run = DraftRun {
            model: &self.model as &dyn TargetModel<B>,
            caches: self.model.new_caches(backend)?,
            cached: Vec::new(),
            speculative: Vec::new(),
        };
        // Prefill what fits the draft model's context (the first round then feeds `current`).
        let fit = prompt.len().min(self.model.max_context().saturating_sub(1));
        run.feed(backend, &prompt[..fit])?;
        run.cached.extend_from_slice(&prompt[..fit]);
        Ok(Box::new(run))
    }
}

/// A [`DraftModel`]'s generation.
struct DraftRun<'p, B: Backend> {
    model: &'p dyn TargetModel<B>,
    caches: CacheSet<B>,
    /// The committed tokens whose keys and values the caches hold (outside any transaction).
    cached: Vec<u32>,
    /// Drafts fed inside the open transaction, after `cached` (empty when none is open).
    speculative: Vec<u32>,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<B: Backend> DraftRun<'_, B> {
    /// Run `ids` at the positions after `cached`; the logits of the last one, `[1, 1, vocab]`.
    fn feed(&mut self, backend: &B, ids: &[u32]) -> Result<Option<B::Array>, B::Error> {
        if ids.is_empty() {
            return Ok(None);
        }
        let start = self.cached.len() + self.speculative.len();
        let array = backend.from_u32(ids, &[1, ids.len()])?;
        let out = self
            .model
            .forward(backend, &array, start, &mut self.caches)?;
        let last = backend.slice(&out.hidden, 1, ids.len() - 1, 1)?;
        Ok(Some(self.model.unembed(backend, &last)?))
    }

    /// Bring the caches to a prefix of `committed` (the history before `current`): keep the
    /// accepted drafts of the open transaction, roll back the rest, and cut back (or rebuild)
    /// when the history diverges from what the caches hold.
    fn resync(&mut self, backend: &B, committed: &[u32]) -> Result<(), B::Error> {
        if self.caches.is_speculating() {
            let rest = committed.get(self.cached.len()..).unwrap_or(&[]);
            let keep = if common_prefix(&self.cached, committed) == self.cached.len() {
                common_prefix(&self.speculative, rest)
            } else {
                0
            };
            self.caches.commit_speculation(backend, keep)?;
            self.cached.extend_from_slice(&self.speculative[..keep]);
        }
        self.speculative.clear();
        let common = common_prefix(&self.cached, committed);
        if common < self.cached.len() {
            match self.caches.truncate(backend, common)? {
                Truncation::Possible => self.cached.truncate(common),
                Truncation::Impossible => {
                    self.caches = self.model.new_caches(backend)?;
                    self.cached.clear();
                }
            }
        }
        Ok(())
    }

    /// The next draft from `logits` (`[1, 1, vocab]`): the argmax (greedy) or a draw from
    /// the request's sampler (sampled, `drafted` the penalty prefix; its distribution goes to
    /// `dists`).
    fn pick(
        &self,
        round: &mut RoundContext<'_, B>,
        logits: &B::Array,
        position: usize,
        drafted: &[u32],
        dists: &mut Vec<crate::sampling::Distribution>,
    ) -> Result<u32, B::Error> {
        let backend = round.backend;
        match round.mode {
            DraftMode::Sampled => {
                let rows = HostRows::read(backend, logits, round.sampler.options(), position)?;
                let q = round.sampler.distribution_of(rows.row(0), drafted)?;
                let id = round.sampler.sample(&q);
                dists.push(q);
                Ok(id)
            }
            DraftMode::Greedy => {
                // The next step feeds this id, so it is read here either way.
                let id = backend.to_vec_u32(&backend.argmax(logits, 2)?)?;
                id.first().copied().ok_or_else(|| {
                    CoreError::Model("the draft model's argmax returned no id".into()).into()
                })
            }
        }
    }
}

impl<B: Backend> ProposerRun<B> for DraftRun<'_, B> {
    fn propose(
        &mut self,
        round: &mut RoundContext<'_, B>,
        depth: usize,
    ) -> Result<Option<Draft<B>>, B::Error> {
        let backend = round.backend;
        let Some((&current, committed)) = round.history.split_last() else {
            return Ok(None);
        };
        if current != round.current {
            return Err(CoreError::Model(format!(
                "the round's history ends with {current}, its current token is {}",
                round.current
            ))
            .into());
        }
        // Positions: `current` at `committed.len()`, drafts after it; all inside the draft
        // model's context.
        let room = self.model.max_context().saturating_sub(committed.len() + 1);
        let depth = depth.min(room);
        if depth == 0 {
            return Ok(None);
        }
        self.resync(backend, committed)?;
        let fresh = round.history[self.cached.len()..].to_vec();
        let Some(mut logits) = self.feed(backend, &fresh)? else {
            return Ok(None);
        };
        self.cached.extend_from_slice(&fresh);
        let speculating =
            depth > 1 && self.caches.begin_speculation(backend)? == SpeculationSupport::Started;
        let depth = if speculating { depth } else { 1 };
        let mut host = Vec::with_capacity(depth);
        let mut dists = Vec::new();
        for j in 0..depth {
            let position = committed.len() + 1 + j;
            // Under a constraint the logits are masked by the drafts so far.
            if let Some(guide) = round.guide.as_deref_mut() {
                let mask = guide.mask()?;
                if mask.is_empty() {
                    break;
                }
                logits = masked_logits(backend, &logits, &[mask])?;
            }
            let id = self.pick(round, &logits, position, &host, &mut dists)?;
            if let Some(guide) = round.guide.as_deref_mut() {
                if !guide.push(id)? {
                    dists.truncate(host.len());
                    break;
                }
            }
            host.push(id);
            if j + 1 < depth {
                logits = match self.feed(backend, &[id])? {
                    Some(l) => l,
                    None => break,
                };
                self.speculative.push(id);
            }
        }
        let sampled = round.mode == DraftMode::Sampled;
        Ok(Draft::from_host(backend, host)?.map(|draft| Draft {
            dists: sampled.then_some(dists),
            ..draft
        }))
    }
}
