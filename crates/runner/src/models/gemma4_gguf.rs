//! The Gemma 4 text configuration of a GGUF file (`general.architecture = "gemma4"`), as
//! llama.cpp's converter writes it (`conversion/gemma.py`, `Gemma4Model`), turned into the same
//! [`Gemma4TextConfig`] an HF `config.json` gives, so one [`Gemma4TextConfig::resolve`] makes the
//! per-layer specifications of both.
//!
//! What the converter writes, and how it is read back:
//!
//! | GGUF | config |
//! | --- | --- |
//! | `token_embd.weight` rows | `vocab_size` |
//! | `embedding_length`, `block_count`, `context_length` | `hidden_size`, `num_hidden_layers`, `max_position_embeddings` |
//! | `feed_forward_length` (one per layer) | `intermediate_size`; twice as wide on the KV-shared layers: `use_double_wide_mlp` |
//! | `attention.head_count`, `attention.head_count_kv` (one, or one per layer) | heads; KV heads of sliding layers, of full layers (`num_global_key_value_heads`) |
//! | `attention.key_length_swa`, `attention.key_length` | `head_dim`, `global_head_dim` |
//! | `attention.sliding_window`, `attention.sliding_window_pattern` (true = sliding) | `sliding_window`, `layer_types` |
//! | `attention.shared_kv_layers` | `num_kv_shared_layers` |
//! | `rope.freq_base_swa`, `rope.freq_base`, `rope_freqs.weight` | sliding RoPE base; full RoPE base, proportional, `partial_rotary_factor` = 2 × (pairs at factor 1) ÷ `global_head_dim` (the others at 1e30 do not rotate) |
//! | `embedding_length_per_layer_input`, `per_layer_token_embd.weight` rows | `hidden_size_per_layer_input`, `vocab_size_per_layer_input` |
//! | `final_logit_softcapping`, `attention.layer_norm_rms_epsilon` | the same |
//! | `attn_v` absent on a full layer that owns its KV | `attention_k_eq_v` |
//! | `output.weight` absent | `tie_word_embeddings` |
//! | `expert_count`, `expert_used_count`, `expert_feed_forward_length` | the MoE block |

use std::collections::BTreeMap;

use super::config::{Gemma4TextConfig, LayerType, ResolvedText, RopeParameters, MAX_LAYERS};
use crate::loading::gguf::{GgufError, GgufFile};
use crate::loading::{LoadError, LoadResult};

/// The GGUF architecture of a Gemma 4 text model.
pub const GGUF_ARCHITECTURE: &str = "gemma4";

/// A `rope_freqs` factor at or above this does not rotate its pair (the converter writes 1e30).
const NOT_ROTATED: f32 = 1e29;

/// The Gemma 4 configuration of `file`, resolved into per-layer specifications.
pub fn resolve_gguf(file: &GgufFile) -> LoadResult<ResolvedText> {
    let config = text_config(file)?;
    config.resolve().map_err(|problem| {
        let reason = match problem {
            super::config::ConfigProblem::Invalid(r) => r,
            super::config::ConfigProblem::Unsupported(r) => format!("unsupported: {r}"),
        };
        invalid(file, reason)
    })
}

/// Who owns the keys and values a Gemma 4 GGUF's layers attend to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KvOwner {
    /// A target: its first layers compute their own keys and values (`attn_k`, `attn_v`).
    Model,
    /// An assistant: every layer reads its target's; values are the keys where full layers
    /// have a KV head count of their own (as HF's assistant configs mirror their targets).
    Target,
}

/// The [`Gemma4TextConfig`] `file`'s metadata and tensors describe.
pub fn text_config(file: &GgufFile) -> LoadResult<Gemma4TextConfig> {
    let arch = file.architecture()?;
    if arch != GGUF_ARCHITECTURE {
        return Err(GgufError::UnsupportedArchitecture {
            path: file.path().to_path_buf(),
            found: arch.to_string(),
            supported: vec![GGUF_ARCHITECTURE],
        }
        .into());
    }
    read_text_config(file, arch, KvOwner::Model)
}

