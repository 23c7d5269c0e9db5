//! Conversions between mtp-core's vocabulary (dtypes, `usize` shapes and axes) and MLX's
//! (`Dtype`, `i32` shapes and axes), checked so that no user input can overflow or panic.

use mlx_rs::{Array, Dtype};
use mtp_core::backend::checked_numel;
use mtp_core::{CoreError, DType};

use crate::error::{MlxError, Result};

/// The MLX dtype storing `dtype`.
pub(crate) fn to_mlx(dtype: DType) -> Dtype {
    match dtype {
        DType::F32 => Dtype::Float32,
        DType::F16 => Dtype::Float16,
        DType::BF16 => Dtype::Bfloat16,
        DType::I32 => Dtype::Int32,
        DType::U32 => Dtype::Uint32,
    }
}

/// The mtp-core dtype of `x`, or [`MlxError::UnsupportedDType`] naming `op`.
pub(crate) fn dtype_of(op: &'static str, x: &Array) -> Result<DType> {
    match x.dtype() {
        Dtype::Float32 => Ok(DType::F32),
        Dtype::Float16 => Ok(DType::F16),
        Dtype::Bfloat16 => Ok(DType::BF16),
        Dtype::Int32 => Ok(DType::I32),
        Dtype::Uint32 => Ok(DType::U32),
        dtype => Err(MlxError::UnsupportedDType { op, dtype }),
    }
}

/// The nearest mtp-core dtype of an MLX dtype (for the infallible [`mtp_core::Backend::dtype`]).
pub(crate) fn nearest_dtype(dtype: Dtype) -> DType {
    match dtype {
        Dtype::Float16 => DType::F16,
        Dtype::Bfloat16 => DType::BF16,
        Dtype::Int8 | Dtype::Int16 | Dtype::Int32 | Dtype::Int64 => DType::I32,
        Dtype::Bool | Dtype::Uint8 | Dtype::Uint16 | Dtype::Uint32 | Dtype::Uint64 => DType::U32,
        _ => DType::F32,
    }
}

/// A `usize` as MLX's `i32`, or an error naming `op`.
pub(crate) fn to_i32(op: &'static str, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| {
        CoreError::InvalidArgument {
            op,
            message: format!("{value} does not fit MLX's i32 sizes"),
        }
        .into()
    })
}

/// `shape` as MLX dims (element count checked too).
pub(crate) fn dims(op: &'static str, shape: &[usize]) -> Result<Vec<i32>> {
    let numel = checked_numel(op, shape)?;
    to_i32(op, numel)?;
    shape.iter().map(|&d| to_i32(op, d)).collect()
}

/// The shape of `x` as `usize`s.
pub(crate) fn shape_of(x: &Array) -> Vec<usize> {
    x.shape()
        .iter()
        .map(|&d| usize::try_from(d).unwrap_or(0))
        .collect()
}

/// `axis` as an MLX axis, checked against the rank of `x`.
pub(crate) fn axis(op: &'static str, x: &Array, axis: usize) -> Result<i32> {
    let rank = x.ndim();
    if axis >= rank {
        return Err(CoreError::AxisOutOfRange { op, axis, rank }.into());
    }
    to_i32(op, axis)
}

/// An error unless `a` and `b` share a dtype (MLX would promote silently).
pub(crate) fn same_dtype(op: &'static str, a: &Array, b: &Array) -> Result<DType> {
    let da = dtype_of(op, a)?;
    let db = dtype_of(op, b)?;
    if da != db {
        return Err(CoreError::DTypeMismatch {
            op,
            expected: "both operands in one dtype",
            got: db,
        }
        .into());
    }
    Ok(da)
}

/// The dtype of `x`, which must be a float dtype.
pub(crate) fn require_float(op: &'static str, x: &Array) -> Result<DType> {
    require_kind(op, x, DType::is_float, "a float dtype")
}

/// The dtype of `x`, which must be an integer (index) dtype.
pub(crate) fn require_int(op: &'static str, x: &Array) -> Result<DType> {
    require_kind(op, x, DType::is_int, "an integer dtype")
}

/// The dtype of `x` when `kind` accepts it, else a mismatch naming what was `expected`.
fn require_kind(
    op: &'static str,
    x: &Array,
    kind: fn(DType) -> bool,
    expected: &'static str,
) -> Result<DType> {
    let dtype = dtype_of(op, x)?;
    if !kind(dtype) {
        return Err(CoreError::DTypeMismatch {
            op,
            expected,
            got: dtype,
        }
        .into());
    }
    Ok(dtype)
}
