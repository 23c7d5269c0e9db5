//! Proposers: where a speculative round's drafts come from.
//!
//! A [`Proposer`] sits one level above [`MtpDrafter`](crate::model::MtpDrafter): given the
//! context of a round ([`RoundContext`]: the token history, `current`, the target's draft
//! hidden, the position and the read-only target caches) and a depth, it returns a [`Draft`]
//! — tokens and, when it has them, the draft distributions they were sampled from.
//!
//! * [`MtpChain`] — an MTP head ("assistant") chained over single-position steps, the engine's
//!   original drafter;
//! * [`NgramProposer`] — prompt lookup: the continuation of the longest earlier occurrence of
//!   the history's suffix, no model at all;
//! * [`DraftModel`] — a small causal LM with the target's vocabulary, drafting from its own
//!   caches (classic draft-target speculative decoding).
//!
//! A draft without distributions is a point mass `q = δ(d)`: sampled verification accepts `d`
//! with probability `p(d)` and, on rejection, samples from `p` with `d` removed and
//! renormalised — the rule of Leviathan et al. 2023 with `q = δ` (see
//! [`verify_sampled`](crate::acceptance::verify_sampled)), so the emitted tokens keep the
//! target's distribution whatever the proposer.
//!
//! A proposer is shared configuration (`&self`); each generation gets its own
//! [`ProposerRun`] from [`Proposer::start`], which holds whatever the proposer keeps between
//! rounds (an n-gram index, a draft model's caches).

mod draft_model;
mod mtp_chain;
mod ngram;

pub use draft_model::DraftModel;
pub use mtp_chain::MtpChain;
pub use ngram::{
    NgramOptions, NgramProposer, DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN, NGRAM_MAX_LIMIT,
};

use crate::cache::CacheSet;
use crate::constraint::DraftMasks;
use crate::model::TargetModel;
use crate::sampling::{Distribution, Sampler};
use crate::Backend;

/// The kinds of proposer, with the stable names that options, statistics and draft schedules
/// key them by.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ProposerKind {
    /// An MTP head chained from the target's hidden state ([`MtpChain`]).
    #[default]
    Mtp,
    /// A separate small causal LM with the target's vocabulary (classic draft-target).
    Model,
    /// Prompt lookup over the token history ([`NgramProposer`]).
    Ngram,
}

impl ProposerKind {
    /// The stable name: `mtp`, `model` or `ngram`.
    pub fn name(self) -> &'static str {
        match self {
            ProposerKind::Mtp => "mtp",
            ProposerKind::Model => "model",
            ProposerKind::Ngram => "ngram",
        }
    }
}

impl std::fmt::Display for ProposerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ProposerKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "mtp" => Ok(ProposerKind::Mtp),
            "model" => Ok(ProposerKind::Model),
            "ngram" => Ok(ProposerKind::Ngram),
            other => Err(format!(
                "unknown proposer kind {other:?}: expected mtp, model or ngram"
            )),
        }
    }
}

/// How a round drafts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DraftMode {
    /// Greedy speculation: drafts are the proposer's best guesses; no distributions needed,
    /// and a device proposer should not read the host.
    Greedy,
    /// Sampled speculation: a proposer with distributions samples its drafts from them with
    /// the round's [`Sampler`] and returns them; one without returns point masses.
    Sampled,
}

/// Everything a proposer may read in one round.
pub struct RoundContext<'r, B: Backend> {
    /// The backend.
    pub backend: &'r B,
    /// The target (for its token embeddings).
    pub target: &'r dyn TargetModel<B>,
    /// The prompt and every committed token, ending with `current`.
    pub history: &'r [u32],
    /// The newest token, at `position`, not yet in the target caches.
    pub current: u32,
    /// The target's draft hidden at `position - 1`, `[1, 1, h]`.
    pub hidden: Option<&'r B::Array>,
    /// `current`'s position.
    pub position: usize,
    /// The target caches (positions `< position`), read-only.
    pub caches: &'r CacheSet<B>,
    /// The request's sampler: sampled drafting draws from its seeded stream, and its
    /// [`Sampler::distribution`] turns draft logits into draft distributions with the same
    /// processing as the target's.
    pub sampler: &'r mut Sampler,
    /// Greedy or sampled drafting.
    pub mode: DraftMode,
    /// Whether the engine overlaps a lazy backend's evaluation with host work (start each
    /// step's evaluation as soon as it is built).
    pub overlap: bool,
    /// With a constraint: the mask after the drafts so far. A proposer that reads logits
    /// drafts under it ([`masked_logits`](crate::constraint::masked_logits) of its step's
    /// logits, then [`DraftMasks::push`] of the draft, which it stops at when refused); any
    /// proposer's drafts are cut by the engine where the masks forbid them.
    pub guide: Option<&'r mut dyn DraftMasks>,
}

/// What a proposer proposes for one round.
#[derive(Debug, Clone)]
pub struct Draft<B: Backend> {
    /// Draft ids `[1, k]` (`U32`), `k ≥ 1`.
    pub tokens: B::Array,
    /// The same ids on the host, when the proposer has them there.
    pub host: Option<Vec<u32>>,
    /// The distributions the drafts were sampled from (sampled mode), one per draft; `None`
    /// means point masses on the drafts.
    pub dists: Option<Vec<Distribution>>,
}

impl<B: Backend> Draft<B> {
    /// A draft of host ids without distributions (point masses), or `None` for no ids.
    pub fn from_host(backend: &B, ids: Vec<u32>) -> Result<Option<Self>, B::Error> {
        if ids.is_empty() {
            return Ok(None);
        }
        Ok(Some(Self {
            tokens: backend.from_u32(&ids, &[1, ids.len()])?,
            host: Some(ids),
            dists: None,
        }))
    }

    /// Drafts in it.
    pub fn len(&self, backend: &B) -> usize {
        match &self.host {
            Some(ids) => ids.len(),
            None => backend.shape(&self.tokens).get(1).copied().unwrap_or(0),
        }
    }

    /// Whether it holds no drafts (never true for a draft a proposer returned).
    pub fn is_empty(&self, backend: &B) -> bool {
        self.len(backend) == 0
    }
}

/// A source of draft tokens for speculative decoding (see the [module docs](self)).
pub trait Proposer<B: Backend> {
    /// Which kind of proposer this is; its [`ProposerKind::name`] is the stable id that
    /// statistics and per-proposer schedule state are keyed by.
    fn kind(&self) -> ProposerKind;

    /// Start one generation of `prompt`: the state this proposer keeps between rounds.
    fn start<'p>(
        &'p self,
        backend: &B,
        prompt: &[u32],
    ) -> Result<Box<dyn ProposerRun<B> + 'p>, B::Error>;
}

/// One generation's proposer state.
pub trait ProposerRun<B: Backend> {
    /// Up to `depth` (≥ 1) drafts that continue `round.history`, or `None` when this proposer
    /// has nothing to propose (the engine then takes a plain step). Proposing never changes
    /// the target caches; the history a later round sees may be shorter than a draft assumed
    /// (rejected drafts are never committed), so a proposer with its own state re-syncs from
    /// `round.history`.
    fn propose(
        &mut self,
        round: &mut RoundContext<'_, B>,
        depth: usize,
    ) -> Result<Option<Draft<B>>, B::Error>;
}
