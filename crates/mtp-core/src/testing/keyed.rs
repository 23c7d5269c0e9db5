//! [`HiddenKeyedDrafter`]: a scripted drafter that finds its chain position from the target
//! hidden it is given, so drafts are right only when the engine hands it the right hidden.

use super::drafters::ScriptedDrafter;
use crate::cache::CacheSet;
use crate::model::{DraftStep, MtpDrafter, TargetModel};
use crate::{Backend, DType};

/// Marks a projected hidden written by [`HiddenKeyedDrafter`]: element 0 is
/// `KEYED_MARKER + steps taken`, element 1 the chain's anchor position.
const KEYED_MARKER: f32 = 2.0e6;

/// A [`ScriptedDrafter`] whose chain position comes from the conditioning hidden.
///
/// `keys[q]` is the target's draft hidden at position `q` of the script's sequence (from one
/// forward over the whole sequence). A chain's first step takes the key nearest to its hidden
/// `h_0` (squared distance) as position `q`, so the chain anchors at `q + 1`, and step `j`
/// guesses [`ScriptedDrafter::guess`]`(q + 2 + j, q + 1)`. The engine's hidden at the last kept
/// position after a round gives exactly the guesses of a [`ScriptedDrafter`]; a hidden sliced
/// at another position gives guesses for the wrong positions, which the target rejects.
#[derive(Debug, Clone)]
pub struct HiddenKeyedDrafter {
    /// The script: sequence, accuracy and seed of the right/wrong decisions.
    pub script: ScriptedDrafter,
    /// Draft hidden per position of `script.sequence`.
    pub keys: Vec<Vec<f32>>,
}

impl HiddenKeyedDrafter {
    /// Keys from one forward of `target` over `script.sequence` (at most `max_context`
    /// tokens) on fresh caches.
    pub fn new<B: Backend>(
        backend: &B,
        target: &dyn TargetModel<B>,
        script: ScriptedDrafter,
    ) -> Result<Self, B::Error> {
        let sequence = &script.sequence;
        let len = sequence.len().min(target.max_context());
        let mut caches = target.new_caches(backend)?;
        let ids = backend.from_u32(&sequence[..len], &[1, len])?;
        let out = target.forward(backend, &ids, 0, &mut caches)?;
        let flat = backend.to_vec_f32(&out.draft_hidden)?;
        let keys = flat
            .chunks(script.hidden.max(1))
            .map(<[f32]>::to_vec)
            .collect();
        Ok(Self { script, keys })
    }

    /// The position whose key is nearest to `hidden`.
    fn nearest(&self, hidden: &[f32]) -> usize {
        let distance =
            |key: &[f32]| -> f32 { key.iter().zip(hidden).map(|(a, b)| (a - b) * (a - b)).sum() };
        let mut best = (0, f32::INFINITY);
        for (q, key) in self.keys.iter().enumerate() {
            let d = distance(key);
            if d < best.1 {
                best = (q, d);
            }
        }
        best.0
    }
}

impl<B: Backend> MtpDrafter<B> for HiddenKeyedDrafter {
    fn draft_step(
        &self,
        backend: &B,
        input: &B::Array,
        _position: usize,
        _target_caches: &CacheSet<B>,
    ) -> Result<DraftStep<B>, B::Error> {
        let hidden_size = self.script.hidden;
        let values = backend.to_vec_f32(input)?;
        let hidden = &values[values.len().saturating_sub(hidden_size)..];
        let (step, anchor) = match hidden {
            [marker, anchor, ..] if *marker >= KEYED_MARKER => {
                ((marker - KEYED_MARKER) as usize, *anchor as usize)
            }
            _ => (0, self.nearest(hidden) + 1),
        };
        let guess = self.script.guess(anchor + 1 + step, anchor);
        let vocab = self.script.vocab;
        let mut logits = vec![0.0f32; vocab];
        if let Some(slot) = logits.get_mut(guess as usize) {
            *slot = self.script.confidence;
        }
        let mut projected = vec![0.0f32; hidden_size.max(2)];
        projected[0] = KEYED_MARKER + (step + 1) as f32;
        projected[1] = anchor as f32;
        Ok(DraftStep {
            logits: backend.from_f32(&logits, &[1, 1, vocab], DType::F32)?,
            projected: backend.from_f32(&projected, &[1, 1, projected.len()], DType::F32)?,
        })
    }
}
