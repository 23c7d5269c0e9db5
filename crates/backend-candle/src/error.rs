//! The error type of the candle backend.

use mtp_core::CoreError;

/// What went wrong in the candle backend.
///
/// Shape, axis, index and dtype problems found before calling candle are reported as
/// [`CoreError`]s (the vocabulary every backend shares); failures inside candle keep candle's own
/// error, boxed because it is large.
#[derive(Debug, thiserror::Error)]
pub enum CandleError {
    /// An error raised by candle itself (a kernel, an allocation, a device).
    #[error("candle: {0}")]
    Candle(#[source] Box<candle_core::Error>),
    /// A backend-neutral error (shapes, axes, dtypes, indices, caches, options).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The batched quantized CPU matmul refused its inputs.
    #[error(transparent)]
    QMatMul(#[from] crate::qmatmul::QMatMulError),
    /// A tensor holds a candle dtype that mtp-core has no name for (U8, I16, I64, F64, F8, ...).
    #[error("{op}: candle dtype {dtype:?} is not one of f32, f16, bf16, i32, u32")]
    UnsupportedDType {
        /// The operation that met the tensor.
        op: &'static str,
        /// The candle dtype it holds.
        dtype: candle_core::DType,
    },
    /// The device spec names a device whose cargo feature was not compiled in.
    #[error("device `{device}` needs backend-candle built with `--features {feature}`")]
    FeatureNotCompiled {
        /// The device asked for (`cuda`, `metal`).
        device: &'static str,
        /// The cargo feature that enables it.
        feature: &'static str,
    },
    /// The device exists only on another platform (Metal outside macOS).
    #[error("device `{device}` is only available on {platform}")]
    PlatformUnsupported {
        /// The device asked for.
        device: &'static str,
        /// Where it is available.
        platform: &'static str,
    },
    /// The device spec is not `cpu`, `cuda`, `cuda:N`, `metal` or `metal:N`.
    #[error("unknown device spec `{spec}`: expected cpu, cuda, cuda:N, metal or metal:N")]
    UnknownDevice {
        /// The spec as given.
        spec: String,
    },
    /// The device is compiled in but could not be opened (no GPU, bad ordinal, driver error).
    #[error("cannot open device `{spec}`: {source}")]
    DeviceUnavailable {
        /// The spec as given.
        spec: String,
        /// candle's reason.
        #[source]
        source: Box<candle_core::Error>,
    },
}

impl From<candle_core::Error> for CandleError {
    fn from(e: candle_core::Error) -> Self {
        Self::Candle(Box::new(e))
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, CandleError>;
