//! The Gemma 4 assistant (HF `Gemma4AssistantForCausalLM`, `model_type: "gemma4_assistant"`) as
//! an [`MtpDrafter`], written once over [`Backend`], for any target that describes itself as an
//! [`AssistantTarget`]: Gemma 4, and Gemma 3 (whose last sliding and last full layer play the
//! part of Gemma 4's store layers; HF's Gemma 3 cache keeps `sliding_window - 1` positions of a
//! sliding layer, so its assistant's window is at most two less).
//!
//! # One draft step
//!
//! ```text
//! x       = pre_projection(concat(target_embed(token), h))          [1, 1, hidden_a]
//! x       = layers(x)   every layer KV-shared: queries only (RoPE at `position`), attending to
//!                       the target's store-layer caches of the same type, read-only
//! hn      = norm(x)
//! projected = post_projection(hn)                                   [1, 1, hidden_target]
//! logits  = hn @ embed_tokens^T, or the ordered (centroid) embedding  [1, 1, vocab]
//! ```
//!
//! # Which keys a step sees
//!
//! HF passes the target's `shared_kv_states` (the store layers' keys of the last target
//! forward) and builds *bidirectional* masks over them:
//!
//! * full attention: every cached position (all `< position`);
//! * sliding attention: HF's bidirectional window is inclusive (`|i - j| <= w`) and flipped to
//!   look back, so the query sees the `w + 1` most recent cached positions,
//!   `position - w - 1 ..= position - 1`. In [`AttentionMask`] terms (`|q - k| < window`) that is
//!   a window of `w + 2` at query position `position`; the target's sliding store cache keeps
//!   `w + 1` positions for this reason (see [`Gemma4Target`](crate::models::Gemma4Target)).
//!
//! Between rounds HF hands the assistant the keys of the whole verification forward, rejected
//! drafts included (it slices by length only); the engine's caches are rolled back before the
//! next round, so from the second round on this drafter sees only accepted history. The first
//! round after the prompt is identical to HF.
//!
//! # Ordered embeddings
//!
//! With `use_ordered_embeddings`, logits come from HF's `Gemma4AssistantMaskedEmbedder`: the
//! `centroid_intermediate_top_k` best of `num_centroids` centroids select their
//! `vocab / num_centroids` tokens each (by `token_ordering`); those tokens get `hn · e_token`, every
//! other token gets `min(selected logits) - 1` (HF's fill value).

use std::collections::BTreeMap;

use mtp_core::cache::CacheSet;
use mtp_core::model::{DraftStep, MtpDrafter};
use mtp_core::{AttentionBias, AttentionMask, Backend, Causality, CoreError, DType, ReduceOp};

use super::assistant_host::{AssistantHost, AssistantTarget};
use super::config::{ConfigProblem, Gemma4AssistantConfig, LayerType, ResolvedText};
use super::layers::{DecoderLayer, LayerDims};
use super::nn::{Embedding, Linear};
use crate::loading::{ArrayLoader, LoadError, LoadResult};

/// The centroid-masked LM head.
#[derive(Debug)]
struct OrderedEmbedding<B: Backend> {
    /// `[num_centroids, hidden_a]`.
    centroids: Linear<B>,
    /// `token_ordering` as `[num_centroids, per_centroid]` token ids, stored as `F32` (exact
    /// below 2^24) so that `embedding` picks a centroid's run.
    ordering: B::Array,
    per_centroid: usize,
    top_k: usize,
}

