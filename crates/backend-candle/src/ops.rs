//! The required ops of [`Backend`](mtp_core::Backend) on candle tensors.
//!
//! Each function checks what mtp-core's contract checks (axes, shapes, dtypes) and reports it as
//! a [`CoreError`], then calls candle. Candle's kernels want contiguous operands in a few places
//! (sort, gather, scatter, index-select); those calls make their inputs contiguous first, which
//! is free when they already are.

use candle_core::op::CmpOp;
use candle_core::{DType as CDType, Device, Tensor};
use half::{bf16, f16};
use mtp_core::backend::{check_f32_source, check_le_source, float_to_int, i32s_as_u32s};
use mtp_core::{BinaryOp, CompareOp, CoreError, DType, ReduceOp, SortOrder, UnaryOp};

use crate::error::{CandleError, Result};
use crate::row_scan;

// ---------------------------------------------------------------------------------- dtypes

/// Whether `device` holds mtp-core's `I32` arrays as candle `I64`: candle 0.11 builds no `i32`
/// CUDA kernels (fill, cast, binary, where, reduce and index kernels exist for `u32` and `i64`
/// only), so on CUDA an `I32` array is stored widened. Values stay in `i32` range as long as the
/// arithmetic on them does (an overflow is not wrapped at 32 bits there; reading such a value
/// back is an error).
pub(crate) fn i32_held_as_i64(device: &Device) -> bool {
    device.is_cuda()
}

/// The candle dtype an array of `dtype` is held in on `device` (all five exist in candle 0.11;
/// see [`i32_held_as_i64`]).
pub(crate) fn to_candle(dtype: DType, device: &Device) -> CDType {
    match dtype {
        DType::F32 => CDType::F32,
        DType::F16 => CDType::F16,
        DType::BF16 => CDType::BF16,
        DType::I32 if i32_held_as_i64(device) => CDType::I64,
        DType::I32 => CDType::I32,
        DType::U32 => CDType::U32,
    }
}

/// The mtp-core dtype of a candle dtype on `device`, or [`CandleError::UnsupportedDType`].
pub(crate) fn from_candle(op: &'static str, dtype: CDType, device: &Device) -> Result<DType> {
    match dtype {
        CDType::F32 => Ok(DType::F32),
        CDType::F16 => Ok(DType::F16),
        CDType::BF16 => Ok(DType::BF16),
        CDType::I32 => Ok(DType::I32),
        CDType::I64 if i32_held_as_i64(device) => Ok(DType::I32),
        CDType::U32 => Ok(DType::U32),
        other => Err(CandleError::UnsupportedDType { op, dtype: other }),
    }
}

/// The dtype of `x`, checked.
pub(crate) fn dtype_of(op: &'static str, x: &Tensor) -> Result<DType> {
    from_candle(op, x.dtype(), x.device())
}

/// The dtype of `x`, which must be a float dtype.
pub(crate) fn require_float(op: &'static str, x: &Tensor) -> Result<DType> {
    let dtype = dtype_of(op, x)?;
    if !dtype.is_float() {
        return Err(CoreError::DTypeMismatch {
            op,
            expected: "a float dtype",
            got: dtype,
        }
        .into());
    }
    Ok(dtype)
}

/// The shared dtype of `a` and `b`.
fn same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<DType> {
    let (da, db) = (dtype_of(op, a)?, dtype_of(op, b)?);
    if da != db {
        return Err(CoreError::DTypeMismatch {
            op,
            expected: "operands of one dtype",
            got: db,
        }
        .into());
    }
    Ok(da)
}

/// `x` as a contiguous index tensor candle's gather/scatter/index-select accept: `U32` as is,
/// `I32` widened to `I64` (candle takes U8/U32/I64 indices; widening keeps negative indices
/// negative, so they stay out of range and are errors).
fn index_tensor(op: &'static str, x: &Tensor) -> Result<Tensor> {
    match dtype_of(op, x)? {
        DType::U32 => Ok(x.contiguous()?),
        DType::I32 => Ok(x.to_dtype(CDType::I64)?.contiguous()?),
        other => Err(CoreError::DTypeMismatch {
            op,
            expected: "an index dtype (u32 or i32)",
            got: other,
        }
        .into()),
    }
}

