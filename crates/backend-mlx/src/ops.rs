//! The required ops of the backend contract, mapped onto MLX ops (lazy: nothing here runs until
//! an eval or a host read).

use std::borrow::Cow;

use mlx_rs::ops::indexing::{argmax_axis, ArrayIndex, ArrayIndexOp, TryIndexOp};
use mlx_rs::{ops, Array, Dtype};
use mtp_core::backend::{
    check_data_len, check_f32_source, check_le_source, float_to_int, i32s_as_u32s,
};
use mtp_core::{BinaryOp, CompareOp, CoreError, DType, ReduceOp, SortOrder, UnaryOp};

use crate::convert::{
    axis, dims, dtype_of, require_float, require_int, same_dtype, shape_of, to_i32, to_mlx,
};
use crate::error::{Context, Result};

// ------------------------------------------------------------------ creation and host reads

pub(crate) fn from_f32(data: &[f32], shape: &[usize], dtype: DType) -> Result<Array> {
    const OP: &str = "from_f32";
    check_f32_source(OP, data.len(), shape, dtype)?;
    let x = Array::from_slice(data, &dims(OP, shape)?);
    if dtype == DType::F32 {
        return Ok(x);
    }
    x.as_dtype(to_mlx(dtype)).op(OP)
}

/// Stored little-endian `F32` / `F16` / `BF16` values (a safetensors tensor in its memory map)
/// as an array of `dtype`, without a host `f32` copy of half-precision weights: the bytes become
/// an MLX array of their stored dtype in one copy (read in place when they are aligned for it,
/// else through one aligned copy of the same width), then MLX converts it when `dtype` differs.
/// A converted tensor is evaluated at once, so the stored copy of one tensor at a time is alive
/// while a checkpoint loads (left lazy, every stored copy would wait for the first forward).
pub(crate) fn from_le_bytes(
    bytes: &[u8],
    src: DType,
    shape: &[usize],
    dtype: DType,
) -> Result<Array> {
    const OP: &str = "from_le_bytes";
    check_le_source(OP, bytes.len(), src, shape, dtype)?;
    let dims = dims(OP, shape)?;
    let stored = match src {
        DType::F32 => Array::from_slice(
            &stored_values(bytes, |c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            &dims,
        ),
        DType::F16 => Array::from_slice(
            &stored_values(bytes, |c| half::f16::from_le_bytes([c[0], c[1]])),
            &dims,
        ),
        _ => Array::from_slice(
            &stored_values(bytes, |c| half::bf16::from_le_bytes([c[0], c[1]])),
            &dims,
        ),
    };
    if src == dtype {
        return Ok(stored);
    }
    let converted = stored.as_dtype(to_mlx(dtype)).op(OP)?;
    converted.eval().op(OP)?;
    Ok(converted)
}

/// `bytes` (little-endian values of `T`, whole values only) as a slice of `T`: the bytes
/// themselves when they are aligned for `T` on a little-endian host, else an aligned copy
/// decoded value by value with `decode`.
fn stored_values<T: bytemuck::Pod>(bytes: &[u8], decode: impl Fn(&[u8]) -> T) -> Cow<'_, [T]> {
    if cfg!(target_endian = "little") {
        if let Ok(values) = bytemuck::try_cast_slice::<u8, T>(bytes) {
            return Cow::Borrowed(values);
        }
    }
    Cow::Owned(
        bytes
            .chunks_exact(std::mem::size_of::<T>())
            .map(decode)
            .collect(),
    )
}

pub(crate) fn from_u32(data: &[u32], shape: &[usize]) -> Result<Array> {
    check_data_len("from_u32", data.len(), shape)?;
    Ok(Array::from_slice(data, &dims("from_u32", shape)?))
}

pub(crate) fn from_i32(data: &[i32], shape: &[usize]) -> Result<Array> {
    check_data_len("from_i32", data.len(), shape)?;
    Ok(Array::from_slice(data, &dims("from_i32", shape)?))
}

