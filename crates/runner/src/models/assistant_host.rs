//! What a Gemma 4 assistant needs to know of the target it drafts for, whatever the target's
//! family: its width and vocabulary, and for each attention type the layer whose keys and
//! values the assistant's layers of that type read (the last of its type, the pair HF passes as
//! `shared_kv_states`) with how many positions its cache keeps.
//!
//! A Gemma 4 target describes its `Store` layers ([`Gemma4Target`]); a Gemma 3 target its last
//! sliding and last full layer ([`Gemma3Target`]: layers 16 and 17 of Gemma 3 270M), whose
//! cached keys and values (as HF's cache holds them after a forward) the assistant reads as
//! `shared_kv_states`. The assistant itself is written once ([`crate::models::Gemma4Assistant`])
//! and binds to either.

use std::collections::BTreeMap;

use mtp_core::Backend;

use super::config::LayerType;
use super::gemma3::Gemma3Target;
use super::gemma4::Gemma4Target;
use super::Family;

/// The layer of one attention type whose caches an assistant's layers of that type read.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceLayer {
    /// The layer's index in the target's [`CacheSet`](mtp_core::cache::CacheSet).
    pub index: usize,
    /// KV heads of that layer.
    pub kv_heads: usize,
    /// Head dim of that layer.
    pub head_dim: usize,
    /// RoPE inverse frequencies its keys were rotated with (`head_dim / 2` entries).
    pub inv_freq: Vec<f32>,
    /// Positions of it an assistant step may read (`None`: every position): what the target's
    /// cache keeps between forwards.
    pub keeps: Option<usize>,
}

/// A target as an assistant sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct AssistantHost {
    /// The target's family (for messages).
    pub family: Family,
    /// Residual width of the target (the assistant's `backbone_hidden_size`).
    pub hidden_size: usize,
    /// Vocabulary size of the target.
    pub vocab_size: usize,
    /// The layer each attention type's assistant layers read.
    pub sources: BTreeMap<LayerType, SourceLayer>,
}

/// A target a Gemma 4 assistant can draft for.
pub trait AssistantTarget {
    /// The target as an assistant sees it.
    fn assistant_host(&self) -> AssistantHost;
}

/// The source layer of each attention type `source` finds.
fn sources_by_type(
    source: impl Fn(LayerType) -> Option<SourceLayer>,
) -> BTreeMap<LayerType, SourceLayer> {
    [LayerType::Sliding, LayerType::Full]
        .into_iter()
        .filter_map(|layer_type| source(layer_type).map(|s| (layer_type, s)))
        .collect()
}

impl<B: Backend> AssistantTarget for Gemma4Target<B> {
    fn assistant_host(&self) -> AssistantHost {
        let t = self.config();
        AssistantHost {
            family: Family::Gemma4,
            hidden_size: t.config.hidden_size,
            vocab_size: t.config.vocab_size,
            sources: sources_by_type(|layer_type| {
                let index = self.store_layer(layer_type)?;
                let spec = t.layers.get(index)?;
                Some(SourceLayer {
                    index,
                    kv_heads: spec.kv_heads,
                    head_dim: spec.head_dim,
                    inv_freq: spec.inv_freq.clone(),
                    keeps: (layer_type == LayerType::Sliding).then(|| self.ring_size(index)),
                })
            }),
        }
    }
}

impl<B: Backend> AssistantTarget for Gemma3Target<B> {
    fn assistant_host(&self) -> AssistantHost {
        let c = self.config();
        AssistantHost {
            family: Family::Gemma3,
            hidden_size: c.hidden_size,
            vocab_size: c.vocab_size,
            sources: sources_by_type(|layer_type| {
                let index = c.layers.iter().rposition(|l| l.layer_type == layer_type)?;
                Some(SourceLayer {
                    index,
                    kv_heads: c.kv_heads,
                    head_dim: c.head_dim,
                    inv_freq: c.layers[index].inv_freq.clone(),
                    // HF's Gemma 3 cache keeps the last `sliding_window - 1` positions of a
                    // sliding layer between forwards (ours keeps one more); an assistant reading
                    // more than that would see keys HF's does not.
                    keeps: (layer_type == LayerType::Sliding)
                        .then(|| c.sliding_window.saturating_sub(1)),
                })
            }),
        }
    }
}