/// The Gemma 4 decoder configuration under the metadata keys of `arch` (the file's own
/// architecture, already checked by the caller).
pub(crate) fn read_text_config(
    file: &GgufFile,
    arch: &str,
    kv_owner: KvOwner,
) -> LoadResult<Gemma4TextConfig> {
    let key = |k: &str| format!("{arch}.{k}");
    let layers = file.usize(&key("block_count"))?;
    if layers == 0 || layers > MAX_LAYERS {
        return Err(invalid(
            file,
            format!("{layers} layers (a model has 1 to {MAX_LAYERS})"),
        ));
    }
    let hidden = file.usize(&key("embedding_length"))?;
    let heads = file.usize(&key("attention.head_count"))?;
    let global_head_dim = file.usize(&key("attention.key_length"))?;
    let head_dim = file
        .opt_usize(&key("attention.key_length_swa"))?
        .unwrap_or(global_head_dim);
    for (k, expected) in [
        ("attention.value_length", global_head_dim),
        ("attention.value_length_swa", head_dim),
    ] {
        if let Some(v) = file.opt_usize(&key(k))? {
            if v != expected {
                return Err(unsupported(
                    file,
                    format!("{arch}.{k} {v} differs from the key length {expected}"),
                ));
            }
        }
    }
    let window = file.usize(&key("attention.sliding_window"))?;
    let layer_types = sliding_pattern(file, &key("attention.sliding_window_pattern"), layers)?;
    let shared = file
        .opt_usize(&key("attention.shared_kv_layers"))?
        .unwrap_or(0);
    let per_layer = |k: &str| per_layer_counts(file, &key(k), layers);
    let kv = per_layer("attention.head_count_kv")?;
    let kv_of = |t: LayerType| {
        layer_types
            .iter()
            .zip(&kv)
            .find(|(lt, _)| **lt == t)
            .map(|(_, &n)| n)
    };
    let sliding_kv = kv_of(LayerType::Sliding)
        .or(kv_of(LayerType::Full))
        .unwrap_or(heads);
    let full_kv = kv_of(LayerType::Full).unwrap_or(sliding_kv);
    for (i, (t, &n)) in layer_types.iter().zip(&kv).enumerate() {
        let expected = if *t == LayerType::Full {
            full_kv
        } else {
            sliding_kv
        };
        if n != expected {
            return Err(unsupported(
                file,
                format!(
                    "layer {i} has {n} KV heads, other {} layers {expected}",
                    t.hf_name()
                ),
            ));
        }
    }
    let ffn = per_layer("feed_forward_length")?;
    let intermediate = ffn[0];
    let wide_width = intermediate.saturating_mul(2);
    let double_wide = shared > 0 && ffn[layers - 1] == wide_width;
    for (i, &width) in ffn.iter().enumerate() {
        let wide = double_wide && i >= layers.saturating_sub(shared);
        let expected = if wide { wide_width } else { intermediate };
        if width != expected {
            return Err(unsupported(
                file,
                format!("layer {i} has an MLP {width} wide, expected {expected}"),
            ));
        }
    }
    // Values are the keys on full layers without `attn_v` (KV-shared layers have neither).
    let owners = layers.saturating_sub(shared);
    let k_eq_v = match kv_owner {
        KvOwner::Model => (0..owners).any(|i| {
            layer_types[i] == LayerType::Full
                && !file
                    .tensors()
                    .contains_key(&format!("blk.{i}.attn_v.weight"))
        }),
        KvOwner::Target => full_kv != sliding_kv,
    };
    // HF gives full layers their own KV head count only with keys as values.
    if full_kv != sliding_kv && !k_eq_v {
        return Err(unsupported(
            file,
            format!(
                "full layers with {full_kv} KV heads and sliding ones with {sliding_kv}, \
                 values not the keys"
            ),
        ));
    }
    let rows = |name: &str| {
        file.tensor_info(name)
            .and_then(|t| t.shape.first().copied())
    };
    let vocab = rows("token_embd.weight").ok_or_else(|| LoadError::MissingTensor {
        name: "token_embd.weight".into(),
        expected: vec![0, hidden],
    })?;
    let ple = file
        .opt_usize(&key("embedding_length_per_layer_input"))?
        .unwrap_or(0);
    let ple_vocab = if ple > 0 {
        rows("per_layer_token_embd.weight").ok_or_else(|| LoadError::MissingTensor {
            name: "per_layer_token_embd.weight".into(),
            expected: vec![vocab, layers.saturating_mul(ple)],
        })?
    } else {
        0
    };
    let (partial, factor) = rotated_share(file, global_head_dim)?;
    let rope = BTreeMap::from([
        (
            LayerType::Sliding,
            RopeParameters {
                rope_type: "default".into(),
                rope_theta: file
                    .opt_f64(&key("rope.freq_base_swa"))?
                    .unwrap_or(10_000.0),
                partial_rotary_factor: None,
                factor: None,
            },
        ),
        (
            LayerType::Full,
            RopeParameters {
                rope_type: "proportional".into(),
                rope_theta: file.opt_f64(&key("rope.freq_base"))?.unwrap_or(1_000_000.0),
                partial_rotary_factor: Some(partial),
                factor,
            },
        ),
    ]);
    let experts = file.opt_usize(&key("expert_count"))?.filter(|&n| n > 0);
    let mut config: Gemma4TextConfig = serde_json::from_value(serde_json::json!({}))
        .map_err(|e| invalid(file, format!("default configuration: {e}")))?;
    config.model_type = Some("gemma4_text".into());
    config.vocab_size = vocab;
    config.hidden_size = hidden;
    config.intermediate_size = intermediate;
    config.num_hidden_layers = layers;
    config.num_attention_heads = heads;
    config.num_key_value_heads = sliding_kv;
    config.head_dim = head_dim;
    config.global_head_dim = global_head_dim;
    config.num_global_key_value_heads = (full_kv != sliding_kv).then_some(full_kv);
    config.max_position_embeddings = file
        .opt_usize(&key("context_length"))?
        .unwrap_or(config.max_position_embeddings);
    config.rms_norm_eps = file
        .opt_f64(&key("attention.layer_norm_rms_epsilon"))?
        .unwrap_or(config.rms_norm_eps);
    config.tie_word_embeddings = !file.tensors().contains_key("output.weight");
    config.rope_parameters = Some(rope);
    config.sliding_window = window;
    config.layer_types = Some(layer_types);
    config.final_logit_softcapping = file.opt_f64(&key("final_logit_softcapping"))?;
    config.vocab_size_per_layer_input = ple_vocab;
    config.hidden_size_per_layer_input = ple;
    config.attention_k_eq_v = k_eq_v;
    config.num_kv_shared_layers = shared;
    config.use_double_wide_mlp = double_wide;
    config.enable_moe_block = experts.is_some();
    config.num_experts = experts;
    config.top_k_experts = file.opt_usize(&key("expert_used_count"))?;
    config.moe_intermediate_size = file.opt_usize(&key("expert_feed_forward_length"))?;
    Ok(config)
}