fn is_half(dtype: CDType) -> bool {
    matches!(dtype, CDType::F16 | CDType::BF16)
}

fn is_float(dtype: CDType) -> bool {
    matches!(
        dtype,
        CDType::F32 | CDType::F16 | CDType::BF16 | CDType::F64
    )
}

// ---------------------------------------------------------------------------------- shapes

fn check_axis(op: &'static str, axis: usize, rank: usize) -> Result<()> {
    if axis >= rank {
        return Err(CoreError::AxisOutOfRange { op, axis, rank }.into());
    }
    Ok(())
}

fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    Ok(mtp_core::backend::checked_numel(op, shape)?)
}

fn check_len(op: &'static str, len: usize, shape: &[usize]) -> Result<()> {
    Ok(mtp_core::backend::check_data_len(op, len, shape)?)
}

/// NumPy broadcast of two shapes.
fn broadcast_shape(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for (i, slot) in out.iter_mut().enumerate() {
        let da = (i + a.len()).checked_sub(rank).map_or(1, |j| a[j]);
        let db = (i + b.len()).checked_sub(rank).map_or(1, |j| b[j]);
        *slot = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(CoreError::ShapeMismatch {
                    op,
                    lhs: a.to_vec(),
                    rhs: b.to_vec(),
                }
                .into())
            }
        };
    }
    Ok(out)
}

/// `x` broadcast to `shape` (a view; a clone when the shape already matches).
fn expand(x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if x.dims() == shape {
        Ok(x.clone())
    } else {
        Ok(x.broadcast_as(shape)?)
    }
}

/// `shape` with `axis` set to 1.
fn kept(shape: &[usize], axis: usize) -> Vec<usize> {
    let mut out = shape.to_vec();
    out[axis] = 1;
    out
}

/// A 0-d tensor holding `value` in `dtype` (built in that dtype, no f64 on the device).
fn scalar(value: f64, dtype: CDType, device: &Device) -> Result<Tensor> {
    let t = match dtype {
        CDType::F16 => Tensor::new(f16::from_f64(value), device)?,
        CDType::BF16 => Tensor::new(bf16::from_f64(value), device)?,
        CDType::I32 => Tensor::new(value as i32, device)?,
        CDType::I64 => Tensor::new(value as i64, device)?,
        CDType::U32 => Tensor::new(value as u32, device)?,
        _ => Tensor::new(value as f32, device)?.to_dtype(dtype)?,
    };
    Ok(t)
}

/// The element of `x` along `axis` moved last, contiguous (so last-axis kernels apply).
fn axis_last(x: &Tensor, axis: usize) -> Result<Tensor> {
    let last = x.rank() - 1;
    Ok(x.transpose(axis, last)?.contiguous()?)
}

// ---------------------------------------------------------------------------------- creation

pub(crate) fn from_f32(
    device: &Device,
    data: &[f32],
    shape: &[usize],
    dtype: DType,
) -> Result<Tensor> {
    const OP: &str = "from_f32";
    check_f32_source(OP, data.len(), shape, dtype)?;
    let t = Tensor::from_slice(data, shape.to_vec(), device)?;
    if dtype == DType::F32 {
        Ok(t)
    } else {
        Ok(t.to_dtype(to_candle(dtype, device))?)
    }
}

/// Stored little-endian values (`F32`, `F16`, `BF16`) to a tensor of `dtype`: the bytes are copied
/// to the device as they are (`Tensor::from_raw_buffer`) and converted there.
pub(crate) fn from_le_bytes(
    device: &Device,
    bytes: &[u8],
    src: DType,
    shape: &[usize],
    dtype: DType,
) -> Result<Tensor> {
    check_le_source("from_le_bytes", bytes.len(), src, shape, dtype)?;
    let t = Tensor::from_raw_buffer(bytes, to_candle(src, device), shape, device)?;
    if src == dtype {
        Ok(t)
    } else {
        Ok(t.to_dtype(to_candle(dtype, device))?)
    }
}