impl<B: Backend> OrderedEmbedding<B> {
    /// The centroids and token ordering of HF's `Gemma4AssistantMaskedEmbedder` for a
    /// vocabulary of `v` tokens and a width of `h`, as `config` sizes them.
    fn load(
        loader: &mut ArrayLoader<'_, B>,
        config: &Gemma4AssistantConfig,
        v: usize,
        h: usize,
    ) -> LoadResult<Self> {
        let n = config.num_centroids;
        let raw = loader
            .store()
            .take_ints("masked_embedding.token_ordering", &[v])?;
        // Token ids as an f32 table, so that `embedding` can pick runs on the device: exact
        // for ids below 2^24.
        if v > 1 << f32::MANTISSA_DIGITS {
            return Err(LoadError::InvalidTensor {
                name: "masked_embedding.token_ordering".into(),
                reason: format!("a vocabulary of {v} ids is not exact in f32"),
            });
        }
        let mut ids = Vec::with_capacity(v);
        for (i, id) in raw.into_iter().enumerate() {
            match u32::try_from(id) {
                Ok(id) if (id as usize) < v => ids.push(id as f32),
                _ => {
                    return Err(LoadError::InvalidTensor {
                        name: "masked_embedding.token_ordering".into(),
                        reason: format!("entry {i} = {id} is not a token id below {v}"),
                    })
                }
            }
        }
        let ordering = loader
            .backend()
            .from_f32(&ids, &[n, v / n], DType::F32)
            .map_err(|e| LoadError::Backend {
                name: "masked_embedding.token_ordering".into(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            centroids: Linear::load(loader, "masked_embedding.centroids.weight", n, h)?,
            ordering,
            per_centroid: v / n,
            top_k: config.centroid_intermediate_top_k,
        })
    }
}

/// A loaded Gemma 4 assistant bound to one target; see the
/// [module docs](crate::models::gemma4_assistant) for a step and the keys it sees.
#[derive(Debug)]
pub struct Gemma4Assistant<B: Backend> {
    config: Gemma4AssistantConfig,
    resolved: ResolvedText,
    eps: f32,
    pre_projection: Linear<B>,
    post_projection: Linear<B>,
    layers: Vec<DecoderLayer<B>>,
    final_norm: B::Array,
    lm_head: Linear<B>,
    ordered: Option<OrderedEmbedding<B>>,
    /// Target cache index read by the layers of each type.
    sources: BTreeMap<LayerType, usize>,
}

/// Check that the assistant fits `host` and return the target cache each layer type reads.
///
/// The assistant's queries meet keys the target rotated: different RoPE frequencies are
/// allowed (HF does not check them either) but said once, since such a pair only drafts well
/// if it was trained that way.
fn bind_to_target(
    config: &Gemma4AssistantConfig,
    resolved: &ResolvedText,
    host: &AssistantHost,
) -> LoadResult<BTreeMap<LayerType, usize>> {
    let mismatch = |reason: String| LoadError::DrafterMismatch { reason };
    let a = &resolved.config;
    let family = host.family;
    if config.backbone_hidden_size != host.hidden_size {
        return Err(mismatch(format!(
            "backbone_hidden_size {} but the {family} target's hidden_size is {}",
            config.backbone_hidden_size, host.hidden_size
        )));
    }
    if a.vocab_size != host.vocab_size {
        return Err(mismatch(format!(
            "vocab_size {} but the {family} target's is {}",
            a.vocab_size, host.vocab_size
        )));
    }
    let mut sources = BTreeMap::new();
    for (i, spec) in resolved.layers.iter().enumerate() {
        let Some(theirs) = host.sources.get(&spec.layer_type) else {
            return Err(mismatch(format!(
                "layer {i} is {} but the {family} target has no such layer",
                spec.layer_type.hf_name()
            )));
        };
        let source = theirs.index;
        if theirs.head_dim != spec.head_dim || theirs.kv_heads != spec.kv_heads {
            return Err(mismatch(format!(
                "layer {i} ({}) expects {} KV heads of dim {}, the {family} target's layer {source} has {} of dim {}",
                spec.layer_type.hf_name(),
                spec.kv_heads,
                spec.head_dim,
                theirs.kv_heads,
                theirs.head_dim
            )));
        }
        // A sliding step sees the `sliding_window + 1` most recent positions (module docs).
        if spec.layer_type == LayerType::Sliding {
            if let Some(keeps) = theirs.keeps.filter(|&k| k < a.sliding_window + 1) {
                if keeps == 0 {
                    return Err(mismatch(format!(
                        "the {family} target's layer {source} keeps no position between \
                         forwards: no sliding assistant layer fits it"
                    )));
                }
                return Err(mismatch(format!(
                    "sliding_window {} reads the {family} target's last {} positions, but its \
                     layer {source} keeps {keeps} (an assistant for this target needs a \
                     sliding_window of at most {})",
                    a.sliding_window,
                    a.sliding_window + 1,
                    keeps.saturating_sub(1)
                )));
            }
        }
        if !same_frequencies(&theirs.inv_freq, &spec.inv_freq) {
            tracing::warn!(
                layer = i,
                target_layer = source,
                "the assistant rotates its {} queries with other RoPE frequencies than the \
                 {family} target's keys",
                spec.layer_type.hf_name()
            );
        }
        sources.insert(spec.layer_type, source);
    }
    Ok(sources)
}

/// Whether two RoPE frequency tables agree (to f32 rounding).
fn same_frequencies(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-6 * x.abs().max(y.abs()).max(f32::MIN_POSITIVE))
}