pub(crate) fn full(shape: &[usize], value: f32, dtype: DType) -> Result<Array> {
    const OP: &str = "full";
    let shape = dims(OP, shape)?;
    let scalar = match dtype {
        DType::I32 => {
            let v = float_to_int(OP, dtype, f64::from(value))?;
            Array::from_slice(&[i32::try_from(v).unwrap_or(i32::MAX)], &[])
        }
        DType::U32 => {
            let v = float_to_int(OP, dtype, f64::from(value))?;
            Array::from_slice(&[u32::try_from(v).unwrap_or(u32::MAX)], &[])
        }
        _ => Array::from_f32(value).as_dtype(to_mlx(dtype)).op(OP)?,
    };
    // A materialised (contiguous) array, not a broadcast view: caches write into it.
    ops::broadcast_to(&scalar, &shape)
        .and_then(|x| x.contiguous())
        .op(OP)
}

/// `x` as a flat row-major copy in `dtype` (a sync point).
fn host_values<T: mlx_rs::ArrayElement + Clone>(
    op: &'static str,
    x: &Array,
    dtype: Dtype,
) -> Result<Vec<T>> {
    if x.size() == 0 {
        // MLX gives empty arrays no buffer at all.
        return Ok(Vec::new());
    }
    let x = if x.dtype() == dtype {
        x.clone()
    } else {
        x.as_dtype(dtype).op(op)?
    };
    let flat = x.contiguous().op(op)?;
    flat.try_as_slice::<T>().op(op).map(<[T]>::to_vec)
}

pub(crate) fn to_vec_f32(x: &Array) -> Result<Vec<f32>> {
    const OP: &str = "to_vec_f32";
    dtype_of(OP, x)?;
    host_values(OP, x, Dtype::Float32)
}

pub(crate) fn to_vec_u32(x: &Array) -> Result<Vec<u32>> {
    const OP: &str = "to_vec_u32";
    match require_int(OP, x)? {
        DType::I32 => Ok(i32s_as_u32s(OP, host_values(OP, x, Dtype::Int32)?)?),
        _ => host_values(OP, x, Dtype::Uint32),
    }
}

pub(crate) fn cast(x: &Array, dtype: DType) -> Result<Array> {
    dtype_of("cast", x)?;
    x.as_dtype(to_mlx(dtype)).op("cast")
}

// ------------------------------------------------------------------ shape ops

pub(crate) fn reshape(x: &Array, shape: &[usize]) -> Result<Array> {
    x.reshape(&dims("reshape", shape)?).op("reshape")
}

pub(crate) fn transpose(x: &Array, a: usize, b: usize) -> Result<Array> {
    let (a, b) = (axis("transpose", x, a)?, axis("transpose", x, b)?);
    x.swap_axes(a, b).op("transpose")
}

/// The index ops selecting `start .. end` along `axis` (every element of the axes before it).
pub(crate) fn range_on_axis(axis: i32, start: i32, end: i32) -> Vec<ArrayIndexOp<'static>> {
    let mut index: Vec<ArrayIndexOp<'static>> = (0..axis).map(|_| (..).index_op()).collect();
    index.push((start..end).index_op());
    index
}

pub(crate) fn slice(x: &Array, axis_: usize, start: usize, len: usize) -> Result<Array> {
    const OP: &str = "slice";
    let ax = axis(OP, x, axis_)?;
    let shape = shape_of(x);
    let end = start.checked_add(len).filter(|&end| end <= shape[axis_]);
    let Some(end) = end else {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("{start}..+{len} on axis {axis_} of {shape:?}"),
        }
        .into());
    };
    let index = range_on_axis(ax, to_i32(OP, start)?, to_i32(OP, end)?);
    x.try_index(&index[..]).op(OP)
}

pub(crate) fn concat(xs: &[&Array], axis_: usize) -> Result<Array> {
    const OP: &str = "concat";
    let Some(first) = xs.first() else {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: "no arrays to join".into(),
        }
        .into());
    };
    let ax = axis(OP, first, axis_)?;
    for x in &xs[1..] {
        same_dtype(OP, first, x)?;
    }
    ops::concatenate(xs, ax).op(OP)
}

// ------------------------------------------------------------------ elementwise

