//! Reductions and scans along one axis: reduce, argmax, argsort and cumsum.
//!
//! Every output element is computed from its own inputs in index order `0..len` along the
//! axis (sums accumulate in `f64`, rounded once at the end), so a row reduced alone or inside a
//! batch gives bit-identical results.
//!
//! NaN handling: `Max`/`Min` propagate NaN; `argmax` treats NaN as smaller than every number
//! (an all-NaN row gives index 0); `argsort` puts NaN last in both orders.

use std::cmp::Ordering;

use super::array::{check_axis, check_u32_len, split_at_axis, wrap_int, HostArray, Storage};
use crate::{CoreError, CoreResult, DType, ReduceOp, SortOrder};

/// The shape with `axis` set to 1.
fn kept_shape(x: &HostArray, axis: usize) -> Vec<usize> {
    let mut shape = x.shape().to_vec();
    shape[axis] = 1;
    shape
}

/// Folds each line along the axis into one value: `outer * inner` accumulators, each fed the
/// line's elements in order `0..len`.
fn fold_lines<T: Copy, A: Copy>(
    data: &[T],
    (outer, len, inner): (usize, usize, usize),
    init: A,
    mut step: impl FnMut(A, T) -> A,
) -> Vec<A> {
    let mut out = Vec::with_capacity(outer * inner);
    let mut acc = vec![init; inner];
    for o in 0..outer {
        acc.iter_mut().for_each(|a| *a = init);
        for r in 0..len {
            let row = &data[(o * len + r) * inner..(o * len + r + 1) * inner];
            for (a, &v) in acc.iter_mut().zip(row) {
                *a = step(*a, v);
            }
        }
        out.extend_from_slice(&acc);
    }
    out
}

fn float_extreme(op: ReduceOp, acc: f64, v: f64) -> f64 {
    if acc.is_nan() || v.is_nan() {
        return f64::NAN;
    }
    if op == ReduceOp::Max {
        acc.max(v)
    } else {
        acc.min(v)
    }
}

pub(super) fn reduce(x: &HostArray, axis: usize, op: ReduceOp) -> CoreResult<HostArray> {
    const OP: &str = "reduce";
    check_axis(OP, axis, x.rank())?;
    let dims = split_at_axis(x.shape(), axis);
    let len = dims.1;
    let shape = kept_shape(x, axis);
    let dtype = x.dtype();
    if len == 0 && matches!(op, ReduceOp::Max | ReduceOp::Min) {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("{op:?} over an empty axis {axis} of {:?}", x.shape()),
        });
    }
    match x.storage() {
        Storage::Float(data) => {
            let values = match op {
                ReduceOp::Sum => fold_lines(data, dims, 0.0f64, |a, v| a + f64::from(v)),
                ReduceOp::Mean => fold_lines(data, dims, 0.0f64, |a, v| a + f64::from(v))
                    .into_iter()
                    .map(|s| s / len as f64)
                    .collect(),
                ReduceOp::Max => fold_lines(data, dims, f64::NEG_INFINITY, |a, v| {
                    float_extreme(op, a, f64::from(v))
                }),
                ReduceOp::Min => fold_lines(data, dims, f64::INFINITY, |a, v| {
                    float_extreme(op, a, f64::from(v))
                }),
            };
            Ok(HostArray::from_f64_values(shape, dtype, values))
        }
        Storage::Int(data) => {
            let values = match op {
                ReduceOp::Sum => fold_lines(data, dims, 0i64, i64::wrapping_add)
                    .into_iter()
                    .map(|s| wrap_int(dtype, s))
                    .collect(),
                ReduceOp::Max => fold_lines(data, dims, i64::MIN, i64::max),
                ReduceOp::Min => fold_lines(data, dims, i64::MAX, i64::min),
                ReduceOp::Mean => {
                    return Err(CoreError::DTypeMismatch {
                        op: OP,
                        expected: "a float dtype for Mean",
                        got: dtype,
                    })
                }
            };
            Ok(HostArray::from_int_values(shape, dtype, values))
        }
    }
}

