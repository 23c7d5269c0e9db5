//! The decode engine: plain decode, greedy MTP and sampled MTP over any [`Backend`].
//!
//! # Round shape
//!
//! After prefill the engine holds `current`, the newest token (already emitted, not yet in the
//! caches), and the target's draft hidden at the position before it. Each speculative round:
//!
//! 1. **draft** — the drafter chains `depth` single-position steps from
//!    `(embed(current), hidden)`, every step at `current`'s position (see [`MtpDrafter`]);
//! 2. **verify** — one fused target forward over `[current, d1 .. dk]` inside a cache speculation
//!    transaction; row `i` of its logits judges draft `i + 1`, row `k` gives the bonus token;
//! 3. **accept** — the [`acceptance`](crate::acceptance) rules pick the accepted prefix and the
//!    next token; the caches keep `current` and the accepted drafts (an accepted EOS is not
//!    kept), and the accepted tokens and the next one are emitted.
//!
//! Greedy rounds read the target's argmax ids and the draft ids in one host read. Serial
//! validation (forced, or when a cache cannot speculate) forwards one token at a time on the live
//! caches and never rolls back. Compare-serial re-runs each batched round serially on a fork and
//! reports the first disagreement.
//!
//! # Costs
//!
//! Greedy rounds without penalties make one host read per round (draft ids and target argmax ids
//! together) plus the drafter's own steps, which stay on the device. Sampled rounds sample on the
//! host with the seeded [`Sampler`](crate::sampling::Sampler), so that every backend draws the
//! same tokens for a seed: each draft step reads its logits row, and verification reads the
//! `k + 1` logits rows — only their top candidates when top-k (or top-p / min-p with bounds on
//! the row's mass) lets a device-side top-k settle them, else the whole row. Drafting at depth 0 is a
//! plain step: no drafter call and no speculation transaction.
//!
//! On a lazy backend ([`Execution::Lazy`](crate::Execution), MLX) a greedy round is one graph
//! evaluated at that one read. With [`EvalOverlap`] (on by default for lazy backends) the engine
//! also starts each draft step's evaluation as soon as it is built
//! ([`Backend::async_eval`]) and builds the next round's drafts before emitting a round's
//! tokens, and greedy plain decode runs one token ahead (each look-ahead forward in a
//! one-position cache transaction, rolled back when its token ends the run), so the device
//! computes while the host builds graphs, detokenizes and prints.
//!
//! # Log-probabilities
//!
//! With [`GenerateRequest::logprobs`] set, every emitted token comes with its log-probability
//! and the top alternatives ([`TokenLogprobs`](crate::sampling::TokenLogprobs)), computed from
//! the logits row the engine already has for its position: the plain step's row, or row `i`
//! of the target's batched verification forward for the `i`-th accepted draft and for the
//! bonus or correction token, with the penalty context of that position (the history and the
//! drafts before it). The distribution is the request's sampling transform; at temperature 0
//! it is `log_softmax` of the penalised logits (see [`crate::sampling::logprobs`]). Plain and
//! speculative decoding therefore report the same values (up to the rounding of a batched
//! forward), and speculation stays on. The cost, only when asked: greedy rounds also read the
//! kept verification rows to the host (sampled rounds read them anyway), and greedy plain
//! decode gives up its one-token look-ahead (it reads each row).
//!
//! # Guarantees
//!
//! Greedy MTP emits exactly the tokens of plain greedy decode; sampled MTP emits tokens with the
//! target's distribution (Leviathan et al. 2023; Chen et al. 2023). Both are property-tested in
//! this crate against the plain loop, which is written separately as the oracle.

pub mod batch;
mod greedy_verify;
mod overlap;
mod phases;
mod plain;
mod prefix;
mod session;
mod sink;
mod speculative;
mod stats;
mod verify;

pub use overlap::EvalOverlap;
pub use prefix::{PrefixCache, PrefixReuse};
pub use session::PREFILL_CHUNK;
pub use sink::{CancelToken, DiscardSink, ScoredSink, SinkFlow, TokenSink};
pub use stats::{DoneReason, MtpStats, PositionCounts, ProposerCounts, Response};

