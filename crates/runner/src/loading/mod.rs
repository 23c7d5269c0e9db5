//! Loading HF model directories: `config.json` plus safetensors weights (one file or shards),
//! memory-mapped and converted from F32 / F16 / BF16 to backend arrays of a chosen compute dtype;
//! and single GGUF files ([`gguf`]: metadata, tensors, the name map to HF names in
//! [`gguf_names`]).
//!
//! ```no_run
//! use mtp_core::reference::ReferenceBackend;
//! use runner::loading::{load_assistant, load_target, LoadOptions};
//!
//! # fn main() -> Result<(), runner::loading::LoadError> {
//! let backend = ReferenceBackend::default();
//! let options = LoadOptions::default();
//! let target = load_target(&backend, "models/gemma4".as_ref(), &options)?;
//! let drafter = load_assistant(&backend, "models/gemma4-assistant".as_ref(), &target, &options)?;
//! # let _ = drafter;
//! # Ok(())
//! # }
//! ```
//!
//! Nothing read from a file is unwrapped: every problem is a [`LoadError`] naming the file or
//! tensor at fault.

mod arrays;
mod config_file;
mod error;
mod expert_matrices;
pub mod gguf;
mod gguf_arrays;
pub mod gguf_names;
mod layout;
mod plan;
mod quantized;
pub mod tensors;

use std::path::Path;

use mtp_core::quant::QuantScheme;
use mtp_core::{Backend, DType};

pub use arrays::{ArrayLoader, Matrix, TensorProgress};
pub use config_file::{read_assistant_config, read_config_json, read_target_config};
pub use error::{LoadError, LoadResult};
pub use expert_matrices::ExpertMatrices;
pub use gguf_arrays::GgufArrays;
pub use layout::{TextLayout, TOWER_MODULES};
pub use plan::{auto_dtype, available_memory, estimate_memory, MemoryEstimate};
pub use quantized::MlxQuantization;
pub use tensors::{StoreStats, TensorStore};

use crate::models::{AssistantTarget, Gemma4Assistant, Gemma4Target};

/// How to load a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// The dtype weights are converted to and computed in (default `F32`).
    pub dtype: DType,
    /// Quantize the dense matrices (projections, embedding tables) at load (`--quantize`;
    /// default `None`). Matrices a checkpoint stores quantized stay as stored.
    pub quantize: Option<QuantScheme>,
    /// What becomes of the matrices a checkpoint stores quantized (GGUF blocks, MLX affine):
    /// kept for the backend's quantized kernels (default), or decoded to dense
    /// (`--dequantize`).
    pub stored_quant: StoredQuant,
}

/// What loading does with weights a checkpoint stores quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoredQuant {
    /// Keep them quantized: the backend's quantized matmul and row lookup compute with them.
    #[default]
    Keep,
    /// Decode them exactly ([`QuantTensor::dequantize`](mtp_core::quant::QuantTensor::dequantize))
    /// to dense arrays of the compute dtype: the computation the file stands for, without the
    /// 8-bit activation rounding of quantized kernels (HF transformers loads a GGUF this way).
    /// Costs the dense weights' memory and bandwidth.
    Dequantize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            dtype: DType::F32,
            quantize: None,
            stored_quant: StoredQuant::Keep,
        }
    }
}

impl LoadOptions {
    /// Options computing in `dtype`, without quantization.
    pub fn with_dtype(dtype: DType) -> Self {
        Self {
            dtype,
            ..Self::default()
        }
    }
}

/// An [`ArrayLoader`] for the directory `dir` under `options`: its compute dtype, the MLX
/// quantization its `config.json` declares, and `--quantize`.
pub(crate) fn loader_for<'a, B: Backend>(
    backend: &'a B,
    store: &'a mut TensorStore,
    dir: &Path,
    options: &LoadOptions,
) -> LoadResult<ArrayLoader<'a, B>> {
    let mlx = MlxQuantization::read(&dir.join("config.json"))?;
    Ok(ArrayLoader::new(backend, store, options.dtype)
        .with_mlx_quantization(mlx)
        .with_quantize(options.quantize)
        .with_stored_quant(options.stored_quant))
}

fn check_dtype(options: &LoadOptions, dir: &Path) -> LoadResult<()> {
    if options.dtype.is_float() {
        Ok(())
    } else {
        Err(LoadError::UnsupportedFeature {
            path: dir.to_path_buf(),
            feature: format!("compute dtype {}", options.dtype),
        })
    }
}

/// What loading a model read from its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadReport {
    /// Where the text model was found.
    pub layout: TextLayout,
    /// Tensors (and bytes) read, and those skipped without reading (towers, unused KV-shared
    /// projections).
    pub stats: StoreStats,
}

/// Load a Gemma 4 text target from the HF model directory `dir`: the text-only
/// `Gemma4ForCausalLM` layout or the multimodal `Gemma4ForConditionalGeneration` one (its text
/// model; towers skipped unread), see [`read_target_config`].
pub fn load_target<B: Backend>(
    backend: &B,
    dir: &Path,
    options: &LoadOptions,
) -> LoadResult<Gemma4Target<B>> {
    load_target_with_report(backend, dir, options).map(|(model, _)| model)
}

/// [`load_target`], also saying what was read and what was skipped.
pub fn load_target_with_report<B: Backend>(
    backend: &B,
    dir: &Path,
    options: &LoadOptions,
) -> LoadResult<(Gemma4Target<B>, LoadReport)> {
    load_target_reporting(backend, dir, options, &mut |_, _| {})
}

