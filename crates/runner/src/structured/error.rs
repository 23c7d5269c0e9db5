//! Errors of structured outputs.

/// Why a grammar could not be built or used.
#[derive(Debug, thiserror::Error)]
pub enum StructuredError {
    /// The model's tokenizer could not be turned into the grammar engine's vocabulary.
    #[error("the tokenizer cannot be used for structured outputs: {0}")]
    Vocabulary(String),
    /// The format (schema, regex, grammar) is invalid or uses something unsupported; the
    /// message names what.
    #[error("{0}")]
    InvalidFormat(String),
}
