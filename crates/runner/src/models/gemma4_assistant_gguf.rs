//! The Gemma 4 assistant (MTP drafter) of a GGUF file, as llama.cpp's converter writes it
//! (`conversion/gemma.py`, `Gemma4AssistantModel`; `general.architecture = "gemma4-assistant"`,
//! also read under the `gemma4_assistant` spelling community files use), turned into the same
//! [`Gemma4AssistantConfig`] an HF `config.json` gives, so the one [`Gemma4Assistant`] model runs
//! both.
//!
//! | GGUF | HF |
//! | --- | --- |
//! | the Gemma 4 keys ([`super::gemma4_gguf`]) | `text_config` (every layer KV-shared) |
//! | `embedding_length_out` | `backbone_hidden_size` (the target's width) |
//! | `nextn.pre_projection.weight`, `nextn.post_projection.weight` | `pre_projection.weight`, `post_projection.weight` |
//! | `token_embd.weight` (the tied head only; tokens are embedded by the target) | `model.embed_tokens.weight` |
//! | — (the converter drops them) | `masked_embedding.centroids.weight`, `masked_embedding.token_ordering` |
//!
//! Without the centroids a GGUF assistant drafts through its full-vocabulary tied head, as
//! llama.cpp does; [`crate::loading::load_gguf_assistant`] takes them from an HF assistant
//! directory when one is given.
//!
//! [`Gemma4Assistant`]: super::Gemma4Assistant

use super::config::{Gemma4AssistantConfig, ResolvedText};
use super::gemma4_gguf::{invalid, read_text_config, unsupported, KvOwner};
use crate::loading::gguf::{GgufError, GgufFile};
use crate::loading::gguf_names::gemma4_gguf_to_hf;
use crate::loading::LoadResult;

/// The GGUF architectures of a Gemma 4 assistant: llama.cpp's, and the underscore spelling.
pub const GGUF_ASSISTANT_ARCHITECTURES: [&str; 2] = ["gemma4-assistant", "gemma4_assistant"];

/// The pre-projection of llama.cpp's schema, whose presence tells it from other forks' schemas.
const PRE_PROJECTION: &str = "nextn.pre_projection.weight";

/// Drafter schemas of other llama.cpp forks, recognised to say why they are refused: a marker
/// (an architecture, or a tensor name prefix) and who writes it.
const OTHER_SCHEMAS: [(&str, &str); 3] = [
    (
        "gemma4_mtp",
        "ik_llama.cpp's gemma4_mtp schema (mtp_pre_proj tensors)",
    ),
    ("mtp.", "the AtomicBot fork's schema (mtp.* tensors)"),
    (
        "assistant.",
        "the turbo-tan fork's schema (assistant.* tensors in a gemma4 file)",
    ),
];

/// Whether `file` holds a Gemma 4 assistant in any schema this module knows (llama.cpp's, or
/// one it refuses with a reason).
pub fn is_gguf_assistant(file: &GgufFile) -> bool {
    let arch = file.architecture().unwrap_or_default();
    GGUF_ASSISTANT_ARCHITECTURES.contains(&arch)
        || other_schema(file, arch).is_some()
        || file.has(&format!("{arch}.embedding_length_out"))
}

