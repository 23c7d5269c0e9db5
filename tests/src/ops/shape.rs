//! Shape ops: `reshape`, `transpose`, `slice`, `concat`, and the derived `squeeze_last`, in
//! every dtype (they move values, so results must be exact).

use mtp_core::{Backend, DType};

use crate::error::SuiteError;
use crate::harness::{Harness, ALL_DTYPES};
use crate::inputs::{Gen, Input};
use crate::op::Op;
use crate::tolerance::Tolerance;

/// Random values of `dtype` (floats in `[-10, 10)`, integers in a small range).
pub(crate) fn any(gen: &mut Gen, shape: &[usize], dtype: DType) -> Input {
    match dtype {
        DType::U32 => gen.u32s(shape, 0, 1000),
        DType::I32 => gen.i32s(shape, -1000, 1000),
        float => gen.uniform(shape, -10.0, 10.0, float),
    }
}

/// `reshape` between shapes of one element count, to and from 0-d, of every layout (a reshape
/// of a transposed view must reorder nothing).
pub fn reshape<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "reshape");
    let cases: [(&[usize], &[usize]); 7] = [
        (&[2, 3, 4], &[6, 4]),
        (&[2, 3, 4], &[24]),
        (&[6, 4], &[2, 2, 6]),
        (&[4, 6], &[4, 6]),
        (&[1], &[]),
        (&[], &[1, 1]),
        (&[3, 1, 5], &[5, 3]),
    ];
    for dtype in ALL_DTYPES {
        for (from, to) in cases {
            let x = any(&mut h.gen, from, dtype);
            h.check(&Op::Reshape(to.to_vec()), &[x], Tolerance::EXACT)?;
        }
    }
    Ok(())
}

/// `transpose` of every pair of axes (the identity pair included) for ranks 2 to 4.
pub fn transpose<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "transpose");
    for dtype in ALL_DTYPES {
        for shape in [&[3, 5][..], &[2, 3, 4], &[2, 3, 1, 4]] {
            for a in 0..shape.len() {
                for b in a..shape.len() {
                    let x = any(&mut h.gen, shape, dtype);
                    h.check(&Op::Transpose(a, b), &[x], Tolerance::EXACT)?;
                }
            }
        }
    }
    Ok(())
}

/// `slice` along every axis at random bounds, the full axis and an empty slice included.
pub fn slice<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "slice");
    for dtype in ALL_DTYPES {
        for shape in [&[9][..], &[4, 6], &[3, 5, 4]] {
            for axis in 0..shape.len() {
                let size = shape[axis];
                let start = h.gen.below(0, size);
                let len = h.gen.below(1, size - start + 1);
                for (start, len) in [(start, len), (0, size), (size - 1, 1), (start, 0)] {
                    let x = any(&mut h.gen, shape, dtype);
                    h.check(&Op::Slice { axis, start, len }, &[x], Tolerance::EXACT)?;
                }
            }
        }
    }
    Ok(())
}

/// `concat` of one, two and three parts of different lengths along every axis.
pub fn concat<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "concat");
    for dtype in ALL_DTYPES {
        for shape in [&[5][..], &[3, 4], &[2, 3, 4]] {
            for axis in 0..shape.len() {
                for parts in 1..=3 {
                    let inputs: Vec<Input> = (0..parts)
                        .map(|p| {
                            let mut s = shape.to_vec();
                            s[axis] = 1 + (p * 2 + axis) % 3;
                            any(&mut h.gen, &s, dtype)
                        })
                        .collect();
                    h.check(&Op::Concat(axis), &inputs, Tolerance::EXACT)?;
                }
            }
        }
    }
    Ok(())
}

/// `squeeze_last` drops a last axis of size 1.
pub fn squeeze_last<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "squeeze_last");
    for dtype in ALL_DTYPES {
        for shape in [&[1][..], &[4, 1], &[2, 3, 1]] {
            let x = any(&mut h.gen, shape, dtype);
            h.check(&Op::SqueezeLast, &[x], Tolerance::EXACT)?;
        }
    }
    Ok(())
}