pub(crate) fn from_u32(device: &Device, data: &[u32], shape: &[usize]) -> Result<Tensor> {
    check_len("from_u32", data.len(), shape)?;
    Ok(Tensor::from_slice(data, shape.to_vec(), device)?)
}

pub(crate) fn from_i32(device: &Device, data: &[i32], shape: &[usize]) -> Result<Tensor> {
    check_len("from_i32", data.len(), shape)?;
    if i32_held_as_i64(device) {
        let wide: Vec<i64> = data.iter().map(|&v| i64::from(v)).collect();
        return Ok(Tensor::from_vec(wide, shape.to_vec(), device)?);
    }
    Ok(Tensor::from_slice(data, shape.to_vec(), device)?)
}

pub(crate) fn full(device: &Device, shape: &[usize], value: f32, dtype: DType) -> Result<Tensor> {
    const OP: &str = "full";
    checked_numel(OP, shape)?;
    let shape = shape.to_vec();
    let t = match dtype {
        DType::F32 => Tensor::full(value, shape, device)?,
        DType::F16 => Tensor::full(f16::from_f32(value), shape, device)?,
        DType::BF16 => Tensor::full(bf16::from_f32(value), shape, device)?,
        DType::I32 => {
            let v = i32::try_from(float_to_int(OP, dtype, f64::from(value))?).unwrap_or(i32::MAX);
            if i32_held_as_i64(device) {
                Tensor::full(i64::from(v), shape, device)?
            } else {
                Tensor::full(v, shape, device)?
            }
        }
        DType::U32 => {
            let v = u32::try_from(float_to_int(OP, dtype, f64::from(value))?).unwrap_or(u32::MAX);
            Tensor::full(v, shape, device)?
        }
    };
    Ok(t)
}

