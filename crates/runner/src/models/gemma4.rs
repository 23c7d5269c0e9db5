//! The Gemma 4 text model (HF `Gemma4ForCausalLM`, `model_type: "gemma4_text"`) as a
//! [`TargetModel`], written once over [`Backend`].
//!
//! # Forward
//!
//! ```text
//! x0   = embed_tokens(ids) * sqrt(hidden)                      (token_embeddings)
//! ple  = (rms_norm(x0 @ per_layer_model_projection^T / sqrt(hidden))
//!         + embed_tokens_per_layer(ids) * sqrt(ple)) / sqrt(2)  [1, t, layers, ple]
//! x    = layers(x0)            (see `layers.rs`; layer i gets ple[:, :, i])
//! h    = norm(x)                                                 (hidden and draft_hidden)
//! logits = softcap(h @ embed_tokens^T)                           (unembed)
//! ```
//!
//! # Cache layout
//!
//! [`TargetModel::new_caches`] returns one cache per layer that owns its keys and values (the first
//! `num_hidden_layers - num_kv_shared_layers` layers), cache `i` belonging to layer `i`:
//! a [`FullKvCache`] for full-attention layers and a [`RotatingKvCache`] of `sliding_window`
//! positions for sliding layers — except the last sliding layer before the shared ones (the
//! sliding *store* layer), whose ring keeps `sliding_window + 1` positions. HF's assistant reads
//! the store layers' keys and values and, through its flipped bidirectional window
//! (`|i - j| <= w`), sees the `w + 1` most recent of them; the extra slot is masked out of the
//! target's own attention (`|q - k| < w`), so the target is unchanged.
//!
//! KV-shared layers (the last `num_kv_shared_layers`) own no cache: within a forward they attend
//! to the [`KvView`] that their type's store layer's `update` returned, with their own mask. This
//! is exactly HF's `shared_kv_states` (full-length states of the current forward).

use std::collections::BTreeMap;

use mtp_core::cache::{CacheSet, FullKvCache, KvCache, KvView, RotatingKvCache};
use mtp_core::model::{ForwardJob, TargetModel, TargetOutput};
use mtp_core::{AttentionMask, Backend, CoreError, DType, ForwardMasks};

use super::config::{KvRole, LayerType, ResolvedText};
use super::layers::{DecoderLayer, LayerDims};
use super::nn::{soft_cap, Embedding, Linear};
use super::packed::{forward_alone, join, pack_ids, rows, split_outputs};
use crate::loading::{ArrayLoader, LoadResult};

/// The per-layer input embeddings (PLE) of a target.
#[derive(Debug)]
struct PerLayerInputs<B: Backend> {
    /// `[vocab_per_layer, layers * ple]`.
    table: Embedding<B>,
    /// `sqrt(ple)`.
    table_scale: B::Array,
    /// `[layers * ple, hidden]`.
    projection: Linear<B>,
    /// `1 / sqrt(hidden)`.
    projection_scale: B::Array,
    /// `[ple]`.
    norm: B::Array,
    /// `1 / sqrt(2)`.
    input_scale: B::Array,
}

/// A loaded Gemma 4 text target; see the [module docs](crate::models::gemma4) for the forward
/// and the cache layout.
#[derive(Debug)]
pub struct Gemma4Target<B: Backend> {
    resolved: ResolvedText,
    dtype: DType,
    eps: f32,
    embed: Embedding<B>,
    embed_scale: B::Array,
    ple: Option<PerLayerInputs<B>>,
    layers: Vec<DecoderLayer<B>>,
    final_norm: B::Array,
    lm_head: Linear<B>,
}

