//! Before loading: the compute dtype a backend runs a checkpoint best in, and the memory the
//! weights and the KV cache at a context will need (so that a model too large for the machine
//! is refused before it is read, not after the machine starts swapping).

use mtp_core::attention_blocked::ATTENTION_KEY_BLOCK;
use mtp_core::engine::PREFILL_CHUNK;
use std::path::Path;

use mtp_core::{Backend, DType};

use super::config_file::read_target_config;
use super::error::LoadResult;
use super::gguf::{is_gguf_path, GgufFile};
use super::layout::{TextLayout, TOWER_MODULES};
use super::tensors::TensorStore;
use super::{LoadOptions, StoredQuant};
use crate::models::config::LayerType;
use crate::models::gemma3::{self, config::resolve_gguf};
use crate::models::registry::{registration_of, Family, Role};

/// The compute dtype `backend` runs the checkpoint in `dir` best in
/// ([`Backend::preferred_dtype`] of the dtype most of its weights are stored in).
///
/// A GGUF file's quantized matrices compute in the activations' dtype: `auto` is the backend's
/// preference for its float tensors (F32 on CPUs).
pub fn auto_dtype<B: Backend>(backend: &B, dir: &Path) -> LoadResult<DType> {
    if is_gguf_path(dir) {
        let file = GgufFile::open(dir)?;
        let stored = file
            .tensors()
            .values()
            .find_map(|t| t.ggml_type.float_dtype())
            .unwrap_or(DType::F32);
        return Ok(backend.preferred_dtype(stored));
    }
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
    /// The largest transient buffers of one prefill chunk (see [`prefill_activation_bytes`]).
    pub activations: u64,
    /// The process beyond its arrays: the tokenizer, thread pools and allocator slack
    /// ([`RUNTIME_BYTES`]).
    pub runtime: u64,
}

/// What a process running a model holds beyond weights, KV cache and activations — the
/// tokenizer (a 262k-entry vocabulary), the thread pools' stacks and buffers, and the allocator's
/// slack after freeing a prefill chunk's buffers. Measured on Gemma 3 270M Q4_K_M (candle-cpu):
/// 0.14 GB beyond the counted arrays at 1k prompt tokens, 0.2 GB at 27k; counted as 256 MiB.
pub const RUNTIME_BYTES: u64 = 256 << 20;

impl MemoryEstimate {
    /// Weights, KV cache, prefill activations and the runtime together.
    pub fn total(&self) -> u64 {
        self.weights
            .saturating_add(self.kv_cache)
            .saturating_add(self.activations)
            .saturating_add(self.runtime)
    }
}

/// The largest transient buffers of one prefill forward of [`PREFILL_CHUNK`] tokens at a
/// context of `context` positions, in `f32`: the attention scores and their exponentials over
/// one block of keys (`heads × chunk × ATTENTION_KEY_BLOCK`, twice: past one block the
/// attention takes the keys a block at a time, see [`mtp_core::attention_blocked`]), the mask
/// table over the whole context (`chunk × context`), one layer's cached keys and values read
/// as contiguous arrays (`2 × context × kv_width`, `kv_width` the widest layer's KV heads × head
/// dim), and the chunk's MLP and hidden rows. The prompt goes through the target a chunk at a
/// time, so only the mask table and the keys and values read grow with the context.
pub fn prefill_activation_bytes(
    heads: usize,
    hidden: usize,
    intermediate: usize,
    kv_width: usize,
    context: usize,
) -> u64 {
    let chunk = PREFILL_CHUNK.min(context.max(1)) as u64;
    let keys = context.clamp(1, ATTENTION_KEY_BLOCK) as u64;
    let scores = 2 * heads as u64 * chunk * keys;
    let table = chunk * context as u64;
    let kv_read = 2 * context as u64 * kv_width as u64;
    let rows = chunk * (3 * intermediate as u64 + 6 * hidden as u64);
    scores
        .saturating_add(table)
        .saturating_add(kv_read)
        .saturating_add(rows)
        .saturating_mul(4)
}

/// The bytes of the tensors of `dir` as `options` loads them, without the multimodal towers:
/// float tensors in the compute dtype; under `--quantize`, every matrix whose rows split into
/// whole blocks in its blocks (projections, embedding tables and 3-D MoE expert stacks are
/// what it quantizes). MLX affine tensors are counted as dense (candle and the reference
/// backend decode them; MLX keeps them packed, so this over-estimates there).
fn weight_bytes(dir: &Path, options: &LoadOptions) -> LoadResult<u64> {
    let store = TensorStore::open(dir)?;
    let towers: Vec<String> = match TextLayout::find(&store).ok().and_then(|l| l.wrapper) {
        Some(wrapper) => TOWER_MODULES
            .iter()
            .map(|m| format!("{wrapper}{m}."))
            .collect(),
        None => Vec::new(),
    };
    let dense = options.dtype.size_in_bytes() as u64;
    let mut total = 0u64;
    for name in store.names() {
        if towers.iter().any(|t| name.starts_with(t.as_str())) {
            continue;
        }
        let Some(shape) = store.shape(name) else {
            continue;
        };
        let count = shape.iter().map(|&d| d as u64).product::<u64>();
        let bytes = match (options.quantize, shape.as_slice()) {
            (Some(scheme), &[_, cols] | &[_, _, cols])
                if cols % scheme.ggml_type().block_size() == 0 =>
            {
                let ty = scheme.ggml_type();
                count / ty.block_size() as u64 * ty.block_bytes() as u64
            }
            _ => count.saturating_mul(dense),
        };
        total = total.saturating_add(bytes);
    }
    Ok(total)
}