pub(crate) fn to_vec_f32(x: &Tensor) -> Result<Vec<f32>> {
    if x.elem_count() == 0 {
        // No kernel launch for nothing (a CUDA launch of zero blocks is an invalid argument).
        return Ok(Vec::new());
    }
    Ok(x.to_dtype(CDType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

pub(crate) fn to_vec_u32(x: &Tensor) -> Result<Vec<u32>> {
    const OP: &str = "to_vec_u32";
    let dtype = dtype_of(OP, x)?;
    if x.elem_count() == 0 && !dtype.is_float() {
        return Ok(Vec::new());
    }
    match dtype {
        DType::U32 => Ok(x.flatten_all()?.to_vec1::<u32>()?),
        DType::I32 if x.dtype() == CDType::I64 => {
            let wide = x.flatten_all()?.to_vec1::<i64>()?;
            let narrow = wide
                .into_iter()
                .map(|v| {
                    i32::try_from(v).map_err(|_| CoreError::InvalidArgument {
                        op: OP,
                        message: format!("{v} is outside the i32 range"),
                    })
                })
                .collect::<std::result::Result<Vec<i32>, CoreError>>()?;
            Ok(i32s_as_u32s(OP, narrow)?)
        }
        DType::I32 => Ok(i32s_as_u32s(OP, x.flatten_all()?.to_vec1::<i32>()?)?),
        other => Err(CoreError::DTypeMismatch {
            op: OP,
            expected: "an integer dtype",
            got: other,
        }
        .into()),
    }
}

pub(crate) fn cast(x: &Tensor, dtype: DType) -> Result<Tensor> {
    dtype_of("cast", x)?;
    let target = to_candle(dtype, x.device());
    if x.dtype() == target {
        return Ok(x.clone());
    }
    if x.elem_count() == 0 {
        return Ok(Tensor::zeros(x.dims(), target, x.device())?);
    }
    let half = |d: CDType| matches!(d, CDType::F16 | CDType::BF16);
    if (x.dtype() == CDType::I64 && half(target)) || (half(x.dtype()) && target == CDType::I64) {
        // candle has no CUDA kernel between i64 and f16/bf16 (an I32 held as I64, see
        // `i32_held_as_i64`): through f32, which holds every half value exactly (an integer
        // beyond 2^24 is rounded twice, to f32 and then to the half type).
        return Ok(x.to_dtype(CDType::F32)?.to_dtype(target)?);
    }
    Ok(x.to_dtype(target)?)
}

// ---------------------------------------------------------------------------------- shape ops

pub(crate) fn reshape(x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    const OP: &str = "reshape";
    if checked_numel(OP, shape)? != x.elem_count() {
        return Err(CoreError::ShapeMismatch {
            op: OP,
            lhs: x.dims().to_vec(),
            rhs: shape.to_vec(),
        }
        .into());
    }
    // candle copies a non-contiguous input and shares a contiguous one.
    Ok(x.reshape(shape.to_vec())?)
}

pub(crate) fn transpose(x: &Tensor, a: usize, b: usize) -> Result<Tensor> {
    check_axis("transpose", a, x.rank())?;
    check_axis("transpose", b, x.rank())?;
    Ok(x.transpose(a, b)?)
}

pub(crate) fn slice(x: &Tensor, axis: usize, start: usize, len: usize) -> Result<Tensor> {
    const OP: &str = "slice";
    check_axis(OP, axis, x.rank())?;
    let size = x.dims()[axis];
    if start.checked_add(len).is_none_or(|end| end > size) {
        let index = i64::try_from(start.saturating_add(len)).unwrap_or(i64::MAX);
        return Err(CoreError::IndexOutOfRange {
            op: OP,
            index,
            size,
        }
        .into());
    }
    Ok(x.narrow(axis, start, len)?)
}

pub(crate) fn concat(xs: &[&Tensor], axis: usize) -> Result<Tensor> {
    const OP: &str = "concat";
    let Some(first) = xs.first() else {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: "no arrays to join".into(),
        }
        .into());
    };
    let rank = first.rank();
    check_axis(OP, axis, rank)?;
    for x in xs {
        same_dtype(OP, first, x)?;
        let same_others = x.rank() == rank
            && x.dims()
                .iter()
                .zip(first.dims())
                .enumerate()
                .all(|(i, (d, f))| i == axis || d == f);
        if !same_others {
            return Err(CoreError::ShapeMismatch {
                op: OP,
                lhs: first.dims().to_vec(),
                rhs: x.dims().to_vec(),
            }
            .into());
        }
    }
    if xs.len() == 1 {
        return Ok((*first).clone());
    }
    Ok(Tensor::cat(xs, axis)?)
}

// ---------------------------------------------------------------------------------- elementwise

/// `where(isnan(x), x, other)`: lets a NaN of `x` through where candle's kernel would drop it.
fn keep_nan(x: &Tensor, other: &Tensor) -> Result<Tensor> {
    Ok(x.ne(x)?.where_cond(x, other)?)
}

/// An error if an integer division would divide by zero (or overflow `i32::MIN / -1`): candle's
/// CPU kernel is Rust's `/`, which panics there. This reads one flag back to the host.
fn check_int_division(a: &Tensor, b: &Tensor) -> Result<()> {
    if b.elem_count() == 0 {
        return Ok(());
    }
    let device = b.device();
    let mut bad = b.eq(&scalar(0.0, b.dtype(), device)?.broadcast_as(b.dims())?)?;
    if matches!(b.dtype(), CDType::I32 | CDType::I64) {
        // i32::MIN / -1 overflows i32 (and leaves i32 range where I32 is held as I64).
        let min = scalar(f64::from(i32::MIN), b.dtype(), device)?.broadcast_as(a.dims())?;
        let minus_one = scalar(-1.0, b.dtype(), device)?.broadcast_as(b.dims())?;
        let overflow = a.eq(&min)?.mul(&b.eq(&minus_one)?)?;
        bad = bad.maximum(&overflow)?;
    }
    let any = bad.flatten_all()?.max(0)?.to_scalar::<u8>()?;
    if any != 0 {
        return Err(CoreError::InvalidArgument {
            op: "binary",
            message: "integer division by zero".into(),
        }
        .into());
    }
    Ok(())
}

pub(crate) fn binary(a: &Tensor, b: &Tensor, op: BinaryOp) -> Result<Tensor> {
    const OP: &str = "binary";
    let dtype = same_dtype(OP, a, b)?;
    let shape = broadcast_shape(OP, a.dims(), b.dims())?;
    let (a, b) = (expand(a, &shape)?, expand(b, &shape)?);
    let out = match op {
        BinaryOp::Add => a.add(&b)?,
        BinaryOp::Sub => a.sub(&b)?,
        BinaryOp::Mul => a.mul(&b)?,
        BinaryOp::Div => {
            if !dtype.is_float() {
                check_int_division(&a, &b)?;
            }
            a.div(&b)?
        }
        BinaryOp::Maximum | BinaryOp::Minimum => {
            let m = if op == BinaryOp::Maximum {
                a.maximum(&b)?
            } else {
                a.minimum(&b)?
            };
            if dtype.is_float() {
                // candle's `if a < b { b } else { a }` keeps NaN only on one side; propagate both.
                keep_nan(&a, &keep_nan(&b, &m)?)?
            } else {
                m
            }
        }
    };
    Ok(out)
}

pub(crate) fn unary(x: &Tensor, op: UnaryOp) -> Result<Tensor> {
    require_float("unary", x)?;
    let out = match op {
        UnaryOp::Neg => x.neg()?,
        UnaryOp::Exp => x.exp()?,
        UnaryOp::Log => x.log()?,
        UnaryOp::Sqrt => x.sqrt()?,
        UnaryOp::Rsqrt => x.sqrt()?.recip()?,
        UnaryOp::Tanh => match crate::row_scan::contiguous_f32(x, crate::tanh::tanh_all) {
            // A contiguous f32 CPU tensor: one vectorised pass, no libm call per element.
            Some(values) => Tensor::from_vec(values?, x.dims(), x.device())?,
            None => x.tanh()?,
        },
        UnaryOp::Abs => x.abs()?,
    };
    Ok(out)
}

pub(crate) fn compare(a: &Tensor, b: &Tensor, op: CompareOp) -> Result<Tensor> {
    const OP: &str = "compare";
    same_dtype(OP, a, b)?;
    let shape = broadcast_shape(OP, a.dims(), b.dims())?;
    let op = match op {
        CompareOp::Eq => CmpOp::Eq,
        CompareOp::Ne => CmpOp::Ne,
        CompareOp::Lt => CmpOp::Lt,
        CompareOp::Le => CmpOp::Le,
        CompareOp::Gt => CmpOp::Gt,
        CompareOp::Ge => CmpOp::Ge,
    };
    // candle's comparisons give U8 masks; the contract asks for U32.
    let mask = expand(a, &shape)?.cmp(&expand(b, &shape)?, op)?;
    Ok(mask.to_dtype(CDType::U32)?)
}

pub(crate) fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    const OP: &str = "where_cond";
    same_dtype(OP, a, b)?;
    let ab = broadcast_shape(OP, a.dims(), b.dims())?;
    let shape = broadcast_shape(OP, cond.dims(), &ab)?;
    // candle wants an integer condition; a float one is "nonzero" (NaN included), as in NumPy.
    let cond = if is_float(cond.dtype()) {
        cond.ne(&scalar(0.0, cond.dtype(), cond.device())?.broadcast_as(cond.dims())?)?
    } else {
        cond.clone()
    };
    Ok(expand(&cond, &shape)?.where_cond(&expand(a, &shape)?, &expand(b, &shape)?)?)
}

