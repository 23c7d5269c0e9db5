//! What can be wrong with a quantized tensor.

/// A quantized tensor or format that cannot be used, with what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// A GGML type id that no GGUF block format here has.
    #[error("unknown GGML tensor type id {id} (known: {known})")]
    UnknownGgmlType {
        /// The id read.
        id: u32,
        /// The ids this build understands, in words.
        known: &'static str,
    },
    /// A format whose parameters are out of range (MLX bits or group size).
    #[error("unsupported quantization {format}: {reason}")]
    UnsupportedFormat {
        /// The format, in words.
        format: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// The bytes (or scales and biases) do not match the shape.
    #[error("{format} tensor of shape [{rows}, {cols}]: {reason}")]
    SizeMismatch {
        /// The format, in words.
        format: String,
        /// Rows of the weight.
        rows: usize,
        /// Columns of the weight (the contracted axis).
        cols: usize,
        /// What does not fit.
        reason: String,
    },
    /// A row index past the last row.
    #[error("row {row} out of range for a quantized tensor of {rows} rows")]
    RowOutOfRange {
        /// The row asked for.
        row: usize,
        /// Rows the tensor has.
        rows: usize,
    },
}
