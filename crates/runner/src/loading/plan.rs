//! Before loading: the compute dtype a backend runs a checkpoint best in, and the memory the
//! weights and the KV cache at a context will need (so that a model too large for the machine
//! is refused before it is read, not after the machine starts swapping).

use std::path::Path;

use mtp_core::{Backend, DType};

use super::config_file::read_target_config;
use super::error::LoadResult;
use super::layout::{TextLayout, TOWER_MODULES};
use super::tensors::TensorStore;
use crate::models::config::LayerType;

/// The compute dtype `backend` runs the checkpoint in `dir` best in
/// ([`Backend::preferred_dtype`] of the dtype most of its weights are stored in).
pub fn auto_dtype<B: Backend>(backend: &B, dir: &Path) -> LoadResult<DType> {
    let store = TensorStore::open(dir)?;
    Ok(backend.preferred_dtype(store.stored_float_dtype().unwrap_or(DType::F32)))
}

/// What loading a model pair and running it at a context will take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// The weights that will be read, in the compute dtype (towers excluded).
    pub weights: u64,
    /// The target's KV cache at `context` positions (sliding layers keep their window).
    pub kv_cache: u64,
    /// The context the KV cache is sized for.
    pub context: usize,
}

impl MemoryEstimate {
    /// Weights and KV cache together.
    pub fn total(&self) -> u64 {
        self.weights.saturating_add(self.kv_cache)
    }
}

/// The bytes of the float tensors of `dir` in `dtype`, without the multimodal towers.
fn weight_bytes(dir: &Path, dtype: DType) -> LoadResult<u64> {
    let store = TensorStore::open(dir)?;
    let towers: Vec<String> = match TextLayout::find(&store).ok().and_then(|l| l.wrapper) {
        Some(wrapper) => TOWER_MODULES
            .iter()
            .map(|m| format!("{wrapper}{m}."))
            .collect(),
        None => Vec::new(),
    };
    let mut total = 0u64;
    for name in store.names() {
        if towers.iter().any(|t| name.starts_with(t.as_str())) {
            continue;
        }
        if let Some(shape) = store.shape(name) {
            let count = shape.iter().map(|&d| d as u64).product::<u64>();
            total = total.saturating_add(count.saturating_mul(dtype.size_in_bytes() as u64));
        }
    }
    Ok(total)
}

/// Estimate the memory of the target in `target` (and the drafter in `drafter`) computed in
/// `dtype`, with the target's KV cache holding `context` positions (capped at the model's
/// `max_position_embeddings`).
pub fn estimate_memory(
    target: &Path,
    drafter: Option<&Path>,
    dtype: DType,
    context: usize,
) -> LoadResult<MemoryEstimate> {
    let resolved = read_target_config(&target.join("config.json"))?;
    let context = context.min(resolved.config.max_position_embeddings);
    let mut weights = weight_bytes(target, dtype)?;
    if let Some(dir) = drafter {
        weights = weights.saturating_add(weight_bytes(dir, dtype)?);
    }
    let window = resolved.config.sliding_window;
    let mut kv_cache = 0u64;
    for spec in resolved.layers.iter().take(resolved.cache_layers) {
        let positions = match spec.layer_type {
            LayerType::Full => context,
            LayerType::Sliding => context.min(window + 1),
        } as u64;
        let per_position =
            2 * (spec.kv_heads * spec.head_dim) as u64 * dtype.size_in_bytes() as u64;
        kv_cache = kv_cache.saturating_add(positions.saturating_mul(per_position));
    }
    Ok(MemoryEstimate {
        weights,
        kv_cache,
        context,
    })
}

/// The memory the system can still give this process (Linux `MemAvailable`), if known.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}
