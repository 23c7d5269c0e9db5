//! Checks of `--model` / `--draft` paths before loading, for the mistakes a new user makes: a
//! file instead of a model directory, and the drafter passed as the target.

use std::path::Path;

use anyhow::bail;
use runner::loading::gguf::is_gguf_path;
use runner::models::registry::{registration_of, Role};
use runner::ModelPaths;

/// Check both paths of `paths`: directories, and the target not an MTP drafter.
pub fn check_paths(paths: &ModelPaths) -> anyhow::Result<()> {
    // A target may also be a single GGUF file.
    if !is_gguf_path(&paths.target) {
        check_dir("--model", &paths.target)?;
    }
    if let Some(drafter) = paths.drafter.as_ref().filter(|d| !is_gguf_path(d)) {
        check_dir("--draft", drafter)?;
    }
    if let Some(model_type) = drafter_type(&paths.target) {
        bail!(
            "{} is an MTP drafter (model_type {model_type:?}), not a target: pass it with \
             --draft, and its target model with --model",
            paths.target.display()
        );
    }
    Ok(())
}

/// A model path must be a directory; a file gets its own message (the loader would say the
/// directory's files are missing).
fn check_dir(flag: &str, path: &Path) -> anyhow::Result<()> {
    if path.is_file() {
        bail!(
            "{flag} {} is a file: pass the model's directory (the one holding config.json, the \
             *.safetensors weights and, for the target, tokenizer.json), or a .gguf file",
            path.display()
        );
    }
    Ok(())
}

/// The `model_type` of `dir/config.json` when the registry names it an MTP drafter (a config
/// that cannot be read is left to the loader's own errors).
fn drafter_type(dir: &Path) -> Option<&'static str> {
    registration_of(dir, Role::Drafter)
        .ok()
        .map(|r| r.model_type)
}
