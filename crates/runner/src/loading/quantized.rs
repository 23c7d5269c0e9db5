//! Quantized weights in a model directory: MLX affine safetensors (the `mlx-community` layout
//! mlx-lm writes) and quantization of dense weights at load (`--quantize q8|q4`).
//!
//! # MLX affine safetensors
//!
//! `config.json` carries `"quantization": {"group_size": G, "bits": B}` (mlx-lm also writes it as
//! `quantization_config`), optionally with per-module entries (`"model.layers.0.mlp.down_proj":
//! {"group_size": .., "bits": ..}`, or `false` for a module left dense). A quantized module
//! `M` stores `M.weight` as packed `u32` words `[out, in * B / 32]` and `M.scales`, `M.biases`
//! `[out, in / G]` beside it (see [`mtp_core::quant::AffineParams`]).

use std::collections::BTreeMap;
use std::path::Path;

use mtp_core::quant::AffineParams;
use serde_json::Value;

use super::error::{LoadError, LoadResult};

/// The `quantization` section of an MLX checkpoint's `config.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MlxQuantization {
    /// The parameters of every module without an entry of its own.
    default: AffineParams,
    /// Per-module parameters (`None`: that module is dense).
    modules: BTreeMap<String, Option<AffineParams>>,
}

fn params_of(path: &Path, key: &str, v: &Value) -> LoadResult<AffineParams> {
    let invalid = |reason: String| LoadError::InvalidConfig {
        path: path.to_path_buf(),
        reason,
    };
    if let Some(mode) = v.get("mode").and_then(Value::as_str) {
        if mode != "affine" {
            return Err(LoadError::UnsupportedFeature {
                path: path.to_path_buf(),
                feature: format!(
                    "{key}: quantization mode {mode:?} (only \"affine\" is supported)"
                ),
            });
        }
    }
    let field = |name: &str| {
        v.get(name)
            .and_then(Value::as_u64)
            .ok_or_else(|| invalid(format!("{key}.{name} must be a positive integer")))
    };
    let (group, bits) = (field("group_size")?, field("bits")?);
    let bits = u32::try_from(bits).map_err(|_| invalid(format!("{key}.bits = {bits}")))?;
    let group =
        usize::try_from(group).map_err(|_| invalid(format!("{key}.group_size = {group}")))?;
    AffineParams::new(bits, group).map_err(|e| invalid(format!("{key}: {e}")))
}

impl MlxQuantization {
    /// The section of `config` (`config.json` at `path`), if it has one.
    pub fn from_config(path: &Path, config: &Value) -> LoadResult<Option<Self>> {
        let Some(section) = config
            .get("quantization")
            .or_else(|| config.get("quantization_config"))
        else {
            return Ok(None);
        };
        // HF's own quantization configs (bitsandbytes, GPTQ, ...) carry a `quant_method`.
        if let Some(method) = section.get("quant_method").and_then(Value::as_str) {
            return Err(LoadError::UnsupportedFeature {
                path: path.to_path_buf(),
                feature: format!(
                    "quant_method {method:?} (supported: MLX affine `quantization`, GGUF files, --quantize)"
                ),
            });
        }
        let default = params_of(path, "quantization", section)?;
        let mut modules = BTreeMap::new();
        if let Some(map) = section.as_object() {
            for (key, v) in map {
                match v {
                    Value::Object(_) => {
                        modules.insert(key.clone(), Some(params_of(path, key, v)?));
                    }
                    Value::Bool(false) => {
                        modules.insert(key.clone(), None);
                    }
                    _ => {}
                }
            }
        }
        Ok(Some(Self { default, modules }))
    }

    /// Read `config.json` at `path` and return its section, if any.
    pub fn read(path: &Path) -> LoadResult<Option<Self>> {
        let (value, _) = super::config_file::read_config_json(path)?;
        Self::from_config(path, &value)
    }

    /// The parameters of module `module` (a weight name without `.weight`); `None` when the
    /// config leaves it dense.
    pub fn params_for(&self, module: &str) -> Option<AffineParams> {
        match self.modules.get(module) {
            Some(entry) => *entry,
            None => Some(self.default),
        }
    }
}

/// A dense weight the `--quantize` quantizer cannot take, and why (told once per load).
pub(crate) fn unquantizable(name: &str, cols: usize, block: usize) -> String {
    format!("{name}: rows of {cols} weights are not a whole number of {block}-weight blocks; kept dense")
}
