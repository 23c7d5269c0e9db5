//! Test drafters: a tiny MTP head with random weights and a scripted one with chosen accuracy.

use super::tiny_target::TinyTarget;
use super::weights::{inv_freq, WeightRng};
use crate::cache::CacheSet;
use crate::model::{DraftStep, MtpDrafter};
use crate::{AttentionMask, Backend, CoreError, DType};

/// Shape and seed of a [`TinyDrafter`].
#[derive(Debug, Clone, PartialEq)]
pub struct TinyDrafterConfig {
    /// The drafter's own hidden size.
    pub hidden: usize,
    /// Query heads (a multiple of the target's KV heads).
    pub heads: usize,
    /// Which target layer's cache the drafter attends to (read-only).
    pub source_layer: usize,
    /// Weight gain.
    pub gain: f32,
    /// Seed of the weights.
    pub seed: u64,
}

impl Default for TinyDrafterConfig {
    fn default() -> Self {
        Self {
            hidden: 16,
            heads: 4,
            source_layer: 1,
            gain: 1.0,
            seed: 1,
        }
    }
}

/// A tiny MTP head of the Gemma-assistant shape (see the [module docs](super)).
#[derive(Debug)]
pub struct TinyDrafter<B: Backend> {
    config: TinyDrafterConfig,
    head_dim: usize,
    window: Option<usize>,
    inv_freq: Vec<f32>,
    pre: B::Array,
    attn_norm: B::Array,
    q_proj: B::Array,
    q_norm: B::Array,
    o_proj: B::Array,
    final_norm: B::Array,
    lm_head: B::Array,
    post: B::Array,
}

impl<B: Backend> TinyDrafter<B> {
    /// A drafter for `target` with seeded random weights.
    pub fn new(
        backend: &B,
        target: &TinyTarget<B>,
        config: TinyDrafterConfig,
    ) -> Result<Self, B::Error> {
        let t = target.config();
        if config.heads == 0 || !config.heads.is_multiple_of(t.kv_heads) {
            return Err(CoreError::InvalidArgument {
                op: "TinyDrafter::new",
                message: format!(
                    "{} heads do not group over {} KV heads",
                    config.heads, t.kv_heads
                ),
            }
            .into());
        }
        let window = target.window(config.source_layer)?;
        let rotated = if window.is_some() {
            t.head_dim
        } else {
            t.head_dim / 2
        };
        let mut rng = WeightRng::new(config.seed);
        let (h, g, qd) = (config.hidden, config.gain, config.heads * t.head_dim);
        // Dense, in the dtype the target computes in (its hidden states are the input).
        let dtype = t.weights.compute_dtype();
        Ok(Self {
            head_dim: t.head_dim,
            window,
            inv_freq: inv_freq(rotated, 10_000.0),
            pre: rng.matrix_in(backend, h, 2 * t.hidden, g, dtype)?,
            attn_norm: rng.norm_in(backend, h, dtype)?,
            q_proj: rng.matrix_in(backend, qd, h, g, dtype)?,
            q_norm: rng.norm_in(backend, t.head_dim, dtype)?,
            o_proj: rng.matrix_in(backend, h, qd, g, dtype)?,
            final_norm: rng.norm_in(backend, h, dtype)?,
            lm_head: rng.matrix_in(backend, t.vocab, h, g * 4.0, dtype)?,
            post: rng.matrix_in(backend, t.hidden, h, g, dtype)?,
            config,
        })
    }
}

impl<B: Backend> MtpDrafter<B> for TinyDrafter<B> {
    fn draft_step(
        &self,
        backend: &B,
        input: &B::Array,
        position: usize,
        target_caches: &CacheSet<B>,
    ) -> Result<DraftStep<B>, B::Error> {
        let c = &self.config;
        let z = backend.linear(input, &self.pre)?;
        let h = backend.rms_norm(&z, Some(&self.attn_norm), 1e-6)?;
        let q = backend.reshape(
            &backend.linear(&h, &self.q_proj)?,
            &[1, 1, c.heads, self.head_dim],
        )?;
        let q = backend.transpose(&q, 1, 2)?;
        let q = backend.rope(
            &backend.rms_norm(&q, Some(&self.q_norm), 1e-6)?,
            position,
            &self.inv_freq,
        )?;
        let z = match target_caches.layer(c.source_layer)?.view(backend)? {
            Some(view) => {
                let mask = AttentionMask::causal(position, view.start).with_window(self.window);
                let scale = 1.0 / (self.head_dim as f32).sqrt();
                let a = backend.attention(&q, &view.keys, &view.values, &mask, scale)?;
                let a = backend.reshape(
                    &backend.transpose(&a, 1, 2)?,
                    &[1, 1, c.heads * self.head_dim],
                )?;
                backend.add(&z, &backend.linear(&a, &self.o_proj)?)?
            }
            None => z,
        };
        let hn = backend.rms_norm(&z, Some(&self.final_norm), 1e-6)?;
        Ok(DraftStep {
            logits: backend.linear(&hn, &self.lm_head)?,
            projected: backend.linear(&hn, &self.post)?,
        })
    }
}

