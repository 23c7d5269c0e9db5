//! Indexing: `embedding`, `take_along_axis` and `scatter`, with `U32` and `I32` indices.

use mtp_core::{Backend, DType};

use crate::error::SuiteError;
use crate::harness::{Harness, ALL_DTYPES, FLOATS};
use crate::inputs::{Gen, Input};
use crate::op::Op;
use crate::ops::shape::any;
use crate::tolerance::Tolerance;

/// `U32` or `I32` indices in `0..size`, repeats allowed.
fn indices(gen: &mut Gen, shape: &[usize], size: usize, signed: bool) -> Input {
    if signed {
        gen.i32s(shape, 0, size as i32)
    } else {
        gen.u32s(shape, 0, size as u32)
    }
}

/// `embedding` of ids of several shapes (0-d included) into tables of every float dtype.
pub fn embedding<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "embedding");
    for dtype in FLOATS {
        for (n, d) in [(10, 6), (1, 3), (32, 16)] {
            for ids in [&[5][..], &[2, 3], &[1, 1], &[]] {
                for signed in [false, true] {
                    let table = h.gen.uniform(&[n, d], -1.0, 1.0, dtype);
                    let ids = indices(&mut h.gen, ids, n, signed);
                    h.check(&Op::Embedding, &[table, ids], Tolerance::EXACT)?;
                }
            }
        }
    }
    Ok(())
}

/// `take_along_axis` on every axis, with fewer, as many and more indices than the axis holds,
/// in every dtype.
pub fn take_along_axis<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "take_along_axis");
    for dtype in ALL_DTYPES {
        for shape in [&[6][..], &[3, 5], &[2, 4, 3]] {
            for axis in 0..shape.len() {
                let size = shape[axis];
                for m in [1, size, size + 2] {
                    let mut ishape = shape.to_vec();
                    ishape[axis] = m;
                    let x = any(&mut h.gen, shape, dtype);
                    let idx = indices(&mut h.gen, &ishape, size, m % 2 == 0);
                    h.check(&Op::TakeAlongAxis(axis), &[x, idx], Tolerance::EXACT)?;
                }
            }
        }
    }
    Ok(())
}

/// Indices of `shape` (the array's shape with `m` along `axis`) that are distinct along every
/// line of `axis`, so the result of a scatter does not depend on write order.
fn distinct_lines(
    gen: &mut Gen,
    shape: &[usize],
    axis: usize,
    size: usize,
    m: usize,
    signed: bool,
) -> Input {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut data = vec![0u32; outer * m * inner];
    for o in 0..outer {
        for i in 0..inner {
            for (j, v) in gen.distinct_indices(size, m).into_iter().enumerate() {
                data[(o * m + j) * inner + i] = v;
            }
        }
    }
    let mut ishape = shape.to_vec();
    ishape[axis] = m;
    if signed {
        Input::i32(&ishape, data.into_iter().map(|v| v as i32).collect())
    } else {
        Input::u32(&ishape, data)
    }
}

/// `scatter` (put_along_axis) on every axis, writing one to all positions of each line, in
/// every dtype.
pub fn scatter<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "scatter");
    for dtype in ALL_DTYPES {
        for shape in [&[6][..], &[3, 5], &[2, 4, 3]] {
            for axis in 0..shape.len() {
                let size: usize = shape[axis];
                for m in [1, size.div_ceil(2), size] {
                    let x = any(&mut h.gen, shape, dtype);
                    let idx = distinct_lines(&mut h.gen, shape, axis, size, m, dtype == DType::I32);
                    let src = any(&mut h.gen, &idx.shape.clone(), dtype);
                    h.check(&Op::Scatter(axis), &[x, idx, src], Tolerance::EXACT)?;
                }
            }
        }
    }
    Ok(())
}
