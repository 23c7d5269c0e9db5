//! A model's default sampling settings: from its `generation_config.json` as HF transformers
//! reads them, else ollama's defaults.
//!
//! HF's `GenerationConfig` samples only when `do_sample` is true (default false: greedy), and
//! then with `temperature` (default 1.0), `top_k` (default 50) and `top_p` (default 1.0); a
//! model directory without the file gets ollama's current defaults instead (temperature 0.8,
//! top-k 40, top-p 0.9, repeat penalty 1.0 over the last 64 tokens). Values given on the
//! command line or in a request override these field by field.

use std::path::{Path, PathBuf};

use mtp_core::sampling::SamplerOptions;
use serde_json::Value;

/// HF `GenerationConfig` defaults when `do_sample` is true.
const HF_TEMPERATURE: f32 = 1.0;
const HF_TOP_K: usize = 50;
const HF_TOP_P: f32 = 1.0;

/// ollama's defaults (`api.DefaultOptions`).
const OLLAMA_TEMPERATURE: f32 = 0.8;
const OLLAMA_TOP_K: usize = 40;
const OLLAMA_TOP_P: f32 = 0.9;

/// Where a model's sampling defaults came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultsSource {
    /// The model's `generation_config.json`.
    GenerationConfig(PathBuf),
    /// No `generation_config.json`: ollama's defaults.
    Ollama,
}

impl std::fmt::Display for DefaultsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DefaultsSource::GenerationConfig(path) => write!(f, "{}", path.display()),
            DefaultsSource::Ollama => f.write_str("ollama's defaults (no generation_config.json)"),
        }
    }
}

/// The sampling options a model starts from, and where they came from.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingDefaults {
    /// The options (no seed).
    pub options: SamplerOptions,
    /// Their source.
    pub source: DefaultsSource,
}

/// `generation_config.json` exists but cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SamplingDefaultsError {
    /// The file cannot be read.
    #[error("cannot read {}: {reason}", .path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// The file is not a JSON object, or a sampling field has the wrong form.
    #[error("bad {}: {reason}", .path.display())]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The sampling defaults of the model directory `dir`.
pub fn sampling_defaults(dir: &Path) -> Result<SamplingDefaults, SamplingDefaultsError> {
    let path = dir.join("generation_config.json");
    if !path.is_file() {
        return Ok(SamplingDefaults {
            options: ollama_defaults(),
            source: DefaultsSource::Ollama,
        });
    }
    let text = std::fs::read_to_string(&path).map_err(|e| SamplingDefaultsError::Unreadable {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    let options = from_generation_config(&text).map_err(|reason| SamplingDefaultsError::Bad {
        path: path.clone(),
        reason,
    })?;
    Ok(SamplingDefaults {
        options,
        source: DefaultsSource::GenerationConfig(path),
    })
}

/// ollama's default sampling options.
pub fn ollama_defaults() -> SamplerOptions {
    SamplerOptions {
        temperature: OLLAMA_TEMPERATURE,
        top_k: OLLAMA_TOP_K,
        top_p: OLLAMA_TOP_P,
        repeat_penalty: 1.0,
        ..SamplerOptions::default()
    }
}

/// The options HF's `GenerationConfig` would sample with, from the text of a
/// `generation_config.json`: greedy unless `do_sample` is true. Every other field is ignored.
pub fn from_generation_config(text: &str) -> Result<SamplerOptions, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err("not a JSON object".to_string());
    };
    let do_sample = match map.get("do_sample") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(format!("do_sample must be true or false, found {other}")),
    };
    if !do_sample {
        return Ok(SamplerOptions::default());
    }
    let temperature = float_field(&map, "temperature", HF_TEMPERATURE)?;
    let top_p = float_field(&map, "top_p", HF_TOP_P)?;
    let top_k = match map.get("top_k") {
        None | Some(Value::Null) => HF_TOP_K,
        Some(v) => v
            .as_u64()
            .and_then(|k| usize::try_from(k).ok())
            .ok_or_else(|| format!("top_k must be a whole number, found {v}"))?,
    };
    let options = SamplerOptions {
        temperature,
        top_k,
        top_p,
        ..SamplerOptions::default()
    };
    options.validate().map_err(|e| e.to_string())?;
    Ok(options)
}

/// A finite number field, `fallback` when absent or null.
fn float_field(
    map: &serde_json::Map<String, Value>,
    name: &str,
    fallback: f32,
) -> Result<f32, String> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(fallback),
        Some(v) => v
            .as_f64()
            .map(|x| x as f32)
            .filter(|x| x.is_finite())
            .ok_or_else(|| format!("{name} must be a finite number, found {v}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_semantics() {
        // No do_sample: greedy, whatever the other fields say (HF ignores them then).
        let greedy = from_generation_config(r#"{"temperature": 0.7, "eos_token_id": 1}"#).unwrap();
        assert!(greedy.is_greedy());
        assert_eq!(greedy, SamplerOptions::default());
        // do_sample with HF's defaults for the missing fields.
        let o = from_generation_config(r#"{"do_sample": true, "top_p": 0.95}"#).unwrap();
        assert_eq!((o.temperature, o.top_k, o.top_p), (1.0, 50, 0.95));
        let o = from_generation_config(
            r#"{"do_sample": true, "temperature": 0.6, "top_k": 0, "top_p": null}"#,
        )
        .unwrap();
        assert_eq!((o.temperature, o.top_k, o.top_p), (0.6, 0, 1.0));
    }

    #[test]
    fn bad_fields_are_clear_errors() {
        for (text, needle) in [
            ("[1]", "not a JSON object"),
            ("{", "not JSON"),
            (r#"{"do_sample": "yes"}"#, "do_sample must be true or false"),
            (
                r#"{"do_sample": true, "top_k": -1}"#,
                "top_k must be a whole number",
            ),
            (
                r#"{"do_sample": true, "temperature": "hot"}"#,
                "temperature must be a finite",
            ),
            (r#"{"do_sample": true, "temperature": -1}"#, "temperature"),
        ] {
            let err = from_generation_config(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn a_directory_without_the_file_gets_ollamas_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let d = sampling_defaults(dir.path()).unwrap();
        assert_eq!(d.source, DefaultsSource::Ollama);
        let o = d.options;
        assert_eq!((o.temperature, o.top_k, o.top_p), (0.8, 40, 0.9));
        assert_eq!((o.repeat_penalty, o.repeat_last_n), (1.0, 64));
        std::fs::write(dir.path().join("generation_config.json"), "{").unwrap();
        let err = sampling_defaults(dir.path()).unwrap_err();
        assert!(err.to_string().contains("generation_config.json"), "{err}");
    }
}