/// Layer kinds from the per-layer flags (true = sliding).
fn sliding_pattern(file: &GgufFile, key: &str, layers: usize) -> LoadResult<Vec<LayerType>> {
    let flags = file.array(key)?;
    if flags.len() != layers {
        return Err(invalid(
            file,
            format!("{key}: {} flags for {layers} layers", flags.len()),
        ));
    }
    flags
        .iter()
        .map(|v| match v {
            candle_core::quantized::gguf_file::Value::Bool(true) => Ok(LayerType::Sliding),
            candle_core::quantized::gguf_file::Value::Bool(false) => Ok(LayerType::Full),
            other => Err(invalid(
                file,
                format!("{key}: expected booleans, found {other:?}"),
            )),
        })
        .collect()
}

/// A count given once for every layer, or once per layer.
fn per_layer_counts(file: &GgufFile, key: &str, layers: usize) -> LoadResult<Vec<usize>> {
    if let Some(candle_core::quantized::gguf_file::Value::Array(_)) = file.value(key) {
        let values = file.ints(key)?;
        if values.len() != layers {
            return Err(invalid(
                file,
                format!("{key}: {} values for {layers} layers", values.len()),
            ));
        }
        return values
            .into_iter()
            .map(|v| {
                usize::try_from(v).map_err(|_| invalid(file, format!("{key}: {v} is negative")))
            })
            .collect();
    }
    Ok(vec![file.usize(key)?; layers])
}

