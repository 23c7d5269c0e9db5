//! State shared by every decode loop: caches, position, the current token, emission and budget.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::phases::PhaseTimes;

use super::sink::{CancelToken, SinkFlow, TokenSink};
use super::stats::{DoneReason, MtpStats, Response};
use super::GenerateRequest;
use crate::cache::CacheSet;
use crate::constraint::{masked_logits, ActiveConstraint, Constraint, TokenMask};
use crate::model::{TargetModel, TargetOutput};
use crate::options::DecodeMode;
use crate::sampling::{Distribution, HostRows, LogitRow, Sampler, TokenLogprobs};
use crate::{Backend, CoreError};

/// Prompt tokens per prefill forward: a prompt goes through the target this many tokens at a
/// time, with cancellation checked between chunks. The attention scores of one forward then hold
/// at most this many query rows per head (512 rows × a 32k context × 4 bytes
/// is 64 MiB a head), while a chunk is still wide enough for the batched kernels' full speed.
pub const PREFILL_CHUNK: usize = 512;
/// One generation in progress.
pub(super) struct Session<'s, B: Backend> {
    pub backend: &'s B,
    pub target: &'s dyn TargetModel<B>,
    pub caches: &'s mut CacheSet<B>,
    pub eos: &'s [u32],
    pub sampler: Sampler,
    prompt: &'s [u32],
    sink: &'s mut dyn TokenSink,
    cancel: &'s CancelToken,
    /// Sampling is greedy without penalties: pick tokens with a device argmax (top-k, top-p and
    /// min-p cannot change the argmax).
    device_argmax: bool,
    /// How many alternatives each token's log-probabilities carry; `None`: none requested.
    top_logprobs: Option<usize>,
    /// Log-probabilities of tokens chosen and not yet emitted, in emission order.
    pending: VecDeque<TokenLogprobs>,
    /// Log-probabilities of the emitted tokens.
    scored: Vec<TokenLogprobs>,
    tokens: Vec<u32>,
    budget: usize,
    /// The tokens asked for (`budget` is this capped by the context).
    num_predict: usize,
    /// The next position to write: where `current` goes.
    pub position: usize,
    /// Prompt positions the caches held already (prefix reuse): prefill starts after them.
    cached: usize,
    /// Prompt tokens per prefill forward ([`PREFILL_CHUNK`] unless the engine says otherwise).
    pub prefill_chunk: usize,
    /// The newest token, not yet in the caches: emitted, or (between a verdict and its
    /// emission) about to be.
    pub current: u32,
    /// The target's draft hidden at `position - 1`, `[1, 1, h]`.
    pub hidden: Option<B::Array>,
    done: Option<DoneReason>,
    started: Instant,
    prompt_eval: Duration,
    first_token_at: Option<Instant>,
    pub target_time: Duration,
    /// Time in the parts of a round the session times itself (forwards, unembeddings, cache
    /// commits).
    pub phases: PhaseTimes,
    /// The request's constraint, advanced by every chosen token.
    pub constraint: Option<ActiveConstraint>,
    /// Tokens the constraint was advanced by (emitted or about to be).
    constraint_tokens: usize,
    /// Whether generation ended at an EOS token (chosen, not emitted).
    ended_at_eos: bool,
}

impl<'s, B: Backend> Session<'s, B> {
    pub fn new(
        backend: &'s B,
        target: &'s dyn TargetModel<B>,
        caches: &'s mut CacheSet<B>,
        request: &'s GenerateRequest,
        sink: &'s mut dyn TokenSink,
        cancel: &'s CancelToken,
    ) -> Result<Self, CoreError> {
        let sampler = Sampler::new(request.sampling.clone(), &request.prompt)?;
        let room = target.max_context().saturating_sub(request.prompt.len());
        let device_argmax = request.sampling.is_device_argmax();
        let cached = caches.position();
        let constraint = match &request.constraint {
            Some(source) => Some(ActiveConstraint::new(
                source.start(target.vocab_size())?,
                &request.eos,
            )),
            None => None,
        };
        if cached >= request.prompt.len() {
            return Err(CoreError::Cache(format!(
                "the caches hold {cached} positions of a {}-token prompt: at least its last \
                 token must be evaluated",
                request.prompt.len()
            )));
        }
        Ok(Self {
            backend,
            target,
            caches,
            eos: &request.eos,
            sampler,
            prompt: &request.prompt,
            sink,
            cancel,
            device_argmax,
            top_logprobs: request.logprobs.top(),
            pending: VecDeque::new(),
            scored: Vec::new(),
            tokens: Vec::new(),
            budget: request.num_predict.min(room),
            num_predict: request.num_predict,
            position: cached,
            cached,
            prefill_chunk: PREFILL_CHUNK,
            current: 0,
            hidden: None,
            done: None,
            started: Instant::now(),
            prompt_eval: Duration::ZERO,
            first_token_at: None,
            target_time: Duration::ZERO,
            phases: PhaseTimes::default(),
            constraint,
            constraint_tokens: 0,
            ended_at_eos: false,
        })
    }

