//! Indexing: embedding lookup, take_along_axis and scatter (put_along_axis).
//!
//! Indices are `U32` or `I32`; negative or too-large indices are
//! [`CoreError::IndexOutOfRange`] (no Python-style wrap-around).

use std::sync::Arc;

use super::array::{
    check_axis, checked_index, index_values, require_float, require_same_dtype, split_at_axis,
    HostArray, Storage,
};
use crate::{CoreError, CoreResult};

pub(super) fn embedding(table: &HostArray, ids: &HostArray) -> CoreResult<HostArray> {
    const OP: &str = "embedding";
    require_float(OP, table)?;
    let [n, d] = table.shape()[..] else {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("table must be [n, d], got {:?}", table.shape()),
        });
    };
    let id_values = index_values(OP, ids)?;
    let mut offsets = Vec::with_capacity(id_values.len() * d);
    for &id in id_values {
        let row = checked_index(OP, id, n)?;
        offsets.extend(row * d..(row + 1) * d);
    }
    let mut shape = ids.shape().to_vec();
    shape.push(d);
    Ok(table.with_storage(shape, table.storage().gather(&offsets)))
}

/// An error unless `indices` has the rank of `x` and equal dims except along `axis`.
fn check_along_axis(
    op: &'static str,
    x: &HostArray,
    indices: &HostArray,
    axis: usize,
) -> CoreResult<()> {
    check_axis(op, axis, x.rank())?;
    let fits = indices.rank() == x.rank()
        && x.shape()
            .iter()
            .zip(indices.shape())
            .enumerate()
            .all(|(i, (a, b))| i == axis || a == b);
    if !fits {
        return Err(CoreError::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: indices.shape().to_vec(),
        });
    }
    Ok(())
}

/// For each element of `indices` (row-major), the flat offset in `x` it points at.
fn target_offsets(
    op: &'static str,
    x: &HostArray,
    indices: &HostArray,
    axis: usize,
) -> CoreResult<Vec<usize>> {
    let idx = index_values(op, indices)?;
    let size = x.shape()[axis];
    let (outer, len, inner) = split_at_axis(indices.shape(), axis);
    let mut offsets = Vec::with_capacity(idx.len());
    for o in 0..outer {
        for j in 0..len {
            for i in 0..inner {
                let at = checked_index(op, idx[(o * len + j) * inner + i], size)?;
                offsets.push((o * size + at) * inner + i);
            }
        }
    }
    Ok(offsets)
}

pub(super) fn take_along_axis(
    x: &HostArray,
    indices: &HostArray,
    axis: usize,
) -> CoreResult<HostArray> {
    const OP: &str = "take_along_axis";
    index_values(OP, indices)?;
    check_along_axis(OP, x, indices, axis)?;
    let offsets = target_offsets(OP, x, indices, axis)?;
    Ok(x.with_storage(indices.shape().to_vec(), x.storage().gather(&offsets)))
}

/// A copy of `data` with `src[k]` written at `offsets[k]`, in order (later writes win).
fn put<T: Copy>(data: &[T], offsets: &[usize], src: &[T]) -> Vec<T> {
    let mut out = data.to_vec();
    for (&o, &v) in offsets.iter().zip(src) {
        out[o] = v;
    }
    out
}

pub(super) fn scatter(
    x: &HostArray,
    indices: &HostArray,
    src: &HostArray,
    axis: usize,
) -> CoreResult<HostArray> {
    const OP: &str = "scatter";
    index_values(OP, indices)?;
    require_same_dtype(OP, x, src)?;
    if indices.shape() != src.shape() {
        return Err(CoreError::ShapeMismatch {
            op: OP,
            lhs: indices.shape().to_vec(),
            rhs: src.shape().to_vec(),
        });
    }
    check_along_axis(OP, x, indices, axis)?;
    let offsets = target_offsets(OP, x, indices, axis)?;
    let storage = match (x.storage(), src.storage()) {
        (Storage::Float(d), Storage::Float(s)) => Storage::Float(Arc::new(put(d, &offsets, s))),
        (Storage::Int(d), Storage::Int(s)) => Storage::Int(Arc::new(put(d, &offsets, s))),
        _ => {
            return Err(CoreError::DTypeMismatch {
                op: OP,
                expected: "x and src of one dtype",
                got: src.dtype(),
            })
        }
    };
    Ok(x.with_storage(x.shape().to_vec(), storage))
}
