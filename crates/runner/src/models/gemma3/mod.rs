//! Gemma 3 text models over any [`Backend`]: HF `Gemma3ForCausalLM` checkpoints
//! (`model_type: "gemma3_text"`), the text model of the multimodal `Gemma3ForConditionalGeneration`
//! checkpoints Google publishes (`model_type: "gemma3"`: the text config nested in
//! `text_config`, the text weights under `language_model.model.`, the SigLIP vision tower and the
//! projector beside them and never read), and GGUF files of architecture `gemma3` (llama.cpp's),
//! built by the same code.
//!
//! # Forward
//!
//! ```text
//! x      = embed_tokens(ids) * sqrt(hidden)
//! x      = layers(x)           (see `layer.rs`; sliding layers: local RoPE base and a window)
//! h      = norm(x)             (hidden and draft_hidden)
//! logits = softcap(h @ embed_tokens^T)   (softcap only when `final_logit_softcapping` is set)
//! ```
//!
//! Gemma 3's own pieces: attention scaled by `query_pre_attn_scalar ^ -0.5`; sliding layers use
//! the local RoPE base (`rope_local_base_freq`, default 10 000), full layers the global one
//! (default 10⁶, optionally with linear scaling); `layer_types` from `sliding_window_pattern`
//! (default: 5 sliding, then 1 full); every RMS norm scales by `1 + w` (HF `Gemma3RMSNorm`).
//!
//! From a GGUF, the configuration is read as llama.cpp reads it ([`config::resolve_gguf`]):
//! llama.cpp ignores `query_pre_attn_scalar` (it uses `head_dim`, or `hidden / heads` for the
//! 62-layer 27B), defaults the sliding pattern to 6 and the local base to 10 000; the converter
//! stored the norms as `1 + w` already (see `weights.rs`). Quantized tensors load as quantized
//! [`Linear`](crate::models::nn::Linear) / [`Embedding`](crate::models::nn::Embedding) weights
//! (the backend's quantized matmul).
//!

pub mod config;
mod layer;
mod model;
mod weights;

use std::path::Path;

use mtp_core::Backend;

pub use config::{Gemma3Resolved, Gemma3TextConfig};
pub use model::Gemma3Target;

use crate::loading::gguf::GgufFile;
use crate::loading::{
    loader_for, read_config_json, GgufArrays, LoadError, LoadOptions, LoadResult, StoreStats,
    TensorProgress, TensorStore, TextLayout,
};
use weights::TextPart;

use super::registry::{family_model_types, Family, Role};

/// The multimodal checkpoint's modules a text prompt never runs (top level as the published
/// files have them, or under `model.` as transformers names them in memory).
const VISION_MODULES: [&str; 4] = [
    "vision_tower.",
    "multi_modal_projector.",
    "model.vision_tower.",
    "model.multi_modal_projector.",
];

fn check_dtype(options: &LoadOptions, path: &Path) -> LoadResult<()> {
    if options.dtype.is_float() {
        Ok(())
    } else {
        Err(LoadError::UnsupportedFeature {
            path: path.to_path_buf(),
            feature: format!("compute dtype {}", options.dtype),
        })
    }
}

/// Read and resolve a Gemma 3 `config.json` (a `model_type` the registry gives the Gemma 3
/// family: the text layout `gemma3_text` or the multimodal `gemma3`).
pub fn read_config(path: &Path) -> LoadResult<Gemma3Resolved> {
    let (value, found) = read_config_json(path)?;
    let accepted = family_model_types(Family::Gemma3, Role::Target);
    if !accepted.contains(&found.as_str()) {
        return Err(LoadError::UnknownModelType {
            path: path.to_path_buf(),
            found,
            expected: accepted,
        });
    }
    // The multimodal layout nests the text model's configuration.
    let value = if found == "gemma3" {
        value
            .get("text_config")
            .cloned()
            .ok_or_else(|| LoadError::InvalidConfig {
                path: path.to_path_buf(),
                reason: "model_type \"gemma3\" without a text_config".into(),
            })?
    } else {
        value
    };
    let config: Gemma3TextConfig =
        serde_json::from_value(value).map_err(|e| LoadError::BadJson {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    config.resolve(path)
}

/// Load a Gemma 3 text model from the HF model directory `dir` (`config.json` +
/// safetensors), telling `progress` each tensor read.
pub fn load_safetensors<B: Backend>(
    backend: &B,
    dir: &Path,
    options: &LoadOptions,
    progress: TensorProgress<'_>,
) -> LoadResult<(Gemma3Target<B>, StoreStats)> {
    check_dtype(options, dir)?;
    let config = read_config(&dir.join("config.json"))?;
    let mut store = TensorStore::open(dir)?;
    let prefix = TextLayout::find(&store)?.prefix;
    for module in VISION_MODULES {
        store.skip_prefix(module);
    }
    // `language_model.model.` → its head is `language_model.lm_head.weight`.
    let lm_head = match prefix.strip_suffix("model.") {
        Some(outer) if !outer.is_empty() => format!("{outer}lm_head.weight"),
        _ => "lm_head.weight".to_string(),
    };
    let model = {
        // MLX-quantized checkpoints and `--quantize` load as for Gemma 4.
        let mut loader = loader_for(backend, &mut store, dir, options)?.with_progress(progress);
        if prefix == "model." {
            Gemma3Target::load(&mut loader, config)?
        } else {
            Gemma3Target::load(&mut TextPart::new(&mut loader, &prefix, &lm_head), config)?
        }
    };
    let stats = store.finish()?;
    Ok((model, stats))
}

/// Load a Gemma 3 text model from an opened GGUF file (architecture `gemma3`).
pub fn load_gguf<B: Backend>(
    backend: &B,
    file: &GgufFile,
    options: &LoadOptions,
    progress: TensorProgress<'_>,
) -> LoadResult<(Gemma3Target<B>, StoreStats)> {
    check_dtype(options, file.path())?;
    if options.quantize.is_some() {
        return Err(LoadError::UnsupportedFeature {
            path: file.path().to_path_buf(),
            feature: "--quantize with a GGUF model (its tensors are stored as they are meant to \
                      run)"
                .into(),
        });
    }
    let config = config::resolve_gguf(file)?;
    let mut arrays = GgufArrays::new(backend, file, options.dtype)
        .with_stored_quant(options.stored_quant)
        .with_progress(progress);
    let model = Gemma3Target::load(&mut arrays, config)?;
    let stats = arrays.finish()?;
    Ok((model, stats))
}
