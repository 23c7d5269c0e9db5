//! The error type of mtp-core.
//!
//! Every backend's own error type converts from [`CoreError`] (see
//! [`Backend::Error`](crate::Backend::Error)), so code written once over a backend — caches, models,
//! the engine — reports shape, option and cache problems in one vocabulary while keeping the
//! backend's native errors intact.

use crate::DType;

/// What went wrong in backend-neutral code or in the reference backend.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoreError {
    // ----- shapes and dtypes -----
    /// Two operands (or an operand and an expectation) have incompatible shapes.
    #[error("{op}: incompatible shapes {lhs:?} and {rhs:?}")]
    ShapeMismatch {
        /// The operation that rejected the shapes.
        op: &'static str,
        /// The first shape.
        lhs: Vec<usize>,
        /// The second shape.
        rhs: Vec<usize>,
    },
    /// An axis is out of range for an array of the given rank.
    #[error("{op}: axis {axis} out of range for rank {rank}")]
    AxisOutOfRange {
        /// The operation.
        op: &'static str,
        /// The axis asked for.
        axis: usize,
        /// The rank of the array.
        rank: usize,
    },
    /// An operand has a dtype the operation does not accept.
    #[error("{op}: expected {expected}, got {got:?}")]
    DTypeMismatch {
        /// The operation.
        op: &'static str,
        /// What the operation accepts, in words.
        expected: &'static str,
        /// The dtype it received.
        got: DType,
    },
    /// An index (token id, gather index, slice bound) is out of range.
    #[error("{op}: index {index} out of range for size {size}")]
    IndexOutOfRange {
        /// The operation.
        op: &'static str,
        /// The offending index.
        index: i64,
        /// The size it indexes into.
        size: usize,
    },
    /// Any other invalid argument to an operation.
    #[error("{op}: {message}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        message: String,
    },

    /// A quantized tensor or format that cannot be used.
    #[error(transparent)]
    Quant(#[from] crate::quant::QuantError),

    // ----- caches -----
    /// A cache operation was called in the wrong state (e.g. commit without begin).
    #[error("cache: {0}")]
    Cache(String),

    // ----- options and requests -----
    /// An option has an invalid value.
    #[error("invalid option {name} = {value}: {reason}")]
    InvalidOption {
        /// The option's name.
        name: &'static str,
        /// The value given, as text.
        value: String,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A draft depth above the largest the engine drafts.
    #[error(
        "{name} = {value} is above the largest draft depth, {max}: use a depth from 1 to {max}"
    )]
    DraftDepthTooLarge {
        /// The setting (an option or an environment key).
        name: &'static str,
        /// The value given, as text.
        value: String,
        /// The largest depth allowed ([`MAX_DRAFT_TOKENS_LIMIT`](crate::options::MAX_DRAFT_TOKENS_LIMIT)).
        max: usize,
    },
    /// The prompt is empty.
    #[error("the prompt is empty: at least one token is needed")]
    EmptyPrompt,
    /// The prompt does not fit the model's context: one position must stay free for the first
    /// generated token.
    #[error(
        "the prompt has {prompt} tokens but at most {} fit: the context holds {context} \
         positions and one must stay free for the first generated token",
        .context.saturating_sub(1)
    )]
    PromptTooLong {
        /// Prompt length in tokens.
        prompt: usize,
        /// The model's context length.
        context: usize,
    },
    /// A token id is not in the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfVocab {
        /// The token id.
        id: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// The target's logits hold a NaN or +∞, or no finite value at all: no token can be chosen
    /// (typically NaN or overflowing weights, or a half-precision overflow).
    #[error(
        "the target model's logits at position {position} are not finite (NaN or +inf): its \
         weights hold NaN/inf values, or the computation overflowed (in f16, try --dtype bf16 or f32)"
    )]
    NonFiniteLogits {
        /// The sequence position whose logits are not finite.
        position: usize,
    },
    /// A model broke its contract (e.g. returned logits of the wrong shape).
    #[error("model contract: {0}")]
    Model(String),
    /// A constraint (structured output, tool call) failed: a grammar that cannot be built,
    /// a matcher error, or a state that allows no token before the grammar is complete.
    #[error("constraint: {0}")]
    Constraint(String),
}

/// Result alias for code that only produces [`CoreError`]s.
pub type CoreResult<T> = Result<T, CoreError>;
