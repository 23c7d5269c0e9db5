//! The Gemma 3 decoder layer (HF `Gemma3DecoderLayer`, llama.cpp `llama_model_gemma3::graph`):
//!
//! ```text
//! h  = input_layernorm(x)
//! q  = rope(q_norm(q_proj h)),  k = rope(k_norm(k_proj h)),  v = v_proj h
//! a  = o_proj(attention(q, K, V)),  scale query_pre_attn_scalar^-0.5, sliding window on sliding layers
//! x  = x + post_attention_layernorm(a)
//! x  = x + post_feedforward_layernorm(down(gelu_tanh(gate h') * up h')),  h' = pre_feedforward_layernorm(x)
//! ```
//!
//! Every norm is an RMS norm that multiplies by `1 + w` as HF computes it (see `weights.rs` for
//! how each source provides that scale). Unlike Gemma 4 there is no value norm, no per-layer
//! input, no layer scalar, and attention is scaled (Gemma 4's is 1.0).

use std::sync::Arc;

use mtp_core::cache::KvView;
use mtp_core::{AttentionBias, Backend, RopeCache};

use super::config::{Gemma3Layer, Gemma3Resolved};
use super::weights::WeightSource;
use crate::loading::LoadResult;
use crate::models::nn::Linear;

/// Queries, keys and values `[1, heads, t, dim]` of one forward.
pub(crate) type Qkv<B> = (
    <B as Backend>::Array,
    <B as Backend>::Array,
    <B as Backend>::Array,
);

/// The shapes every layer shares.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dims {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub eps: f32,
    pub attention_scale: f32,
}

impl Dims {
    pub fn of(c: &Gemma3Resolved) -> Self {
        Self {
            hidden: c.hidden_size,
            heads: c.heads,
            kv_heads: c.kv_heads,
            head_dim: c.head_dim,
            intermediate: c.intermediate_size,
            eps: c.eps,
            attention_scale: c.attention_scale,
        }
    }
}

/// One decoder layer's weights.
#[derive(Debug)]
pub(crate) struct DecoderLayer<B: Backend> {
    pub spec: Gemma3Layer,
    dims: Dims,
    /// The model's rotary tables for this layer's frequencies (shared by layers of one kind).
    rope: Arc<RopeCache<B>>,
    input_norm: B::Array,
    q_proj: Linear<B>,
    k_proj: Linear<B>,
    v_proj: Linear<B>,
    o_proj: Linear<B>,
    q_norm: B::Array,
    k_norm: B::Array,
    post_attention_norm: B::Array,
    pre_feedforward_norm: B::Array,
    gate_proj: Linear<B>,
    up_proj: Linear<B>,
    down_proj: Linear<B>,
    post_feedforward_norm: B::Array,
}

impl<B: Backend> DecoderLayer<B> {
    /// Load layer `prefix` (e.g. `model.layers.3`, HF names); its rotary tables come from
    /// `ropes`, the model's, shared by layers with the same frequencies.
    pub fn load(
        w: &mut dyn WeightSource<B>,
        prefix: &str,
        spec: Gemma3Layer,
        dims: Dims,
        ropes: &mut Vec<Arc<RopeCache<B>>>,
    ) -> LoadResult<Self> {
        let (h, hd, nh, kvh, inter) = (
            dims.hidden,
            dims.head_dim,
            dims.heads,
            dims.kv_heads,
            dims.intermediate,
        );
        let attn = format!("{prefix}.self_attn");
        Ok(Self {
            input_norm: w.norm_scale(&format!("{prefix}.input_layernorm.weight"), h)?,
            q_proj: w.linear(&format!("{attn}.q_proj.weight"), nh * hd, h)?,
            k_proj: w.linear(&format!("{attn}.k_proj.weight"), kvh * hd, h)?,
            v_proj: w.linear(&format!("{attn}.v_proj.weight"), kvh * hd, h)?,
            o_proj: w.linear(&format!("{attn}.o_proj.weight"), h, nh * hd)?,
            q_norm: w.norm_scale(&format!("{attn}.q_norm.weight"), hd)?,
            k_norm: w.norm_scale(&format!("{attn}.k_norm.weight"), hd)?,
            post_attention_norm: w
                .norm_scale(&format!("{prefix}.post_attention_layernorm.weight"), h)?,
            pre_feedforward_norm: w
                .norm_scale(&format!("{prefix}.pre_feedforward_layernorm.weight"), h)?,
            gate_proj: w.linear(&format!("{prefix}.mlp.gate_proj.weight"), inter, h)?,
            up_proj: w.linear(&format!("{prefix}.mlp.up_proj.weight"), inter, h)?,
            down_proj: w.linear(&format!("{prefix}.mlp.down_proj.weight"), h, inter)?,
            post_feedforward_norm: w
                .norm_scale(&format!("{prefix}.post_feedforward_layernorm.weight"), h)?,
            rope: RopeCache::shared(ropes, &spec.inv_freq),
            spec,
            dims,
        })
    }