// ---------------------------------------------------------------------------------- reductions

pub(crate) fn reduce(x: &Tensor, axis: usize, op: ReduceOp) -> Result<Tensor> {
    const OP: &str = "reduce";
    let dtype = dtype_of(OP, x)?;
    check_axis(OP, axis, x.rank())?;
    let len = x.dims()[axis];
    let out_shape = kept(x.dims(), axis);
    match op {
        ReduceOp::Sum | ReduceOp::Mean => {
            if op == ReduceOp::Mean && !dtype.is_float() {
                return Err(CoreError::DTypeMismatch {
                    op: OP,
                    expected: "a float dtype for Mean",
                    got: dtype,
                }
                .into());
            }
            // Half-precision sums accumulate in f32 and round once, like the reference.
            let wide = if is_half(x.dtype()) {
                x.to_dtype(CDType::F32)?
            } else {
                x.clone()
            };
            let r = if op == ReduceOp::Sum {
                wide.sum_keepdim(axis)?
            } else {
                wide.mean_keepdim(axis)?
            };
            Ok(r.to_dtype(x.dtype())?)
        }
        ReduceOp::Max | ReduceOp::Min => {
            if len == 0 {
                return Err(CoreError::InvalidArgument {
                    op: OP,
                    message: format!("{op:?} over an empty axis {axis} of {:?}", x.dims()),
                }
                .into());
            }
            if x.elem_count() == 0 {
                return Ok(Tensor::zeros(out_shape, x.dtype(), x.device())?);
            }
            let m = if op == ReduceOp::Max {
                x.max_keepdim(axis)?
            } else {
                x.min_keepdim(axis)?
            };
            if !dtype.is_float() {
                return Ok(m);
            }
            // candle's fold skips NaN after the first element; the contract propagates it.
            let has_nan = x.ne(x)?.max_keepdim(axis)?;
            let nan = scalar(f64::NAN, x.dtype(), x.device())?.broadcast_as(out_shape)?;
            Ok(has_nan.where_cond(&nan, &m)?)
        }
    }
}

