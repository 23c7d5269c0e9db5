//! Error paths: invalid inputs (mismatched shapes or dtypes, bad axes, out-of-range bounds)
//! must come back as `Err` from the backend — not `Ok`, not a panic. Each invalid call is
//! first confirmed invalid on the reference backend.
//!
//! Only checks that are cheap on every device are required (shapes, axes, dtypes, slice
//! bounds); out-of-range *gather indices* are not, since GPU gathers do not check them.

use mtp_core::{AttentionMask, Backend, BinaryOp, DType, ReduceOp, SortOrder};

use crate::error::SuiteError;
use crate::harness::Harness;
use crate::inputs::Input;
use crate::op::Op;

/// A float input of `shape` (the values do not matter).
fn f(shape: &[usize]) -> Input {
    let n = shape.iter().product();
    Input::float(shape, (0..n).map(|i| i as f32 * 0.1).collect(), DType::F32)
}

/// Shape and dtype mismatches in elementwise, shape, indexing and linear-algebra ops.
pub fn mismatched_shapes_are_errors<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let h = Harness::new(backend, "mismatched_shapes_are_errors");
    let u = Input::u32(&[2, 3], vec![0, 1, 2, 0, 1, 2]);
    let cases: Vec<(Op, Vec<Input>)> = vec![
        (Op::Binary(BinaryOp::Add), vec![f(&[2, 3]), f(&[4])]),
        (Op::Binary(BinaryOp::Mul), vec![f(&[2, 3]), u.clone()]),
        (Op::Reshape(vec![4]), vec![f(&[2, 3])]),
        (Op::Concat(1), vec![f(&[2, 3]), f(&[3, 3])]),
        (Op::Concat(0), vec![f(&[2, 3]), u.clone()]),
        (Op::Matmul, vec![f(&[2, 3]), f(&[4, 5])]),
        (Op::Matmul, vec![f(&[2, 2, 3]), f(&[3, 3, 4])]),
        (Op::Linear, vec![f(&[2, 3]), f(&[4, 5])]),
        (
            Op::GatherLinear,
            vec![f(&[2, 3]), f(&[4, 5, 4]), Input::u32(&[2], vec![0, 1])],
        ),
        (
            Op::GatherLinear,
            vec![f(&[2, 3]), f(&[4, 5, 3]), Input::u32(&[3], vec![0, 1, 2])],
        ),
        (Op::GatherLinear, vec![f(&[2, 3]), f(&[5, 3]), u.clone()]),
        (Op::WhereCond, vec![u.clone(), f(&[4, 3]), f(&[2, 3])]),
        (
            Op::TakeAlongAxis(0),
            vec![f(&[2, 3]), Input::u32(&[2], vec![0, 1])],
        ),
        (Op::WriteSlice { axis: 0, start: 2 }, vec![f(&[4]), f(&[3])]),
        (
            Op::WriteSlice { axis: 1, start: 0 },
            vec![f(&[2, 4]), f(&[3, 2])],
        ),
        (Op::SqueezeLast, vec![f(&[2, 3])]),
    ];
    for (op, inputs) in cases {
        h.check_err(&op, &inputs)?;
    }
    Ok(())
}

/// Axes out of range and slices past the end.
pub fn bad_axes_are_errors<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let h = Harness::new(backend, "bad_axes_are_errors");
    let x = || vec![f(&[2, 3])];
    let cases: Vec<(Op, Vec<Input>)> = vec![
        (Op::Transpose(0, 2), x()),
        (
            Op::Slice {
                axis: 2,
                start: 0,
                len: 1,
            },
            x(),
        ),
        (
            Op::Slice {
                axis: 1,
                start: 2,
                len: 2,
            },
            x(),
        ),
        (Op::Concat(2), vec![f(&[2, 3]), f(&[2, 3])]),
        (Op::Reduce(2, ReduceOp::Sum), x()),
        (Op::Argmax(5), x()),
        (Op::Argsort(2, SortOrder::Ascending), x()),
        (Op::Cumsum(2), x()),
        (Op::Softmax(2), x()),
        (Op::LogSoftmax(3), x()),
    ];
    for (op, inputs) in cases {
        h.check_err(&op, &inputs)?;
    }
    Ok(())
}

/// Invalid arguments of the fused ops: rope on a wrong rank or with too many frequencies,
/// attention with query heads that do not group over the KV heads, `top_k` with `k` of 0 or
/// past the axis.
pub fn fused_argument_errors<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let h = Harness::new(backend, "fused_argument_errors");
    let rope = |n: usize| Op::Rope {
        start: 0,
        inv_freq: vec![1.0; n],
    };
    let attention = Op::Attention {
        mask: AttentionMask::causal(0, 0),
        scale: 1.0,
    };
    let cases: Vec<(Op, Vec<Input>)> = vec![
        (rope(2), vec![f(&[2, 8])]),
        (rope(5), vec![f(&[1, 1, 2, 8])]),
        (
            attention.clone(),
            vec![f(&[1, 3, 2, 4]), f(&[1, 2, 2, 4]), f(&[1, 2, 2, 4])],
        ),
        (
            attention,
            vec![f(&[1, 2, 2, 4]), f(&[1, 2, 2, 8]), f(&[1, 2, 2, 4])],
        ),
        (Op::TopK(0), vec![f(&[2, 3])]),
        (Op::TopK(4), vec![f(&[2, 3])]),
    ];
    for (op, inputs) in cases {
        h.check_err(&op, &inputs)?;
    }
    Ok(())
}

/// Host-side errors: `from_f32` with too few values, `to_vec_u32` of a negative `I32`.
pub fn host_errors<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let h = Harness::new(backend, "host_errors");
    h.expect_err(&|| "from_f32 of 3 values as [2, 2]".into(), || {
        let x = backend.from_f32(&[1.0, 2.0, 3.0], &[2, 2], DType::F32)?;
        backend.to_vec_f32(&x)
    })?;
    h.expect_err(&|| "from_u32 of 5 values as [2, 3]".into(), || {
        let x = backend.from_u32(&[1, 2, 3, 4, 5], &[2, 3])?;
        backend.to_vec_u32(&x)
    })?;
    h.expect_err(&|| "to_vec_u32 of i32 [3, -1]".into(), || {
        let x = backend.from_i32(&[3, -1], &[2])?;
        backend.to_vec_u32(&x)
    })
}