/// [`load_target_with_report`], telling `progress` each tensor read.
pub fn load_target_reporting<B: Backend>(
    backend: &B,
    dir: &Path,
    options: &LoadOptions,
    progress: TensorProgress<'_>,
) -> LoadResult<(Gemma4Target<B>, LoadReport)> {
    check_dtype(options, dir)?;
    let resolved = read_target_config(&dir.join("config.json"))?;
    let mut store = TensorStore::open(dir)?;
    let layout = TextLayout::find(&store)?;
    let towers = layout.skip_towers(&mut store);
    let model = {
        let mut loader = loader_for(backend, &mut store, dir, options)?.with_progress(progress);
        Gemma4Target::load(&mut loader, resolved, &layout.prefix)?
    };
    let stats = store.finish()?;
    tracing::debug!(
        prefix = %layout.prefix,
        tower_tensors = towers,
        read_tensors = stats.read_tensors,
        read_bytes = stats.read_bytes,
        skipped_tensors = stats.skipped_tensors,
        skipped_bytes = stats.skipped_bytes,
        "loaded the target's weights (skipped tensors were never read)"
    );
    Ok((model, LoadReport { layout, stats }))
}

/// Load a Gemma 4 text target from the GGUF file `path` (`general.architecture = gemma4`, as
/// llama.cpp's converter writes it; float tensors): its configuration from the metadata
/// ([`crate::models::gemma4_gguf`]), its weights by their HF names.
pub fn load_gguf_target<B: Backend>(
    backend: &B,
    path: &Path,
    options: &LoadOptions,
) -> LoadResult<Gemma4Target<B>> {
    let file = gguf::GgufFile::open(path)?;
    load_gguf_target_file(backend, &file, options, &mut |_, _| {}).map(|(model, _)| model)
}

/// [`load_gguf_target`] from an opened file, telling `progress` each tensor read.
pub fn load_gguf_target_file<B: Backend>(
    backend: &B,
    file: &gguf::GgufFile,
    options: &LoadOptions,
    progress: TensorProgress<'_>,
) -> LoadResult<(Gemma4Target<B>, StoreStats)> {
    let path = file.path();
    check_dtype(options, path)?;
    let resolved = crate::models::gemma4_gguf::resolve_gguf(file)?;
    let mut store = TensorStore::from_gguf(path, file, gguf_names::gemma4_gguf_to_hf)?;
    let model = {
        let mut loader = ArrayLoader::new(backend, &mut store, options.dtype)
            .with_quantize(options.quantize)
            .with_stored_quant(options.stored_quant)
            .with_progress(progress);
        Gemma4Target::load(&mut loader, resolved, "model.").map_err(|e| e.in_file(path))?
    };
    let stats = store.finish()?;
    Ok((model, stats))
}

/// Load a Gemma 4 assistant from the HF model directory `dir`, for `target` (a Gemma 4 or a
/// Gemma 3 target).
pub fn load_assistant<B: Backend>(
    backend: &B,
    dir: &Path,
    target: &dyn AssistantTarget,
    options: &LoadOptions,
) -> LoadResult<Gemma4Assistant<B>> {
    check_dtype(options, dir)?;
    let (config, resolved) = read_assistant_config(&dir.join("config.json"))?;
    let mut store = TensorStore::open(dir)?;
    let model = {
        let mut loader = loader_for(backend, &mut store, dir, options)?;
        Gemma4Assistant::load(&mut loader, config, resolved, target)?
    };
    store.finish()?;
    Ok(model)
}

/// Load a Gemma 4 assistant from the GGUF file `path` (`general.architecture =
/// gemma4-assistant`, as llama.cpp's converter writes it; see
/// [`crate::models::gemma4_assistant_gguf`]) for `target`. The converter drops the ordered
/// embedding's centroids, so the assistant drafts through its full-vocabulary tied head unless
/// `centroids` names an HF assistant directory to take them from (its `config.json` sizes them,
/// its safetensors hold them; nothing else of it is read).
pub fn load_gguf_assistant<B: Backend>(
    backend: &B,
    path: &Path,
    target: &dyn AssistantTarget,
    options: &LoadOptions,
    centroids: Option<&Path>,
) -> LoadResult<Gemma4Assistant<B>> {
    check_dtype(options, path)?;
    let file = gguf::GgufFile::open(path)?;
    let (config, resolved) = crate::models::gemma4_assistant_gguf::assistant_config(&file)?;
    let mut store = TensorStore::from_gguf(
        path,
        &file,
        crate::models::gemma4_assistant_gguf::assistant_gguf_to_hf,
    )?;
    let mut model = {
        let mut loader = ArrayLoader::new(backend, &mut store, options.dtype)
            .with_quantize(options.quantize)
            .with_stored_quant(options.stored_quant);
        Gemma4Assistant::load(&mut loader, config, resolved, target).map_err(|e| e.in_file(path))?
    };
    store.finish()?;
    match centroids {
        Some(dir) => {
            let (source, _) = read_assistant_config(&dir.join("config.json"))?;
            let mut store = TensorStore::open(dir)?;
            let mut loader = loader_for(backend, &mut store, dir, options)?;
            model.attach_ordered_embedding(&mut loader, &source)?;
        }
        None => tracing::warn!(
            assistant = %path.display(),
            "the GGUF assistant drafts through its full-vocabulary head: llama.cpp's converter \
             drops the centroids of an ordered embedding (E2B/E4B assistants have one); give the \
             HF assistant's directory (--draft-centroids DIR) to draft through them"
        ),
    }
    Ok(model)
}
