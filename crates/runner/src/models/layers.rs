//! The Gemma 4 decoder layer, shared by the target and the assistant.
//!
//! One layer (HF `Gemma4TextDecoderLayer`):
//!
//! ```text
//! h  = input_layernorm(x)
//! a  = o_proj(attention(rope(q_norm(q_proj h)), K, V))      scale 1.0 (q/k are normed)
//! x  = x + post_attention_layernorm(a)
//! x  = x + post_feedforward_layernorm(down(gelu_tanh(gate h') * up h')),  h' = pre_feedforward_layernorm(x)
//!          (with a MoE block, the MLP output is combined with the experts' first: see `moe.rs`)
//! x  = x + post_per_layer_input_norm(per_layer_projection(gelu_tanh(per_layer_input_gate x) * ple_i))   [PLE only]
//! x  = x * layer_scalar
//! ```
//!
//! Keys and values of a layer that owns them: `K = rope(k_norm(k_proj h))`, `V = v_norm(v_proj h)`
//! where `v_norm` is an RMS norm without scale and, for full layers with `attention_k_eq_v`,
//! `v_proj h` is replaced by the raw `k_proj h`. Every norm is an RMS norm whose weight is used as
//! stored (Gemma 4 has no `1 + w`).

use std::sync::Arc;

use mtp_core::cache::KvView;
use mtp_core::{AttentionBias, Backend, RopeCache};

use super::config::{KvRole, LayerSpec, MoeSpec};
use super::moe::MoeBlock;
use super::nn::Linear;
use crate::loading::{ArrayLoader, LoadResult};

/// Keys and values `[1, kv_heads, t, dim]` of one write.
pub(crate) type KeysValues<B> = (<B as Backend>::Array, <B as Backend>::Array);

/// Query rows and, for a layer that owns keys and values, key rows and value rows (`None`: the
/// values are the keys), `[1, t, heads * dim]` each.
pub(crate) type ProjectedRows<B> = (
    <B as Backend>::Array,
    Option<(<B as Backend>::Array, Option<<B as Backend>::Array>)>,
);

/// The K/V projections of a layer that owns its keys and values.
#[derive(Debug)]
struct KvProjections<B: Backend> {
    k_proj: Linear<B>,
    /// `None` when values are the keys (`attention_k_eq_v` on a full layer).
    v_proj: Option<Linear<B>>,
    k_norm: B::Array,
}

/// The per-layer-input (PLE) gate of a layer.
#[derive(Debug)]
struct PleGate<B: Backend> {
    gate: Linear<B>,
    projection: Linear<B>,
    norm: B::Array,
}

/// Shapes a layer needs besides its [`LayerSpec`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerDims {
    /// Residual width.
    pub hidden: usize,
    /// Query heads.
    pub heads: usize,
    /// PLE width (0 = none).
    pub ple: usize,
    /// RMS norm epsilon.
    pub eps: f32,
    /// The mixture-of-experts block beside the MLP, when the model has one.
    pub moe: Option<MoeSpec>,
}

/// One decoder layer's weights.
#[derive(Debug)]
pub(crate) struct DecoderLayer<B: Backend> {
    pub spec: LayerSpec,
    dims: LayerDims,
    /// The model's rotary tables for this layer's frequencies (shared by layers of one kind).
    rope: Arc<RopeCache<B>>,
    input_norm: B::Array,
    q_proj: Linear<B>,
    q_norm: B::Array,
    kv: Option<KvProjections<B>>,
    o_proj: Linear<B>,
    post_attention_norm: B::Array,
    pre_feedforward_norm: B::Array,
    gate_proj: Linear<B>,
    up_proj: Linear<B>,
    down_proj: Linear<B>,
    post_feedforward_norm: B::Array,
    ple: Option<PleGate<B>>,
    moe: Option<MoeBlock<B>>,
    layer_scalar: Option<B::Array>,
}

/// The names HF gives to a shared layer's unused K/V weights (skipped if present).
const SHARED_LAYER_UNUSED: [&str; 4] = ["k_proj", "v_proj", "k_norm", "v_norm"];