pub(super) fn argmax(x: &HostArray, axis: usize) -> CoreResult<HostArray> {
    const OP: &str = "argmax";
    check_axis(OP, axis, x.rank())?;
    let dims = split_at_axis(x.shape(), axis);
    if dims.1 == 0 {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("empty axis {axis} of {:?}", x.shape()),
        });
    }
    check_u32_len(OP, dims.1)?;
    let values = x.values_f64();
    // Accumulator: (best value, best index, next index). NaN never wins; strict `>` keeps the
    // first index on ties.
    let init = (f64::NAN, 0i64, 0i64);
    let found = fold_lines(&values, dims, init, |(best, at, next), v| {
        if !v.is_nan() && (best.is_nan() || v > best) {
            (v, next, next + 1)
        } else {
            (best, at, next + 1)
        }
    });
    let indices = found.into_iter().map(|(_, at, _)| at).collect();
    Ok(HostArray::from_int_values(
        kept_shape(x, axis),
        DType::U32,
        indices,
    ))
}

/// Ascending order with NaN after every number.
fn ascending(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
        (a_nan, b_nan) => a_nan.cmp(&b_nan),
    }
}

pub(super) fn argsort(x: &HostArray, axis: usize, order: SortOrder) -> CoreResult<HostArray> {
    const OP: &str = "argsort";
    check_axis(OP, axis, x.rank())?;
    let (outer, len, inner) = split_at_axis(x.shape(), axis);
    check_u32_len(OP, len)?;
    let values = x.values_f64();
    let mut out = vec![0i64; values.len()];
    let mut line: Vec<usize> = Vec::with_capacity(len);
    for o in 0..outer {
        for i in 0..inner {
            let at = |r: usize| values[(o * len + r) * inner + i];
            line.clear();
            line.extend(0..len);
            // `sort_by` is stable: equal values keep their index order in both directions.
            line.sort_by(|&p, &q| {
                let (a, b) = (at(p), at(q));
                match (order, a.is_nan() || b.is_nan()) {
                    (SortOrder::Descending, false) => ascending(b, a),
                    _ => ascending(a, b),
                }
            });
            for (r, &src) in line.iter().enumerate() {
                out[(o * len + r) * inner + i] = src as i64;
            }
        }
    }
    Ok(HostArray::from_int_values(
        x.shape().to_vec(),
        DType::U32,
        out,
    ))
}

pub(super) fn cumsum(x: &HostArray, axis: usize) -> CoreResult<HostArray> {
    const OP: &str = "cumsum";
    check_axis(OP, axis, x.rank())?;
    let (outer, len, inner) = split_at_axis(x.shape(), axis);
    let shape = x.shape().to_vec();
    let dtype = x.dtype();
    match x.storage() {
        Storage::Float(data) => {
            let mut out = vec![0.0f64; data.len()];
            let mut acc = vec![0.0f64; inner];
            for o in 0..outer {
                acc.iter_mut().for_each(|a| *a = 0.0);
                for r in 0..len {
                    let at = (o * len + r) * inner;
                    for (i, a) in acc.iter_mut().enumerate() {
                        *a += f64::from(data[at + i]);
                        out[at + i] = *a;
                    }
                }
            }
            Ok(HostArray::from_f64_values(shape, dtype, out))
        }
        Storage::Int(data) => {
            let mut out = vec![0i64; data.len()];
            let mut acc = vec![0i64; inner];
            for o in 0..outer {
                acc.iter_mut().for_each(|a| *a = 0);
                for r in 0..len {
                    let at = (o * len + r) * inner;
                    for (i, a) in acc.iter_mut().enumerate() {
                        *a = a.wrapping_add(data[at + i]);
                        out[at + i] = wrap_int(dtype, *a);
                    }
                }
            }
            Ok(HostArray::from_int_values(shape, dtype, out))
        }
    }
}
