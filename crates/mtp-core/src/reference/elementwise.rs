//! Elementwise operations with NumPy broadcasting: binary, unary, compare and where.
//!
//! Float arithmetic is done in `f64` on the stored values and rounded once to the dtype.
//! Integer arithmetic is exact and wraps to the dtype's range; integer division truncates
//! toward zero (as in Rust and C) and dividing by zero is an error.

use super::array::{
    broadcast_shape, broadcast_strides, for_each_offset, narrow, require_float, require_same_dtype,
    wrap_int, HostArray, Storage,
};
use crate::{BinaryOp, CompareOp, CoreError, CoreResult, UnaryOp};

/// `f(a[i], b[j])` over the broadcast of the two shapes (`a_shape`, `b_shape` describe `a`, `b`).
fn broadcast2<A: Copy, B: Copy, T>(
    op: &'static str,
    a: (&[A], &[usize]),
    b: (&[B], &[usize]),
    mut f: impl FnMut(A, B) -> T,
) -> CoreResult<(Vec<usize>, Vec<T>)> {
    let out_shape = broadcast_shape(op, a.1, b.1)?;
    let mut out = Vec::with_capacity(out_shape.iter().product());
    if a.1 == b.1 {
        out.extend(a.0.iter().zip(b.0).map(|(&x, &y)| f(x, y)));
    } else {
        let sa = broadcast_strides(a.1, &out_shape);
        let sb = broadcast_strides(b.1, &out_shape);
        for_each_offset(&out_shape, [&sa, &sb], |[i, j]| out.push(f(a.0[i], b.0[j])));
    }
    Ok((out_shape, out))
}

fn float_binary(op: BinaryOp, x: f64, y: f64) -> f64 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Maximum if x.is_nan() || y.is_nan() => f64::NAN,
        BinaryOp::Minimum if x.is_nan() || y.is_nan() => f64::NAN,
        BinaryOp::Maximum => x.max(y),
        BinaryOp::Minimum => x.min(y),
    }
}

/// Integer `op`, or `None` on division by zero (the result is wrapped by the caller).
fn int_binary(op: BinaryOp, x: i64, y: i64) -> Option<i64> {
    Some(match op {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::Div => x.checked_div(y)?,
        BinaryOp::Maximum => x.max(y),
        BinaryOp::Minimum => x.min(y),
    })
}

pub(super) fn binary(a: &HostArray, b: &HostArray, op: BinaryOp) -> CoreResult<HostArray> {
    const OP: &str = "binary";
    require_same_dtype(OP, a, b)?;
    let dtype = a.dtype();
    match (a.storage(), b.storage()) {
        (Storage::Float(x), Storage::Float(y)) => {
            let (shape, values) = broadcast2(OP, (x, a.shape()), (y, b.shape()), |p, q| {
                narrow(dtype, float_binary(op, f64::from(p), f64::from(q)))
            })?;
            Ok(HostArray::from_rounded_f32(shape, dtype, values))
        }
        (Storage::Int(x), Storage::Int(y)) => {
            let mut divided_by_zero = false;
            let (shape, values) =
                broadcast2(
                    OP,
                    (x, a.shape()),
                    (y, b.shape()),
                    |p, q| match int_binary(op, p, q) {
                        Some(v) => wrap_int(dtype, v),
                        None => {
                            divided_by_zero = true;
                            0
                        }
                    },
                )?;
            if divided_by_zero {
                return Err(CoreError::InvalidArgument {
                    op: OP,
                    message: "integer division by zero".into(),
                });
            }
            Ok(HostArray::from_int_values(shape, dtype, values))
        }
        _ => Err(CoreError::DTypeMismatch {
            op: OP,
            expected: "operands of one dtype",
            got: b.dtype(),
        }),
    }
}

