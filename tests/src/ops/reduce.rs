//! Reductions and scans: `reduce` (every [`ReduceOp`] on every axis), `argmax` (first index on
//! ties), `argsort` (both orders; distinct values, then ties for stability) and `cumsum`.

use mtp_core::{Backend, DType, ReduceOp, SortOrder};

use crate::error::SuiteError;
use crate::harness::{Harness, FLOATS};
use crate::op::Op;
use crate::tolerance::Tolerance;

/// Every reduction.
pub const REDUCE_OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min];

/// Shapes of the reduction cases (rank 1 to 4, a size-1 axis included).
const SHAPES: [&[usize]; 5] = [&[9], &[4, 6], &[3, 1, 5], &[2, 3, 4, 5], &[1, 40]];

/// `reduce` with every op on every axis, in every float dtype and (except `Mean`) in `U32` and
/// `I32`.
pub fn reduce<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "reduce");
    for op in REDUCE_OPS {
        for shape in SHAPES {
            for axis in 0..shape.len() {
                for dtype in FLOATS {
                    let x = h.gen.uniform(shape, -1.0, 1.0, dtype);
                    let tolerance = match op {
                        ReduceOp::Max | ReduceOp::Min => Tolerance::EXACT,
                        _ => Tolerance::accumulating(dtype),
                    };
                    h.check(&Op::Reduce(axis, op), &[x], tolerance)?;
                }
                if op != ReduceOp::Mean {
                    let u = h.gen.u32s(shape, 0, 1000);
                    h.check(&Op::Reduce(axis, op), &[u], Tolerance::EXACT)?;
                    let i = h.gen.i32s(shape, -1000, 1000);
                    h.check(&Op::Reduce(axis, op), &[i], Tolerance::EXACT)?;
                }
            }
        }
    }
    Ok(())
}

/// `argmax` on every axis, on small integers so ties are frequent: the first index wins.
pub fn argmax<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "argmax");
    for shape in SHAPES {
        for axis in 0..shape.len() {
            for dtype in FLOATS {
                let x = h.gen.small_ints(shape, -2, 2, dtype);
                h.check(&Op::Argmax(axis), &[x], Tolerance::EXACT)?;
                let x = h.gen.distinct(shape, dtype);
                h.check(&Op::Argmax(axis), &[x], Tolerance::EXACT)?;
            }
            let u = h.gen.u32s(shape, 0, 3);
            h.check(&Op::Argmax(axis), &[u], Tolerance::EXACT)?;
        }
    }
    Ok(())
}

/// `argsort` in both orders on every axis, on distinct values.
pub fn argsort<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "argsort");
    for shape in SHAPES {
        for axis in 0..shape.len() {
            for order in [SortOrder::Ascending, SortOrder::Descending] {
                for dtype in FLOATS {
                    let x = h.gen.distinct(shape, dtype);
                    h.check(&Op::Argsort(axis, order), &[x], Tolerance::EXACT)?;
                }
                let u = h
                    .gen
                    .distinct_indices(shape.iter().product(), shape.iter().product());
                let u = crate::inputs::Input::u32(shape, u);
                h.check(&Op::Argsort(axis, order), &[u], Tolerance::EXACT)?;
            }
        }
    }
    Ok(())
}

/// `argsort` is stable: equal values keep their index order, in both orders.
pub fn argsort_is_stable<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "argsort_is_stable");
    for shape in [&[12][..], &[3, 10], &[6, 2, 3]] {
        for axis in 0..shape.len() {
            for order in [SortOrder::Ascending, SortOrder::Descending] {
                for dtype in [DType::F32, DType::BF16] {
                    let x = h.gen.small_ints(shape, -1, 1, dtype);
                    h.check(&Op::Argsort(axis, order), &[x], Tolerance::EXACT)?;
                }
            }
        }
    }
    Ok(())
}

/// `cumsum` (inclusive) on every axis, floats and integers.
pub fn cumsum<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "cumsum");
    for shape in SHAPES {
        for axis in 0..shape.len() {
            for dtype in FLOATS {
                let x = h.gen.uniform(shape, -1.0, 1.0, dtype);
                h.check(&Op::Cumsum(axis), &[x], Tolerance::accumulating(dtype))?;
            }
            let u = h.gen.u32s(shape, 0, 1000);
            h.check(&Op::Cumsum(axis), &[u], Tolerance::EXACT)?;
            let i = h.gen.i32s(shape, -1000, 1000);
            h.check(&Op::Cumsum(axis), &[i], Tolerance::EXACT)?;
        }
    }
    Ok(())
}