use std::sync::Arc;

use crate::acceptance::AcceptanceRules;
use crate::cache::CacheSet;
use crate::constraint::ConstraintSource;
use crate::model::{MtpDrafter, TargetModel};
use crate::options::MtpOptions;
use crate::options::{
    decode_mode, speculation_off, DecodeMode, DraftOverrides, DrafterPresence, LogprobsRequest,
    SpeculationOff,
};
use crate::proposer::{MtpChain, Proposer};
use crate::sampling::SamplerOptions;
use crate::schedule::ScheduleMemory;
use crate::{Backend, CoreError};

/// Where the engine reads `MTP_*` environment settings from.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// One generation request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    /// Prompt token ids (at least one).
    pub prompt: Vec<u32>,
    /// Sampling options (default: greedy).
    pub sampling: SamplerOptions,
    /// Most tokens to generate (capped by the context).
    pub num_predict: usize,
    /// Token ids that end generation.
    pub eos: Vec<u32>,
    /// Per-request draft overrides.
    pub draft: DraftOverrides,
    /// Whether the log-probability of each emitted token (and how many alternatives) is
    /// requested: sent to the sink's [`TokenSink::scored_token`] and kept in
    /// [`Response::logprobs`]. Speculation stays on (see the module docs, *Log-probabilities*).
    pub logprobs: LogprobsRequest,
    /// A constraint on the generated text (a JSON schema, a tool-call grammar): every token is
    /// chosen from the target's distribution masked to what it allows, speculation included
    /// (see [`crate::constraint`]); `None`: unconstrained.
    pub constraint: Option<ConstraintSource>,
}

impl GenerateRequest {
    /// A greedy request for `num_predict` tokens after `prompt`, with no EOS.
    pub fn greedy(prompt: Vec<u32>, num_predict: usize) -> Self {
        Self {
            prompt,
            sampling: SamplerOptions::default(),
            num_predict,
            eos: Vec::new(),
            draft: DraftOverrides::default(),
            logprobs: LogprobsRequest::None,
            constraint: None,
        }
    }
}

/// The decode engine for one target (and optionally proposers: an MTP drafter, prompt lookup,
/// a draft model, ... — one or several) on one backend.
///
/// ```
/// use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
/// use mtp_core::reference::ReferenceBackend;
/// use mtp_core::testing::{TinyConfig, TinyDrafter, TinyDrafterConfig, TinyTarget};
///
/// # fn main() -> Result<(), mtp_core::CoreError> {
/// let backend = ReferenceBackend::default();
/// let target = TinyTarget::new(&backend, TinyConfig::default())?;
/// let drafter = TinyDrafter::new(&backend, &target, TinyDrafterConfig::default())?;
/// let request = GenerateRequest::greedy(vec![1, 2, 3], 16);
///
/// let plain = Engine::new(&backend, &target)
///     .generate(&request, &mut DiscardSink, &CancelToken::new())?;
/// let mut streamed = Vec::new();
/// let mtp = Engine::new(&backend, &target).with_drafter(&drafter).generate(
///     &request,
///     &mut |id| {
///         streamed.push(id);
///         mtp_core::engine::SinkFlow::Continue
///     },
///     &CancelToken::new(),
/// )?;
/// assert_eq!(mtp.tokens, plain.tokens); // greedy MTP changes speed, never the output
/// assert_eq!(streamed, mtp.tokens);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Engine<'m, B: Backend> {
    backend: &'m B,
    target: &'m dyn TargetModel<B>,
    /// What drafts, in the order given (empty: plain decode).
    proposers: Vec<ProposerSlot<'m, B>>,
    rules: AcceptanceRules,
    env: EnvLookup,
    overlap: EvalOverlap,
    schedules: ScheduleMemory,
    /// Asked before each round whether to draft at all (a batch's policy); `None`: always.
    switch: Option<&'m dyn SpeculationSwitch>,
    /// Prompt tokens per prefill forward.
    prefill_chunk: usize,
}