impl<B: Backend> DecoderLayer<B> {
    /// Load layer `prefix` (e.g. `model.layers.3`); its rotary tables come from `ropes`, the
    /// model's, shared by layers with the same frequencies.
    pub fn load(
        loader: &mut ArrayLoader<'_, B>,
        prefix: &str,
        spec: LayerSpec,
        dims: LayerDims,
        ropes: &mut Vec<Arc<RopeCache<B>>>,
    ) -> LoadResult<Self> {
        let (h, hd, nh, kvh) = (dims.hidden, spec.head_dim, dims.heads, spec.kv_heads);
        let attn = format!("{prefix}.self_attn");
        let kv = if spec.role == KvRole::Reuse {
            for name in SHARED_LAYER_UNUSED {
                loader.store().skip(&format!("{attn}.{name}.weight"));
            }
            None
        } else {
            Some(KvProjections {
                k_proj: Linear::load(loader, &format!("{attn}.k_proj.weight"), kvh * hd, h)?,
                v_proj: if spec.k_eq_v {
                    None
                } else {
                    Some(Linear::load(
                        loader,
                        &format!("{attn}.v_proj.weight"),
                        kvh * hd,
                        h,
                    )?)
                },
                k_norm: loader.array(&format!("{attn}.k_norm.weight"), &[hd])?,
            })
        };
        let ple = if dims.ple > 0 {
            Some(PleGate {
                gate: Linear::load(
                    loader,
                    &format!("{prefix}.per_layer_input_gate.weight"),
                    dims.ple,
                    h,
                )?,
                projection: Linear::load(
                    loader,
                    &format!("{prefix}.per_layer_projection.weight"),
                    h,
                    dims.ple,
                )?,
                norm: loader.array(&format!("{prefix}.post_per_layer_input_norm.weight"), &[h])?,
            })
        } else {
            None
        };
        let scalar_name = format!("{prefix}.layer_scalar");
        let layer_scalar = if loader.store().contains(&scalar_name) {
            Some(loader.array(&scalar_name, &[1])?)
        } else {
            None
        };
        let inter = spec.intermediate;
        let moe = match dims.moe {
            Some(moe) => Some(MoeBlock::load(loader, prefix, moe, h, dims.eps)?),
            None => None,
        };
        Ok(Self {
            input_norm: loader.array(&format!("{prefix}.input_layernorm.weight"), &[h])?,
            q_proj: Linear::load(loader, &format!("{attn}.q_proj.weight"), nh * hd, h)?,
            q_norm: loader.array(&format!("{attn}.q_norm.weight"), &[hd])?,
            kv,
            o_proj: Linear::load(loader, &format!("{attn}.o_proj.weight"), h, nh * hd)?,
            post_attention_norm: loader
                .array(&format!("{prefix}.post_attention_layernorm.weight"), &[h])?,
            pre_feedforward_norm: loader
                .array(&format!("{prefix}.pre_feedforward_layernorm.weight"), &[h])?,
            gate_proj: Linear::load(loader, &format!("{prefix}.mlp.gate_proj.weight"), inter, h)?,
            up_proj: Linear::load(loader, &format!("{prefix}.mlp.up_proj.weight"), inter, h)?,
            down_proj: Linear::load(loader, &format!("{prefix}.mlp.down_proj.weight"), h, inter)?,
            post_feedforward_norm: loader
                .array(&format!("{prefix}.post_feedforward_layernorm.weight"), &[h])?,
            ple,
            moe,
            layer_scalar,
            rope: RopeCache::shared(ropes, &spec.inv_freq),
            spec,
            dims,
        })
    }

    /// `input_layernorm(x)`.
    pub fn attention_input(&self, b: &B, x: &B::Array) -> Result<B::Array, B::Error> {
        b.rms_norm(x, Some(&self.input_norm), self.dims.eps)
    }

    /// `[1, t, heads * dim]` → `[1, heads, t, dim]`.
    fn split_heads(&self, b: &B, x: &B::Array, heads: usize) -> Result<B::Array, B::Error> {
        let t = b.shape(x)[1];
        let x = b.reshape(x, &[1, t, heads, self.spec.head_dim])?;
        b.transpose(&x, 1, 2)
    }

    /// The position-wise projections of `h` (`input_layernorm(x)`, any number of sequences'
    /// rows at once): query rows `[1, t, heads * dim]` and, for a layer that owns its keys and
    /// values, key rows and value rows (`None` when values are the keys).
    pub fn project_rows(&self, b: &B, h: &B::Array) -> Result<ProjectedRows<B>, B::Error> {
        let q = self.q_proj.forward(b, h)?;
        let kv = match &self.kv {
            Some(kv) => Some((
                kv.k_proj.forward(b, h)?,
                match &kv.v_proj {
                    Some(w) => Some(w.forward(b, h)?),
                    None => None,
                },
            )),
            None => None,
        };
        Ok((q, kv))
    }

