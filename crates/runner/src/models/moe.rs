//! The Gemma 4 mixture-of-experts block (26B-A4B, `enable_moe_block`), written once over
//! [`Backend`]. It runs beside the dense MLP of every layer, exactly as HF
//! `Gemma4TextDecoderLayer.forward` (transformers 5.24) combines them:
//!
//! ```text
//! x        = the residual after attention                              [t, H]
//! router   = rms_norm(x) * scale * H^-0.5 @ proj^T                     (norm without weight)
//! p        = softmax(router) in f32; (w, e) = top_k(p, k); w = w / sum(w) * per_expert_scale[e]
//! x2       = pre_feedforward_layernorm_2(x)
//! experts  = sum_j w_j * down[e_j](gelu_tanh(gate[e_j] x2) * up[e_j] x2)  (gate/up = halves of gate_up_proj)
//! combined = post_feedforward_layernorm_1(dense_mlp) + post_feedforward_layernorm_2(experts)
//! ```
//!
//! `combined` then goes through the layer's `post_feedforward_layernorm` like the dense MLP's
//! output does without experts. Every token of a forward (a prompt, or the `k + 1` tokens of a
//! verification) is routed on its own: the expert matmuls go through
//! [`Backend::gather_linear`], one expert id per row.

use mtp_core::{Backend, DType, ReduceOp};

use super::config::MoeSpec;
use super::nn::{Experts, Linear};
use crate::loading::{ArrayLoader, LoadResult};

/// One layer's router and experts.
#[derive(Debug)]
pub(crate) struct MoeBlock<B: Backend> {
    spec: MoeSpec,
    eps: f32,
    /// `[E, H]`.
    router_proj: Linear<B>,
    /// `[H]`.
    router_scale: B::Array,
    /// `H^-0.5`.
    router_root: B::Array,
    /// `per_expert_scale` as a `[E, 1]` table (looked up by expert id).
    per_expert_scale: B::Array,
    /// The gate and up projections of every expert.
    gate_up: GateUp<B>,
    /// `[E, H, I]`.
    down: Experts<B>,
    pre_norm_2: B::Array,
    post_norm_1: B::Array,
    post_norm_2: B::Array,
}

impl<B: Backend> MoeBlock<B> {
    /// Load the block of layer `prefix` (e.g. `model.language_model.layers.3`).
    pub fn load(
        loader: &mut ArrayLoader<'_, B>,
        prefix: &str,
        spec: MoeSpec,
        hidden: usize,
        eps: f32,
    ) -> LoadResult<Self> {
        let (e, i, h) = (spec.experts, spec.intermediate, hidden);
        let per_expert = loader.host(&format!("{prefix}.router.per_expert_scale"), &[e])?;
        Ok(Self {
            router_proj: Linear::load(loader, &format!("{prefix}.router.proj.weight"), e, h)?,
            router_scale: loader.array(&format!("{prefix}.router.scale"), &[h])?,
            router_root: loader.scalar("router_root", (h as f64).powf(-0.5) as f32)?,
            per_expert_scale: loader.from_host("per_expert_scale", &per_expert, &[e, 1])?,
            gate_up: GateUp::load(loader, prefix, [e, i, h])?,
            down: {
                let name = expert_name(loader, prefix, "down_proj");
                Experts::load(loader, &name, [e, h, i])?
            },
            pre_norm_2: loader.array(
                &format!("{prefix}.pre_feedforward_layernorm_2.weight"),
                &[h],
            )?,
            post_norm_1: loader.array(
                &format!("{prefix}.post_feedforward_layernorm_1.weight"),
                &[h],
            )?,
            post_norm_2: loader.array(
                &format!("{prefix}.post_feedforward_layernorm_2.weight"),
                &[h],
            )?,
            spec,
            eps,
        })
    }

    /// The top-k experts of every token of `x` (`[1, t, H]`): ids `[t * k]` and weights
    /// `[t * k, 1]` (compute dtype), row `r * k + j` being token `r`'s `j`-th choice.
    fn route(&self, b: &B, x: &B::Array) -> Result<(B::Array, B::Array), B::Error> {
        let dtype = b.dtype(x);
        let k = self.spec.top_k;
        let h = b.rms_norm(x, None, self.eps)?;
        let h = b.mul(&b.mul(&h, &self.router_scale)?, &self.router_root)?;
        let scores = b.cast(&self.router_proj.forward(b, &h)?, DType::F32)?;
        let rank = b.shape(&scores).len();
        let probs = b.softmax(&scores, rank - 1)?;
        let (top, ids) = b.top_k(&probs, k)?;
        let top = b.div(&top, &b.reduce(&top, rank - 1, ReduceOp::Sum)?)?;
        let t = b.shape(x)[1];
        let ids = b.reshape(&ids, &[t * k])?;
        let scale = b.cast(&b.embedding(&self.per_expert_scale, &ids)?, DType::F32)?;
        let weights = b.mul(&b.reshape(&top, &[t * k, 1])?, &scale)?;
        Ok((ids, b.cast(&weights, dtype)?))
    }