/// The first index of the largest element along `axis` (axis kept), for devices whose argmax
/// kernel is a parallel reduction that may return any index of a tie (CUDA): every position
/// equal to the maximum keeps its index, the others the axis length, and the smallest wins.
pub(crate) fn first_max_index(x: &Tensor, axis: usize) -> Result<Tensor> {
    let size = x.dims()[axis];
    let hits = x.broadcast_eq(&x.max_keepdim(axis)?)?;
    let mut index_shape = vec![1; x.rank()];
    index_shape[axis] = size;
    let size_u32 = u32::try_from(size).map_err(|_| CoreError::InvalidArgument {
        op: "argmax",
        message: format!("axis of {size} elements is longer than u32 indices reach"),
    })?;
    let indices = Tensor::arange(0u32, size_u32, x.device())?
        .reshape(index_shape)?
        .broadcast_as(x.dims())?;
    let past_end = scalar(f64::from(size_u32), CDType::U32, x.device())?.broadcast_as(x.dims())?;
    Ok(hits.where_cond(&indices, &past_end)?.min_keepdim(axis)?)
}

pub(crate) fn argmax(x: &Tensor, axis: usize) -> Result<Tensor> {
    const OP: &str = "argmax";
    let dtype = dtype_of(OP, x)?;
    check_axis(OP, axis, x.rank())?;
    let out_shape = kept(x.dims(), axis);
    if x.dims()[axis] == 0 {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("empty axis {axis} of {:?}", x.dims()),
        }
        .into());
    }
    if x.elem_count() == 0 {
        return Ok(Tensor::zeros(out_shape, CDType::U32, x.device())?);
    }
    if let Some(ids) = row_scan::map_rows(x, axis, row_scan::argmax) {
        return Ok(Tensor::from_vec(ids, out_shape, x.device())?);
    }
    // candle's kernel keeps the first index on ties (`if best < v`) but a leading NaN would win:
    // NaN is made -inf so that it never does.
    let x = if dtype.is_float() {
        let neg_inf = scalar(f64::NEG_INFINITY, x.dtype(), x.device())?.broadcast_as(x.dims())?;
        x.ne(x)?.where_cond(&neg_inf, x)?
    } else {
        x.clone()
    };
    if !x.device().is_cpu() {
        return first_max_index(&x, axis);
    }
    let idx = x.argmax_keepdim(axis)?;
    if idx.dtype() == CDType::U32 {
        Ok(idx)
    } else {
        Ok(idx.to_dtype(CDType::U32)?)
    }
}