/// The assistant configuration of `file` and its resolved decoder.
///
/// Refused with a reason: another architecture, the drafter schemas of other forks (say which,
/// and that llama.cpp's converter writes the one read here), a file without the projections, a
/// missing `embedding_length_out`.
pub fn assistant_config(file: &GgufFile) -> LoadResult<(Gemma4AssistantConfig, ResolvedText)> {
    let arch = file.architecture()?;
    if let Some(schema) = other_schema(file, arch) {
        return Err(unsupported(
            file,
            format!(
                "{schema}: only llama.cpp's gemma4-assistant layout is read (nextn.pre_projection \
                 tensors); convert the HF assistant with llama.cpp's convert_hf_to_gguf.py"
            ),
        ));
    }
    if !GGUF_ASSISTANT_ARCHITECTURES.contains(&arch) {
        return Err(GgufError::UnsupportedArchitecture {
            path: file.path().to_path_buf(),
            found: arch.to_string(),
            supported: GGUF_ASSISTANT_ARCHITECTURES.to_vec(),
        }
        .into());
    }
    if !file.tensors().contains_key(PRE_PROJECTION) {
        return Err(invalid(
            file,
            format!("a {arch} file without {PRE_PROJECTION}"),
        ));
    }
    let backbone = file
        .opt_usize(&format!("{arch}.embedding_length_out"))?
        .ok_or_else(|| {
            invalid(
                file,
                format!("{arch}.embedding_length_out (the target's width) is missing"),
            )
        })?;
    let mut text = read_text_config(file, arch, KvOwner::Target)?;
    text.num_kv_shared_layers = text.num_hidden_layers;
    text.final_logit_softcapping = None;
    let mut config: Gemma4AssistantConfig = serde_json::from_value(serde_json::json!({
        "model_type": "gemma4_assistant",
        "text_config": {},
    }))
    .map_err(|e| invalid(file, format!("default configuration: {e}")))?;
    config.tie_word_embeddings = text.tie_word_embeddings;
    config.text_config = text;
    config.backbone_hidden_size = backbone;
    config.use_ordered_embeddings = false;
    let resolved = config.resolve().map_err(|problem| match problem {
        super::config::ConfigProblem::Invalid(r) => invalid(file, r),
        super::config::ConfigProblem::Unsupported(r) => unsupported(file, r),
    })?;
    Ok((config, resolved))
}

/// The schema of another fork `file` is written in, if it is one.
fn other_schema(file: &GgufFile, arch: &str) -> Option<&'static str> {
    if arch == OTHER_SCHEMAS[0].0 {
        return Some(OTHER_SCHEMAS[0].1);
    }
    if file.has(&format!("{arch}.assistant.type")) {
        return Some(OTHER_SCHEMAS[2].1);
    }
    let tensors = file.tensors();
    OTHER_SCHEMAS[1..]
        .iter()
        .find(|(prefix, _)| tensors.keys().any(|name| name.starts_with(prefix)))
        .map(|(_, schema)| *schema)
}

/// The HF `Gemma4AssistantForCausalLM` name of GGUF tensor `name` of an assistant file.
pub fn assistant_gguf_to_hf(name: &str) -> Option<String> {
    match name {
        PRE_PROJECTION => Some("pre_projection.weight".into()),
        "nextn.post_projection.weight" => Some("post_projection.weight".into()),
        _ => gemma4_gguf_to_hf(name),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn fixture(file: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/gemma4_gguf/e2b_like")
            .join(file)
    }

    /// The converter's assistant GGUF resolves to the same configuration as the HF
    /// `config.json` it was converted from.
    #[test]
    fn the_converters_assistant_resolves_as_its_hf_config() {
        let file = GgufFile::open(&fixture("assistant-f32.gguf")).unwrap();
        assert!(is_gguf_assistant(&file));
        let (config, resolved) = assistant_config(&file).unwrap();
        let text = std::fs::read_to_string(fixture("hf/assistant/config.json")).unwrap();
        let hf: Gemma4AssistantConfig = serde_json::from_str(&text).unwrap();
        let from_hf = hf.resolve().unwrap();
        assert_eq!(resolved.layers, from_hf.layers);
        assert_eq!(config.backbone_hidden_size, hf.backbone_hidden_size);
        assert_eq!(config.tie_word_embeddings, hf.tie_word_embeddings);
        let (g, h) = (&resolved.config, &from_hf.config);
        assert_eq!(
            (
                g.vocab_size,
                g.hidden_size,
                g.sliding_window,
                g.num_kv_shared_layers
            ),
            (
                h.vocab_size,
                h.hidden_size,
                h.sliding_window,
                h.num_kv_shared_layers
            )
        );
    }

    #[test]
    fn a_target_is_not_an_assistant() {
        let file = GgufFile::open(&fixture("target-f32.gguf")).unwrap();
        assert!(!is_gguf_assistant(&file));
        let err = assistant_config(&file).unwrap_err().to_string();
        assert!(err.contains("gemma4-assistant"), "{err}");
    }

    #[test]
    fn projections_take_their_hf_names() {
        assert_eq!(
            assistant_gguf_to_hf("nextn.pre_projection.weight").as_deref(),
            Some("pre_projection.weight")
        );
        assert_eq!(
            assistant_gguf_to_hf("nextn.post_projection.weight").as_deref(),
            Some("post_projection.weight")
        );
        assert_eq!(
            assistant_gguf_to_hf("output_norm.weight").as_deref(),
            Some("model.norm.weight")
        );
    }
}
