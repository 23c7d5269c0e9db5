//! The map between llama.cpp's GGUF tensor names and HF transformers' names, for the
//! architectures the GGUF loader builds (llama.cpp `llama-arch.cpp` `LLM_TENSOR_NAMES`;
//! HF `Gemma3ForCausalLM` state-dict keys).
//!
//! | GGUF | HF |
//! |---|---|
//! | `token_embd.weight` | `model.embed_tokens.weight` |
//! | `output_norm.weight` | `model.norm.weight` |
//! | `output.weight` | `lm_head.weight` (absent when tied) |
//! | `blk.N.attn_norm.weight` | `model.layers.N.input_layernorm.weight` |
//! | `blk.N.attn_q` / `attn_k` / `attn_v` / `attn_output` | `…self_attn.q_proj` / `k_proj` / `v_proj` / `o_proj` |
//! | `blk.N.attn_q_norm` / `attn_k_norm` | `…self_attn.q_norm` / `k_norm` |
//! | `blk.N.post_attention_norm` | `…post_attention_layernorm` |
//! | `blk.N.ffn_norm` | `…pre_feedforward_layernorm` |
//! | `blk.N.post_ffw_norm` | `…post_feedforward_layernorm` |
//! | `blk.N.ffn_gate` / `ffn_up` / `ffn_down` | `…mlp.gate_proj` / `up_proj` / `down_proj` |
//!
//! Gemma 4 (`gemma4`, [`gemma4_gguf_to_hf`]) adds the per-layer input embeddings
//! (`per_layer_token_embd`, `per_layer_model_proj`, `per_layer_proj_norm`; per layer `inp_gate`,
//! `proj`, `post_norm`) and the layer scalar (`blk.N.layer_output_scale.weight` →
//! `model.layers.N.layer_scalar`) and the mixture-of-experts block (router, expert stacks and
//! their norms; `GEMMA4_MOE`).

/// Whole-model tensors: (GGUF, HF).
const GLOBAL: [(&str, &str); 3] = [
    ("token_embd", "model.embed_tokens"),
    ("output_norm", "model.norm"),
    ("output", "lm_head"),
];

