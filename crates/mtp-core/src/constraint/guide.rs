//! Drafting under a constraint: its masks along a round's drafts, computed by advancing and
//! rolling back, so nothing but emitted tokens is ever committed.

use super::{Constraint, TokenMask};
use crate::CoreError;

/// What a proposer that reads logits sees of the request's constraint while it drafts: the
/// mask after the drafts so far, and a way to add a draft (see [`DraftGuide`]).
pub trait DraftMasks {
    /// The tokens allowed after the drafts pushed so far.
    fn mask(&mut self) -> Result<TokenMask, CoreError>;

    /// Add `id` as the next draft; `false` (and nothing added) when the mask forbids it.
    fn push(&mut self, id: u32) -> Result<bool, CoreError>;
}

/// A constraint advanced speculatively through one round's drafts.
///
/// Every mask is computed once per draft prefix and kept: `masks[i]` is the mask after the
/// first `i` drafts, which is what verification row `i` needs. [`finish`](Self::finish) rolls
/// the constraint back to where the round began and returns the masks; dropping an unfinished
/// guide rolls back too (an error there is logged: the first error is the one reported).
#[derive(Debug)]
pub struct DraftGuide<'c> {
    constraint: Option<&'c mut dyn Constraint>,
    /// Drafts advanced through, in order.
    pushed: Vec<u32>,
    /// `masks[i]`: the mask after `pushed[..i]` (at most `pushed.len() + 1` entries).
    masks: Vec<TokenMask>,
}

impl std::fmt::Debug for dyn Constraint + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Constraint")
    }
}

/// A proposal checked against a constraint: how many of its drafts the masks allow (the
/// proposal is cut before the first one forbidden, and before one after which nothing may
/// follow) and the mask of every verification row of the kept drafts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuidedDrafts {
    /// Drafts kept: the longest prefix every mask allows.
    pub kept: usize,
    /// `kept + 1` masks: row `i`'s after `drafts[..i]`.
    pub masks: Vec<TokenMask>,
}

impl<'c> DraftGuide<'c> {
    /// A guide at `constraint`'s current state.
    pub fn new(constraint: &'c mut dyn Constraint) -> Self {
        Self {
            constraint: Some(constraint),
            pushed: Vec::new(),
            masks: Vec::new(),
        }
    }

    fn constraint(&mut self) -> Result<&mut (dyn Constraint + 'c), CoreError> {
        self.constraint
            .as_deref_mut()
            .ok_or_else(|| CoreError::Constraint("the draft guide was finished".into()))
    }

    /// Bring the pushed drafts to `drafts` (rolling back where they differ), then push the
    /// rest of `drafts` while the masks allow them. Returns the drafts kept and every row's
    /// mask, with the constraint back where the round began.
    pub fn follow(mut self, drafts: &[u32]) -> Result<GuidedDrafts, CoreError> {
        let same = self
            .pushed
            .iter()
            .zip(drafts)
            .take_while(|(a, b)| a == b)
            .count();
        if same < self.pushed.len() {
            let undo = self.pushed.len() - same;
            self.constraint()?.rollback(undo)?;
            self.pushed.truncate(same);
            self.masks.truncate(same + 1);
        }
        for &id in &drafts[same..] {
            if !self.push(id)? {
                break;
            }
            if self.mask()?.is_empty() {
                // Nothing may follow this draft: its row could choose no token. Cut it; the
                // target chooses it (or not) in a row of its own.
                self.constraint()?.rollback(1)?;
                self.pushed.pop();
                self.masks.pop();
                break;
            }
        }
        let kept = self.pushed.len();
        self.mask()?;
        let masks = self.finish()?;
        Ok(GuidedDrafts { kept, masks })
    }

    /// Roll the constraint back to where the round began; the masks computed (row `i`'s after
    /// the first `i` drafts pushed).
    pub fn finish(mut self) -> Result<Vec<TokenMask>, CoreError> {
        let undo = self.pushed.len();
        if let Some(constraint) = self.constraint.take() {
            if undo > 0 {
                constraint.rollback(undo)?;
            }
        }
        Ok(std::mem::take(&mut self.masks))
    }
}

impl DraftMasks for DraftGuide<'_> {
    fn mask(&mut self) -> Result<TokenMask, CoreError> {
        let i = self.pushed.len();
        if let Some(mask) = self.masks.get(i) {
            return Ok(mask.clone());
        }
        let mask = self.constraint()?.mask()?;
        self.masks.push(mask.clone());
        Ok(mask)
    }

    fn push(&mut self, id: u32) -> Result<bool, CoreError> {
        if !self.mask()?.allows(id) {
            return Ok(false);
        }
        self.constraint()?.advance(&[id])?;
        self.pushed.push(id);
        Ok(true)
    }
}

impl Drop for DraftGuide<'_> {
    fn drop(&mut self) {
        let undo = self.pushed.len();
        if let Some(constraint) = self.constraint.take() {
            if undo > 0 {
                if let Err(error) = constraint.rollback(undo) {
                    tracing::warn!(target: "mtp", %error, "rolling back a draft guide failed");
                }
            }
        }
    }
}

/// [`DraftGuide::follow`] from `constraint`'s current state: the drafts of `drafts` its masks
/// allow and the mask of every verification row, the constraint left as it was.
pub fn masks_along(
    constraint: &mut dyn Constraint,
    drafts: &[u32],
) -> Result<GuidedDrafts, CoreError> {
    DraftGuide::new(constraint).follow(drafts)
}
