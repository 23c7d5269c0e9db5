//! The hooks: `write_slice` (in place on backends with mutable storage), `deep_copy` (isolated
//! from later writes) and `eval` / `async_eval` (callable, results unchanged).

use mtp_core::Backend;

use crate::error::SuiteError;
use crate::harness::{Harness, Output, ALL_DTYPES, FLOATS};
use crate::inputs::{Input, Layout};
use crate::op::Op;
use crate::ops::shape::any;
use crate::tolerance::Tolerance;

/// `write_slice` along every axis at random offsets (the whole axis included), in every
/// dtype, into and from non-contiguous arrays too.
pub fn write_slice<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "write_slice");
    for dtype in ALL_DTYPES {
        for shape in [&[8][..], &[4, 6], &[2, 5, 3], &[1, 2, 7, 4]] {
            for axis in 0..shape.len() {
                let size = shape[axis];
                let len = h.gen.below(1, size + 1);
                let start = h.gen.below(0, size - len + 1);
                for (start, len) in [(start, len), (0, size), (size - 1, 1)] {
                    let mut s = shape.to_vec();
                    s[axis] = len;
                    let dst = any(&mut h.gen, shape, dtype);
                    let src = any(&mut h.gen, &s, dtype);
                    let op = Op::WriteSlice { axis, start };
                    h.check(&op, &[dst, src], Tolerance::EXACT)?;
                }
            }
        }
    }
    Ok(())
}

/// `x`, a deep copy of it, `x` after a write, the copy after that write, and the copy after a
/// write of its own followed by `x` again: a deep copy and its original never see each other's
/// writes.
fn deep_copy_story<X: Backend>(
    b: &X,
    x: &Input,
    src: &Input,
    other: &Input,
    axis: usize,
    start: usize,
) -> Result<Vec<Output>, X::Error> {
    let mut original = x.build(b, Layout::Contiguous)?;
    let mut copy = b.deep_copy(&original)?;
    let src = src.build(b, Layout::Contiguous)?;
    let other = other.build(b, Layout::Contiguous)?;
    b.write_slice(&mut original, &src, axis, start)?;
    let mut out = vec![Output::read(b, &original)?, Output::read(b, &copy)?];
    b.write_slice(&mut copy, &other, axis, start)?;
    out.push(Output::read(b, &copy)?);
    out.push(Output::read(b, &original)?);
    Ok(out)
}

/// `deep_copy` equals its source, and later `write_slice`s on either side do not reach the
/// other.
pub fn deep_copy<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "deep_copy");
    for dtype in ALL_DTYPES {
        for shape in [&[6][..], &[3, 4], &[1, 2, 8, 3]] {
            let x = any(&mut h.gen, shape, dtype);
            h.check(&Op::DeepCopy, std::slice::from_ref(&x), Tolerance::EXACT)?;
            let axis = shape.len() - 1;
            let mut s = shape.to_vec();
            s[axis] = 2;
            let src = any(&mut h.gen, &s, dtype);
            let other = any(&mut h.gen, &s, dtype);
            let what = || format!("deep_copy then write_slice on {}", x.describe());
            h.compare_results(
                &what,
                deep_copy_story(backend, &x, &src, &other, axis, 1),
                deep_copy_story(h.reference(), &x, &src, &other, axis, 1),
                Tolerance::EXACT,
            )?;
        }
    }
    Ok(())
}

/// Arrays before and after `eval` / `async_eval` (of nothing, one array, several).
fn eval_story<X: Backend>(b: &X, x: &Input) -> Result<Vec<Output>, X::Error> {
    let a = x.build(b, Layout::Contiguous)?;
    let s = b.softmax(&a, 0)?;
    let t = b.affine(&s, 2.0, 1.0)?;
    b.async_eval(&[&t])?;
    b.eval(&[])?;
    b.async_eval(&[])?;
    b.eval(&[&a, &s, &t])?;
    b.eval(&[&t])?;
    Ok(vec![
        Output::read(b, &a)?,
        Output::read(b, &s)?,
        Output::read(b, &t)?,
    ])
}

/// `eval` and `async_eval` are callable on any list of arrays and change no value.
pub fn eval_and_async_eval<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "eval");
    for dtype in FLOATS {
        let x = h.gen.uniform(&[5, 3], -2.0, 2.0, dtype);
        let what = || format!("eval/async_eval of {}", x.describe());
        h.compare_results(
            &what,
            eval_story(backend, &x),
            eval_story(h.reference(), &x),
            Tolerance::accumulating(dtype),
        )?;
    }
    Ok(())
}