/// [`mtp_core::Backend::non_finite_rows`]: one scan per row for a contiguous `f32` CPU tensor
/// along its last axis, else `None` (the trait's default body runs).
pub(crate) fn non_finite_rows(x: &Tensor, axis: usize) -> Result<Option<Tensor>> {
    check_axis("non_finite_rows", axis, x.rank())?;
    match row_scan::map_rows(x, axis, row_scan::non_finite) {
        Some(flags) => Ok(Some(Tensor::from_vec(
            flags,
            kept(x.dims(), axis),
            x.device(),
        )?)),
        None => Ok(None),
    }
}

pub(crate) fn argsort(x: &Tensor, axis: usize, order: SortOrder) -> Result<Tensor> {
    const OP: &str = "argsort";
    let dtype = dtype_of(OP, x)?;
    check_axis(OP, axis, x.rank())?;
    let len = x.dims()[axis];
    if u32::try_from(len).is_err() {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("axis of {len} elements does not fit u32 indices"),
        }
        .into());
    }
    if x.elem_count() == 0 {
        return Ok(Tensor::zeros(x.dims(), CDType::U32, x.device())?);
    }
    let ascending = order == SortOrder::Ascending;
    // NaN sorts last in both orders: +inf when ascending, -inf when descending. This also keeps
    // candle's comparator a total order.
    let keys = if dtype.is_float() {
        let last = if ascending {
            f64::INFINITY
        } else {
            f64::NEG_INFINITY
        };
        let fill = scalar(last, x.dtype(), x.device())?.broadcast_as(x.dims())?;
        x.ne(x)?.where_cond(&fill, x)?
    } else {
        x.clone()
    };
    let keys = axis_last(&keys, axis)?;
    // candle's CPU kernel is a stable `sort_by`. Its CUDA and Metal kernels are bitonic sorts,
    // not stable: there the keys go to the host and back so that ties keep index order.
    let idx = if keys.device().is_cpu() {
        keys.arg_sort_last_dim(ascending)?
    } else {
        keys.to_device(&Device::Cpu)?
            .arg_sort_last_dim(ascending)?
            .to_device(x.device())?
    };
    Ok(idx.transpose(axis, x.rank() - 1)?)
}

/// Axes up to this long use candle's `Tensor::cumsum` (a product with an `n x n` triangular
/// matrix); longer ones use a log-step scan so memory stays linear.
const CUMSUM_MATMUL_MAX: usize = 1024;

pub(crate) fn cumsum(x: &Tensor, axis: usize) -> Result<Tensor> {
    const OP: &str = "cumsum";
    let dtype = dtype_of(OP, x)?;
    check_axis(OP, axis, x.rank())?;
    let len = x.dims()[axis];
    if x.elem_count() == 0 || len <= 1 {
        return Ok(x.clone());
    }
    if !dtype.is_float() {
        // candle has no integer matmul: inclusive scan by doubling shifts (Hillis-Steele).
        return scan(x, axis);
    }
    let wide = if is_half(x.dtype()) {
        x.to_dtype(CDType::F32)?
    } else {
        x.clone()
    };
    let summed = if len <= CUMSUM_MATMUL_MAX {
        let last = x.rank() - 1;
        axis_last(&wide, axis)?
            .cumsum(last)?
            .transpose(axis, last)?
    } else {
        scan(&wide, axis)?
    };
    Ok(summed.to_dtype(x.dtype())?)
}

/// Inclusive prefix sum along `axis` in `ceil(log2(n))` shifted adds.
fn scan(x: &Tensor, axis: usize) -> Result<Tensor> {
    let len = x.dims()[axis];
    let mut acc = x.contiguous()?;
    let mut shift = 1;
    while shift < len {
        let mut pad_shape = acc.dims().to_vec();
        pad_shape[axis] = shift;
        let pad = Tensor::zeros(pad_shape, acc.dtype(), acc.device())?;
        let shifted = Tensor::cat(&[&pad, &acc.narrow(axis, 0, len - shift)?], axis)?;
        acc = acc.add(&shifted)?;
        shift *= 2;
    }
    Ok(acc)
}

// ---------------------------------------------------------------------------------- indexing