impl<B: Backend> Gemma4Target<B> {
    /// Build the model from the tensors of `loader`: HF `Gemma4ForCausalLM` names under `prefix`
    /// (`model.`, or `model.language_model.` in the multimodal layout; see
    /// [`TextLayout`](crate::loading::TextLayout)).
    pub fn load(
        loader: &mut ArrayLoader<'_, B>,
        resolved: ResolvedText,
        prefix: &str,
    ) -> LoadResult<Self> {
        let c = &resolved.config;
        let (v, h, n) = (c.vocab_size, c.hidden_size, c.num_hidden_layers);
        let eps = c.rms_norm_eps as f32;
        let embed = Embedding::load(loader, &format!("{prefix}embed_tokens.weight"), v, h)?;
        let embed_scale = loader.scalar("embed_scale", (h as f64).sqrt() as f32)?;
        let p = c.hidden_size_per_layer_input;
        let ple = if p > 0 {
            Some(PerLayerInputs {
                table: Embedding::load(
                    loader,
                    &format!("{prefix}embed_tokens_per_layer.weight"),
                    c.vocab_size_per_layer_input,
                    n * p,
                )?,
                table_scale: loader.scalar("ple_scale", (p as f64).sqrt() as f32)?,
                projection: Linear::load(
                    loader,
                    &format!("{prefix}per_layer_model_projection.weight"),
                    n * p,
                    h,
                )?,
                projection_scale: loader
                    .scalar("ple_projection_scale", (h as f64).powf(-0.5) as f32)?,
                norm: loader.array(&format!("{prefix}per_layer_projection_norm.weight"), &[p])?,
                input_scale: loader.scalar("ple_input_scale", 2f64.powf(-0.5) as f32)?,
            })
        } else {
            None
        };
        let dims = LayerDims {
            hidden: h,
            heads: c.num_attention_heads,
            ple: p,
            eps,
            moe: resolved.moe,
        };
        let mut ropes = Vec::new();
        let mut layers = Vec::with_capacity(n);
        for (i, spec) in resolved.layers.iter().enumerate() {
            layers.push(DecoderLayer::load(
                loader,
                &format!("{prefix}layers.{i}"),
                spec.clone(),
                dims,
                &mut ropes,
            )?);
        }
        let final_norm = loader.array(&format!("{prefix}norm.weight"), &[h])?;
        let lm_head = if c.tie_word_embeddings {
            loader.store().skip("lm_head.weight");
            embed.as_linear()
        } else {
            Linear::load(loader, "lm_head.weight", v, h)?
        };
        Ok(Self {
            dtype: loader.dtype(),
            eps,
            embed,
            embed_scale,
            ple,
            layers,
            final_norm,
            lm_head,
            resolved,
        })
    }

    /// The resolved configuration.
    pub fn config(&self) -> &ResolvedText {
        &self.resolved
    }

    /// The compute dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Residual width.
    pub fn hidden_size(&self) -> usize {
        self.resolved.config.hidden_size
    }

    /// The cache index (= layer index) whose keys and values the assistant reads for
    /// `layer_type` (HF's `shared_kv_states[layer_type]`), if the model has such a layer.
    pub fn store_layer(&self, layer_type: LayerType) -> Option<usize> {
        self.resolved.store_layers.get(&layer_type).copied()
    }

    /// The per-layer inputs `[1, t, layers, ple]` for `ids` and their embeddings `x0`.
    fn per_layer_inputs(
        &self,
        b: &B,
        ids: &B::Array,
        x0: &B::Array,
    ) -> Result<Option<B::Array>, B::Error> {
        let Some(ple) = &self.ple else {
            return Ok(None);
        };
        let c = &self.resolved.config;
        let (n, p) = (c.num_hidden_layers, c.hidden_size_per_layer_input);
        let t = b.shape(ids)[1];
        let tokens = b.mul(&ple.table.forward(b, ids)?, &ple.table_scale)?;
        let tokens = b.reshape(&tokens, &[1, t, n, p])?;
        let proj = b.mul(&ple.projection.forward(b, x0)?, &ple.projection_scale)?;
        let proj = b.rms_norm(&b.reshape(&proj, &[1, t, n, p])?, Some(&ple.norm), self.eps)?;
        Ok(Some(b.mul(&b.add(&proj, &tokens)?, &ple.input_scale)?))
    }

    /// The sliding window a cache of layer `index` keeps (see the module docs).
    pub(crate) fn ring_size(&self, index: usize) -> usize {
        let w = self.resolved.config.sliding_window;
        if self.store_layer(LayerType::Sliding) == Some(index) {
            w + 1
        } else {
            w
        }
    }
}

impl<B: Backend> TargetModel<B> for Gemma4Target<B> {
    fn vocab_size(&self) -> usize {
        self.resolved.config.vocab_size
    }

    fn max_context(&self) -> usize {
        self.resolved.config.max_position_embeddings
    }

