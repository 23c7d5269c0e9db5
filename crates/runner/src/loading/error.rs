//! What can go wrong while loading a model directory.

use std::path::PathBuf;

/// An error while reading a model directory (configuration or weights) or while building a model
/// from it. Every variant names what it was looking at, so a message alone locates the problem.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file the loader needs does not exist or cannot be read.
    #[error("cannot read {path}: {reason}")]
    MissingFile {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// A JSON file (config or shard index) is not valid JSON or does not have the expected form.
    #[error("bad JSON in {path}: {reason}")]
    BadJson {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// The configuration names a model type this loader does not build.
    #[error("unknown model_type {found:?} in {path} (expected one of {expected:?})")]
    UnknownModelType {
        /// The config file.
        path: PathBuf,
        /// The model type found.
        found: String,
        /// The model types accepted here.
        expected: Vec<&'static str>,
    },
    /// The configuration is self-contradictory (e.g. heads that do not divide).
    #[error("invalid configuration in {path}: {reason}")]
    InvalidConfig {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A safetensors file has a header that cannot be parsed.
    #[error("corrupt safetensors file {path}: {reason}")]
    CorruptWeights {
        /// The weight file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// A tensor the model needs is not in the weight files.
    #[error("missing tensor {name} (expected shape {expected:?})")]
    MissingTensor {
        /// The tensor name.
        name: String,
        /// The shape the model expects.
        expected: Vec<usize>,
    },
    /// The weight files hold a tensor the model does not use.
    #[error("unexpected tensor {name} in {path}")]
    UnexpectedTensor {
        /// The tensor name.
        name: String,
        /// The file that holds it.
        path: PathBuf,
    },
    /// A tensor has another shape than the configuration implies.
    #[error("tensor {name} has shape {found:?}, expected {expected:?}")]
    ShapeMismatch {
        /// The tensor name.
        name: String,
        /// The shape the model expects.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor is stored in a dtype the loader does not convert.
    #[error("tensor {name} has unsupported dtype {dtype} (supported: {supported})")]
    UnsupportedDtype {
        /// The tensor name.
        name: String,
        /// The dtype in the file.
        dtype: String,
        /// What is supported for this tensor, in words.
        supported: &'static str,
    },
    /// A tensor's values are out of range (e.g. a token ordering with ids beyond the vocabulary).
    #[error("tensor {name} holds invalid values: {reason}")]
    InvalidTensor {
        /// The tensor name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The configuration asks for a feature these models do not implement.
    #[error("unsupported feature in {path}: {feature}")]
    UnsupportedFeature {
        /// The config file.
        path: PathBuf,
        /// The feature, in words.
        feature: String,
    },
    /// The drafter does not fit the target it is loaded for.
    #[error("drafter does not fit the target: {reason}")]
    DrafterMismatch {
        /// What does not fit.
        reason: String,
    },
    /// A GGUF file is unreadable, or does not hold what the model needs (see
    /// [`GgufError`](super::gguf::GgufError)).
    #[error(transparent)]
    Gguf(Box<super::gguf::GgufError>),
    /// An error about a single-file model (a GGUF) that names no file, with the file it was
    /// read from ([`LoadError::in_file`]).
    #[error("{path}: {source}")]
    InFile {
        /// The model file.
        path: PathBuf,
        /// What went wrong in it.
        source: Box<LoadError>,
    },
    /// The backend refused to build an array from the weights.
    #[error("backend error while building {name}: {reason}")]
    Backend {
        /// The tensor (or model part) being built.
        name: String,
        /// The backend's message.
        reason: String,
    },
}

impl LoadError {
    /// `self`, naming `path` when it names no file (the tensor errors, and a drafter that does
    /// not fit its target): how a single-file model's errors say which file.
    pub fn in_file(self, path: &std::path::Path) -> Self {
        match self {
            Self::MissingTensor { .. }
            | Self::ShapeMismatch { .. }
            | Self::UnsupportedDtype { .. }
            | Self::InvalidTensor { .. }
            | Self::Backend { .. }
            | Self::DrafterMismatch { .. } => Self::InFile {
                path: path.to_path_buf(),
                source: Box::new(self),
            },
            other => other,
        }
    }
}

/// Result alias for loading.
pub type LoadResult<T> = Result<T, LoadError>;