/// Per-layer tensors: (GGUF suffix after `blk.N.`, HF suffix after `model.layers.N.`).
const LAYER: [(&str, &str); 13] = [
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("post_attention_norm", "post_attention_layernorm"),
    ("ffn_norm", "pre_feedforward_layernorm"),
    ("post_ffw_norm", "post_feedforward_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// `(stem, parameter)` of a tensor name: `blk.3.attn_q.weight` → (`blk.3.attn_q`, `weight`).
fn split_param(name: &str) -> Option<(&str, &str)> {
    name.rsplit_once('.')
        .filter(|(_, p)| matches!(*p, "weight" | "bias"))
}

/// The HF name of GGUF tensor `name`, if it is one the map knows.
pub fn gguf_to_hf(name: &str) -> Option<String> {
    let (stem, param) = split_param(name)?;
    if let Some((_, hf)) = GLOBAL.iter().find(|(g, _)| *g == stem) {
        return Some(format!("{hf}.{param}"));
    }
    let rest = stem.strip_prefix("blk.")?;
    let (layer, suffix) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (_, hf) = LAYER.iter().find(|(g, _)| *g == suffix)?;
    Some(format!("model.layers.{layer}.{hf}.{param}"))
}

/// The GGUF name of HF tensor `name`, if it is one the map knows.
pub fn hf_to_gguf(name: &str) -> Option<String> {
    let (stem, param) = split_param(name)?;
    if let Some((g, _)) = GLOBAL.iter().find(|(_, h)| *h == stem) {
        return Some(format!("{g}.{param}"));
    }
    let rest = stem.strip_prefix("model.layers.")?;
    let (layer, suffix) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (g, _) = LAYER.iter().find(|(_, h)| *h == suffix)?;
    Some(format!("blk.{layer}.{g}.{param}"))
}

/// Gemma 4's whole-model tensors beyond [`GLOBAL`]: (GGUF, HF) — the per-layer input embeddings
/// (llama.cpp `per_layer_token_embd`, `per_layer_model_proj`, `per_layer_proj_norm`).
const GEMMA4_GLOBAL: [(&str, &str); 3] = [
    ("per_layer_token_embd", "model.embed_tokens_per_layer"),
    ("per_layer_model_proj", "model.per_layer_model_projection"),
    ("per_layer_proj_norm", "model.per_layer_projection_norm"),
];

/// Gemma 4's per-layer tensors beyond [`LAYER`]: the per-layer input gate, its projection and
/// norm, and the layer's output scalar (HF `layer_scalar`, a bare name without `.weight`).
const GEMMA4_LAYER: [(&str, &str); 3] = [
    ("inp_gate", "per_layer_input_gate"),
    ("proj", "per_layer_projection"),
    ("post_norm", "post_per_layer_input_norm"),
];

/// Gemma 4's mixture-of-experts tensors: (GGUF name after `blk.N.`, HF name after
/// `model.layers.N.`), parameter included — the router's scales are `.scale` tensors in GGUF and
/// bare parameters in HF, as are the expert stacks. Split gate and up stacks (which llama.cpp's
/// loader also accepts) take mlx-vlm's `switch_glu` names, the split layout the MoE block reads.
const GEMMA4_MOE: [(&str, &str); 10] = [
    ("ffn_gate_inp.weight", "router.proj.weight"),
    ("ffn_gate_inp.scale", "router.scale"),
    ("ffn_down_exps.scale", "router.per_expert_scale"),
    ("ffn_gate_up_exps.weight", "experts.gate_up_proj"),
    (
        "ffn_gate_exps.weight",
        "experts.switch_glu.gate_proj.weight",
    ),
    ("ffn_up_exps.weight", "experts.switch_glu.up_proj.weight"),
    ("ffn_down_exps.weight", "experts.down_proj"),
    (
        "pre_ffw_norm_2.weight",
        "pre_feedforward_layernorm_2.weight",
    ),
    (
        "post_ffw_norm_1.weight",
        "post_feedforward_layernorm_1.weight",
    ),
    (
        "post_ffw_norm_2.weight",
        "post_feedforward_layernorm_2.weight",
    ),
];

/// The HF `Gemma4ForCausalLM` name of GGUF tensor `name` of a `gemma4` file, if it is one the
/// map knows (`rope_freqs.weight` is not a weight: it is read into the configuration).
pub fn gemma4_gguf_to_hf(name: &str) -> Option<String> {
    if let Some(rest) = name.strip_prefix("blk.") {
        let (layer, suffix) = rest.split_once('.')?;
        if let Some((_, hf)) = GEMMA4_MOE.iter().find(|(g, _)| *g == suffix) {
            let layer: usize = layer.parse().ok()?;
            return Some(format!("model.layers.{layer}.{hf}"));
        }
    }
    let (stem, param) = split_param(name)?;
    if let Some((_, hf)) = GEMMA4_GLOBAL.iter().find(|(g, _)| *g == stem) {
        return Some(format!("{hf}.{param}"));
    }
    if let Some(rest) = stem.strip_prefix("blk.") {
        let (layer, suffix) = rest.split_once('.')?;
        let layer: usize = layer.parse().ok()?;
        if suffix == "layer_output_scale" && param == "weight" {
            return Some(format!("model.layers.{layer}.layer_scalar"));
        }
        if let Some((_, hf)) = GEMMA4_LAYER.iter().find(|(g, _)| *g == suffix) {
            return Some(format!("model.layers.{layer}.{hf}.{param}"));
        }
    }
    gguf_to_hf(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_maps_both_ways() {
        for (g, h) in GLOBAL {
            let (g, h) = (format!("{g}.weight"), format!("{h}.weight"));
            assert_eq!(gguf_to_hf(&g).as_deref(), Some(h.as_str()));
            assert_eq!(hf_to_gguf(&h).as_deref(), Some(g.as_str()));
        }
        for (g, h) in LAYER {
            let (g, h) = (
                format!("blk.17.{g}.weight"),
                format!("model.layers.17.{h}.weight"),
            );
            assert_eq!(gguf_to_hf(&g).as_deref(), Some(h.as_str()));
            assert_eq!(hf_to_gguf(&h).as_deref(), Some(g.as_str()));
        }
    }

    #[test]
    fn unknown_names_do_not_map() {
        for name in [
            "blk.x.attn_q.weight",
            "blk.1.attn_qq.weight",
            "token_embd",
            "rope_freqs.weight",
            "blk.1.attn_q.scale",
        ] {
            assert_eq!(gguf_to_hf(name), None, "{name}");
        }
        assert_eq!(hf_to_gguf("model.layers.1.self_attn.rotary.weight"), None);
    }

    #[test]
    fn gemma4_names_map_to_hf() {
        for (gguf, hf) in [
            (
                "per_layer_token_embd.weight",
                "model.embed_tokens_per_layer.weight",
            ),
            (
                "per_layer_model_proj.weight",
                "model.per_layer_model_projection.weight",
            ),
            (
                "per_layer_proj_norm.weight",
                "model.per_layer_projection_norm.weight",
            ),
            (
                "blk.3.inp_gate.weight",
                "model.layers.3.per_layer_input_gate.weight",
            ),
            (
                "blk.3.proj.weight",
                "model.layers.3.per_layer_projection.weight",
            ),
            (
                "blk.3.post_norm.weight",
                "model.layers.3.post_per_layer_input_norm.weight",
            ),
            (
                "blk.3.layer_output_scale.weight",
                "model.layers.3.layer_scalar",
            ),
            (
                "blk.0.attn_q.weight",
                "model.layers.0.self_attn.q_proj.weight",
            ),
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("blk.2.ffn_gate_inp.scale", "model.layers.2.router.scale"),
            (
                "blk.2.ffn_down_exps.scale",
                "model.layers.2.router.per_expert_scale",
            ),
            (
                "blk.2.ffn_gate_up_exps.weight",
                "model.layers.2.experts.gate_up_proj",
            ),
            (
                "blk.2.post_ffw_norm_1.weight",
                "model.layers.2.post_feedforward_layernorm_1.weight",
            ),
        ] {
            assert_eq!(gemma4_gguf_to_hf(gguf).as_deref(), Some(hf), "{gguf}");
        }
        assert_eq!(gemma4_gguf_to_hf("rope_freqs.weight"), None);
    }
}
