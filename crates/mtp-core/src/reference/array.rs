//! The host array: a shape, a dtype and reference-counted row-major storage.

use std::sync::Arc;

use crate::{CoreError, CoreResult, DType};

/// The element storage of a [`HostArray`].
///
/// Float dtypes keep `f32` values (already rounded to the dtype for F16/BF16); integer dtypes
/// keep `i64` values that always lie in the dtype's range.
#[derive(Clone)]
pub(super) enum Storage {
    /// Values of an F32, F16 or BF16 array.
    Float(Arc<Vec<f32>>),
    /// Values of an I32 or U32 array.
    Int(Arc<Vec<i64>>),
}

/// An immutable, contiguous, row-major array on the host.
///
/// Cloning is cheap (the storage is shared); every operation of the
/// [`ReferenceBackend`](super::ReferenceBackend) returns a new array. F16 and BF16 arrays hold
/// `f32` values rounded to the dtype, so results mimic real half-precision storage.
#[derive(Clone)]
pub struct HostArray {
    shape: Vec<usize>,
    dtype: DType,
    storage: Storage,
}

impl HostArray {
    /// A float array from values computed in `f64`, each rounded to `dtype`.
    pub(super) fn from_f64_values(shape: Vec<usize>, dtype: DType, values: Vec<f64>) -> Self {
        let data = values.into_iter().map(|v| narrow(dtype, v)).collect();
        Self::from_rounded_f32(shape, dtype, data)
    }

    /// A float array from `f32` values, each rounded to `dtype`.
    pub(super) fn from_f32_values(shape: Vec<usize>, dtype: DType, mut values: Vec<f32>) -> Self {
        if dtype != DType::F32 {
            for v in values.iter_mut() {
                *v = narrow(dtype, f64::from(*v));
            }
        }
        Self::from_rounded_f32(shape, dtype, values)
    }

    /// A float array from values already representable in `dtype` (no rounding applied).
    pub(super) fn from_rounded_f32(shape: Vec<usize>, dtype: DType, values: Vec<f32>) -> Self {
        debug_assert!(dtype.is_float());
        debug_assert_eq!(shape.iter().product::<usize>(), values.len());
        Self {
            shape,
            dtype,
            storage: Storage::Float(Arc::new(values)),
        }
    }

    /// An integer array from values already in `dtype`'s range.
    pub(super) fn from_int_values(shape: Vec<usize>, dtype: DType, values: Vec<i64>) -> Self {
        debug_assert!(dtype.is_int());
        debug_assert_eq!(shape.iter().product::<usize>(), values.len());
        Self {
            shape,
            dtype,
            storage: Storage::Int(Arc::new(values)),
        }
    }

    /// The same storage under another shape of equal element count.
    pub(super) fn with_shape(&self, shape: Vec<usize>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), self.numel());
        Self {
            shape,
            dtype: self.dtype,
            storage: self.storage.clone(),
        }
    }

    /// The same dtype with new storage (values keep their dtype: no rounding needed).
    pub(super) fn with_storage(&self, shape: Vec<usize>, storage: Storage) -> Self {
        Self {
            shape,
            dtype: self.dtype,
            storage,
        }
    }

    /// The shape, row-major.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of elements (the product of the shape; 1 for a 0-d array).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The rank (number of axes).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The storage.
    pub(super) fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Every element as `f64`, row-major.
    pub(super) fn values_f64(&self) -> Vec<f64> {
        match &self.storage {
            Storage::Float(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Storage::Int(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }
}

impl std::fmt::Debug for HostArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const SHOWN: usize = 8;
        write!(f, "HostArray({}, {:?}, [", self.dtype, self.shape)?;
        let n = self.numel();
        match &self.storage {
            Storage::Float(v) => {
                for (i, x) in v.iter().take(SHOWN).enumerate() {
                    write!(f, "{}{x}", if i > 0 { ", " } else { "" })?;
                }
            }
            Storage::Int(v) => {
                for (i, x) in v.iter().take(SHOWN).enumerate() {
                    write!(f, "{}{x}", if i > 0 { ", " } else { "" })?;
                }
            }
        }
        if n > SHOWN {
            write!(f, ", ... ({n} values)")?;
        }
        write!(f, "])")
    }
}

// ---------------------------------------------------------------------------- rounding

/// `v` rounded to `dtype` (a float dtype): first to `f32`, then to half precision if asked.
pub(super) fn narrow(dtype: DType, v: f64) -> f32 {
    let f = v as f32;
    match dtype {
        DType::F16 => half::f16::from_f32(f).to_f32(),
        DType::BF16 => half::bf16::from_f32(f).to_f32(),
        _ => f,
    }
}

/// `v` wrapped into the range of the integer `dtype` (two's-complement wrap-around).
pub(super) fn wrap_int(dtype: DType, v: i64) -> i64 {
    match dtype {
        DType::U32 => i64::from(v as u32),
        _ => i64::from(v as i32),
    }
}

/// The value range of an integer dtype, and float-to-int conversion (shared by every backend).
pub(super) use crate::backend::{float_to_int, int_range};

// ---------------------------------------------------------------------------- validation

/// The element count of `shape`, or an error when it overflows.
pub(super) use crate::backend::checked_numel;