/// `(partial_rotary_factor, factor)` of full layers from `rope_freqs.weight`: the pairs at one
/// factor `f` rotate (a prefix), the others (≥ 1e29) do not; `f ≠ 1` is RoPE's frequency divisor.
/// Without the tensor every pair rotates.
fn rotated_share(file: &GgufFile, global_head_dim: usize) -> LoadResult<(f64, Option<f64>)> {
    let Some(raw) = file.raw("rope_freqs.weight") else {
        return Ok((1.0, None));
    };
    if global_head_dim == 0
        || raw.ggml_type.name != "F32"
        || Some(raw.bytes.len()) != global_head_dim.checked_mul(2)
    {
        return Err(invalid(
            file,
            format!(
                "rope_freqs.weight: {} of {} bytes, expected F32 with {} entries",
                raw.ggml_type.name,
                raw.bytes.len(),
                global_head_dim / 2
            ),
        ));
    }
    let factors: Vec<f32> = raw
        .bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let rotated = factors.iter().take_while(|&&f| f < NOT_ROTATED).count();
    let first = factors.first().copied().unwrap_or(1.0);
    let consistent = factors[..rotated].iter().all(|&f| f == first && f > 0.0)
        && factors[rotated..].iter().all(|&f| f >= NOT_ROTATED);
    if !consistent {
        return Err(unsupported(
            file,
            "rope_freqs.weight other than one factor on a prefix of the pairs and 1e30 after it",
        ));
    }
    let factor = (rotated > 0 && first != 1.0).then_some(f64::from(first));
    Ok((2.0 * rotated as f64 / global_head_dim as f64, factor))
}

pub(super) fn invalid(file: &GgufFile, reason: impl Into<String>) -> LoadError {
    LoadError::InvalidConfig {
        path: file.path().to_path_buf(),
        reason: reason.into(),
    }
}

pub(super) fn unsupported(file: &GgufFile, feature: impl Into<String>) -> LoadError {
    LoadError::UnsupportedFeature {
        path: file.path().to_path_buf(),
        feature: feature.into(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn fixture(file: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/gemma4_gguf/e2b_like")
            .join(file)
    }

    /// The converter's GGUFs resolve to the same layers as the HF `config.json` each was
    /// converted from: E2B-like (PLE, KV sharing, double-wide MLP, partial RoPE), 31B-like
    /// (keys as values, full layers' own KV heads), MoE.
    #[test]
    fn the_converters_gguf_resolves_as_its_hf_config() {
        for case in ["e2b_like", "dense_like", "moe_like"] {
            resolves_as_its_hf_config(case);
        }
    }

    fn resolves_as_its_hf_config(case: &str) {
        let fixture = |file: &str| fixture(&format!("../{case}/{file}"));
        let file = GgufFile::open(&fixture("target-f32.gguf")).unwrap();
        let from_gguf = resolve_gguf(&file).unwrap();
        let text = std::fs::read_to_string(fixture("hf/target/config.json")).unwrap();
        let hf: Gemma4TextConfig = serde_json::from_str(&text).unwrap();
        let from_hf = hf.resolve().unwrap();
        assert_eq!(from_gguf.layers, from_hf.layers);
        assert_eq!(from_gguf.store_layers, from_hf.store_layers);
        assert_eq!(from_gguf.cache_layers, from_hf.cache_layers);
        assert_eq!(from_gguf.moe, from_hf.moe);
        let (g, h) = (&from_gguf.config, &from_hf.config);
        assert_eq!(
            (
                g.vocab_size,
                g.hidden_size,
                g.num_attention_heads,
                g.sliding_window
            ),
            (
                h.vocab_size,
                h.hidden_size,
                h.num_attention_heads,
                h.sliding_window
            )
        );
        assert_eq!(g.hidden_size_per_layer_input, h.hidden_size_per_layer_input);
        if h.hidden_size_per_layer_input > 0 {
            // Without per-layer inputs the table's size means nothing (HF keeps its default).
            assert_eq!(g.vocab_size_per_layer_input, h.vocab_size_per_layer_input);
        }
        assert_eq!(g.final_logit_softcapping, h.final_logit_softcapping);
        assert_eq!(g.tie_word_embeddings, h.tie_word_embeddings);
        assert!((g.rms_norm_eps - h.rms_norm_eps).abs() < 1e-12);
    }

    #[test]
    fn the_assistant_gguf_is_not_a_target() {
        let file = GgufFile::open(&fixture("assistant-f32.gguf")).unwrap();
        let err = resolve_gguf(&file).unwrap_err().to_string();
        assert!(err.contains("gemma4-assistant"), "{err}");
    }
}