pub(crate) fn binary(a: &Array, b: &Array, op: BinaryOp) -> Result<Array> {
    const OP: &str = "binary";
    let dtype = same_dtype(OP, a, b)?;
    let out = match op {
        BinaryOp::Add => ops::add(a, b),
        BinaryOp::Sub => ops::subtract(a, b),
        BinaryOp::Mul => ops::multiply(a, b),
        BinaryOp::Div if dtype.is_int() => return int_div(a, b, dtype),
        BinaryOp::Div => ops::divide(a, b),
        BinaryOp::Maximum => ops::maximum(a, b),
        BinaryOp::Minimum => ops::minimum(a, b),
    };
    out.op(OP)
}

/// Integer division truncating toward zero (MLX's `divide` is true division and its
/// `floor_divide` floors). A zero divisor is an error: one flag is read back to the host.
fn int_div(a: &Array, b: &Array, dtype: DType) -> Result<Array> {
    const OP: &str = "binary";
    let zero = Array::from_slice(&[0i32], &[])
        .as_dtype(to_mlx(dtype))
        .op(OP)?;
    let has_zero = ops::any(b.eq(&zero).op(OP)?, None).op(OP)?;
    if has_zero.try_item_exact::<bool>().op(OP)? {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: "integer division by zero".into(),
        }
        .into());
    }
    if dtype == DType::U32 {
        return ops::floor_divide(a, b).op(OP);
    }
    // trunc(a / b) = sign(a) sign(b) floor(|a| / |b|)
    let magnitude = ops::floor_divide(ops::abs(a).op(OP)?, ops::abs(b).op(OP)?).op(OP)?;
    let sign = ops::multiply(ops::sign(a).op(OP)?, ops::sign(b).op(OP)?).op(OP)?;
    ops::multiply(magnitude, sign).op(OP)
}

pub(crate) fn unary(x: &Array, op: UnaryOp) -> Result<Array> {
    const OP: &str = "unary";
    require_float(OP, x)?;
    let out = match op {
        UnaryOp::Neg => ops::negative(x),
        UnaryOp::Exp => ops::exp(x),
        UnaryOp::Log => ops::log(x),
        UnaryOp::Sqrt => ops::sqrt(x),
        UnaryOp::Rsqrt => ops::rsqrt(x),
        UnaryOp::Tanh => ops::tanh(x),
        UnaryOp::Abs => ops::abs(x),
    };
    out.op(OP)
}

pub(crate) fn compare(a: &Array, b: &Array, op: CompareOp) -> Result<Array> {
    const OP: &str = "compare";
    same_dtype(OP, a, b)?;
    let mask = match op {
        CompareOp::Eq => a.eq(b),
        CompareOp::Ne => a.ne(b),
        CompareOp::Lt => a.lt(b),
        CompareOp::Le => a.le(b),
        CompareOp::Gt => a.gt(b),
        CompareOp::Ge => a.ge(b),
    };
    mask.and_then(|m| m.as_dtype(Dtype::Uint32)).op(OP)
}

pub(crate) fn where_cond(cond: &Array, a: &Array, b: &Array) -> Result<Array> {
    const OP: &str = "where_cond";
    dtype_of(OP, cond)?;
    same_dtype(OP, a, b)?;
    // `astype(bool)` is `!= 0` (NaN counts as true, as in the reference).
    let cond = cond.as_dtype(Dtype::Bool).op(OP)?;
    ops::select(&cond, a, b).op(OP)
}

// ------------------------------------------------------------------ reductions and scans

pub(crate) fn reduce(x: &Array, axis_: usize, op: ReduceOp) -> Result<Array> {
    const OP: &str = "reduce";
    let dtype = dtype_of(OP, x)?;
    let ax = axis(OP, x, axis_)?;
    let out = match op {
        ReduceOp::Sum => x.sum_axis(ax, true),
        ReduceOp::Mean if dtype.is_int() => {
            return Err(CoreError::DTypeMismatch {
                op: OP,
                expected: "a float dtype for Mean",
                got: dtype,
            }
            .into())
        }
        ReduceOp::Mean => x.mean_axis(ax, true),
        ReduceOp::Max => x.max_axis(ax, true),
        ReduceOp::Min => x.min_axis(ax, true),
    };
    // MLX sums small integers into wider ones; keep the input dtype.
    out.and_then(|y| y.as_dtype(to_mlx(dtype))).op(OP)
}