/// The bytes of a GGUF file's tensors as `options` loads them: quantized ones as stored (or in
/// the compute dtype under `--dequantize`), float ones in the compute dtype. Q5_0 counts at its
/// 8-bit width, 34 bytes per block of 32 rather than 22: the candle CPU kernel's interleaved
/// layout on x86-64 widens it (elsewhere this over-counts those tensors by half).
fn gguf_weight_bytes(file: &GgufFile, options: &LoadOptions) -> u64 {
    let dense = options.dtype.size_in_bytes() as u64;
    file.tensors().values().fold(0u64, |total, t| {
        let count = t.shape.iter().map(|&d| d as u64).product::<u64>();
        let bytes = match (t.ggml_type.float_dtype(), options.stored_quant) {
            (None, StoredQuant::Keep) if t.ggml_type.name == "Q5_0" => (t.len as u64) / 22 * 34,
            (None, StoredQuant::Keep) => t.len as u64,
            _ => count.saturating_mul(dense),
        };
        total.saturating_add(bytes)
    })
}

/// The KV cache of `layers` at `context` positions: full layers keep every position, sliding
/// ones their window (+ 1).
fn kv_bytes(
    layers: impl Iterator<Item = (LayerType, usize, usize)>,
    window: usize,
    context: usize,
    dtype: DType,
) -> u64 {
    layers.fold(0u64, |total, (layer_type, kv_heads, head_dim)| {
        let positions = match layer_type {
            LayerType::Full => context,
            LayerType::Sliding => context.min(window + 1),
        } as u64;
        let per_position = 2 * (kv_heads * head_dim) as u64 * dtype.size_in_bytes() as u64;
        total.saturating_add(positions.saturating_mul(per_position))
    })
}

/// Estimate the memory of the target in `target` (and the drafter in `drafter`) loaded under
/// `options` (compute dtype, `--quantize`, `--dequantize`), with the target's KV cache holding
/// `context` positions (capped at the model's `max_position_embeddings`). `target` and
/// `drafter` may be GGUF files.
pub fn estimate_memory(
    target: &Path,
    drafter: Option<&Path>,
    options: &LoadOptions,
    context: usize,
) -> LoadResult<MemoryEstimate> {
    let dtype = options.dtype;
    let drafter_bytes = match drafter {
        Some(file) if is_gguf_path(file) => gguf_weight_bytes(&GgufFile::open(file)?, options),
        Some(dir) => weight_bytes(dir, options)?,
        None => 0,
    };
    if is_gguf_path(target) {
        let file = GgufFile::open(target)?;
        if file.architecture()? == crate::models::gemma4_gguf::GGUF_ARCHITECTURE {
            let resolved = crate::models::gemma4_gguf::resolve_gguf(&file)?;
            let weights = gguf_weight_bytes(&file, options).saturating_add(drafter_bytes);
            return Ok(gemma4_estimate(&resolved, weights, context, dtype));
        }
        let config = resolve_gguf(&file)?;
        let context = context.min(config.max_position_embeddings);
        let layers = config
            .layers
            .iter()
            .map(|l| (l.layer_type, config.kv_heads, config.head_dim));
        return Ok(MemoryEstimate {
            weights: gguf_weight_bytes(&file, options).saturating_add(drafter_bytes),
            kv_cache: kv_bytes(layers, config.sliding_window, context, dtype),
            context,
            activations: prefill_activation_bytes(
                config.heads,
                config.hidden_size,
                config.intermediate_size,
                config.kv_heads * config.head_dim,
                context,
            ),
            runtime: RUNTIME_BYTES,
        });
    }
    let config_path = target.join("config.json");
    if registration_of(target, Role::Target)?.family == Family::Gemma3 {
        let config = gemma3::read_config(&config_path)?;
        let context = context.min(config.max_position_embeddings);
        let layers = config
            .layers
            .iter()
            .map(|l| (l.layer_type, config.kv_heads, config.head_dim));
        return Ok(MemoryEstimate {
            weights: weight_bytes(target, options)?.saturating_add(drafter_bytes),
            kv_cache: kv_bytes(layers, config.sliding_window, context, dtype),
            context,
            activations: prefill_activation_bytes(
                config.heads,
                config.hidden_size,
                config.intermediate_size,
                config.kv_heads * config.head_dim,
                context,
            ),
            runtime: RUNTIME_BYTES,
        });
    }
    let resolved = read_target_config(&config_path)?;
    let weights = weight_bytes(target, options)?.saturating_add(drafter_bytes);
    Ok(gemma4_estimate(&resolved, weights, context, dtype))
}

/// The estimate of a Gemma 4 target of `resolved` configuration (from `config.json` or GGUF
/// metadata) whose weights (and drafter's) take `weights` bytes.
fn gemma4_estimate(
    resolved: &crate::models::config::ResolvedText,
    weights: u64,
    context: usize,
    dtype: DType,
) -> MemoryEstimate {
    let context = context.min(resolved.config.max_position_embeddings);
    let layers = resolved
        .layers
        .iter()
        .take(resolved.cache_layers)
        .map(|spec| (spec.layer_type, spec.kv_heads, spec.head_dim));
    let kv_width = resolved
        .layers
        .iter()
        .map(|spec| spec.kv_heads * spec.head_dim)
        .max()
        .unwrap_or(0);
    MemoryEstimate {
        weights,
        kv_cache: kv_bytes(layers, resolved.config.sliding_window, context, dtype),
        context,
        activations: prefill_activation_bytes(
            resolved.config.num_attention_heads,
            resolved.config.hidden_size,
            resolved.config.intermediate_size,
            kv_width,
            context,
        ),
        runtime: RUNTIME_BYTES,
    }
}

/// The memory the system can still give this process (Linux `MemAvailable`), if known.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}
