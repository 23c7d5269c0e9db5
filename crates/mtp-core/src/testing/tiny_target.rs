//! A tiny decoder-only transformer over any backend.

use super::serial_only::SerialOnlyCache;
use super::weights::{inv_freq, WeightRng};
use crate::cache::{CacheSet, FullKvCache, KvCache, RotatingKvCache};
use crate::model::{TargetModel, TargetOutput};
use crate::options::MtpDefaults;
use crate::quant::QuantScheme;
use crate::{AttentionMask, Backend, CoreError, DType};

/// The attention kind of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// Global causal attention over every position (half the head dims rotated).
    Full,
    /// Sliding-window attention over the last `window` positions (all head dims rotated).
    Sliding {
        /// Window length.
        window: usize,
    },
}

/// Which caches [`TinyTarget::new_caches`] hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheFlavor {
    /// Full and rotating caches that speculate.
    Speculative,
    /// [`SerialOnlyCache`]s everywhere (forces serial validation).
    SerialOnly,
}

/// How a [`TinyTarget`] holds its weights and computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TinyWeights {
    /// Dense weights, activations and caches in `dtype` (`F32`, `F16` or `BF16`).
    Dense(DType),
    /// Every projection and the head quantized to `scheme` (GGUF Q8_0 / Q4_0 blocks of 32,
    /// so every matrix's input width must be a multiple of 32), computing in `F32` through
    /// [`Backend::quant_linear`]; the embedding table and norms stay dense.
    Quantized(QuantScheme),
}

impl Default for TinyWeights {
    fn default() -> Self {
        Self::Dense(DType::F32)
    }
}

impl TinyWeights {
    /// The dtype activations, caches and dense weights are in.
    pub fn compute_dtype(self) -> DType {
        match self {
            Self::Dense(dtype) => dtype,
            Self::Quantized(_) => DType::F32,
        }
    }
}

/// Shape and seed of a [`TinyTarget`].
#[derive(Debug, Clone, PartialEq)]
pub struct TinyConfig {
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads (divides `heads`).
    pub kv_heads: usize,
    /// Head dimension (even).
    pub head_dim: usize,
    /// MLP inner size.
    pub mlp: usize,
    /// Layer kinds, first to last.
    pub layers: Vec<LayerKind>,
    /// Context length.
    pub max_context: usize,
    /// Final logit soft-capping (`tanh(x / c) * c`), if any.
    pub softcap: Option<f32>,
    /// Weight gain (larger = peakier distributions).
    pub gain: f32,
    /// Seed of the weights.
    pub seed: u64,
    /// Which caches to use.
    pub caches: CacheFlavor,
    /// MTP defaults the model reports.
    pub mtp: MtpDefaults,
    /// Weight format and compute dtype.
    pub weights: TinyWeights,
}

impl Default for TinyConfig {
    fn default() -> Self {
        Self {
            vocab: 32,
            hidden: 16,
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
            mlp: 32,
            layers: vec![LayerKind::Sliding { window: 4 }, LayerKind::Full],
            max_context: 256,
            softcap: Some(30.0),
            gain: 1.0,
            seed: 0,
            caches: CacheFlavor::Speculative,
            mtp: MtpDefaults::default(),
            weights: TinyWeights::default(),
        }
    }
}

/// A projection: dense `[out, in]`, or quantized.
#[derive(Debug)]
enum Linear<B: Backend> {
    Dense(B::Array),
    Quantized(B::QuantWeight),
}

impl<B: Backend> Linear<B> {
    /// A seeded random `[rows, cols]` matrix (the draws of [`WeightRng::matrix_in`]) in `weights`.
    fn random(
        rng: &mut WeightRng,
        backend: &B,
        [rows, cols]: [usize; 2],
        gain: f32,
        weights: TinyWeights,
    ) -> Result<Self, B::Error> {
        let values = rng.matrix_values(rows, cols, gain);
        Ok(match weights {
            TinyWeights::Dense(dtype) => {
                Self::Dense(backend.from_f32(&values, &[rows, cols], dtype)?)
            }
            TinyWeights::Quantized(scheme) => {
                let t = scheme
                    .quantize(&values, rows, cols)
                    .map_err(CoreError::from)?;
                Self::Quantized(backend.quant_weight(std::sync::Arc::new(t), DType::F32)?)
            }
        })
    }

    /// `x @ Wᵀ`.
    fn apply(&self, backend: &B, x: &B::Array) -> Result<B::Array, B::Error> {
        match self {
            Self::Dense(w) => backend.linear(x, w),
            Self::Quantized(w) => backend.quant_linear(x, w),
        }
    }
}

