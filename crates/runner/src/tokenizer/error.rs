//! What can go wrong while loading or using a tokenizer.

use std::path::PathBuf;

/// An error of the tokenizer: a missing or malformed file, or a text it cannot encode or ids it
/// cannot decode. Every file problem names the file.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A file the tokenizer needs does not exist or cannot be read.
    #[error("cannot read {path}: {reason}")]
    MissingFile {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// `tokenizer.json` could not be parsed by the `tokenizers` crate.
    #[error("bad tokenizer file {path}: {reason}")]
    BadTokenizer {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// A JSON side file (`config.json`, `tokenizer_config.json`, `generation_config.json`) is not
    /// valid JSON or has a field of the wrong form.
    #[error("bad JSON in {path}: {reason}")]
    BadJson {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The text could not be encoded (e.g. a word-level vocabulary without an unknown token).
    #[error("cannot tokenize the prompt: {reason}")]
    Encode {
        /// What the tokenizer said.
        reason: String,
    },
    /// Token ids could not be decoded.
    #[error("cannot decode token ids: {reason}")]
    Decode {
        /// What the tokenizer said.
        reason: String,
    },
    /// A chat prompt was asked for, but the model has no chat template.
    #[error(
        "the model has no chat template (no chat_template.jinja beside {path}, and no \
         `chat_template` in it); drop --chat and pass the prompt as raw text, or give a \
         template file with --chat-template"
    )]
    NoChatTemplate {
        /// The tokenizer configuration looked at.
        path: PathBuf,
    },
    /// The chat template failed to compile or to render (a syntax error, or the template's
    /// own `raise_exception`, e.g. roles that do not alternate).
    #[error("the chat template in {path} failed: {reason}")]
    Template {
        /// The file holding the template.
        path: PathBuf,
        /// What minijinja (or the template) said.
        reason: String,
    },
}

/// Result alias for the tokenizer.
pub type TokenizerResult<T> = Result<T, TokenizerError>;
