//! A compiled grammar as the engine's constraint: one llguidance `Matcher` per generation.

use std::sync::{Arc, Mutex};

use llguidance::api::StopReason;
use llguidance::{Matcher, TokenParser};
use mtp_core::constraint::{Constraint, ConstraintFactory, ConstraintSource, TokenMask};
use mtp_core::CoreError;

use super::json_bounds::{JsonBounds, JsonTokens};

/// A grammar compiled for one model's vocabulary (see
/// [`GrammarVocabulary::compile`](super::GrammarVocabulary::compile)); each generation gets a
/// fresh matcher from a copy of the compiled parser (the grammar is compiled once).
#[derive(Clone)]
pub struct GrammarConstraint {
    /// The compiled parser, never advanced itself.
    parser: Arc<Mutex<TokenParser>>,
    vocab: usize,
    /// The bounds on open-ended JSON values, for JSON formats.
    json: Option<Arc<JsonTokens>>,
}

impl std::fmt::Debug for GrammarConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarConstraint")
            .field("vocab", &self.vocab)
            .finish()
    }
}

impl GrammarConstraint {
    pub(super) fn new(parser: TokenParser, vocab: usize, json: Option<Arc<JsonTokens>>) -> Self {
        Self {
            parser: Arc::new(Mutex::new(parser)),
            vocab,
            json,
        }
    }

    /// This grammar as what a request carries
    /// ([`GenerateRequest::constraint`](mtp_core::engine::GenerateRequest)).
    pub fn source(self) -> ConstraintSource {
        ConstraintSource::new(self)
    }
}

impl ConstraintFactory for GrammarConstraint {
    fn start(&self, vocab: usize) -> Result<Box<dyn Constraint>, CoreError> {
        if vocab != self.vocab {
            return Err(CoreError::Constraint(format!(
                "a grammar compiled for a vocabulary of {} tokens used with {vocab}",
                self.vocab
            )));
        }
        let parser = self
            .parser
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .deep_clone();
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(CoreError::Constraint(e));
        }
        Ok(Box::new(MatcherConstraint {
            matcher,
            vocab,
            bounds: self.json.clone().map(JsonBounds::new),
        }))
    }
}

/// One generation's matcher.
struct MatcherConstraint {
    matcher: Matcher,
    vocab: usize,
    bounds: Option<JsonBounds>,
}

impl MatcherConstraint {
    fn failed(&self, e: impl std::fmt::Display) -> CoreError {
        CoreError::Constraint(match self.matcher.get_error() {
            Some(inner) => format!("{e} ({inner})"),
            None => e.to_string(),
        })
    }
}

impl Constraint for MatcherConstraint {
    fn mask(&mut self) -> Result<TokenMask, CoreError> {
        if self.matcher.is_stopped() {
            return Ok(TokenMask::none(self.vocab));
        }
        let mask = self.matcher.compute_mask().map_err(|e| self.failed(e))?;
        let mut words = mask.as_slice().to_vec();
        if let Some(bounds) = &self.bounds {
            bounds.restrict(&mut words);
        }
        Ok(TokenMask::from_words(words, self.vocab))
    }

    fn advance(&mut self, ids: &[u32]) -> Result<(), CoreError> {
        let taken = self
            .matcher
            .try_consume_tokens(ids)
            .map_err(|e| self.failed(e))?;
        if taken < ids.len() {
            self.matcher.rollback(taken).map_err(|e| self.failed(e))?;
            return Err(CoreError::Constraint(format!(
                "token {} is not allowed by the grammar here",
                ids[taken]
            )));
        }
        if let Some(bounds) = &mut self.bounds {
            bounds.advance(ids);
        }
        Ok(())
    }

    fn rollback(&mut self, n: usize) -> Result<(), CoreError> {
        self.matcher.rollback(n).map_err(|e| self.failed(e))?;
        if let Some(bounds) = &mut self.bounds {
            bounds.rollback(n);
        }
        Ok(())
    }

    fn forced(&mut self) -> Result<Vec<u32>, CoreError> {
        if self.matcher.is_stopped() {
            return Ok(Vec::new());
        }
        let forced = self.matcher.compute_ff_tokens();
        if let Some(e) = self.matcher.get_error() {
            return Err(CoreError::Constraint(e));
        }
        Ok(forced)
    }

    fn is_complete(&mut self) -> bool {
        match self.matcher.stop_reason() {
            StopReason::NotStopped => self.matcher.is_accepting().unwrap_or(false),
            StopReason::NoExtension | StopReason::NoExtensionBias | StopReason::EndOfSentence => {
                true
            }
            _ => false,
        }
    }
}