#[derive(Debug)]
struct Layer<B: Backend> {
    kind: LayerKind,
    /// Rotary tables built once (the model path every Gemma model takes).
    rope: crate::RopeCache<B>,
    attn_norm: B::Array,
    q_proj: Linear<B>,
    k_proj: Linear<B>,
    v_proj: Linear<B>,
    q_norm: B::Array,
    k_norm: B::Array,
    o_proj: Linear<B>,
    mlp_norm: B::Array,
    gate: Linear<B>,
    up: Linear<B>,
    down: Linear<B>,
}

/// A tiny decoder-only transformer (see the [module docs](super)).
#[derive(Debug)]
pub struct TinyTarget<B: Backend> {
    config: TinyConfig,
    embed: B::Array,
    layers: Vec<Layer<B>>,
    final_norm: B::Array,
    lm_head: Linear<B>,
}

const EPS: f32 = 1e-6;

impl<B: Backend> TinyTarget<B> {
    /// Build a model with seeded random weights.
    pub fn new(backend: &B, config: TinyConfig) -> Result<Self, B::Error> {
        let c = &config;
        let valid = c.vocab > 0
            && c.hidden > 0
            && c.kv_heads > 0
            && c.heads.is_multiple_of(c.kv_heads)
            && c.head_dim.is_multiple_of(4)
            && c.head_dim > 0
            && !c.layers.is_empty()
            && match c.weights {
                TinyWeights::Dense(dtype) => dtype.is_float(),
                TinyWeights::Quantized(_) => [c.hidden, c.heads * c.head_dim, c.mlp]
                    .iter()
                    .all(|w| w.is_multiple_of(32)),
            };
        if !valid {
            return Err(CoreError::InvalidArgument {
                op: "TinyTarget::new",
                message: format!("inconsistent config {config:?}"),
            }
            .into());
        }
        let mut rng = WeightRng::new(c.seed);
        let g = c.gain;
        let (w, dtype) = (c.weights, c.weights.compute_dtype());
        let embed = backend.from_f32(
            &rng.uniform(c.vocab * c.hidden, 1.0),
            &[c.vocab, c.hidden],
            dtype,
        )?;
        let mut layers = Vec::with_capacity(c.layers.len());
        for &kind in &c.layers {
            let rotated = match kind {
                LayerKind::Full => c.head_dim / 2,
                LayerKind::Sliding { .. } => c.head_dim,
            };
            layers.push(Layer {
                kind,
                rope: crate::RopeCache::new(inv_freq(rotated, 10_000.0)),
                attn_norm: rng.norm_in(backend, c.hidden, dtype)?,
                q_proj: Linear::random(&mut rng, backend, [c.heads * c.head_dim, c.hidden], g, w)?,
                k_proj: Linear::random(
                    &mut rng,
                    backend,
                    [c.kv_heads * c.head_dim, c.hidden],
                    g,
                    w,
                )?,
                v_proj: Linear::random(
                    &mut rng,
                    backend,
                    [c.kv_heads * c.head_dim, c.hidden],
                    g,
                    w,
                )?,
                q_norm: rng.norm_in(backend, c.head_dim, dtype)?,
                k_norm: rng.norm_in(backend, c.head_dim, dtype)?,
                o_proj: Linear::random(&mut rng, backend, [c.hidden, c.heads * c.head_dim], g, w)?,
                mlp_norm: rng.norm_in(backend, c.hidden, dtype)?,
                gate: Linear::random(&mut rng, backend, [c.mlp, c.hidden], g, w)?,
                up: Linear::random(&mut rng, backend, [c.mlp, c.hidden], g, w)?,
                down: Linear::random(&mut rng, backend, [c.hidden, c.mlp], g, w)?,
            });
        }
        let final_norm = rng.norm_in(backend, c.hidden, dtype)?;
        // An untied head: with tied embeddings a random model tends to repeat its last token.
        let lm_head = Linear::random(&mut rng, backend, [c.vocab, c.hidden], 2.0 * g, w)?;
        Ok(Self {
            config,
            embed,
            layers,
            final_norm,
            lm_head,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &TinyConfig {
        &self.config
    }

    /// `[1, t, heads * dim]` → `[1, heads, t, dim]`.
    fn split_heads(&self, backend: &B, x: &B::Array, heads: usize) -> Result<B::Array, B::Error> {
        let t = backend.shape(x)[1];
        let x = backend.reshape(x, &[1, t, heads, self.config.head_dim])?;
        backend.transpose(&x, 1, 2)
    }

    fn layer(&self, index: usize) -> Result<&Layer<B>, CoreError> {
        self.layers.get(index).ok_or(CoreError::IndexOutOfRange {
            op: "TinyTarget layer",
            index: index as i64,
            size: self.layers.len(),
        })
    }

    /// The sliding window of `layer`, if it has one.
    pub(crate) fn window(&self, layer: usize) -> Result<Option<usize>, CoreError> {
        Ok(match self.layer(layer)?.kind {
            LayerKind::Sliding { window } => Some(window),
            LayerKind::Full => None,
        })
    }

    fn block(
        &self,
        backend: &B,
        l: &Layer<B>,
        cache: &mut dyn KvCache<B>,
        x: &B::Array,
        start: usize,
    ) -> Result<B::Array, B::Error> {
        let c = &self.config;
        let t = backend.shape(x)[1];
        let h = backend.rms_norm(x, Some(&l.attn_norm), EPS)?;
        let q = self.split_heads(backend, &l.q_proj.apply(backend, &h)?, c.heads)?;
        let q =
            backend.rope_cached(&backend.rms_norm(&q, Some(&l.q_norm), EPS)?, start, &l.rope)?;
        let k = self.split_heads(backend, &l.k_proj.apply(backend, &h)?, c.kv_heads)?;
        let k =
            backend.rope_cached(&backend.rms_norm(&k, Some(&l.k_norm), EPS)?, start, &l.rope)?;
        let v = self.split_heads(backend, &l.v_proj.apply(backend, &h)?, c.kv_heads)?;
        let view = cache.update(backend, &k, &v)?;
        let window = match l.kind {
            LayerKind::Sliding { window } => Some(window),
            LayerKind::Full => None,
        };
        let mask = AttentionMask::causal(start, view.start).with_window(window);
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        let a = backend.attention(&q, &view.keys, &view.values, &mask, scale)?;
        let a = backend.reshape(&backend.transpose(&a, 1, 2)?, &[1, t, c.heads * c.head_dim])?;
        let x = backend.add(x, &l.o_proj.apply(backend, &a)?)?;
        let h = backend.rms_norm(&x, Some(&l.mlp_norm), EPS)?;
        let gate = backend.gelu_tanh(&l.gate.apply(backend, &h)?)?;
        let inner = backend.mul(&gate, &l.up.apply(backend, &h)?)?;
        backend.add(&x, &l.down.apply(backend, &inner)?)
    }
}

impl<B: Backend> TargetModel<B> for TinyTarget<B> {
    fn vocab_size(&self) -> usize {
        self.config.vocab
    }

    fn max_context(&self) -> usize {
        self.config.max_context
    }

    fn new_caches(&self, _backend: &B) -> Result<CacheSet<B>, B::Error> {
        let mut layers: Vec<Box<dyn KvCache<B>>> = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            layers.push(match (self.config.caches, l.kind) {
                (CacheFlavor::SerialOnly, _) => Box::new(SerialOnlyCache::new()),
                (CacheFlavor::Speculative, LayerKind::Full) => Box::new(FullKvCache::new()),
                (CacheFlavor::Speculative, LayerKind::Sliding { window }) => {
                    Box::new(RotatingKvCache::new(window)?)
                }
            });
        }
        Ok(CacheSet::new(layers))
    }

    fn forward(
        &self,
        backend: &B,
        ids: &B::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, B::Error> {
        let mut x = self.token_embeddings(backend, ids)?;
        for (i, l) in self.layers.iter().enumerate() {
            x = self.block(backend, l, caches.layer_mut(i)?, &x, start)?;
        }
        let hidden = backend.rms_norm(&x, Some(&self.final_norm), EPS)?;
        Ok(TargetOutput {
            draft_hidden: hidden.clone(),
            hidden,
        })
    }

    fn unembed(&self, backend: &B, hidden: &B::Array) -> Result<B::Array, B::Error> {
        let logits = self.lm_head.apply(backend, hidden)?;
        match self.config.softcap {
            Some(cap) => {
                let t = backend.unary(
                    &backend.affine(&logits, 1.0 / cap, 0.0)?,
                    crate::UnaryOp::Tanh,
                )?;
                backend.affine(&t, cap, 0.0)
            }
            None => Ok(logits),
        }
    }

    fn token_embeddings(&self, backend: &B, ids: &B::Array) -> Result<B::Array, B::Error> {
        let e = backend.embedding(&self.embed, ids)?;
        backend.affine(&e, (self.config.hidden as f32).sqrt(), 0.0)
    }

    fn mtp_defaults(&self) -> MtpDefaults {
        self.config.mtp
    }
}
