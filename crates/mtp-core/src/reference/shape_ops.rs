//! Shape operations: reshape, transpose, slice and concat.

use std::sync::Arc;

use super::array::{
    check_axis, checked_numel, contiguous_strides, for_each_offset, split_at_axis, HostArray,
    Storage,
};
use crate::{CoreError, CoreResult};

pub(super) fn reshape(x: &HostArray, shape: &[usize]) -> CoreResult<HostArray> {
    const OP: &str = "reshape";
    if checked_numel(OP, shape)? != x.numel() {
        return Err(CoreError::ShapeMismatch {
            op: OP,
            lhs: x.shape().to_vec(),
            rhs: shape.to_vec(),
        });
    }
    Ok(x.with_shape(shape.to_vec()))
}

pub(super) fn transpose(x: &HostArray, a: usize, b: usize) -> CoreResult<HostArray> {
    const OP: &str = "transpose";
    let rank = x.rank();
    check_axis(OP, a, rank)?;
    check_axis(OP, b, rank)?;
    if a == b {
        return Ok(x.clone());
    }
    let mut out_shape = x.shape().to_vec();
    out_shape.swap(a, b);
    // Reading the output in row-major order walks the input with its strides swapped.
    let mut strides = contiguous_strides(x.shape());
    strides.swap(a, b);
    let mut offsets = Vec::with_capacity(x.numel());
    for_each_offset(&out_shape, [&strides], |[o]| offsets.push(o));
    Ok(x.with_storage(out_shape, x.storage().gather(&offsets)))
}

pub(super) fn slice(x: &HostArray, axis: usize, start: usize, len: usize) -> CoreResult<HostArray> {
    const OP: &str = "slice";
    check_axis(OP, axis, x.rank())?;
    let (outer, size, inner) = split_at_axis(x.shape(), axis);
    let end = start.checked_add(len).filter(|&e| e <= size);
    let Some(end) = end else {
        let index = i64::try_from(start.saturating_add(len)).unwrap_or(i64::MAX);
        return Err(CoreError::IndexOutOfRange {
            op: OP,
            index,
            size,
        });
    };
    let mut offsets = Vec::with_capacity(outer * len * inner);
    for o in 0..outer {
        let base = o * size * inner;
        offsets.extend(base + start * inner..base + end * inner);
    }
    let mut out_shape = x.shape().to_vec();
    out_shape[axis] = len;
    Ok(x.with_storage(out_shape, x.storage().gather(&offsets)))
}

/// The chunks of `parts` interleaved along the axis: for each outer index, every part's
/// `len * inner` run in turn.
fn join<T: Copy>(parts: &[(&[T], usize)], outer: usize, total: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(total);
    for o in 0..outer {
        for &(data, run) in parts {
            out.extend_from_slice(&data[o * run..(o + 1) * run]);
        }
    }
    out
}

pub(super) fn concat(xs: &[&HostArray], axis: usize) -> CoreResult<HostArray> {
    const OP: &str = "concat";
    let Some(first) = xs.first() else {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: "no arrays to join".into(),
        });
    };
    let rank = first.rank();
    check_axis(OP, axis, rank)?;
    let mut out_shape = first.shape().to_vec();
    out_shape[axis] = 0;
    for x in xs {
        if x.dtype() != first.dtype() {
            return Err(CoreError::DTypeMismatch {
                op: OP,
                expected: "arrays of one dtype",
                got: x.dtype(),
            });
        }
        let same_others = x.rank() == rank
            && x.shape()
                .iter()
                .zip(first.shape())
                .enumerate()
                .all(|(i, (d, f))| i == axis || d == f);
        if !same_others {
            return Err(CoreError::ShapeMismatch {
                op: OP,
                lhs: first.shape().to_vec(),
                rhs: x.shape().to_vec(),
            });
        }
        out_shape[axis] += x.shape()[axis];
    }
    let (outer, _, inner) = split_at_axis(first.shape(), axis);
    let total = checked_numel(OP, &out_shape)?;
    let storage = match first.storage() {
        Storage::Float(_) => {
            let parts: Vec<(&[f32], usize)> = xs
                .iter()
                .filter_map(|x| match x.storage() {
                    Storage::Float(v) => Some((v.as_slice(), x.shape()[axis] * inner)),
                    Storage::Int(_) => None,
                })
                .collect();
            Storage::Float(Arc::new(join(&parts, outer, total)))
        }
        Storage::Int(_) => {
            let parts: Vec<(&[i64], usize)> = xs
                .iter()
                .filter_map(|x| match x.storage() {
                    Storage::Int(v) => Some((v.as_slice(), x.shape()[axis] * inner)),
                    Storage::Float(_) => None,
                })
                .collect();
            Storage::Int(Arc::new(join(&parts, outer, total)))
        }
    };
    Ok(first.with_storage(out_shape, storage))
}