pub(super) fn unary(x: &HostArray, op: UnaryOp) -> CoreResult<HostArray> {
    const OP: &str = "unary";
    require_float(OP, x)?;
    let Storage::Float(values) = x.storage() else {
        return Err(CoreError::DTypeMismatch {
            op: OP,
            expected: "a float dtype",
            got: x.dtype(),
        });
    };
    let f = |v: f64| match op {
        UnaryOp::Neg => -v,
        UnaryOp::Exp => v.exp(),
        UnaryOp::Log => v.ln(),
        UnaryOp::Sqrt => v.sqrt(),
        UnaryOp::Rsqrt => 1.0 / v.sqrt(),
        UnaryOp::Tanh => v.tanh(),
        UnaryOp::Abs => v.abs(),
    };
    let dtype = x.dtype();
    let out = values
        .iter()
        .map(|&v| narrow(dtype, f(f64::from(v))))
        .collect();
    Ok(HostArray::from_rounded_f32(x.shape().to_vec(), dtype, out))
}

fn compare_values<T: PartialOrd>(op: CompareOp, x: T, y: T) -> i64 {
    // IEEE comparisons: NaN is unequal to everything, so only `Ne` holds.
    let r = match op {
        CompareOp::Eq => x == y,
        CompareOp::Ne => x != y,
        CompareOp::Lt => x < y,
        CompareOp::Le => x <= y,
        CompareOp::Gt => x > y,
        CompareOp::Ge => x >= y,
    };
    i64::from(r)
}

pub(super) fn compare(a: &HostArray, b: &HostArray, op: CompareOp) -> CoreResult<HostArray> {
    const OP: &str = "compare";
    require_same_dtype(OP, a, b)?;
    let (shape, values) = match (a.storage(), b.storage()) {
        (Storage::Float(x), Storage::Float(y)) => {
            broadcast2(OP, (x, a.shape()), (y, b.shape()), |p, q| {
                compare_values(op, p, q)
            })?
        }
        (Storage::Int(x), Storage::Int(y)) => {
            broadcast2(OP, (x, a.shape()), (y, b.shape()), |p, q| {
                compare_values(op, p, q)
            })?
        }
        _ => {
            return Err(CoreError::DTypeMismatch {
                op: OP,
                expected: "operands of one dtype",
                got: b.dtype(),
            })
        }
    };
    Ok(HostArray::from_int_values(shape, crate::DType::U32, values))
}

pub(super) fn where_cond(cond: &HostArray, a: &HostArray, b: &HostArray) -> CoreResult<HostArray> {
    const OP: &str = "where_cond";
    require_same_dtype(OP, a, b)?;
    let ab_shape = broadcast_shape(OP, a.shape(), b.shape())?;
    let out_shape = broadcast_shape(OP, cond.shape(), &ab_shape)?;
    // Truth of each condition element: nonzero (NaN counts as nonzero, as in NumPy).
    let truth: Vec<bool> = match cond.storage() {
        Storage::Float(v) => v.iter().map(|&c| c != 0.0).collect(),
        Storage::Int(v) => v.iter().map(|&c| c != 0).collect(),
    };
    let sc = broadcast_strides(cond.shape(), &out_shape);
    let sa = broadcast_strides(a.shape(), &out_shape);
    let sb = broadcast_strides(b.shape(), &out_shape);
    let storage = match (a.storage(), b.storage()) {
        (Storage::Float(x), Storage::Float(y)) => {
            let mut out = Vec::with_capacity(out_shape.iter().product());
            for_each_offset(&out_shape, [&sc, &sa, &sb], |[c, i, j]| {
                out.push(if truth[c] { x[i] } else { y[j] });
            });
            Storage::Float(out.into())
        }
        (Storage::Int(x), Storage::Int(y)) => {
            let mut out = Vec::with_capacity(out_shape.iter().product());
            for_each_offset(&out_shape, [&sc, &sa, &sb], |[c, i, j]| {
                out.push(if truth[c] { x[i] } else { y[j] });
            });
            Storage::Int(out.into())
        }
        _ => {
            return Err(CoreError::DTypeMismatch {
                op: OP,
                expected: "operands of one dtype",
                got: b.dtype(),
            })
        }
    };
    Ok(a.with_storage(out_shape, storage))
}
