//! The engine's view of a request's constraint: the request's EOS tokens allowed wherever the
//! text is complete, and the end of a grammar that allows nothing more.

use super::{Constraint, TokenMask};
use crate::CoreError;

/// A request's [`Constraint`] as the engine runs it.
///
/// Where the grammar's text is complete ([`Constraint::is_complete`]) the request's EOS tokens
/// are allowed too, and they never reach the grammar (the generation ends with them). The mask
/// of the current state is kept until the next advance or rollback.
pub struct ActiveConstraint {
    inner: Box<dyn Constraint>,
    eos: Vec<u32>,
    /// Per token advanced: whether it went to the grammar (EOS tokens do not).
    advanced: Vec<bool>,
    /// The current state's mask, once computed.
    current: Option<TokenMask>,
}

impl std::fmt::Debug for ActiveConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveConstraint")
            .field("eos", &self.eos)
            .field("advanced", &self.advanced.len())
            .finish()
    }
}

impl ActiveConstraint {
    /// `inner` with `eos` allowed wherever its text is complete.
    pub fn new(inner: Box<dyn Constraint>, eos: &[u32]) -> Self {
        Self {
            inner,
            eos: eos.to_vec(),
            advanced: Vec::new(),
            current: None,
        }
    }

    /// Whether nothing may follow: the mask is empty. `Ok(true)` when the grammar's text is
    /// complete (the generation ends there), an error when it is not (a grammar that
    /// dead-ends, which a well-formed one never does).
    pub fn exhausted(&mut self) -> Result<bool, CoreError> {
        if !self.mask()?.is_empty() {
            return Ok(false);
        }
        if self.inner.is_complete() {
            Ok(true)
        } else {
            Err(CoreError::Constraint(
                "the grammar allows no token here and its text is not complete".into(),
            ))
        }
    }
}

impl Constraint for ActiveConstraint {
    fn mask(&mut self) -> Result<TokenMask, CoreError> {
        if let Some(mask) = &self.current {
            return Ok(mask.clone());
        }
        let mut mask = self.inner.mask()?;
        if self.inner.is_complete() {
            for &id in &self.eos {
                mask.allow(id);
            }
        }
        self.current = Some(mask.clone());
        Ok(mask)
    }

    fn advance(&mut self, ids: &[u32]) -> Result<(), CoreError> {
        let before = self.advanced.len();
        for &id in ids {
            let to_grammar = !(self.eos.contains(&id) && self.inner.is_complete());
            if to_grammar {
                if let Err(e) = self.inner.advance(&[id]) {
                    // Leave the state as it was before the call.
                    self.rollback(self.advanced.len() - before)?;
                    return Err(e);
                }
            }
            self.advanced.push(to_grammar);
            self.current = None;
        }
        Ok(())
    }

    fn rollback(&mut self, n: usize) -> Result<(), CoreError> {
        if n > self.advanced.len() {
            return Err(CoreError::Constraint(format!(
                "rollback of {n} tokens after {}",
                self.advanced.len()
            )));
        }
        let undone = self.advanced.split_off(self.advanced.len() - n);
        let to_grammar = undone.iter().filter(|&&g| g).count();
        if to_grammar > 0 {
            self.inner.rollback(to_grammar)?;
        }
        if n > 0 {
            self.current = None;
        }
        Ok(())
    }

    fn forced(&mut self) -> Result<Vec<u32>, CoreError> {
        self.inner.forced()
    }

    fn is_complete(&mut self) -> bool {
        self.inner.is_complete()
    }
}