pub(crate) fn embedding(table: &Tensor, ids: &Tensor) -> Result<Tensor> {
    const OP: &str = "embedding";
    require_float(OP, table)?;
    let ids_c = index_tensor(OP, ids)?;
    let [_, d] = table.dims()[..] else {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("table must be [n, d], got {:?}", table.dims()),
        }
        .into());
    };
    let flat = ids_c.flatten_all()?;
    let rows = table.contiguous()?.index_select(&flat, 0)?;
    let mut shape = ids.dims().to_vec();
    shape.push(d);
    Ok(rows.reshape(shape)?)
}

/// An error unless `indices` has the rank of `x` and equal dims except along `axis`.
fn check_along_axis(op: &'static str, x: &Tensor, indices: &Tensor, axis: usize) -> Result<()> {
    check_axis(op, axis, x.rank())?;
    let fits = indices.rank() == x.rank()
        && x.dims()
            .iter()
            .zip(indices.dims())
            .enumerate()
            .all(|(i, (a, b))| i == axis || a == b);
    if !fits {
        return Err(CoreError::ShapeMismatch {
            op,
            lhs: x.dims().to_vec(),
            rhs: indices.dims().to_vec(),
        }
        .into());
    }
    Ok(())
}

pub(crate) fn take_along_axis(x: &Tensor, indices: &Tensor, axis: usize) -> Result<Tensor> {
    const OP: &str = "take_along_axis";
    dtype_of(OP, x)?;
    let idx = index_tensor(OP, indices)?;
    check_along_axis(OP, x, indices, axis)?;
    Ok(x.contiguous()?.gather(&idx, axis)?)
}

pub(crate) fn scatter(x: &Tensor, indices: &Tensor, src: &Tensor, axis: usize) -> Result<Tensor> {
    const OP: &str = "scatter";
    let idx = index_tensor(OP, indices)?;
    same_dtype(OP, x, src)?;
    if indices.dims() != src.dims() {
        return Err(CoreError::ShapeMismatch {
            op: OP,
            lhs: indices.dims().to_vec(),
            rhs: src.dims().to_vec(),
        }
        .into());
    }
    check_along_axis(OP, x, indices, axis)?;
    // candle's `scatter` copies `x` into fresh storage, then writes in order (later writes win).
    Ok(x.scatter(&idx, &src.contiguous()?, axis)?)
}

// ---------------------------------------------------------------------------------- matmul

pub(crate) fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    const OP: &str = "matmul";
    require_float(OP, a)?;
    same_dtype(OP, a, b)?;
    let (ra, rb) = (a.rank(), b.rank());
    let mismatch = || -> CandleError {
        CoreError::ShapeMismatch {
            op: OP,
            lhs: a.dims().to_vec(),
            rhs: b.dims().to_vec(),
        }
        .into()
    };
    if ra < 2 || rb < 2 {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!(
                "operands need rank >= 2, got {:?} and {:?}",
                a.dims(),
                b.dims()
            ),
        }
        .into());
    }
    let (m, k) = (a.dims()[ra - 2], a.dims()[ra - 1]);
    let (kb, n) = (b.dims()[rb - 2], b.dims()[rb - 1]);
    if k != kb {
        return Err(mismatch());
    }
    let batch =
        broadcast_shape(OP, &a.dims()[..ra - 2], &b.dims()[..rb - 2]).map_err(|_| mismatch())?;
    let mut out_shape = batch;
    out_shape.extend([m, n]);
    if k == 0 || checked_numel(OP, &out_shape)? == 0 {
        return Ok(Tensor::zeros(out_shape, a.dtype(), a.device())?);
    }
    // gemm reads plain and transposed strides directly (a `linear` weight is a transposed view:
    // no copy); other layouts are rejected by candle, and then both operands are made contiguous.
    match a.broadcast_matmul(b) {
        Ok(out) => Ok(out),
        Err(_) if !(a.is_contiguous() && b.is_contiguous()) => {
            Ok(a.contiguous()?.broadcast_matmul(&b.contiguous()?)?)
        }
        Err(e) => Err(e.into()),
    }
}
