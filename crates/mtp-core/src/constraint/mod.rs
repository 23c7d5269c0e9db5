//! Constrained decoding: a grammar (a JSON schema, a tool-call format, a regular expression)
//! as a stage of the sampling pipeline, exact under speculation.
//!
//! A [`Constraint`] is a matcher over token ids: the tokens it allows in its current state
//! ([`Constraint::mask`]), an advance by accepted tokens, a rollback of the last ones, and the
//! continuation its grammar forces ([`Constraint::forced`]). The engine applies it where the
//! sampler's distribution is formed: every disallowed token's logit becomes −∞
//! ([`masked_logits`]) before penalties, temperature and truncation, so plain decoding samples
//! from the masked target distribution.
//!
//! Under speculation the rule of the [sampling pipeline](crate::sampling) carries over: row `i`
//! of a verification forward sees the history plus `drafts[..i]`, so its mask is the
//! constraint's after those drafts ([`masks_along`]). The masks of a round are computed by
//! advancing through the drafts and rolling back ([`DraftGuide`]); only the tokens a verdict
//! emits are ever committed. A draft the mask forbids would be rejected (its target probability
//! is 0), so the proposal is cut before it and never verified; the proposers that read logits
//! (the MTP chain, a draft model) draft under the same masks. Greedy constrained speculation
//! therefore emits exactly the tokens of greedy constrained plain decoding, and sampled
//! constrained speculation keeps the masked target distribution (Leviathan et al. 2023: the
//! acceptance rule holds for any target distribution, the masked one included).
//!
//! **Forced tokens.** Where the grammar admits one continuation (a schema's keys, quotes,
//! braces), [`Constraint::forced`] names its tokens; the speculative engine drafts them without
//! a proposer call (jump-forward decoding as in SGLang, verified like any draft, so a target
//! that tokenizes the forced text differently is still followed exactly). Statistics count them
//! apart ([`MtpStats::forced`](crate::engine::MtpStats::forced)).
//!
//! A request carries its constraint as a [`ConstraintSource`]: a factory that starts one
//! matcher per generation. The runner implements it with llguidance over the model's
//! tokenizer; [`crate::testing::TokenGrammar`] is a small one over token ids for tests.

mod guide;
mod mask;
mod session;

pub use guide::{masks_along, DraftGuide, DraftMasks, GuidedDrafts};
pub use mask::{masked_logits, TokenMask};
pub use session::ActiveConstraint;

use std::sync::Arc;

use crate::CoreError;

/// A matcher over token ids for one generation (see the [module docs](self)).
pub trait Constraint {
    /// The tokens allowed next, over the model's vocabulary. An empty mask means nothing may
    /// follow: generation ends there when [`is_complete`](Self::is_complete), and is an error
    /// otherwise.
    fn mask(&mut self) -> Result<TokenMask, CoreError>;

    /// Advance by `ids`, each allowed in turn; an error when one is not (the state is then
    /// as before the call).
    fn advance(&mut self, ids: &[u32]) -> Result<(), CoreError>;

    /// Undo the last `n` tokens advanced (at most as many as were advanced).
    fn rollback(&mut self, n: usize) -> Result<(), CoreError>;

    /// Tokens the grammar forces from the current state, in order (empty when the next token
    /// is a choice). Each is allowed after the ones before it.
    fn forced(&mut self) -> Result<Vec<u32>, CoreError>;

    /// Whether the text so far is a complete sentence of the grammar (generation may end
    /// here).
    fn is_complete(&mut self) -> bool;
}

/// Starts one [`Constraint`] per generation.
pub trait ConstraintFactory: Send + Sync + std::fmt::Debug {
    /// A fresh matcher at the start of the generated text, over a vocabulary of `vocab`
    /// tokens (the target's logits width).
    fn start(&self, vocab: usize) -> Result<Box<dyn Constraint>, CoreError>;
}

/// The constraint a request carries: shared, cheap to clone; two sources are equal when they
/// are the same factory.
#[derive(Clone, Debug)]
pub struct ConstraintSource(pub Arc<dyn ConstraintFactory>);

impl ConstraintSource {
    /// A source over `factory`.
    pub fn new(factory: impl ConstraintFactory + 'static) -> Self {
        Self(Arc::new(factory))
    }

    /// A fresh matcher (see [`ConstraintFactory::start`]).
    pub fn start(&self, vocab: usize) -> Result<Box<dyn Constraint>, CoreError> {
        self.0.start(vocab)
    }
}

impl PartialEq for ConstraintSource {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