/// Marks a projected hidden written by [`ScriptedDrafter`]: its first element is
/// `MARKER + MARKER_STEP · steps taken`, exact in `f32`, `f16` and `bf16` (4096 · (1 + s / 128)
/// has 7 significant bits for `s < 128`), far above any hidden value of a tiny target.
const MARKER: f32 = 4096.0;

/// The marker's increment per step taken.
const MARKER_STEP: f32 = 32.0;

/// A drafter that proposes a known continuation (see the [module docs](super)).
///
/// `sequence` is the full token sequence (prompt then expected continuation) indexed by
/// position. Step `j` of a chain at position `p` predicts position `p + 1 + j`. With
/// `right_steps: Some(n)` the first `n` steps of every chain are right and later ones wrong;
/// otherwise a step is right with probability `accuracy`, decided by a hash of
/// `(seed, predicted position, chain position)`. A wrong guess is another token. Logits put `confidence` on the
/// guess and 0 elsewhere.
#[derive(Debug, Clone)]
pub struct ScriptedDrafter {
    /// Full sequence by position.
    pub sequence: Vec<u32>,
    /// Probability that a guess is right.
    pub accuracy: f64,
    /// When set, exactly the first this-many steps of each chain are right.
    pub right_steps: Option<usize>,
    /// Seed of the right/wrong decisions.
    pub seed: u64,
    /// Vocabulary size.
    pub vocab: usize,
    /// The target's draft-hidden size.
    pub hidden: usize,
    /// Logit given to the guessed token.
    pub confidence: f32,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl ScriptedDrafter {
    /// The guess for `position` by a chain at position `chain`.
    pub fn guess(&self, position: usize, chain: usize) -> u32 {
        let truth = self.sequence.get(position).copied().unwrap_or(0);
        let h = splitmix(
            self.seed ^ splitmix(position as u64) ^ splitmix(chain as u64).rotate_left(17),
        );
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        let right = match self.right_steps {
            Some(n) => position < chain + 1 + n,
            None => u < self.accuracy,
        };
        if right || self.vocab < 2 {
            return truth;
        }
        let offset = 1 + (h % (self.vocab as u64 - 1)) as u32;
        (truth + offset) % self.vocab as u32
    }
}

impl<B: Backend> MtpDrafter<B> for ScriptedDrafter {
    fn draft_step(
        &self,
        backend: &B,
        input: &B::Array,
        position: usize,
        _target_caches: &CacheSet<B>,
    ) -> Result<DraftStep<B>, B::Error> {
        let values = backend.to_vec_f32(input)?;
        let step = match values.get(values.len().saturating_sub(self.hidden)) {
            Some(&v) if v >= MARKER => ((v - MARKER) / MARKER_STEP) as usize,
            _ => 0,
        };
        let guess = self.guess(position + 1 + step, position);
        let mut logits = vec![0.0f32; self.vocab];
        if let Some(slot) = logits.get_mut(guess as usize) {
            *slot = self.confidence;
        }
        let mut projected = vec![0.0f32; self.hidden];
        if let Some(first) = projected.first_mut() {
            *first = MARKER + MARKER_STEP * (step + 1) as f32;
        }
        // The projected hidden in the input's dtype (it is concatenated with the target's
        // embeddings for the next step).
        let dtype = backend.dtype(input);
        Ok(DraftStep {
            logits: backend.from_f32(&logits, &[1, 1, self.vocab], DType::F32)?,
            projected: backend.from_f32(&projected, &[1, 1, self.hidden], dtype)?,
        })
    }
}