    /// `post_feedforward_layernorm_1(dense) + post_feedforward_layernorm_2(experts(x))` for the
    /// residual `x` and the dense MLP's output `dense` (both `[1, t, H]`).
    pub fn combine(&self, b: &B, x: &B::Array, dense: &B::Array) -> Result<B::Array, B::Error> {
        let shape = b.shape(x);
        let (t, h) = (shape[1], shape[2]);
        let (k, inter) = (self.spec.top_k, self.spec.intermediate);
        let (ids, weights) = self.route(b, x)?;
        let x2 = b.reshape(
            &b.rms_norm(x, Some(&self.pre_norm_2), self.eps)?,
            &[t, 1, h],
        )?;
        // Row r * k + j is token r, for its j-th expert.
        let copies: Vec<&B::Array> = std::iter::repeat_n(&x2, k).collect();
        let rows = b.reshape(&b.concat(&copies, 1)?, &[t * k, h])?;
        let (gate, up) = self.gate_up.forward(b, &rows, &ids, inter)?;
        let inner = b.mul(&b.gelu_tanh(&gate)?, &up)?;
        let out = b.mul(&self.down.forward(b, &inner, &ids)?, &weights)?;
        let experts = b.reduce(&b.reshape(&out, &[t, k, h])?, 1, ReduceOp::Sum)?;
        let experts = b.reshape(&experts, &[1, t, h])?;
        b.add(
            &b.rms_norm(dense, Some(&self.post_norm_1), self.eps)?,
            &b.rms_norm(&experts, Some(&self.post_norm_2), self.eps)?,
        )
    }
}

/// The experts' gate and up projections, as the checkpoint holds them.
#[derive(Debug)]
enum GateUp<B: Backend> {
    /// HF `experts.gate_up_proj` `[E, 2 I, H]`: gate rows then up rows of each expert.
    Fused(Experts<B>),
    /// mlx-vlm's SwitchGLU `experts.switch_glu.gate_proj` and `up_proj`, each `[E, I, H]`
    /// (what mlx-vlm's `sanitize` splits `gate_up_proj` into, and quantizes).
    Split { gate: Experts<B>, up: Experts<B> },
}

impl<B: Backend> GateUp<B> {
    /// Load the gate and up projections of layer `prefix`, for `[E, I, H]` experts.
    fn load(
        loader: &mut ArrayLoader<'_, B>,
        prefix: &str,
        [e, i, h]: [usize; 3],
    ) -> LoadResult<Self> {
        let fused = format!("{prefix}.experts.gate_up_proj");
        if loader.store().contains(&fused) {
            return Ok(Self::Fused(Experts::load(loader, &fused, [e, 2 * i, h])?));
        }
        Ok(Self::Split {
            gate: Experts::load(loader, &switch_glu(prefix, "gate_proj"), [e, i, h])?,
            up: Experts::load(loader, &switch_glu(prefix, "up_proj"), [e, i, h])?,
        })
    }

    /// The gate and up activations (`[n, I]` each) of the rows of `x` routed by `ids`.
    fn forward(
        &self,
        b: &B,
        x: &B::Array,
        ids: &B::Array,
        inter: usize,
    ) -> Result<(B::Array, B::Array), B::Error> {
        match self {
            Self::Fused(experts) => {
                let both = experts.forward(b, x, ids)?;
                Ok((
                    b.slice(&both, 1, 0, inter)?,
                    b.slice(&both, 1, inter, inter)?,
                ))
            }
            Self::Split { gate, up } => Ok((gate.forward(b, x, ids)?, up.forward(b, x, ids)?)),
        }
    }
}

/// mlx-vlm's name of expert projection `proj` of layer `prefix`.
fn switch_glu(prefix: &str, proj: &str) -> String {
    format!("{prefix}.experts.switch_glu.{proj}.weight")
}

/// The stored name of expert projection `proj` of layer `prefix`: HF's `experts.{proj}` when
/// the checkpoint has it, else mlx-vlm's SwitchGLU name.
fn expert_name<B: Backend>(loader: &mut ArrayLoader<'_, B>, prefix: &str, proj: &str) -> String {
    let hf = format!("{prefix}.experts.{proj}");
    if loader.store().contains(&hf) {
        hf
    } else {
        switch_glu(prefix, proj)
    }
}