pub(crate) fn argmax(x: &Array, axis_: usize) -> Result<Array> {
    const OP: &str = "argmax";
    dtype_of(OP, x)?;
    let ax = axis(OP, x, axis_)?;
    argmax_axis(x, ax, true)
        .and_then(|i| i.as_dtype(Dtype::Uint32))
        .op(OP)
}

pub(crate) fn argsort(x: &Array, axis_: usize, order: SortOrder) -> Result<Array> {
    const OP: &str = "argsort";
    let dtype = dtype_of(OP, x)?;
    let ax = axis(OP, x, axis_)?;
    let keys = match order {
        SortOrder::Ascending => x.clone(),
        // A stable sort of the negated keys keeps equal keys in index order; integers are
        // widened first so that negation cannot overflow.
        SortOrder::Descending if dtype.is_int() => {
            ops::negative(x.as_dtype(Dtype::Int64).op(OP)?).op(OP)?
        }
        SortOrder::Descending => ops::negative(x).op(OP)?,
    };
    ops::argsort_axis(&keys, ax)
        .and_then(|i| i.as_dtype(Dtype::Uint32))
        .op(OP)
}

pub(crate) fn cumsum(x: &Array, axis_: usize) -> Result<Array> {
    const OP: &str = "cumsum";
    let dtype = dtype_of(OP, x)?;
    let ax = axis(OP, x, axis_)?;
    x.cumsum(ax, false, true)
        .and_then(|y| y.as_dtype(to_mlx(dtype)))
        .op(OP)
}

// ------------------------------------------------------------------ indexing

pub(crate) fn embedding(table: &Array, ids: &Array) -> Result<Array> {
    const OP: &str = "embedding";
    dtype_of(OP, table)?;
    require_int(OP, ids)?;
    let table_shape = shape_of(table);
    let [_, d] = table_shape[..] else {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("table must be [n, d], got {table_shape:?}"),
        }
        .into());
    };
    let mut out_shape = shape_of(ids);
    out_shape.push(d);
    let flat = ids.reshape(&[-1]).op(OP)?;
    let rows = table.take_axis(&flat, 0).op(OP)?;
    rows.reshape(&dims(OP, &out_shape)?).op(OP)
}

/// An error unless `indices` has the rank of `x` and its dims off `axis` (the gather rule).
fn check_along_axis(op: &'static str, x: &Array, indices: &Array, axis_: usize) -> Result<i32> {
    let ax = axis(op, x, axis_)?;
    require_int(op, indices)?;
    let (xs, is) = (shape_of(x), shape_of(indices));
    let matches = xs.len() == is.len()
        && xs
            .iter()
            .zip(&is)
            .enumerate()
            .all(|(i, (a, b))| i == axis_ || a == b);
    if !matches {
        return Err(CoreError::ShapeMismatch {
            op,
            lhs: xs,
            rhs: is,
        }
        .into());
    }
    Ok(ax)
}

pub(crate) fn take_along_axis(x: &Array, indices: &Array, axis_: usize) -> Result<Array> {
    const OP: &str = "take_along_axis";
    dtype_of(OP, x)?;
    let ax = check_along_axis(OP, x, indices, axis_)?;
    x.take_along_axis(indices, ax).op(OP)
}

pub(crate) fn scatter(x: &Array, indices: &Array, src: &Array, axis_: usize) -> Result<Array> {
    const OP: &str = "scatter";
    same_dtype(OP, x, src)?;
    let ax = check_along_axis(OP, x, indices, axis_)?;
    if indices.shape() != src.shape() {
        return Err(CoreError::ShapeMismatch {
            op: OP,
            lhs: shape_of(indices),
            rhs: shape_of(src),
        }
        .into());
    }
    x.put_along_axis(indices, src, ax).op(OP)
}

// ------------------------------------------------------------------ linear algebra

pub(crate) fn matmul(a: &Array, b: &Array) -> Result<Array> {
    const OP: &str = "matmul";
    require_float(OP, a)?;
    same_dtype(OP, a, b)?;
    if a.ndim() < 2 || b.ndim() < 2 {
        return Err(CoreError::ShapeMismatch {
            op: OP,
            lhs: shape_of(a),
            rhs: shape_of(b),
        }
        .into());
    }
    a.matmul(b).op(OP)
}