impl<B: Backend> Gemma4Assistant<B> {
    /// Build the assistant from the tensors of `loader` (HF `Gemma4AssistantForCausalLM` names),
    /// checking that it fits `target` (a Gemma 4 or Gemma 3 target: [`AssistantTarget`]).
    pub fn load(
        loader: &mut ArrayLoader<'_, B>,
        config: Gemma4AssistantConfig,
        resolved: ResolvedText,
        target: &dyn AssistantTarget,
    ) -> LoadResult<Self> {
        let sources = bind_to_target(&config, &resolved, &target.assistant_host())?;
        let c = &resolved.config;
        let (v, h, hb) = (c.vocab_size, c.hidden_size, config.backbone_hidden_size);
        let eps = c.rms_norm_eps as f32;
        let dims = LayerDims {
            hidden: h,
            heads: c.num_attention_heads,
            ple: 0,
            eps,
            moe: resolved.moe,
        };
        let mut ropes = Vec::new();
        let mut layers = Vec::with_capacity(resolved.layers.len());
        for (i, spec) in resolved.layers.iter().enumerate() {
            layers.push(DecoderLayer::load(
                loader,
                &format!("model.layers.{i}"),
                spec.clone(),
                dims,
                &mut ropes,
            )?);
        }
        let embed = Embedding::load(loader, "model.embed_tokens.weight", v, h)?;
        let lm_head = if config.tie_word_embeddings {
            loader.store().skip("lm_head.weight");
            embed.as_linear()
        } else {
            Linear::load(loader, "lm_head.weight", v, h)?
        };
        let ordered = if config.use_ordered_embeddings {
            Some(OrderedEmbedding::load(loader, &config, v, h)?)
        } else {
            None
        };
        Ok(Self {
            pre_projection: Linear::load(loader, "pre_projection.weight", h, 2 * hb)?,
            post_projection: Linear::load(loader, "post_projection.weight", hb, h)?,
            final_norm: loader.array("model.norm.weight", &[h])?,
            eps,
            layers,
            lm_head,
            ordered,
            sources,
            config,
            resolved,
        })
    }

    /// The parsed assistant configuration.
    pub fn config(&self) -> &Gemma4AssistantConfig {
        &self.config
    }

    /// The resolved configuration of the assistant's decoder.
    pub fn text_config(&self) -> &ResolvedText {
        &self.resolved
    }

    /// The target cache index the assistant's `layer_type` layers read.
    pub fn source_layer(&self, layer_type: LayerType) -> Option<usize> {
        self.sources.get(&layer_type).copied()
    }

    /// Route the head through the ordered (centroid) embedding of `source`, an HF assistant
    /// configuration of the same shape whose `masked_embedding.*` tensors `loader` reads: how a
    /// GGUF assistant, whose converter dropped them, regains HF's head. `source` must use
    /// ordered embeddings and match this assistant's vocabulary, width and target width.
    pub fn attach_ordered_embedding(
        &mut self,
        loader: &mut ArrayLoader<'_, B>,
        source: &Gemma4AssistantConfig,
    ) -> LoadResult<()> {
        let mismatch = |reason: String| LoadError::DrafterMismatch { reason };
        let ours = &self.resolved.config;
        let theirs = &source.text_config;
        if !source.use_ordered_embeddings {
            return Err(mismatch(
                "the centroid source does not use ordered embeddings (use_ordered_embeddings \
                 is false)"
                    .into(),
            ));
        }
        if (
            theirs.vocab_size,
            theirs.hidden_size,
            source.backbone_hidden_size,
        ) != (
            ours.vocab_size,
            ours.hidden_size,
            self.config.backbone_hidden_size,
        ) {
            return Err(mismatch(format!(
                "the centroid source has vocab_size {}, hidden_size {}, backbone_hidden_size {}; \
                 the assistant {}, {}, {}",
                theirs.vocab_size,
                theirs.hidden_size,
                source.backbone_hidden_size,
                ours.vocab_size,
                ours.hidden_size,
                self.config.backbone_hidden_size
            )));
        }
        let mut config = self.config.clone();
        config.use_ordered_embeddings = true;
        config.num_centroids = source.num_centroids;
        config.centroid_intermediate_top_k = source.centroid_intermediate_top_k;
        config.resolve().map_err(|problem| {
            let (ConfigProblem::Invalid(reason) | ConfigProblem::Unsupported(reason)) = problem;
            mismatch(format!("the centroid source's ordered embedding: {reason}"))
        })?;
        let ordered = OrderedEmbedding::load(loader, &config, ours.vocab_size, ours.hidden_size)?;
        self.ordered = Some(ordered);
        self.config = config;
        Ok(())
    }