    fn new_caches(&self, _backend: &B) -> Result<CacheSet<B>, B::Error> {
        let mut caches: Vec<Box<dyn KvCache<B>>> = Vec::with_capacity(self.resolved.cache_layers);
        for (i, spec) in self
            .resolved
            .layers
            .iter()
            .enumerate()
            .take(self.resolved.cache_layers)
        {
            caches.push(match spec.layer_type {
                LayerType::Full => Box::new(FullKvCache::new()),
                LayerType::Sliding => Box::new(RotatingKvCache::new(self.ring_size(i))?),
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

    /// The jobs' rows packed (one job: exactly the single-sequence forward): embeddings, PLE,
    /// projections, MLPs and the final norm run once over every row; rotary positions, cache
    /// updates, KV sharing, masks and attention per sequence.
    fn forward_batch(
        &self,
        b: &B,
        jobs: &mut [ForwardJob<'_, B>],
    ) -> Result<Vec<TargetOutput<B>>, B::Error> {
        let (ids, spans) = pack_ids(b, jobs)?;
        let x0 = self.token_embeddings(b, &ids)?;
        let ple = self.per_layer_inputs(b, &ids, &x0)?;
        let t = b.shape(&ids)[1];
        let window = self.resolved.config.sliding_window;
        // Per sequence: the store layers' views for the KV-shared layers, and one mask per
        // geometry per forward (full, sliding, and the sliding store layer's wider ring; none
        // when every key is visible).
        let mut shared: Vec<BTreeMap<LayerType, KvView<B>>> =
            jobs.iter().map(|_| BTreeMap::new()).collect();
        let mut masks: Vec<ForwardMasks<B>> = jobs.iter().map(|_| ForwardMasks::new()).collect();
        let mut x = x0;
        for (i, layer) in self.layers.iter().enumerate() {
            let h = layer.attention_input(b, &x)?;
            let (q_rows, kv_rows) = layer.project_rows(b, &h)?;
            let layer_type = layer.spec.layer_type;
            let mut attended = Vec::with_capacity(jobs.len());
            for (j, (job, &span)) in jobs.iter_mut().zip(&spans).enumerate() {
                let q = layer.queries_of(b, &rows(b, &q_rows, span)?, span.start)?;
                let own = match &kv_rows {
                    Some((k, v)) => {
                        let k = rows(b, k, span)?;
                        let v = v.as_ref().map(|v| rows(b, v, span)).transpose()?;
                        layer.keys_values_of(b, (&k, v.as_ref()), span.start)?
                    }
                    None => None,
                };
                let view = match own {
                    Some((k, v)) => {
                        let view = job.caches.layer_mut(i)?.update(b, &k, &v)?;
                        if layer.spec.role == KvRole::Store {
                            shared[j].insert(layer_type, view.clone());
                        }
                        view
                    }
                    None => match shared[j].get(&layer_type) {
                        Some(view) => view.clone(),
                        None => {
                            return Err(CoreError::Model(format!(
                                "layer {i} shares {} keys that no earlier layer stored",
                                layer_type.hf_name()
                            ))
                            .into())
                        }
                    },
                };
                let mask = AttentionMask::causal(span.start, view.start)
                    .with_window((layer_type == LayerType::Sliding).then_some(window));
                let bias = masks[j].get(b, mask, span.len, view.len(b), b.dtype(&q))?;
                attended.push(layer.attention(b, &q, &view, bias)?);
            }
            let attn = layer.project_out(b, &join(b, &attended)?)?;
            let ple_i = match &ple {
                Some(all) => Some(b.reshape(
                    &b.slice(all, 2, i, 1)?,
                    &[1, t, self.resolved.config.hidden_size_per_layer_input],
                )?),
                None => None,
            };
            x = layer.finish(b, &x, &attn, ple_i.as_ref())?;
        }
        let hidden = b.rms_norm(&x, Some(&self.final_norm), self.eps)?;
        // HF's `hidden_states[-1]` is the final-normed hidden unless `tie_last_hidden_states`
        // is explicitly false.
        let draft_hidden = match self.resolved.config.tie_last_hidden_states {
            Some(false) => x,
            _ => hidden.clone(),
        };
        split_outputs(b, &hidden, &draft_hidden, &spans)
    }

    fn unembed(&self, b: &B, hidden: &B::Array) -> Result<B::Array, B::Error> {
        let logits = self.lm_head.forward(b, hidden)?;
        let logits = soft_cap(b, logits, self.resolved.config.final_logit_softcapping)?;
        b.cast(&logits, DType::F32)
    }

    /// HF's `get_input_embeddings()(ids)`: the scaled embedding `embed_tokens(ids) * sqrt(hidden)`
    /// (what the assistant candidate generator concatenates with the hidden state).
    fn token_embeddings(&self, b: &B, ids: &B::Array) -> Result<B::Array, B::Error> {
        b.mul(&self.embed.forward(b, ids)?, &self.embed_scale)
    }
}