    /// Tokens generated so far.
    pub fn generated(&self) -> usize {
        self.tokens.len()
    }

    /// Tokens still allowed (at least 1 while not done).
    pub fn remaining(&self) -> usize {
        self.budget.saturating_sub(self.tokens.len())
    }

    pub fn is_done(&self) -> bool {
        self.done.is_some()
    }

    /// Whether the cancel token is set (without marking the session done).
    pub fn cancel_requested(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Check for cancellation; marks the session done when cancelled.
    pub fn cancelled(&mut self) -> bool {
        if self.done.is_none() && self.cancel.is_cancelled() {
            self.done = Some(DoneReason::Cancelled);
        }
        self.done == Some(DoneReason::Cancelled)
    }

    /// Emit one token: EOS ends with `Stop` (not emitted), the sink may cancel, and reaching the
    /// budget ends with `Length`. Returns whether generation continues.
    ///
    /// With log-probabilities requested, the oldest queued entry ([`Self::queue_logprobs`]) is
    /// the token's: it goes to the sink with it and into the response.
    pub fn emit(&mut self, id: u32) -> bool {
        let scored = self.pending.pop_front();
        debug_assert!(
            scored.as_ref().is_none_or(|lp| lp.id == id),
            "log-probabilities out of step with the emitted tokens"
        );
        if self.done.is_some() {
            return false;
        }
        if self.eos.contains(&id) {
            self.done = Some(DoneReason::Stop);
            self.ended_at_eos = true;
            return false;
        }
        self.tokens.push(id);
        let flow = match scored {
            Some(lp) => {
                let flow = self.sink.scored_token(id, &lp);
                self.scored.push(lp);
                flow
            }
            None => self.sink.token(id),
        };
        if flow == SinkFlow::Stop {
            self.done = Some(DoneReason::Cancelled);
            return false;
        }
        if self.tokens.len() >= self.budget {
            self.done = Some(DoneReason::Length);
            return false;
        }
        true
    }

    /// A `[1, t]` id array.
    pub fn ids(&self, ids: &[u32]) -> Result<B::Array, B::Error> {
        self.backend.from_u32(ids, &[1, ids.len()])
    }

    /// Run the target over `ids` at the current position on the live caches.
    pub fn forward_live(&mut self, ids: &B::Array) -> Result<TargetOutput<B>, B::Error> {
        let t0 = Instant::now();
        let t = self.backend.shape(ids).get(1).copied().unwrap_or(0);
        let out = self
            .target
            .forward(self.backend, ids, self.position, self.caches)?;
        self.position += t;
        let spent = t0.elapsed();
        self.target_time += spent;
        self.phases.forward += spent;
        Ok(out)
    }

    /// Logits `[1, 1, v]` of row `row` of a forward's hidden states.
    pub fn row_logits(&mut self, hidden: &B::Array, row: usize) -> Result<B::Array, B::Error> {
        let t0 = Instant::now();
        let h = self.backend.slice(hidden, 1, row, 1)?;
        let logits = self.target.unembed(self.backend, &h);
        self.phases.unembed += t0.elapsed();
        logits
    }

    /// Choose the next token from logits `[1, 1, v]` with the request's sampling, committing it
    /// to the sampler's history.
    ///
    /// The logits are those of the newest forwarded position (`position - 1`); non-finite logits
    /// are [`CoreError::NonFiniteLogits`].
    ///
    /// With log-probabilities requested, the chosen token's are queued for its emission (read
    /// from the same row; the device-argmax path then also reads the row itself).
    pub fn choose(&mut self, logits: &B::Array) -> Result<u32, B::Error> {
        let mask = self.current_mask()?;
        if let Some(mask) = &mask {
            if self.device_argmax && self.top_logprobs.is_none() {
                // The unmasked argmax, when allowed, is the masked one: the bias is built only
                // where the constraint changes the choice.
                let id = self.device_choice(logits, self.position.saturating_sub(1))?;
                if mask.allows(id) {
                    self.sampler.commit(&[id]);
                    self.advance_constraint(&[id])?;
                    return Ok(id);
                }
            }
        }
        let masked;
        let logits = match mask {
            Some(mask) => {
                masked = masked_logits(self.backend, logits, &[mask])?;
                &masked
            }
            None => logits,
        };
        let row_position = self.position.saturating_sub(1);
        let (id, scored) = if self.device_argmax {
            let id = self.device_choice(logits, row_position)?;
            let scored = match self.top_logprobs {
                Some(top) => {
                    let row = self.backend.to_vec_f32(logits)?;
                    Some(self.sampler.greedy_logprobs(&row, &[], id, top)?)
                }
                None => None,
            };
            (id, scored)
        } else {
            let host = HostRows::read(self.backend, logits, self.sampler.options(), row_position)?;
            if let Some(row) = host.dense() {
                check_row(row, row_position)?;
            }
            let dist = self.sampler.distribution_of(host.row(0), &[])?;
            let id = self.sampler.sample(&dist);
            let scored = match self.top_logprobs {
                Some(top) => Some(self.logprobs_of(host.row(0), &dist, &[], id, top)?),
                None => None,
            };
            (id, scored)
        };
        self.sampler.commit(&[id]);
        self.advance_constraint(&[id])?;
        self.pending.extend(scored);
        Ok(id)
    }

    /// The constraint's mask for the next token; `None` without a constraint.
    pub fn current_mask(&mut self) -> Result<Option<TokenMask>, CoreError> {
        self.constraint.as_mut().map(|c| c.mask()).transpose()
    }

    /// Advance the constraint (if any) by chosen tokens.
    pub fn advance_constraint(&mut self, ids: &[u32]) -> Result<(), CoreError> {
        match &mut self.constraint {
            Some(c) => {
                c.advance(ids)?;
                self.constraint_tokens += ids.len();
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Whether the constraint's text is complete as far as it was emitted: a round's tokens
    /// advance the constraint before they are emitted, so tokens an early end (a sink that
    /// stops, the budget) left unemitted are rolled back first.
    fn emitted_text_complete(&mut self) -> Option<bool> {
        let consumed = self.tokens.len() + usize::from(self.ended_at_eos);
        let excess = self.constraint_tokens.saturating_sub(consumed);
        let constraint = self.constraint.as_mut()?;
        if excess > 0 {
            if let Err(error) = constraint.rollback(excess) {
                tracing::warn!(target: "mtp", %error, "rolling back unemitted tokens failed");
                return Some(false);
            }
        }
        Some(constraint.is_complete())
    }

    /// Whether the constraint allows nothing more: then the session ends here with
    /// [`DoneReason::Stop`] (its text complete; an error when not).
    pub fn constraint_exhausted(&mut self) -> Result<bool, CoreError> {
        let Some(constraint) = &mut self.constraint else {
            return Ok(false);
        };
        if constraint.exhausted()? {
            if self.done.is_none() {
                self.done = Some(DoneReason::Stop);
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// How many alternatives the request's log-probabilities carry; `None` when it asked for
    /// none.
    pub fn top_logprobs(&self) -> Option<usize> {
        self.top_logprobs
    }

    /// Queue the log-probabilities of the next token to be emitted after those queued already.
    pub fn queue_logprobs(&mut self, logprobs: TokenLogprobs) {
        self.pending.push_back(logprobs);
    }

    /// The log-probabilities reported for `id`, chosen from `row` (whose distribution after the
    /// history and `prefix` is `dist`): the distribution's at temperature > 0, the penalised
    /// logits' `log_softmax` at temperature 0, which needs the whole row (greedy rows are
    /// always read whole).
    pub fn logprobs_of(
        &self,
        row: LogitRow<'_>,
        dist: &Distribution,
        prefix: &[u32],
        id: u32,
        top: usize,
    ) -> Result<TokenLogprobs, CoreError> {
        if !self.sampler.options().is_greedy() {
            return Ok(dist.logprobs(id, top));
        }
        match row {
            LogitRow::Dense(logits) => self.sampler.greedy_logprobs(logits, prefix, id, top),
            LogitRow::Top { .. } | LogitRow::Head { .. } => Err(CoreError::Model(
                "greedy log-probabilities need the whole logits row".into(),
            )),
        }
    }

    /// The argmax of logits `[1, 1, v]` (the row at `position`), read with its non-finite
    /// flag: an error when the row is not finite.
    pub fn device_choice(&self, logits: &B::Array, position: usize) -> Result<u32, B::Error> {
        let (ids, flags) = self.checked_argmax(logits)?;
        let read = self
            .backend
            .to_vec_u32(&self.backend.concat(&[&ids, &flags], 1)?)?;
        check_flags(&read[1..], position)?;
        Ok(first(read)?)
    }

    /// The argmax ids `[1, t]` of logits `[1, t, v]` and each row's non-finite flag `[1, t]`
    /// ([`Backend::non_finite_rows`]), both still on the device: read them together.
    pub fn checked_argmax(&self, logits: &B::Array) -> Result<(B::Array, B::Array), B::Error> {
        let b = self.backend;
        let t = b.shape(logits).get(1).copied().unwrap_or(1);
        let ids = b.reshape(&b.argmax(logits, 2)?, &[1, t])?;
        let flags = b.reshape(&b.non_finite_rows(logits, 2)?, &[1, t])?;
        Ok((ids, flags))
    }

    /// Evaluate the prompt, choose and emit the first token.
    ///
    /// The prompt goes through the target `prefill_chunk` tokens at a time ([`PREFILL_CHUNK`]
    /// by default), so one forward's
    /// attention scores span at most `PREFILL_CHUNK × context` (memory linear in the prompt,
    /// not quadratic), and cancellation is checked between chunks: a cancelled request stops
    /// within one chunk, its caches holding the chunks evaluated.
    pub fn prefill(&mut self) -> Result<(), B::Error> {
        if self.budget == 0 {
            self.done = Some(DoneReason::Length);
            return Ok(());
        }
        let mut start = self.cached;
        let mut last_chunk = None;
        while start < self.prompt.len() {
            if start > self.cached && self.cancelled() {
                return Ok(());
            }
            let end = (start + self.prefill_chunk.max(1)).min(self.prompt.len());
            let ids = self.ids(&self.prompt[start..end])?;
            let out = self.forward_live(&ids)?;
            if end < self.prompt.len() {
                // A lazy backend evaluates each chunk before building the next one's graph.
                self.backend.eval(&[&out.hidden])?;
            }
            last_chunk = Some((out, end - start));
            start = end;
        }
        let Some((out, len)) = last_chunk else {
            return Err(
                CoreError::Cache("prefill found no prompt token left to evaluate".into()).into(),
            );
        };
        let last = len - 1;
        if self.constraint_exhausted()? {
            return Ok(());
        }
        let logits = self.row_logits(&out.hidden, last)?;
        let first_token = self.choose(&logits)?;
        self.hidden = Some(self.backend.slice(&out.draft_hidden, 1, last, 1)?);
        self.current = first_token;
        self.prompt_eval = self.started.elapsed();
        self.first_token_at = Some(Instant::now());
        self.emit(first_token);
        Ok(())
    }

    /// Whether tokens are chosen by a device argmax (greedy with neutral processing).
    pub fn device_argmax(&self) -> bool {
        self.device_argmax
    }

    /// Forward `ids` (`[1, 1]`, possibly not yet evaluated) on the live caches and return the
    /// lazy argmax of its logits with their non-finite flag, with its evaluation started.
    pub fn forward_argmax(&mut self, ids: &B::Array) -> Result<DeviceToken<B>, B::Error> {
        let out = self.forward_live(ids)?;
        let logits = self.row_logits(&out.hidden, 0)?;
        let (id, flag) = self.checked_argmax(&logits)?;
        let checked = self.backend.concat(&[&id, &flag], 1)?;
        self.backend.async_eval(&[&checked])?;
        self.hidden = Some(out.draft_hidden);
        Ok(DeviceToken {
            id,
            checked,
            position: self.position - 1,
        })
    }

    /// Read a token chosen on the device (an error when its logits were not finite), commit it
    /// to the sampler's history, make it `current` and emit it. Returns whether generation
    /// continues.
    pub fn take_device_token(&mut self, token: &DeviceToken<B>) -> Result<bool, B::Error> {
        let read = self.backend.to_vec_u32(&token.checked)?;
        check_flags(&read[1..], token.position)?;
        let id = first(read)?;
        self.sampler.commit(&[id]);
        self.current = id;
        Ok(self.emit(id))
    }

    /// One plain decode step: forward `current`, choose and emit the next token.
    pub fn plain_step(&mut self) -> Result<(), B::Error> {
        let next = self.plain_token()?;
        self.emit(next);
        Ok(())
    }

    /// A plain decode step up to emission: forward `current` and choose the next token, which
    /// becomes `current` (the caller emits it).
    pub fn plain_token(&mut self) -> Result<u32, B::Error> {
        let ids = self.ids(&[self.current])?;
        let out = self.forward_live(&ids)?;
        let logits = self.row_logits(&out.hidden, 0)?;
        let next = self.choose(&logits)?;
        self.hidden = Some(out.draft_hidden);
        self.current = next;
        Ok(next)
    }

    pub fn into_response(mut self, mode: DecodeMode, mtp: Option<MtpStats>) -> Response {
        let eval_duration = self.first_token_at.map_or(Duration::ZERO, |t| t.elapsed());
        let generated = self.tokens.len();
        let done_reason = self.done.unwrap_or(DoneReason::Length);
        let context_full = done_reason == DoneReason::Length && self.budget < self.num_predict;
        let constraint_complete = self.emitted_text_complete();
        Response {
            tokens: self.tokens,
            done_reason,
            mode,
            prompt_eval_count: self.prompt.len() - self.cached,
            prompt_cached: self.cached,
            prompt_eval_duration: self.prompt_eval,
            eval_count: generated,
            eval_duration,
            mtp,
            speculation_off: None,
            context_full,
            logprobs: self.scored,
            constraint_complete,
        }
    }
}

/// A token chosen on the device and not yet read.
pub(super) struct DeviceToken<B: Backend> {
    /// The id `[1, 1]` (the next forward's input).
    pub id: B::Array,
    /// The id and its logits row's non-finite flag `[1, 2]` (what the host reads).
    checked: B::Array,
    /// The position whose logits chose it.
    position: usize,
}

/// [`CoreError::NonFiniteLogits`] for the first set flag; `flags[i]` is the row at position
/// `first_position + i`.
pub(super) fn check_flags(flags: &[u32], first_position: usize) -> Result<(), CoreError> {
    match flags.iter().position(|&f| f != 0) {
        Some(i) => Err(CoreError::NonFiniteLogits {
            position: first_position + i,
        }),
        None => Ok(()),
    }
}

/// [`CoreError::NonFiniteLogits`] when a host logits row holds a NaN or +∞ or nothing finite
/// (the host side of [`Backend::non_finite_rows`]).
pub(super) fn check_row(row: &[f32], position: usize) -> Result<(), CoreError> {
    let bad =
        row.iter().any(|l| l.is_nan() || *l == f32::INFINITY) || !row.iter().any(|l| l.is_finite());
    if bad {
        Err(CoreError::NonFiniteLogits { position })
    } else {
        Ok(())
    }
}

/// The single element of a host read.
pub(super) fn first(values: Vec<u32>) -> Result<u32, CoreError> {
    values
        .first()
        .copied()
        .ok_or_else(|| CoreError::Model("a host read returned no value".into()))
}
