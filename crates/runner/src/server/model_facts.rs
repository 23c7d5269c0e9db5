//! What the server says a model is — family, format, size, parameters, quantization — read from
//! the files it loaded, as ollama's `/api/tags` and `/api/show` report them.

use std::path::Path;

use crate::defaults::ModelPaths;
use crate::loading::gguf::{is_gguf_path, GgufFile};

/// The facts `/api/tags`, `/api/show` and `/api/ps` report about the target model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelFacts {
    /// The architecture: a GGUF's `general.architecture`, else `config.json`'s `model_type`
    /// (`gemma3`, `gemma4`, …); empty when unknown.
    pub family: String,
    /// `gguf` or `safetensors`.
    pub format: String,
    /// Bytes of the weight files (the GGUF file, or the `.safetensors` files of the target and
    /// the drafter directories).
    pub size_bytes: u64,
    /// The parameter count as ollama writes it (`268.10M`, `4.30B`); empty when not counted.
    pub parameter_size: String,
    /// The quantization: a GGUF's `general.file_type` by llama.cpp's name (`Q4_K_M`), an MLX
    /// checkpoint's `MLX Q{bits}`, else the stored dtype (`F32`, `BF16`); empty when unknown.
    pub quantization_level: String,
}

/// The facts of the pair at `paths` (never an error: what cannot be read stays empty).
pub fn model_facts(paths: &ModelPaths) -> ModelFacts {
    let mut facts = if is_gguf_path(&paths.target) {
        gguf_facts(&paths.target)
    } else {
        directory_facts(&paths.target)
    };
    if let Some(drafter) = &paths.drafter {
        facts.size_bytes += if is_gguf_path(drafter) {
            std::fs::metadata(drafter).map_or(0, |m| m.len())
        } else {
            safetensors_bytes(drafter)
        };
    }
    facts
}

fn gguf_facts(path: &Path) -> ModelFacts {
    let size_bytes = std::fs::metadata(path).map_or(0, |m| m.len());
    let Ok(file) = GgufFile::open(path) else {
        return ModelFacts {
            format: "gguf".into(),
            size_bytes,
            ..ModelFacts::default()
        };
    };
    let parameters: u64 = file
        .tensors()
        .values()
        .map(|t| t.shape.iter().map(|&d| d as u64).product::<u64>())
        .sum();
    let file_type = file
        .opt_usize("general.file_type")
        .ok()
        .flatten()
        .and_then(gguf_file_type_name);
    ModelFacts {
        family: file.architecture().unwrap_or_default().to_string(),
        format: "gguf".into(),
        size_bytes,
        parameter_size: parameter_size(parameters),
        quantization_level: file_type.unwrap_or_default().to_string(),
    }
}

fn directory_facts(dir: &Path) -> ModelFacts {
    let config: serde_json::Value = std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    let text_config = config.get("text_config").unwrap_or(&config);
    let string = |v: &serde_json::Value, key: &str| {
        v.get(key)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let family = string(&config, "model_type");
    let quantization = config
        .get("quantization")
        .or_else(|| config.get("quantization_config"))
        .and_then(|q| q.get("bits"))
        .and_then(serde_json::Value::as_u64)
        .map(|bits| format!("MLX Q{bits}"));
    let dtype = [string(&config, "torch_dtype"), string(&config, "dtype")]
        .into_iter()
        .chain([
            string(text_config, "torch_dtype"),
            string(text_config, "dtype"),
        ])
        .find(|d| !d.is_empty())
        .map(|d| match d.as_str() {
            "float32" => "F32".to_string(),
            "float16" => "F16".to_string(),
            "bfloat16" => "BF16".to_string(),
            other => other.to_uppercase(),
        });
    ModelFacts {
        family,
        format: "safetensors".into(),
        size_bytes: safetensors_bytes(dir),
        parameter_size: String::new(),
        quantization_level: quantization.or(dtype).unwrap_or_default(),
    }
}

/// Bytes of the `.safetensors` files directly in `dir`.
fn safetensors_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// A parameter count as ollama's `format.HumanNumber` writes it: `268.10M`, `4.30B`, `950K`.
pub fn parameter_size(count: u64) -> String {
    let n = count as f64;
    match count {
        0 => String::new(),
        c if c >= 1_000_000_000 => format!("{:.2}B", n / 1e9),
        c if c >= 1_000_000 => format!("{:.2}M", n / 1e6),
        c if c >= 1_000 => format!("{:.0}K", n / 1e3),
        c => c.to_string(),
    }
}

/// llama.cpp's name of a GGUF `general.file_type` (`llama_ftype` in `llama.h`), for the types
/// a file can declare; `None` for a number it does not name.
pub fn gguf_file_type_name(file_type: usize) -> Option<&'static str> {
    Some(match file_type {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        39 => "NVFP4",
        40 => "Q1_0",
        41 => "Q2_0",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_read_as_ollama_writes_them() {
        assert_eq!(parameter_size(268_098_176), "268.10M");
        assert_eq!(parameter_size(4_300_000_000), "4.30B");
        assert_eq!(parameter_size(950_000), "950K");
        assert_eq!(parameter_size(12), "12");
        assert_eq!(parameter_size(0), "");
    }

    #[test]
    fn file_types_have_llama_cpp_names() {
        assert_eq!(gguf_file_type_name(15), Some("Q4_K_M"));
        assert_eq!(gguf_file_type_name(0), Some("F32"));
        assert_eq!(gguf_file_type_name(4), None);
    }

    #[test]
    fn a_directory_without_files_has_empty_facts() {
        let dir = tempfile::tempdir().unwrap();
        let facts = directory_facts(dir.path());
        assert_eq!(facts.format, "safetensors");
        assert_eq!(facts.size_bytes, 0);
        assert!(facts.family.is_empty());
    }
}
