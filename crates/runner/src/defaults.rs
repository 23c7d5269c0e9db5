//! Where the default model pair lives when no model directory is given.
//!
//! The default is the tiny trained pair committed under `models/default/{target,assistant}`:
//! with the `embedded-model` feature (on by default) compiled into the program and written to a
//! cache directory on first use ([`crate::embedded_pair`]), so an installed or copied binary
//! runs it from any directory; without the feature, read from the workspace checkout (found
//! through this crate's source directory). `$MTP_MODEL_DIR` overrides both, and `--model`
//! overrides the default pair altogether.

use std::path::{Path, PathBuf};

/// Environment variable naming a directory with `target/` and `assistant/` model directories.
pub const MODEL_DIR_ENV: &str = "MTP_MODEL_DIR";

/// The target and (optional) drafter of a model pair, and the tokenizer to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPaths {
    /// The target model: an HF directory (config, weights, tokenizer) or a `.gguf` file (with
    /// its embedded vocabulary).
    pub target: PathBuf,
    /// The drafter: an HF directory (an MTP assistant or a draft model), or a Gemma 4 assistant
    /// GGUF file; `None` decodes without MTP.
    pub drafter: Option<PathBuf>,
    /// An HF assistant directory whose ordered-embedding centroids a GGUF assistant drafts
    /// through (llama.cpp's converter drops them; `--draft-centroids`).
    pub draft_centroids: Option<PathBuf>,
    /// A `tokenizer.json` to use instead of the target's own tokenizer (`--tokenizer`).
    pub tokenizer: Option<PathBuf>,
    /// A Jinja chat template file to use instead of the model's own (`--chat-template`).
    pub chat_template: Option<PathBuf>,
}

/// The default pair could not be found.
#[derive(Debug, thiserror::Error)]
pub enum DefaultModelError {
    /// The workspace has no default pair yet.
    #[error(
        "no default model yet: `models/default/` is not in this checkout (looked for {}); \
         pass --model DIR (and --draft DIR), or set {MODEL_DIR_ENV} to a directory holding \
         target/ and assistant/",
        .dir.display()
    )]
    NotInCheckout {
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// The embedded pair could not be written to its cache directory.
    #[error(
        "cannot write the embedded default model to {}: {reason}; set {MODEL_DIR_ENV} to a \
         directory holding target/ and assistant/, or pass --model DIR",
        .path.display()
    )]
    Extract {
        /// The file or directory that could not be written.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// `$MTP_MODEL_DIR` does not hold a pair.
    #[error(
        "{MODEL_DIR_ENV}={} does not hold a model pair: {} is missing",
        .dir.display(),
        .missing.display()
    )]
    EnvDirIncomplete {
        /// The directory named by the variable.
        dir: PathBuf,
        /// The sub-directory that is missing.
        missing: PathBuf,
    },
}

/// Where the default pair is looked for without extracting anything: `$MTP_MODEL_DIR`, else
/// `<workspace>/models/default` (which [`default_pair`] replaces by the embedded copy when the
/// `embedded-model` feature is on).
pub fn default_pair_dir() -> (PathBuf, PairSource) {
    match std::env::var_os(MODEL_DIR_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => (PathBuf::from(dir), PairSource::Environment),
        None => (workspace_default_dir(), PairSource::Checkout),
    }
}

/// `<workspace>/models/default`, located from this crate's source directory.
pub fn workspace_default_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // crates/runner -> the workspace root.
    let root = manifest.ancestors().nth(2).unwrap_or(manifest);
    root.join("models").join("default")
}

/// Where a default pair directory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairSource {
    /// `$MTP_MODEL_DIR`.
    Environment,
    /// The workspace checkout.
    Checkout,
    /// The pair embedded in the program, written to its cache directory.
    Embedded,
}

/// The default pair's directories, checked to exist: `$MTP_MODEL_DIR`, else the embedded pair
/// (feature `embedded-model`), else the checkout's `models/default`.
pub fn default_pair() -> Result<ModelPaths, DefaultModelError> {
    let (dir, source) = default_pair_dir();
    #[cfg(feature = "embedded-model")]
    if source == PairSource::Checkout {
        let dir = crate::embedded_pair::extracted_pair_dir()?;
        return pair_in(&dir, PairSource::Embedded);
    }
    pair_in(&dir, source)
}

/// The pair `dir/target` + `dir/assistant`, checked to exist.
pub fn pair_in(dir: &Path, source: PairSource) -> Result<ModelPaths, DefaultModelError> {
    let target = dir.join("target");
    let drafter = dir.join("assistant");
    for part in [&target, &drafter] {
        if !part.is_dir() {
            return Err(match source {
                PairSource::Environment => DefaultModelError::EnvDirIncomplete {
                    dir: dir.to_path_buf(),
                    missing: part.clone(),
                },
                PairSource::Checkout | PairSource::Embedded => DefaultModelError::NotInCheckout {
                    dir: dir.to_path_buf(),
                },
            });
        }
    }
    Ok(ModelPaths {
        target,
        drafter: Some(drafter),
        draft_centroids: None,
        tokenizer: None,
        chat_template: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_directory_resolves_and_a_missing_one_explains() {
        let dir = tempfile::tempdir().unwrap();
        let err = pair_in(dir.path(), PairSource::Checkout).unwrap_err();
        assert!(err.to_string().contains("no default model yet"), "{err}");
        std::fs::create_dir(dir.path().join("target")).unwrap();
        let err = pair_in(dir.path(), PairSource::Environment).unwrap_err();
        assert!(err.to_string().contains("assistant"), "{err}");
        std::fs::create_dir(dir.path().join("assistant")).unwrap();
        let paths = pair_in(dir.path(), PairSource::Environment).unwrap();
        assert_eq!(paths.target, dir.path().join("target"));
        assert_eq!(paths.drafter, Some(dir.path().join("assistant")));
    }

    #[test]
    fn the_checkout_default_is_under_the_workspace() {
        assert!(workspace_default_dir().ends_with("models/default"));
    }
}
