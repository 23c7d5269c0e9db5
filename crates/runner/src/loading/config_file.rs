//! Reading and checking `config.json`.

use std::path::Path;

use serde::de::DeserializeOwned;

use super::error::{LoadError, LoadResult};
use crate::models::config::{
    text_config_of, ConfigProblem, Gemma4AssistantConfig, Gemma4TextConfig, ResolvedText,
};
use crate::models::registry::{family_model_types, Family, Role};

/// `config.json` as JSON and its top-level `model_type` (`""` when absent).
pub fn read_config_json(path: &Path) -> LoadResult<(serde_json::Value, String)> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::MissingFile {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let bad = |reason: String| LoadError::BadJson {
        path: path.to_path_buf(),
        reason,
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let found = value
        .get("model_type")
        .and_then(|m| m.as_str())
        .unwrap_or("")
        .to_string();
    Ok((value, found))
}

/// Parse `path` as JSON, check its `model_type`, pick the part `select` says (the text model of
/// a multimodal config), then deserialize it as `T`.
fn read_typed<T: DeserializeOwned>(
    path: &Path,
    accepted: Vec<&'static str>,
    select: impl FnOnce(&str, serde_json::Value) -> Result<serde_json::Value, ConfigProblem>,
) -> LoadResult<T> {
    let (value, found) = read_config_json(path)?;
    if !accepted.contains(&found.as_str()) {
        return Err(LoadError::UnknownModelType {
            path: path.to_path_buf(),
            found,
            expected: accepted,
        });
    }
    let value = select(&found, value).map_err(|p| problem(path, p))?;
    serde_json::from_value(value).map_err(|e| LoadError::BadJson {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn problem(path: &Path, p: ConfigProblem) -> LoadError {
    match p {
        ConfigProblem::Invalid(reason) => LoadError::InvalidConfig {
            path: path.to_path_buf(),
            reason,
        },
        ConfigProblem::Unsupported(feature) => LoadError::UnsupportedFeature {
            path: path.to_path_buf(),
            feature,
        },
    }
}

/// Read and resolve a Gemma 4 target's `config.json`: a `model_type` the registry gives the
/// Gemma 4 family as a target (the text-only `Gemma4ForCausalLM` layout, `gemma4_text`, and the
/// multimodal `Gemma4ForConditionalGeneration` one Google publishes, `gemma4`).
pub fn read_target_config(path: &Path) -> LoadResult<ResolvedText> {
    let accepted = family_model_types(Family::Gemma4, Role::Target);
    let config: Gemma4TextConfig = read_typed(path, accepted, text_config_of)?;
    let resolved = config.resolve().map_err(|p| problem(path, p))?;
    if resolved.cache_layers == 0 {
        return Err(problem(
            path,
            ConfigProblem::Invalid("every layer is KV-shared: nothing computes keys".into()),
        ));
    }
    Ok(resolved)
}

/// Read and resolve a Gemma 4 assistant's `config.json` (a `model_type` the registry gives the
/// Gemma 4 family as a drafter: `gemma4_assistant`).
pub fn read_assistant_config(path: &Path) -> LoadResult<(Gemma4AssistantConfig, ResolvedText)> {
    let accepted = family_model_types(Family::Gemma4, Role::Drafter);
    let config: Gemma4AssistantConfig = read_typed(path, accepted, |_, v| Ok(v))?;
    let resolved = config.resolve().map_err(|p| problem(path, p))?;
    Ok((config, resolved))
}
