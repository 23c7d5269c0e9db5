//! [`MtpChain`]: an MTP head chained over single-position steps.

use super::{Draft, DraftMode, Proposer, ProposerKind, ProposerRun, RoundContext};
use crate::constraint::masked_logits;
use crate::model::MtpDrafter;
use crate::sampling::HostRows;
use crate::{Backend, CoreError};

/// An MTP drafter ("assistant" head) as a [`Proposer`]: the single-position chain that HF
/// transformers' Gemma 4 assisted generation runs (see [`MtpDrafter`]).
///
/// Step `j` feeds `concat(token_embeddings(x_j), h_j)` at `current`'s position, with `x_0 =
/// current` and `h_0` the target's draft hidden; the proposal `x_{j+1}` is the argmax of the
/// step's logits (greedy) or a draw from their distribution under the request's sampler
/// (sampled, with the drafts so far as the penalty prefix), and `h_{j+1}` the step's projected
/// hidden. Greedy chains stay on the device (with the evaluation overlap each step's
/// evaluation starts as soon as it is built); sampled chains read each step's logits row.
/// Under a constraint ([`RoundContext::guide`]) each step's logits are masked by the drafts
/// before it, and greedy chains read each draft (the next mask needs it).
#[derive(Debug, Clone, Copy)]
pub struct MtpChain<D>(pub D);

impl<B: Backend, D: MtpDrafter<B>> Proposer<B> for MtpChain<D> {
    fn kind(&self) -> ProposerKind {
        ProposerKind::Mtp
    }

    fn start<'p>(
        &'p self,
        _backend: &B,
        _prompt: &[u32],
    ) -> Result<Box<dyn ProposerRun<B> + 'p>, B::Error> {
        Ok(Box::new(ChainRun { drafter: &self.0 }))
    }
}

/// An [`MtpChain`]'s generation: stateless between rounds.
struct ChainRun<'p, D> {
    drafter: &'p D,
}

impl<B: Backend, D: MtpDrafter<B>> ProposerRun<B> for ChainRun<'_, D> {
    fn propose(
        &mut self,
        round: &mut RoundContext<'_, B>,
        depth: usize,
    ) -> Result<Option<Draft<B>>, B::Error> {
        let backend = round.backend;
        let mut hidden = match round.hidden {
            Some(h) => h.clone(),
            None => return Err(CoreError::Model("no target hidden to draft from".into()).into()),
        };
        let mut token = backend.from_u32(&[round.current], &[1, 1])?;
        let mut arrays = Vec::with_capacity(depth);
        let mut host = Vec::with_capacity(depth);
        let mut dists = Vec::with_capacity(depth);
        for _ in 0..depth {
            let embedding = round.target.token_embeddings(backend, &token)?;
            let input = backend.concat(&[&embedding, &hidden], 2)?;
            let step = self
                .drafter
                .draft_step(backend, &input, round.position, round.caches)?;
            hidden = step.projected;
            // Under a constraint the step's logits are masked by the drafts so far.
            let logits = match round.guide.as_deref_mut() {
                Some(guide) => {
                    let mask = guide.mask()?;
                    if mask.is_empty() {
                        break;
                    }
                    masked_logits(backend, &step.logits, &[mask])?
                }
                None => step.logits,
            };
            token = match round.mode {
                DraftMode::Sampled => {
                    let rows =
                        HostRows::read(backend, &logits, round.sampler.options(), round.position)?;
                    let q = round.sampler.distribution_of(rows.row(0), &host)?;
                    let id = round.sampler.sample(&q);
                    if let Some(guide) = round.guide.as_deref_mut() {
                        if !guide.push(id)? {
                            break;
                        }
                    }
                    host.push(id);
                    dists.push(q);
                    backend.from_u32(&[id], &[1, 1])?
                }
                DraftMode::Greedy => {
                    let id = backend.reshape(&backend.argmax(&logits, 2)?, &[1, 1])?;
                    if let Some(guide) = round.guide.as_deref_mut() {
                        // The guide needs each draft on the host to mask the next step.
                        let read = backend.to_vec_u32(&id)?;
                        let Some(&chosen) = read.first() else {
                            break;
                        };
                        if !guide.push(chosen)? {
                            break;
                        }
                        host.push(chosen);
                    } else if round.overlap {
                        backend.async_eval(&[&id, &hidden])?;
                    }
                    id
                }
            };
            arrays.push(token.clone());
        }
        if arrays.is_empty() {
            return Ok(None);
        }
        let refs: Vec<&B::Array> = arrays.iter().collect();
        let tokens = backend.concat(&refs, 1)?;
        let sampled = round.mode == DraftMode::Sampled;
        let on_host = sampled || round.guide.is_some();
        Ok(Some(Draft {
            tokens,
            host: on_host.then_some(host),
            dists: sampled.then_some(dists),
        }))
    }
}
