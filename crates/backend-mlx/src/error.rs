//! The error type of the MLX backend.

use mtp_core::CoreError;

/// What went wrong in the MLX backend.
///
/// Shape, axis, index and dtype problems found before calling MLX are reported as
/// [`CoreError`]s (the vocabulary every backend shares); failures inside MLX keep MLX's message
/// and name the backend op that met them.
#[derive(Debug, thiserror::Error)]
pub enum MlxError {
    /// MLX itself refused or failed an operation (its C++ exception text, or an mlx-rs
    /// conversion error).
    #[error("mlx: {op}: {message}")]
    Mlx {
        /// The backend operation that called MLX.
        op: &'static str,
        /// MLX's message.
        message: String,
    },
    /// A backend-neutral error (shapes, axes, dtypes, indices, caches, options).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// An array holds an MLX dtype that mtp-core has no name for (bool, int8, int64, f64, ...).
    #[error("{op}: MLX dtype {dtype:?} is not one of f32, f16, bf16, i32, u32")]
    UnsupportedDType {
        /// The operation that met the array.
        op: &'static str,
        /// The MLX dtype it holds.
        dtype: mlx_rs::Dtype,
    },
    /// The device exists only on another platform (the GPU outside macOS).
    #[error("device `{device}` is only available on {platform}")]
    PlatformUnsupported {
        /// The device asked for.
        device: &'static str,
        /// Where it is available.
        platform: &'static str,
    },
    /// The device spec is not `cpu`, `gpu` or `metal`.
    #[error("unknown device spec `{spec}`: expected cpu, gpu or metal")]
    UnknownDevice {
        /// The spec as given.
        spec: String,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, MlxError>;

/// Attach the backend op to an error coming out of mlx-rs.
pub(crate) trait Context<T> {
    /// `Err(e)` becomes [`MlxError::Mlx`] naming `op`.
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T, E: std::fmt::Display> Context<T> for std::result::Result<T, E> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|e| MlxError::Mlx {
            op,
            message: e.to_string(),
        })
    }
}
