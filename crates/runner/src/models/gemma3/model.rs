//! The Gemma 3 text model as a [`TargetModel`].

use mtp_core::cache::{CacheSet, FullKvCache, KvCache, RotatingKvCache};
use mtp_core::model::{ForwardJob, TargetModel, TargetOutput};
use mtp_core::{AttentionMask, Backend, DType, ForwardMasks};

use super::config::Gemma3Resolved;
use super::layer::{DecoderLayer, Dims};
use super::weights::WeightSource;
use crate::loading::LoadResult;
use crate::models::config::LayerType;
use crate::models::nn::{soft_cap, Embedding, Linear};
use crate::models::packed::{forward_alone, join, pack_ids, rows, split_outputs};

/// A loaded Gemma 3 text model; see the [module docs](crate::models::gemma3).
#[derive(Debug)]
pub struct Gemma3Target<B: Backend> {
    config: Gemma3Resolved,
    dtype: DType,
    embed: Embedding<B>,
    embed_scale: B::Array,
    layers: Vec<DecoderLayer<B>>,
    final_norm: B::Array,
    lm_head: Linear<B>,
}

impl<B: Backend> Gemma3Target<B> {
    /// Build the model from `weights` (HF names under `model.`).
    pub(crate) fn load(
        weights: &mut dyn WeightSource<B>,
        config: Gemma3Resolved,
    ) -> LoadResult<Self> {
        let (v, h) = (config.vocab_size, config.hidden_size);
        let embed = weights.embedding("model.embed_tokens.weight", v, h)?;
        // HF: `embed_scale` (sqrt(hidden), f32) cast to the weights' dtype.
        let embed_scale = weights.scalar("embed_scale", (h as f32).sqrt())?;
        let dims = Dims::of(&config);
        let mut layers = Vec::with_capacity(config.layers.len());
        let mut ropes = Vec::new();
        for (i, spec) in config.layers.iter().enumerate() {
            layers.push(DecoderLayer::load(
                weights,
                &format!("model.layers.{i}"),
                spec.clone(),
                dims,
                &mut ropes,
            )?);
        }
        let final_norm = weights.norm_scale("model.norm.weight", h)?;
        let lm_head = if config.tie_word_embeddings || !weights.contains("lm_head.weight") {
            weights.skip("lm_head.weight");
            embed.as_linear()
        } else {
            weights.linear("lm_head.weight", v, h)?
        };
        Ok(Self {
            dtype: weights.dtype(),
            config,
            embed,
            embed_scale,
            layers,
            final_norm,
            lm_head,
        })
    }

    /// The resolved configuration.
    pub fn config(&self) -> &Gemma3Resolved {
        &self.config
    }

    /// The compute dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
}

impl<B: Backend> TargetModel<B> for Gemma3Target<B> {
    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn max_context(&self) -> usize {
        self.config.max_position_embeddings
    }

    /// One cache per layer: a [`FullKvCache`] for full layers, a [`RotatingKvCache`] of
    /// `sliding_window` positions for sliding ones.
    fn new_caches(&self, _backend: &B) -> Result<CacheSet<B>, B::Error> {
        let mut caches: Vec<Box<dyn KvCache<B>>> = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            caches.push(match layer.spec.layer_type {
                LayerType::Full => Box::new(FullKvCache::new()),
                LayerType::Sliding => Box::new(RotatingKvCache::new(self.config.sliding_window)?),
            });
        }
        Ok(CacheSet::new(caches))
    }

    fn forward(
        &self,
        b: &B,
        ids: &B::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, B::Error> {
        forward_alone(self, b, ids, start, caches)
    }

    /// The jobs' rows packed (one job: exactly the single-sequence forward): embeddings,
    /// projections, MLPs and the final norm run once over all of them; rotary positions, cache
    /// updates, masks and attention per sequence.
    fn forward_batch(
        &self,
        b: &B,
        jobs: &mut [ForwardJob<'_, B>],
    ) -> Result<Vec<TargetOutput<B>>, B::Error> {
        let (ids, spans) = pack_ids(b, jobs)?;
        let mut x = self.token_embeddings(b, &ids)?;
        let window = self.config.sliding_window;
        let mut masks: Vec<ForwardMasks<B>> = jobs.iter().map(|_| ForwardMasks::new()).collect();
        for (i, layer) in self.layers.iter().enumerate() {
            let (q, k, v) = layer.project_rows(b, &x)?;
            let sliding = layer.spec.layer_type == LayerType::Sliding;
            let mut attended = Vec::with_capacity(jobs.len());
            for ((job, &span), masks) in jobs.iter_mut().zip(&spans).zip(&mut masks) {
                let own = (rows(b, &q, span)?, rows(b, &k, span)?, rows(b, &v, span)?);
                let (q, k, v) = layer.heads(b, &own, span.start)?;
                let view = job.caches.layer_mut(i)?.update(b, &k, &v)?;
                let mask = AttentionMask::causal(span.start, view.start)
                    .with_window(sliding.then_some(window));
                let bias = masks.get(b, mask, span.len, view.len(b), b.dtype(&q))?;
                attended.push(layer.attend(b, &q, &view, bias)?);
            }
            x = layer.finish_rows(b, &x, &join(b, &attended)?)?;
        }
        let hidden = b.rms_norm(&x, Some(&self.final_norm), self.config.eps)?;
        split_outputs(b, &hidden, &hidden, &spans)
    }

    fn unembed(&self, b: &B, hidden: &B::Array) -> Result<B::Array, B::Error> {
        let logits = self.lm_head.forward(b, hidden)?;
        let logits = soft_cap(b, logits, self.config.final_logit_softcapping)?;
        b.cast(&logits, DType::F32)
    }

    /// `embed_tokens(ids) * sqrt(hidden)` (HF `Gemma3TextScaledWordEmbedding`).
    fn token_embeddings(&self, b: &B, ids: &B::Array) -> Result<B::Array, B::Error> {
        b.mul(&self.embed.forward(b, ids)?, &self.embed_scale)
    }
}