    /// Rotated, normed queries `[1, heads, t, dim]` from one sequence's query rows, for
    /// positions `start ..`.
    pub fn queries_of(&self, b: &B, rows: &B::Array, start: usize) -> Result<B::Array, B::Error> {
        let q = self.split_heads(b, rows, self.dims.heads)?;
        let q = b.rms_norm(&q, Some(&self.q_norm), self.dims.eps)?;
        b.rope_cached(&q, start, &self.rope)
    }

    /// Rotated, normed queries `[1, heads, t, dim]` for positions `start ..`.
    pub fn queries(&self, b: &B, h: &B::Array, start: usize) -> Result<B::Array, B::Error> {
        self.queries_of(b, &self.q_proj.forward(b, h)?, start)
    }

    /// One sequence's keys and values `[1, kv_heads, t, dim]` from its key and value rows
    /// (values `None`: the keys), for positions `start ..`.
    pub fn keys_values_of(
        &self,
        b: &B,
        (k_rows, v_rows): (&B::Array, Option<&B::Array>),
        start: usize,
    ) -> Result<Option<KeysValues<B>>, B::Error> {
        let Some(kv) = &self.kv else {
            return Ok(None);
        };
        let kvh = self.spec.kv_heads;
        let k_raw = self.split_heads(b, k_rows, kvh)?;
        let v_raw = match v_rows {
            Some(v) => self.split_heads(b, v, kvh)?,
            None => k_raw.clone(),
        };
        let k = b.rope_cached(
            &b.rms_norm(&k_raw, Some(&kv.k_norm), self.dims.eps)?,
            start,
            &self.rope,
        )?;
        let v = b.rms_norm(&v_raw, None, self.dims.eps)?;
        Ok(Some((k, v)))
    }

    /// One sequence's attention over `view` as `[1, t, heads * dim]`, before the output
    /// projection (scale 1.0, as HF).
    pub fn attention(
        &self,
        b: &B,
        q: &B::Array,
        view: &KvView<B>,
        bias: &AttentionBias<B>,
    ) -> Result<B::Array, B::Error> {
        let t = b.shape(q)[2];
        let a = b.attention_with_bias(q, &view.keys, &view.values, bias, 1.0)?;
        b.reshape(
            &b.transpose(&a, 1, 2)?,
            &[1, t, self.dims.heads * self.spec.head_dim],
        )
    }

    /// The output projection of attention rows (any number of sequences' rows at once).
    pub fn project_out(&self, b: &B, a: &B::Array) -> Result<B::Array, B::Error> {
        self.o_proj.forward(b, a)
    }

    /// `o_proj(attention(q, view))` as `[1, t, hidden]` (attention scale 1.0, as HF).
    pub fn attend(
        &self,
        b: &B,
        q: &B::Array,
        view: &KvView<B>,
        bias: &AttentionBias<B>,
    ) -> Result<B::Array, B::Error> {
        self.project_out(b, &self.attention(b, q, view, bias)?)
    }

    /// Everything after attention: residuals, MLP, PLE gate and layer scalar.
    /// `ple_input` is this layer's `[1, t, ple]` slice of the per-layer inputs.
    pub fn finish(
        &self,
        b: &B,
        x: &B::Array,
        attn_out: &B::Array,
        ple_input: Option<&B::Array>,
    ) -> Result<B::Array, B::Error> {
        let eps = self.dims.eps;
        let x = b.add(
            x,
            &b.rms_norm(attn_out, Some(&self.post_attention_norm), eps)?,
        )?;
        let h = b.rms_norm(&x, Some(&self.pre_feedforward_norm), eps)?;
        let gate = b.gelu_tanh(&self.gate_proj.forward(b, &h)?)?;
        let inner = b.mul(&gate, &self.up_proj.forward(b, &h)?)?;
        let mut mlp = self.down_proj.forward(b, &inner)?;
        if let Some(moe) = &self.moe {
            mlp = moe.combine(b, &x, &mlp)?;
        }
        let mut x = b.add(
            &x,
            &b.rms_norm(&mlp, Some(&self.post_feedforward_norm), eps)?,
        )?;
        if let (Some(ple), Some(input)) = (&self.ple, ple_input) {
            let g = b.gelu_tanh(&ple.gate.forward(b, &x)?)?;
            let g = ple.projection.forward(b, &b.mul(&g, input)?)?;
            x = b.add(&x, &b.rms_norm(&g, Some(&ple.norm), eps)?)?;
        }
        match &self.layer_scalar {
            Some(s) => b.mul(&x, s),
            None => Ok(x),
        }
    }
}
