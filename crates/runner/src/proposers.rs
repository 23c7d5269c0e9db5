//! Which proposer drafts for a [`Pipeline`](crate::Pipeline): the kind a draft directory holds,
//! detected from its `config.json`, and the proposer choice of a command line or an API user.

use std::path::{Path, PathBuf};

use mtp_core::proposer::{NgramOptions, ProposerKind};

use crate::loading::gguf::{is_gguf_path, GgufError, GgufFile};
use crate::loading::LoadError;
use crate::models::gemma4_assistant_gguf::{is_gguf_assistant, GGUF_ASSISTANT_ARCHITECTURES};
use crate::models::registry::{lookup, model_types, registration_of, Role, GGUF_REGISTRY};

/// The proposer kind of the model in `dir`, from the registry's entry for its `config.json`'s
/// `model_type`: a registered drafter (`gemma4_assistant`) is an MTP head
/// ([`ProposerKind::Mtp`]); a registered target (`gemma4_text`, `gemma3_text`, ...) is a draft
/// model ([`ProposerKind::Model`]).
///
/// Errors when the file is missing or not JSON, and with [`LoadError::UnknownModelType`] (listing
/// every registered drafter and target type) for any other `model_type`.
pub fn detect_draft_kind(dir: &Path) -> Result<ProposerKind, LoadError> {
    if is_gguf_path(dir) {
        return gguf_draft_kind(dir);
    }
    match registration_of(dir, Role::Drafter) {
        Ok(_) => Ok(ProposerKind::Mtp),
        Err(LoadError::UnknownModelType { path, found, .. }) => {
            if lookup(&found, Role::Target).is_some() {
                return Ok(ProposerKind::Model);
            }
            let mut expected = model_types(Role::Drafter);
            expected.extend(model_types(Role::Target));
            Err(LoadError::UnknownModelType {
                path,
                found,
                expected,
            })
        }
        Err(other) => Err(other),
    }
}

/// The proposer kind of a GGUF file: a Gemma 4 assistant (any schema the loader knows, so that
/// one it refuses says why) is an MTP head; an architecture the registry loads as a target is a
/// draft model.
fn gguf_draft_kind(path: &Path) -> Result<ProposerKind, LoadError> {
    let file = GgufFile::open(path)?;
    if is_gguf_assistant(&file) {
        return Ok(ProposerKind::Mtp);
    }
    let arch = file.architecture()?;
    if GGUF_REGISTRY.iter().any(|(a, _)| *a == arch) {
        return Ok(ProposerKind::Model);
    }
    let mut supported: Vec<&str> = GGUF_ASSISTANT_ARCHITECTURES.to_vec();
    supported.extend(GGUF_REGISTRY.iter().map(|(a, _)| *a));
    Err(GgufError::UnsupportedArchitecture {
        path: path.to_path_buf(),
        found: arch.to_string(),
        supported,
    }
    .into())
}

/// What a generation drafts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProposerChoice {
    /// The MTP head's directory (an assistant), if one drafts.
    pub mtp: Option<PathBuf>,
    /// The draft model's directory (a causal LM with the target's vocabulary), if one
    /// drafts.
    pub model: Option<PathBuf>,
    /// Prompt lookup, if it drafts.
    pub ngram: Option<NgramOptions>,
}

/// What is wrong with a proposer choice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposerChoiceError {
    /// An MTP head was asked for without a directory.
    #[error("--draft-kind mtp needs an assistant directory: pass --draft DIR")]
    MtpWithoutDirectory,
    /// `--draft-kind model` without a directory.
    #[error("--draft-kind model needs the draft model's directory: pass --draft DIR")]
    ModelWithoutDirectory,
    /// The directory holds another kind than the one forced.
    #[error("{} holds {found} weights, not {forced}", .dir.display())]
    KindMismatch {
        /// The directory.
        dir: PathBuf,
        /// The kind forced by `--draft-kind`.
        forced: ProposerKind,
        /// The kind its config names.
        found: ProposerKind,
    },
    /// The draft directory (or GGUF file) does not exist.
    #[error("the drafter model directory {} does not exist", .0.display())]
    MissingDir(PathBuf),
    /// The directory's config could not be read.
    #[error("cannot tell what {} holds: {reason}", .dir.display())]
    Undetectable {
        /// The directory.
        dir: PathBuf,
        /// The loader's message.
        reason: String,
    },
}

