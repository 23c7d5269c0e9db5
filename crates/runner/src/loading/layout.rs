//! Where a target's text model lives in its weight files, found from the files themselves.
//!
//! HF `Gemma4ForCausalLM` stores the text model under `model.` (`model.embed_tokens.weight`, ...);
//! the multimodal `Gemma4ForConditionalGeneration` that Google publishes stores it under
//! `model.language_model.`, next to the modules a text prompt never runs: `model.vision_tower`,
//! `model.audio_tower`, `model.embed_vision` and `model.embed_audio` (HF `Gemma4Model.__init__`);
//! mlx-vlm's conversions (the `mlx-community` files) store it under `language_model.model.`,
//! the towers at the root.
//! Those are marked used without being read ([`TensorStore::skip_prefix`]), so their pages of the
//! memory map are never touched.

use super::error::{LoadError, LoadResult};
use super::tensors::TensorStore;

/// The text model's embedding, relative to its prefix.
const EMBED: &str = "embed_tokens.weight";
/// The per-layer embedding shares the embedding's suffix: it is not the text model's root.
const PER_LAYER_EMBED: &str = "embed_tokens_per_layer.weight";
/// The text model's module name inside the multimodal wrapper.
const LANGUAGE_MODEL: &str = "language_model.";
/// Where mlx-vlm's `Model.sanitize` puts the text model of a multimodal checkpoint it
/// converts (the `mlx-community` files): `language_model.model.`, the towers at the root.
const MLX_VLM_LANGUAGE_MODEL: &str = "language_model.model.";
/// The multimodal wrapper's other modules (HF `Gemma4Model`): towers and their embedders.
pub const TOWER_MODULES: [&str; 4] = ["vision_tower", "audio_tower", "embed_vision", "embed_audio"];

/// Where the text model of a checkpoint lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextLayout {
    /// The prefix of every text-model tensor: `model.`, `model.language_model.` or
    /// `language_model.model.`.
    pub prefix: String,
    /// The multimodal wrapper's prefix (`model.`, or `` for mlx-vlm's layout), when the text
    /// model sits inside one.
    pub wrapper: Option<String>,
}

impl TextLayout {
    /// Find the text model from the tensor names: the one `…embed_tokens.weight` outside the towers.
    pub fn find(store: &TensorStore) -> LoadResult<Self> {
        let in_tower = |name: &str| {
            TOWER_MODULES
                .iter()
                .any(|m| name.split('.').any(|part| part == *m))
        };
        let roots: Vec<&str> = store
            .names()
            .filter(|n| (*n == EMBED || n.ends_with(&format!(".{EMBED}"))) && !in_tower(n))
            .filter(|n| !n.ends_with(PER_LAYER_EMBED))
            .collect();
        let name = match roots.as_slice() {
            [one] => *one,
            [] => {
                return Err(LoadError::MissingTensor {
                    name: format!("model.{EMBED} (or model.{LANGUAGE_MODEL}{EMBED})"),
                    expected: Vec::new(),
                })
            }
            many => {
                return Err(LoadError::InvalidTensor {
                    name: many.join(", "),
                    reason: "more than one text-model embedding: which model is the text model?"
                        .into(),
                })
            }
        };
        let prefix = name[..name.len() - EMBED.len()].to_string();
        let wrapper = prefix
            .strip_suffix(LANGUAGE_MODEL)
            .or_else(|| prefix.strip_suffix(MLX_VLM_LANGUAGE_MODEL))
            .map(str::to_string);
        Ok(Self { prefix, wrapper })
    }

    /// Mark the wrapper's tower tensors used without reading them; returns how many there were.
    pub fn skip_towers(&self, store: &mut TensorStore) -> usize {
        let Some(wrapper) = &self.wrapper else {
            return 0;
        };
        TOWER_MODULES
            .iter()
            .map(|m| store.skip_prefix(&format!("{wrapper}{m}.")))
            .sum()
    }
}