    /// The mask of a step at `position` over keys starting at `key_start` (module docs).
    fn mask(&self, layer_type: LayerType, position: usize, key_start: usize) -> AttentionMask {
        match layer_type {
            LayerType::Full => AttentionMask {
                query_start: position,
                key_start,
                causality: Causality::Bidirectional,
                window: None,
            },
            LayerType::Sliding => AttentionMask::causal(position, key_start)
                .with_window(Some(self.resolved.config.sliding_window + 2)),
        }
    }

    /// Logits `[1, 1, vocab]` of the normed hidden `hn` `[1, 1, hidden_a]`, all on the device
    /// (no host read, so a lazy backend can evaluate a whole draft chain asynchronously).
    fn logits(&self, b: &B, hn: &B::Array) -> Result<B::Array, B::Error> {
        let Some(o) = &self.ordered else {
            return b.cast(&self.lm_head.forward(b, hn)?, DType::F32);
        };
        let v = self.resolved.config.vocab_size;
        let n = o.top_k * o.per_centroid;
        let scores = o.centroids.forward(b, hn)?;
        let (_, top) = b.top_k(&scores, o.top_k)?;
        // The selected centroids' token runs, as ids: `[n]`.
        let runs = b.embedding(&o.ordering, &b.reshape(&top, &[o.top_k])?)?;
        let selected = b.cast(&b.reshape(&runs, &[n])?, DType::U32)?;
        let rows = self.lm_head.rows(b, &selected)?;
        let h = b.reshape(hn, &[1, self.resolved.config.hidden_size])?;
        let picked = b.cast(&b.linear(&h, &rows)?, DType::F32)?;
        // Every other token gets min(picked) - 1.
        let one = b.full(&[1, 1], 1.0, DType::F32)?;
        let fill = b.sub(&b.reduce(&picked, 1, ReduceOp::Min)?, &one)?;
        let base = b.add(&b.full(&[1, v], 0.0, DType::F32)?, &fill)?;
        let index = b.reshape(&selected, &[1, n])?;
        let out = b.scatter(&base, &index, &picked, 1)?;
        b.reshape(&out, &[1, 1, v])
    }
}

impl<B: Backend> MtpDrafter<B> for Gemma4Assistant<B> {
    fn draft_step(
        &self,
        b: &B,
        input: &B::Array,
        position: usize,
        target_caches: &CacheSet<B>,
    ) -> Result<DraftStep<B>, B::Error> {
        let mut x = self.pre_projection.forward(b, input)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let layer_type = layer.spec.layer_type;
            let Some(&source) = self.sources.get(&layer_type) else {
                return Err(CoreError::Model(format!("assistant layer {i} has no source")).into());
            };
            let Some(view) = target_caches.layer(source)?.view(b)? else {
                return Err(CoreError::Model(format!(
                    "assistant layer {i}: target cache {source} is empty (draft before prefill)"
                ))
                .into());
            };
            let h = layer.attention_input(b, &x)?;
            let q = layer.queries(b, &h, position)?;
            let mask = self.mask(layer_type, position, view.start);
            // A step's query sees every cached key of its window: no table is built.
            let bias = AttentionBias::new(b, mask, b.shape(&q)[2], view.len(b), b.dtype(&q))?;
            let attn = layer.attend(b, &q, &view, &bias)?;
            x = layer.finish(b, &x, &attn, None)?;
        }
        let hn = b.rms_norm(&x, Some(&self.final_norm), self.eps)?;
        Ok(DraftStep {
            logits: self.logits(b, &hn)?,
            projected: self.post_projection.forward(b, &hn)?,
        })
    }
}