impl ProposerChoice {
    /// Resolve the proposers of a request: `kinds` (forced, possibly several; empty means
    /// "detect from `draft_dir`") over the optional draft directory, with the n-gram sizes
    /// `ngram`. No kinds and no directory means plain decoding.
    pub fn resolve(
        kinds: &[ProposerKind],
        draft_dir: Option<&Path>,
        ngram: NgramOptions,
    ) -> Result<Self, ProposerChoiceError> {
        let detect = |dir: &Path| {
            let exists = if is_gguf_path(dir) {
                dir.is_file()
            } else {
                dir.is_dir()
            };
            if !exists {
                return Err(ProposerChoiceError::MissingDir(dir.to_path_buf()));
            }
            detect_draft_kind(dir).map_err(|e| ProposerChoiceError::Undetectable {
                dir: dir.to_path_buf(),
                reason: e.to_string(),
            })
        };
        let mut choice = ProposerChoice::none();
        let wanted: Vec<ProposerKind> = match (kinds, draft_dir) {
            ([], Some(dir)) => vec![detect(dir)?],
            ([], None) => Vec::new(),
            (kinds, _) => kinds.to_vec(),
        };
        for kind in wanted {
            match kind {
                ProposerKind::Ngram => choice.ngram = Some(ngram),
                ProposerKind::Mtp => {
                    let dir = draft_dir.ok_or(ProposerChoiceError::MtpWithoutDirectory)?;
                    match detect(dir)? {
                        ProposerKind::Mtp => choice.mtp = Some(dir.to_path_buf()),
                        found => {
                            return Err(ProposerChoiceError::KindMismatch {
                                dir: dir.to_path_buf(),
                                forced: kind,
                                found,
                            })
                        }
                    }
                }
                ProposerKind::Model => {
                    let dir = draft_dir.ok_or(ProposerChoiceError::ModelWithoutDirectory)?;
                    match detect(dir)? {
                        ProposerKind::Model => choice.model = Some(dir.to_path_buf()),
                        found => {
                            return Err(ProposerChoiceError::KindMismatch {
                                dir: dir.to_path_buf(),
                                forced: kind,
                                found,
                            })
                        }
                    }
                }
            }
        }
        Ok(choice)
    }

    /// Nothing drafts (plain decoding).
    pub fn none() -> Self {
        Self {
            mtp: None,
            model: None,
            ngram: None,
        }
    }

    /// Whether anything drafts.
    pub fn is_speculative(&self) -> bool {
        self.mtp.is_some() || self.model.is_some() || self.ngram.is_some()
    }

    /// How many proposers are on.
    pub fn count(&self) -> usize {
        usize::from(self.mtp.is_some())
            + usize::from(self.model.is_some())
            + usize::from(self.ngram.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(case: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/gemma4")
            .join(case)
    }

    #[test]
    fn kinds_come_from_model_type() {
        assert_eq!(
            detect_draft_kind(&fixture("swa_basic/assistant")).unwrap(),
            ProposerKind::Mtp
        );
        assert_eq!(
            detect_draft_kind(&fixture("swa_basic/target")).unwrap(),
            ProposerKind::Model
        );
        assert!(detect_draft_kind(&fixture("no_such_case")).is_err());
    }

    #[test]
    fn choices_resolve() {
        let ngram = NgramOptions::default();
        let assistant = fixture("swa_basic/assistant");
        let target = fixture("swa_basic/target");
        let detected = ProposerChoice::resolve(&[], Some(&assistant), ngram).unwrap();
        assert_eq!(detected.mtp.as_deref(), Some(assistant.as_path()));
        assert_eq!(detected.ngram, None);
        let lookup = ProposerChoice::resolve(&[ProposerKind::Ngram], None, ngram).unwrap();
        assert_eq!((lookup.mtp, lookup.ngram), (None, Some(ngram)));
        let both = ProposerChoice::resolve(
            &[ProposerKind::Mtp, ProposerKind::Ngram],
            Some(&assistant),
            ngram,
        )
        .unwrap();
        assert!(both.mtp.is_some() && both.ngram.is_some());
        assert!(!ProposerChoice::resolve(&[], None, ngram)
            .unwrap()
            .is_speculative());
        assert_eq!(
            ProposerChoice::resolve(&[ProposerKind::Mtp], None, ngram),
            Err(ProposerChoiceError::MtpWithoutDirectory)
        );
        assert!(matches!(
            ProposerChoice::resolve(&[ProposerKind::Mtp], Some(&target), ngram),
            Err(ProposerChoiceError::KindMismatch { .. })
        ));
        let model = ProposerChoice::resolve(&[], Some(&target), ngram).unwrap();
        assert_eq!(model.model.as_deref(), Some(target.as_path()));
        assert_eq!((model.mtp, model.ngram), (None, None));
        let model_and_lookup = ProposerChoice::resolve(
            &[ProposerKind::Model, ProposerKind::Ngram],
            Some(&target),
            ngram,
        )
        .unwrap();
        assert_eq!(model_and_lookup.count(), 2);
        assert!(matches!(
            ProposerChoice::resolve(&[ProposerKind::Model], Some(&assistant), ngram),
            Err(ProposerChoiceError::KindMismatch { .. })
        ));
        assert_eq!(
            ProposerChoice::resolve(
                &[ProposerKind::Mtp, ProposerKind::Model],
                Some(&target),
                ngram
            ),
            Err(ProposerChoiceError::KindMismatch {
                dir: target.clone(),
                forced: ProposerKind::Mtp,
                found: ProposerKind::Model,
            })
        );
        assert_eq!(
            ProposerChoice::resolve(&[ProposerKind::Model], None, ngram),
            Err(ProposerChoiceError::ModelWithoutDirectory)
        );
    }
}