/// Says, before each speculative round, whether the round may draft; a round that may not is a
/// plain step. A continuous batch uses it to turn speculation off where it stops paying at the
/// current batch size ([`batch`]), and to tell the sequence which of its wall time was spent on
/// other sequences' work.
pub trait SpeculationSwitch {
    /// Whether the next round may draft.
    fn speculate(&self) -> bool;

    /// Time so far that this sequence's generation waited on work not its own (a monotonic
    /// total): in a batch, the other sequences' host work and their share of each batched pass.
    /// The engine leaves it out of the round times its draft schedule learns from, so that a
    /// schedule in a batch weighs what its own drafting costs (its own host time and its share
    /// of the passes), as it does alone; otherwise another sequence's slow work would look like
    /// the cost of this one's plain rounds. Zero by default (a sequence alone).
    fn others_time(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

/// What the engine drafts with: borrowed, so an engine is cheap to clone and drops nothing.
enum ProposerSlot<'m, B: Backend> {
    /// An MTP drafter, chained as an [`MtpChain`].
    Drafter(&'m dyn MtpDrafter<B>),
    /// Any proposer.
    Proposer(&'m dyn Proposer<B>),
}

impl<B: Backend> Clone for ProposerSlot<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for ProposerSlot<'_, B> {}

impl<B: Backend> ProposerSlot<'_, B> {
    fn kind(self) -> crate::proposer::ProposerKind {
        match self {
            ProposerSlot::Drafter(_) => crate::proposer::ProposerKind::Mtp,
            ProposerSlot::Proposer(p) => p.kind(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for Engine<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("backend", &self.backend.name())
            .field(
                "proposers",
                &self.proposers.iter().map(|p| p.kind()).collect::<Vec<_>>(),
            )
            .field("rules", &self.rules)
            .field("overlap", &self.overlap)
            .finish()
    }
}

impl<'m, B: Backend> Engine<'m, B> {
    /// An engine for `target` alone (plain decode), reading `MTP_*` settings from the process
    /// environment.
    pub fn new(backend: &'m B, target: &'m dyn TargetModel<B>) -> Self {
        Self {
            backend,
            target,
            proposers: Vec::new(),
            rules: AcceptanceRules::default(),
            env: Arc::new(|key| std::env::var(key).ok()),
            overlap: EvalOverlap::default(),
            schedules: ScheduleMemory::new(),
            switch: None,
            prefill_chunk: PREFILL_CHUNK,
        }
    }

    /// The same engine verifying with `target` instead (a continuous batch hands each sequence
    /// a target that joins the batch's forwards).
    pub fn with_target(mut self, target: &'m dyn TargetModel<B>) -> Self {
        self.target = target;
        self
    }

    /// Ask `switch` before each speculative round whether to draft (see [`SpeculationSwitch`]).
    pub fn with_switch(mut self, switch: &'m dyn SpeculationSwitch) -> Self {
        self.switch = Some(switch);
        self
    }

    /// Keep the adaptive schedule's learned state in `schedules` (shared with whoever holds a
    /// clone of it, e.g. the engines of later requests on the same model pair). A new engine
    /// has a memory of its own; clones of an engine share it.
    pub fn with_schedule_memory(mut self, schedules: ScheduleMemory) -> Self {
        self.schedules = schedules;
        self
    }

    /// Where the adaptive schedule's learned state is kept.
    pub fn schedule_memory(&self) -> &ScheduleMemory {
        &self.schedules
    }

    /// Use `drafter` for MTP (as an [`MtpChain`]), replacing any proposer or drafter set
    /// before.
    pub fn with_drafter(mut self, drafter: &'m dyn MtpDrafter<B>) -> Self {
        self.proposers = vec![ProposerSlot::Drafter(drafter)];
        self
    }

    /// Draft with `proposer` (an [`MtpChain`], an
    /// [`NgramProposer`](crate::proposer::NgramProposer), a
    /// [`DraftModel`](crate::proposer::DraftModel), ...), replacing any proposer or drafter
    /// set before.
    pub fn with_proposer(mut self, proposer: &'m dyn Proposer<B>) -> Self {
        self.proposers = vec![ProposerSlot::Proposer(proposer)];
        self
    }

    /// Draft also with `proposer`, beside those set before. With several proposers on, each
    /// round drafts with the one whose running expected accepted length is highest (each is
    /// tried once first; one that has nothing to propose yields to the next; one not chosen
    /// for a while is tried again), each with its own draft schedule (and adaptive state);
    /// [`MtpStats::per_proposer`] counts each one's rounds.
    pub fn also_proposer(mut self, proposer: &'m dyn Proposer<B>) -> Self {
        self.proposers.push(ProposerSlot::Proposer(proposer));
        self
    }

    /// Draft also with `drafter` (as an [`MtpChain`]), beside the proposers set before (see
    /// [`also_proposer`](Self::also_proposer)).
    pub fn also_drafter(mut self, drafter: &'m dyn MtpDrafter<B>) -> Self {
        self.proposers.push(ProposerSlot::Drafter(drafter));
        self
    }

    /// Read `MTP_*` settings through `env` instead of the process environment (tests, servers).
    pub fn with_env(mut self, env: EnvLookup) -> Self {
        self.env = env;
        self
    }

    /// Forward a prompt `tokens` at a time ([`PREFILL_CHUNK`] by default; at least 1),
    /// checking for cancellation between chunks. A continuous batch sets its own chunk, so a
    /// joining prompt shares each pass with the running sequences.
    pub fn with_prefill_chunk(mut self, tokens: usize) -> Self {
        self.prefill_chunk = tokens.max(1);
        self
    }

    /// Choose the evaluation overlap ([`EvalOverlap::Auto`] by default).
    pub fn with_overlap(mut self, overlap: EvalOverlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// Replace the acceptance rules (tests use this to show that a wrong rule is caught).
    pub fn with_rules(mut self, rules: AcceptanceRules) -> Self {
        self.rules = rules;
        self
    }

    /// The MTP options a request resolves to (model defaults, then environment, then request),
    /// with the draft depths clamped to the target's context: a round verifies `current` and
    /// its drafts in one forward, so at most `max_context - 1` drafts fit.
    pub fn mtp_options(&self, request: &GenerateRequest) -> Result<MtpOptions, CoreError> {
        let env = self.env.clone();
        let mut options = MtpOptions::resolve(
            &self.target.mtp_defaults(),
            &move |k| env(k),
            &request.draft,
        )?;
        let room = self.target.max_context().saturating_sub(1).max(1);
        options.max_draft_tokens = options.max_draft_tokens.min(room);
        options.initial_draft_tokens = options.initial_draft_tokens.min(options.max_draft_tokens);
        Ok(options)
    }

    /// How a request will be decoded.
    pub fn decode_mode(&self, request: &GenerateRequest) -> Result<DecodeMode, CoreError> {
        let options = self.mtp_options(request)?;
        Ok(self.mode_for(request, &options))
    }

    fn mode_for(&self, request: &GenerateRequest, options: &MtpOptions) -> DecodeMode {
        decode_mode(&request.sampling, options, self.presence())
    }

    /// Why `request` decodes without speculation, or `None` when it speculates.
    pub fn speculation_off(
        &self,
        request: &GenerateRequest,
    ) -> Result<Option<SpeculationOff>, CoreError> {
        let options = self.mtp_options(request)?;
        Ok(self.off_reason(request, &options))
    }

    fn off_reason(
        &self,
        request: &GenerateRequest,
        options: &MtpOptions,
    ) -> Option<SpeculationOff> {
        speculation_off(&request.sampling, options, self.presence())
    }

    fn presence(&self) -> DrafterPresence {
        if self.proposers.is_empty() {
            DrafterPresence::Absent
        } else {
            DrafterPresence::Loaded
        }
    }

    /// Generate with fresh caches.
    pub fn generate(
        &self,
        request: &GenerateRequest,
        sink: &mut dyn TokenSink,
        cancel: &CancelToken,
    ) -> Result<Response, B::Error> {
        let mut caches = self.target.new_caches(self.backend)?;
        self.generate_with_caches(&mut caches, request, sink, cancel)
    }

    /// Generate into caller-provided, empty caches (so the caller can inspect them afterwards).
    pub fn generate_with_caches(
        &self,
        caches: &mut CacheSet<B>,
        request: &GenerateRequest,
        sink: &mut dyn TokenSink,
        cancel: &CancelToken,
    ) -> Result<Response, B::Error> {
        self.check_request(request)?;
        if caches.position() != 0 || caches.is_speculating() {
            return Err(CoreError::Cache(format!(
                "generation needs empty caches; these hold {} positions",
                caches.position()
            ))
            .into());
        }
        self.generate_after_cached(caches, request, sink, cancel)
    }

    /// Generate into `caches`, which may hold the keys and values of a prefix of the prompt
    /// (shorter than it; prefill evaluates the rest).
    fn generate_after_cached(
        &self,
        caches: &mut CacheSet<B>,
        request: &GenerateRequest,
        sink: &mut dyn TokenSink,
        cancel: &CancelToken,
    ) -> Result<Response, B::Error> {
        request.sampling.validate()?;
        request.logprobs.validate()?;
        let options = self.mtp_options(request)?;
        let mode = self.mode_for(request, &options);
        let mut session =
            session::Session::new(self.backend, self.target, caches, request, sink, cancel)?;
        session.prefill_chunk = self.prefill_chunk;
        match mode {
            DecodeMode::GreedyMtp | DecodeMode::SampledMtp if !self.proposers.is_empty() => {
                let chains: Vec<MtpChain<&dyn MtpDrafter<B>>> = self
                    .proposers
                    .iter()
                    .filter_map(|slot| match slot {
                        ProposerSlot::Drafter(drafter) => Some(MtpChain(*drafter)),
                        ProposerSlot::Proposer(_) => None,
                    })
                    .collect();
                let mut chain = chains.iter();
                let mut runs = Vec::with_capacity(self.proposers.len());
                for slot in &self.proposers {
                    let proposer: &dyn Proposer<B> = match slot {
                        ProposerSlot::Drafter(_) => match chain.next() {
                            Some(c) => c,
                            None => {
                                return Err(CoreError::Model("drafter chain missing".into()).into())
                            }
                        },
                        ProposerSlot::Proposer(proposer) => *proposer,
                    };
                    runs.push((
                        proposer.kind(),
                        proposer.start(self.backend, &request.prompt)?,
                    ));
                }
                let mut run = speculative::SpeculativeRun::new(
                    &mut session,
                    runs,
                    &request.prompt,
                    &options,
                    self.rules,
                    mode,
                    self.overlap,
                )
                .keep_schedule_in(&self.schedules)
                .with_switch(self.switch);
                run.run()?;
                let stats = run.into_stats();
                stats.trace(session.generated());
                Ok(session.into_response(mode, Some(stats)))
            }
            _ => {
                plain::run(&mut session, self.overlap.is_active(self.backend))?;
                let mut response = session.into_response(DecodeMode::Plain, None);
                response.speculation_off = self.off_reason(request, &options);
                Ok(response)
            }
        }
    }

    fn check_request(&self, request: &GenerateRequest) -> Result<(), CoreError> {
        if request.prompt.is_empty() {
            return Err(CoreError::EmptyPrompt);
        }
        let context = self.target.max_context();
        if request.prompt.len() >= context {
            return Err(CoreError::PromptTooLong {
                prompt: request.prompt.len(),
                context,
            });
        }
        let vocab = self.target.vocab_size();
        if let Some(&id) = request.prompt.iter().find(|&&id| id as usize >= vocab) {
            return Err(CoreError::TokenOutOfVocab { id, vocab });
        }
        Ok(())
    }
}
