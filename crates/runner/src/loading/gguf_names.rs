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
}
