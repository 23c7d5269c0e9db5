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
    /// `--chat` was asked for, but `tokenizer_config.json` has no chat template.
    #[error(
        "the model has no chat template ({path} has no `chat_template`); drop --chat and pass \
         the prompt as raw text"
    )]
    NoChatTemplate {
        /// The tokenizer configuration looked at.
        path: PathBuf,
    },
    /// The chat template is not Gemma's turn format, the only one supported.
    #[error(
        "unsupported chat template in {path}: only Gemma's turn format \
         (`<start_of_turn>user\\n{{prompt}}<end_of_turn>\\n<start_of_turn>model\\n`) is supported; \
         drop --chat and format the prompt yourself"
    )]
    UnsupportedChatTemplate {
        /// The tokenizer configuration holding the template.
        path: PathBuf,
    },
}

/// Result alias for the tokenizer.
pub type TokenizerResult<T> = Result<T, TokenizerError>;