/// An error unless `axis < rank`.
pub(super) fn check_axis(op: &'static str, axis: usize, rank: usize) -> CoreResult<()> {
    if axis >= rank {
        return Err(CoreError::AxisOutOfRange { op, axis, rank });
    }
    Ok(())
}

/// An error unless `x` has a float dtype.
pub(super) fn require_float(op: &'static str, x: &HostArray) -> CoreResult<()> {
    if !x.dtype().is_float() {
        return Err(CoreError::DTypeMismatch {
            op,
            expected: "a float dtype",
            got: x.dtype(),
        });
    }
    Ok(())
}

/// An error unless `x` has an integer dtype.
pub(super) fn require_int(op: &'static str, x: &HostArray) -> CoreResult<()> {
    if !x.dtype().is_int() {
        return Err(CoreError::DTypeMismatch {
            op,
            expected: "an integer dtype",
            got: x.dtype(),
        });
    }
    Ok(())
}

/// An error unless `b` has the dtype of `a`.
pub(super) fn require_same_dtype(op: &'static str, a: &HostArray, b: &HostArray) -> CoreResult<()> {
    if a.dtype() != b.dtype() {
        return Err(CoreError::DTypeMismatch {
            op,
            expected: "operands of one dtype",
            got: b.dtype(),
        });
    }
    Ok(())
}

/// The integer values of an index array (`U32` or `I32`).
pub(super) fn index_values<'a>(op: &'static str, x: &'a HostArray) -> CoreResult<&'a [i64]> {
    match x.storage() {
        Storage::Int(v) => Ok(v),
        Storage::Float(_) => Err(CoreError::DTypeMismatch {
            op,
            expected: "an integer dtype",
            got: x.dtype(),
        }),
    }
}

/// `index` as a position into an axis of `size`, or an error when out of range.
pub(super) fn checked_index(op: &'static str, index: i64, size: usize) -> CoreResult<usize> {
    match usize::try_from(index) {
        Ok(i) if i < size => Ok(i),
        _ => Err(CoreError::IndexOutOfRange { op, index, size }),
    }
}

/// An error unless positions along an axis of `len` fit a `U32` result.
pub(super) fn check_u32_len(op: &'static str, len: usize) -> CoreResult<()> {
    if len as u64 > u64::from(u32::MAX) + 1 {
        return Err(CoreError::InvalidArgument {
            op,
            message: format!("axis of {len} elements does not fit u32 indices"),
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------- layout

/// Row-major strides of a contiguous array of `shape`.
pub(super) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// `(outer, len, inner)`: the element counts before, along and after `axis`.
pub(super) fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// The NumPy broadcast of two shapes.
pub(super) fn broadcast_shape(
    op: &'static str,
    a: &[usize],
    b: &[usize],
) -> CoreResult<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0usize; rank];
    for (i, o) in out.iter_mut().enumerate() {
        // Dims aligned from the right; missing leading dims count as 1.
        let da = (i + a.len()).checked_sub(rank).map_or(1, |j| a[j]);
        let db = (i + b.len()).checked_sub(rank).map_or(1, |j| b[j]);
        *o = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(CoreError::ShapeMismatch {
                op,
                lhs: a.to_vec(),
                rhs: b.to_vec(),
            });
        };
    }
    Ok(out)
}

/// Strides that read an array of `shape` (contiguous) as if broadcast to `out` (same rank or
/// larger; broadcast dims get stride 0).
pub(super) fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = contiguous_strides(shape);
    let lead = out.len() - shape.len();
    let mut strides = vec![0usize; out.len()];
    for (j, (&d, &s)) in shape.iter().zip(&own).enumerate() {
        if d == out[lead + j] && d != 1 {
            strides[lead + j] = s;
        }
    }
    strides
}

/// Calls `f` once per element of `shape`, in row-major order, with the flat offset of that
/// element in each of `N` operands described by their `strides`.
pub(super) fn for_each_offset<const N: usize>(
    shape: &[usize],
    strides: [&[usize]; N],
    mut f: impl FnMut([usize; N]),
) {
    let numel: usize = shape.iter().product();
    let rank = shape.len();
    let mut idx = vec![0usize; rank];
    let mut off = [0usize; N];
    for _ in 0..numel {
        f(off);
        let mut d = rank;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            for (o, s) in off.iter_mut().zip(&strides) {
                *o += s[d];
            }
            if idx[d] < shape[d] {
                break;
            }
            for (o, s) in off.iter_mut().zip(&strides) {
                *o -= s[d] * shape[d];
            }
            idx[d] = 0;
        }
    }
}

/// `src` gathered at `offsets` (any element type).
pub(super) fn gather<T: Copy>(src: &[T], offsets: &[usize]) -> Vec<T> {
    offsets.iter().map(|&o| src[o]).collect()
}

impl Storage {
    /// New storage holding the elements at `offsets` (which are all in range).
    pub(super) fn gather(&self, offsets: &[usize]) -> Storage {
        match self {
            Storage::Float(v) => Storage::Float(Arc::new(gather(v, offsets))),
            Storage::Int(v) => Storage::Int(Arc::new(gather(v, offsets))),
        }
    }
}