    /// `[1, t, heads * dim]` → `[1, heads, t, dim]`.
    fn split_heads(&self, b: &B, x: &B::Array, heads: usize) -> Result<B::Array, B::Error> {
        let t = b.shape(x)[1];
        let x = b.reshape(x, &[1, t, heads, self.dims.head_dim])?;
        b.transpose(&x, 1, 2)
    }

    /// `norm(rows)` rotated for positions `start ..`, as `[1, heads, t, dim]`.
    fn rotated(
        &self,
        b: &B,
        rows: &B::Array,
        (norm, heads): (&B::Array, usize),
        start: usize,
    ) -> Result<B::Array, B::Error> {
        let x = self.split_heads(b, rows, heads)?;
        let x = b.rms_norm(&x, Some(norm), self.dims.eps)?;
        b.rope_cached(&x, start, &self.rope)
    }

    /// The position-wise half of the attention input: `input_layernorm(x)` projected to query,
    /// key and value rows `[1, t, heads * dim]` (any number of sequences' rows at once).
    pub fn project_rows(&self, b: &B, x: &B::Array) -> Result<Qkv<B>, B::Error> {
        let h = b.rms_norm(x, Some(&self.input_norm), self.dims.eps)?;
        Ok((
            self.q_proj.forward(b, &h)?,
            self.k_proj.forward(b, &h)?,
            self.v_proj.forward(b, &h)?,
        ))
    }

    /// One sequence's queries, keys and values `[1, heads, t, dim]` from its projected rows, at
    /// positions `start ..`.
    pub fn heads(&self, b: &B, (q, k, v): &Qkv<B>, start: usize) -> Result<Qkv<B>, B::Error> {
        let d = self.dims;
        Ok((
            self.rotated(b, q, (&self.q_norm, d.heads), start)?,
            self.rotated(b, k, (&self.k_norm, d.kv_heads), start)?,
            self.split_heads(b, v, d.kv_heads)?,
        ))
    }

    /// One sequence's attention over `view`, `[1, t, heads * dim]` (before the output
    /// projection).
    pub fn attend(
        &self,
        b: &B,
        q: &B::Array,
        view: &KvView<B>,
        bias: &AttentionBias<B>,
    ) -> Result<B::Array, B::Error> {
        let d = self.dims;
        let t = b.shape(q)[2];
        let a = b.attention_with_bias(q, &view.keys, &view.values, bias, d.attention_scale)?;
        b.reshape(&b.transpose(&a, 1, 2)?, &[1, t, d.heads * d.head_dim])
    }

    /// The position-wise rest of the layer from attention rows `[1, t, heads * dim]` (any
    /// number of sequences' rows at once): output projection, residuals, MLP.
    pub fn finish_rows(&self, b: &B, x: &B::Array, a: &B::Array) -> Result<B::Array, B::Error> {
        let d = self.dims;
        let a = self.o_proj.forward(b, a)?;
        let x = b.add(x, &b.rms_norm(&a, Some(&self.post_attention_norm), d.eps)?)?;
        let h = b.rms_norm(&x, Some(&self.pre_feedforward_norm), d.eps)?;
        let gate = b.gelu_tanh(&self.gate_proj.forward(b, &h)?)?;
        let inner = b.mul(&gate, &self.up_proj.forward(b, &h)?)?;
        let mlp = self.down_proj.forward(b, &inner)?;
        b.add(
            &x,
            &b.rms_norm(&mlp, Some(&self.post_feedforward_norm), d.eps)?,
        )
    }
}
