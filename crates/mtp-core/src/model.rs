//! The model traits: a target that verifies and an MTP drafter that proposes.
//!
//! Models are written once, generic over [`Backend`], and receive their caches explicitly (the
//! engine owns the [`CacheSet`] and passes it in), so the engine can open a speculation
//! transaction around a verification forward and fork caches for compare-serial checks.

use crate::cache::CacheSet;
use crate::options::MtpDefaults;
use crate::Backend;

/// What one target forward returns.
#[derive(Debug, Clone)]
pub struct TargetOutput<B: Backend> {
    /// The final (normed) hidden states, `[1, t, hidden]`, ready for [`TargetModel::unembed`].
    pub hidden: B::Array,
    /// The hidden states the drafter conditions on, `[1, t, hidden_draft]` (for Gemma 4 the same
    /// final normed hidden).
    pub draft_hidden: B::Array,
}

/// One sequence's part of a batched target forward ([`TargetModel::forward_batch`]): its tokens
/// `[1, t]` at positions `start .. start + t`, and its own caches.
#[derive(Debug)]
pub struct ForwardJob<'a, B: Backend> {
    /// The tokens, `[1, t]` (`U32`); `t` may differ between the jobs of a batch (ragged).
    pub ids: &'a B::Array,
    /// The position of the first token.
    pub start: usize,
    /// This sequence's caches (they receive its keys and values).
    pub caches: &'a mut CacheSet<B>,
}

/// The target model: the one whose output speculative decoding must reproduce exactly.
pub trait TargetModel<B: Backend> {
    /// Vocabulary size (the last dim of the logits).
    fn vocab_size(&self) -> usize;

    /// The longest sequence (prompt + generated) the model accepts.
    fn max_context(&self) -> usize;

    /// Fresh, empty caches for one sequence, one entry per cache-owning layer.
    fn new_caches(&self, backend: &B) -> Result<CacheSet<B>, B::Error>;

    /// Run the tokens `ids` (`[1, t]`, `U32`) at positions `start .. start + t`, appending their
    /// keys and values to `caches`.
    fn forward(
        &self,
        backend: &B,
        ids: &B::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, B::Error>;

    /// Logits `[1, t, vocab]` (f32) for final hidden states `[1, t, hidden]`.
    fn unembed(&self, backend: &B, hidden: &B::Array) -> Result<B::Array, B::Error>;

    /// Several sequences' forwards at once (continuous batching): output `i` is what
    /// [`forward`](Self::forward) would return for job `i` alone, and each job's caches receive
    /// exactly its own keys and values. The default runs the jobs one after another; a model
    /// overrides it to pack the rows of every job into one pass through its weights (the
    /// position-wise layers), so a batch reads each weight once.
    fn forward_batch(
        &self,
        backend: &B,
        jobs: &mut [ForwardJob<'_, B>],
    ) -> Result<Vec<TargetOutput<B>>, B::Error> {
        jobs.iter_mut()
            .map(|job| self.forward(backend, job.ids, job.start, job.caches))
            .collect()
    }

    /// Logits for several hidden-state blocks `[1, t_i, hidden]` at once: the blocks are joined
    /// along the sequence axis, unembedded in one pass (the head is position-wise) and split
    /// again, so a batch reads the output head once.
    fn unembed_batch(&self, backend: &B, hiddens: &[&B::Array]) -> Result<Vec<B::Array>, B::Error> {
        match hiddens {
            [] => Ok(Vec::new()),
            [one] => Ok(vec![self.unembed(backend, one)?]),
            _ => {
                let joined = backend.concat(hiddens, 1)?;
                let logits = self.unembed(backend, &joined)?;
                let mut out = Vec::with_capacity(hiddens.len());
                let mut at = 0;
                for h in hiddens {
                    let t = backend.shape(h)[1];
                    out.push(backend.slice(&logits, 1, at, t)?);
                    at += t;
                }
                Ok(out)
            }
        }
    }

    /// The input embeddings of `ids` (`[1, t]`) as the drafter consumes them, `[1, t, hidden]`.
    fn token_embeddings(&self, backend: &B, ids: &B::Array) -> Result<B::Array, B::Error>;

    /// Model-provided MTP defaults (initial and max draft tokens, enabled).
    fn mtp_defaults(&self) -> MtpDefaults {
        MtpDefaults::default()
    }
}

impl<B: Backend, T: TargetModel<B> + ?Sized> TargetModel<B> for &T {
    fn vocab_size(&self) -> usize {
        (**self).vocab_size()
    }

    fn max_context(&self) -> usize {
        (**self).max_context()
    }

    fn new_caches(&self, backend: &B) -> Result<CacheSet<B>, B::Error> {
        (**self).new_caches(backend)
    }

    fn forward(
        &self,
        backend: &B,
        ids: &B::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, B::Error> {
        (**self).forward(backend, ids, start, caches)
    }

    fn unembed(&self, backend: &B, hidden: &B::Array) -> Result<B::Array, B::Error> {
        (**self).unembed(backend, hidden)
    }

    fn forward_batch(
        &self,
        backend: &B,
        jobs: &mut [ForwardJob<'_, B>],
    ) -> Result<Vec<TargetOutput<B>>, B::Error> {
        (**self).forward_batch(backend, jobs)
    }

    fn unembed_batch(&self, backend: &B, hiddens: &[&B::Array]) -> Result<Vec<B::Array>, B::Error> {
        (**self).unembed_batch(backend, hiddens)
    }

    fn token_embeddings(&self, backend: &B, ids: &B::Array) -> Result<B::Array, B::Error> {
        (**self).token_embeddings(backend, ids)
    }

    fn mtp_defaults(&self) -> MtpDefaults {
        (**self).mtp_defaults()
    }
}

/// One drafter step's result.
#[derive(Debug, Clone)]
pub struct DraftStep<B: Backend> {
    /// Draft logits `[1, 1, vocab]` (f32).
    pub logits: B::Array,
    /// The projected hidden `[1, 1, hidden_draft]` that conditions the next step of the chain.
    pub projected: B::Array,
}

/// An MTP drafter ("assistant" head) that proposes one token per step.
///
/// The engine feeds it "single-position" chains, as HF transformers' Gemma 4 assisted
/// generation does: the input of step `j` is `concat(token_embeddings(x_j), h_j)` along the last
/// axis, where `x_0` is `current` — the newest token, at position `position`, not yet in the
/// target caches — and `h_0` is the target's draft hidden at `position - 1`; later steps use the
/// previous step's proposal and projected hidden. Every step of a chain uses the same
/// `position` (the drafter's rotary position), and the target caches (holding positions
/// `< position`) are read-only to the drafter.
pub trait MtpDrafter<B: Backend> {
    /// One draft step from `input` (`[1, 1, 2 * hidden]`) at `position`.
    fn draft_step(
        &self,
        backend: &B,
        input: &B::Array,
        position: usize,
        target_caches: &CacheSet<B>,
    ) -> Result<DraftStep<B>, B::Error>;
}

impl<B: Backend, D: MtpDrafter<B> + ?Sized> MtpDrafter<B> for &D {
    fn draft_step(
        &self,
        backend: &B,
        input: &B::Array,
        position: usize,
        target_caches: &CacheSet<B>,
    ) -> Result<DraftStep<B>, B::Error> {
        (**self).draft_step(backend, input, position, target_caches)
    }
}
