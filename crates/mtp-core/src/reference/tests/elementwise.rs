//! Binary, unary, compare and where, with broadcasting, on floats and integers.

use super::{arange, assert_close, be, f, i, u, uvals, vals};
use crate::{Backend, BinaryOp, CompareOp, CoreError, CoreResult, DType, UnaryOp};

#[test]
fn broadcast_rank3_against_rank2() -> CoreResult<()> {
    let b = be();
    let x = arange(&[2, 1, 3]);
    let y = f(&[10.0, 20.0, 30.0, 40.0], &[4, 1]);
    let z = b.add(&x, &y)?;
    assert_eq!(b.shape(&z), vec![2, 4, 3]);
    let zv = vals(&z);
    for p in 0..2 {
        for q in 0..4 {
            for r in 0..3 {
                let want = (p * 3 + r) as f32 + 10.0 * (q + 1) as f32;
                assert_eq!(zv[(p * 4 + q) * 3 + r], want);
            }
        }
    }
    // And the other way round (operand order matters for Sub).
    let d = b.sub(&y, &x)?;
    assert_eq!(b.shape(&d), vec![2, 4, 3]);
    assert_eq!(vals(&d)[..3], [10.0, 9.0, 8.0]);
    Ok(())
}

#[test]
fn scalar_operands() -> CoreResult<()> {
    let b = be();
    let x = f(&[1.0, -2.0, 3.0, 4.0], &[2, 2]);
    let two = b.scalar(2.0, DType::F32)?;
    assert_eq!(vals(&b.mul(&x, &two)?), vec![2.0, -4.0, 6.0, 8.0]);
    assert_eq!(vals(&b.div(&two, &x)?), vec![2.0, -1.0, 2.0 / 3.0, 0.5]);
    let ss = b.add(&two, &two)?;
    assert_eq!((b.shape(&ss), vals(&ss)), (vec![], vec![4.0]));
    // A [1] operand broadcasts too.
    assert_eq!(
        vals(&b.sub(&x, &f(&[1.0], &[1]))?),
        vec![0.0, -3.0, 2.0, 3.0]
    );
    Ok(())
}

#[test]
fn float_binary_ops() -> CoreResult<()> {
    let b = be();
    let x = f(&[1.0, -2.0, f32::NAN, 0.5], &[4]);
    let y = f(&[3.0, -5.0, 1.0, 0.0], &[4]);
    assert_eq!(
        vals(&b.binary(&x, &y, BinaryOp::Maximum)?)[..2],
        [3.0, -2.0]
    );
    assert!(vals(&b.binary(&x, &y, BinaryOp::Maximum)?)[2].is_nan());
    assert_eq!(
        vals(&b.binary(&x, &y, BinaryOp::Minimum)?)[..2],
        [1.0, -5.0]
    );
    assert!(vals(&b.binary(&y, &x, BinaryOp::Minimum)?)[2].is_nan());
    assert_eq!(vals(&b.binary(&x, &y, BinaryOp::Div)?)[3], f32::INFINITY);
    assert_eq!(vals(&b.binary(&x, &y, BinaryOp::Sub)?)[..2], [-2.0, 3.0]);
    assert_eq!(vals(&b.affine(&x, 2.0, 1.0)?)[..2], [3.0, -3.0]);
    Ok(())
}

#[test]
fn integer_binary_ops() -> CoreResult<()> {
    let b = be();
    let x = i(&[7, -7, 3, 0], &[4]);
    let y = i(&[2, 2, -2, 5], &[4]);
    assert_eq!(
        vals(&b.binary(&x, &y, BinaryOp::Add)?),
        vec![9.0, -5.0, 1.0, 5.0]
    );
    assert_eq!(
        vals(&b.binary(&x, &y, BinaryOp::Sub)?),
        vec![5.0, -9.0, 5.0, -5.0]
    );
    assert_eq!(
        vals(&b.binary(&x, &y, BinaryOp::Mul)?),
        vec![14.0, -14.0, -6.0, 0.0]
    );
    // Integer division truncates toward zero.
    assert_eq!(
        vals(&b.binary(&x, &y, BinaryOp::Div)?),
        vec![3.0, -3.0, -1.0, 0.0]
    );
    assert_eq!(
        vals(&b.binary(&x, &y, BinaryOp::Maximum)?),
        vec![7.0, 2.0, 3.0, 5.0]
    );
    assert_eq!(
        vals(&b.binary(&x, &y, BinaryOp::Minimum)?),
        vec![2.0, -7.0, -2.0, 0.0]
    );
    let r = b.binary(&x, &y, BinaryOp::Add)?;
    assert_eq!(b.dtype(&r), DType::I32);

    let p = u(&[1, 10, 9], &[3, 1]);
    let q = u(&[2, 3], &[2]);
    let s = b.binary(&p, &q, BinaryOp::Sub)?;
    assert_eq!(b.shape(&s), vec![3, 2]);
    // u32 wraps like the hardware type.
    assert_eq!(uvals(&s), vec![u32::MAX, u32::MAX - 1, 8, 7, 7, 6]);
    assert_eq!(
        uvals(&b.binary(&p, &q, BinaryOp::Div)?),
        vec![0, 0, 5, 3, 4, 3]
    );
    assert!(matches!(
        b.binary(&p, &u(&[0], &[1]), BinaryOp::Div),
        Err(CoreError::InvalidArgument { op: "binary", .. })
    ));
    Ok(())
}

#[test]
fn binary_errors() {
    let b = be();
    let x = arange(&[2, 3]);
    assert!(matches!(
        b.add(&x, &arange(&[4])),
        Err(CoreError::ShapeMismatch { op: "binary", .. })
    ));
    assert!(matches!(
        b.add(&x, &b.cast(&x, DType::BF16).expect("cast")),
        Err(CoreError::DTypeMismatch {
            op: "binary",
            got: DType::BF16,
            ..
        })
    ));
    assert!(matches!(
        b.add(&u(&[1], &[1]), &i(&[1], &[1])),
        Err(CoreError::DTypeMismatch { .. })
    ));
}

#[test]
fn unary_ops() -> CoreResult<()> {
    let b = be();
    let x = f(&[1.0, 4.0, 0.25], &[3]);
    let run = |op| b.unary(&x, op).map(|y| vals(&y));
    assert_eq!(run(UnaryOp::Neg)?, vec![-1.0, -4.0, -0.25]);
    assert_close(
        &run(UnaryOp::Exp)?,
        &[1f32.exp(), 4f32.exp(), 0.25f32.exp()],
        1e-7,
    );
    assert_close(&run(UnaryOp::Log)?, &[0.0, 4f32.ln(), 0.25f32.ln()], 1e-7);
    assert_eq!(run(UnaryOp::Sqrt)?, vec![1.0, 2.0, 0.5]);
    assert_eq!(run(UnaryOp::Rsqrt)?, vec![1.0, 0.5, 2.0]);
    assert_close(
        &run(UnaryOp::Tanh)?,
        &[1f32.tanh(), 4f32.tanh(), 0.25f32.tanh()],
        1e-7,
    );
    assert_eq!(
        vals(&b.unary(&f(&[-3.0, 2.0], &[2]), UnaryOp::Abs)?),
        vec![3.0, 2.0]
    );
    assert!(vals(&b.unary(&f(&[-1.0], &[1]), UnaryOp::Log)?)[0].is_nan());
    assert!(matches!(
        b.unary(&u(&[1], &[1]), UnaryOp::Neg),
        Err(CoreError::DTypeMismatch {
            op: "unary",
            got: DType::U32,
            ..
        })
    ));
    Ok(())
}

#[test]
fn compare_ops() -> CoreResult<()> {
    let b = be();
    let x = f(&[1.0, 2.0, 3.0, f32::NAN], &[4]);
    let y = f(&[2.0], &[1]);
    let run = |p: &_, q: &_, op| b.compare(p, q, op).map(|m| uvals(&m));
    assert_eq!(run(&x, &y, CompareOp::Eq)?, vec![0, 1, 0, 0]);
    assert_eq!(run(&x, &y, CompareOp::Ne)?, vec![1, 0, 1, 1]);
    assert_eq!(run(&x, &y, CompareOp::Lt)?, vec![1, 0, 0, 0]);
    assert_eq!(run(&x, &y, CompareOp::Le)?, vec![1, 1, 0, 0]);
    assert_eq!(run(&x, &y, CompareOp::Gt)?, vec![0, 0, 1, 0]);
    assert_eq!(run(&x, &y, CompareOp::Ge)?, vec![0, 1, 1, 0]);
    // NaN != NaN; a value equals itself.
    assert_eq!(run(&x, &x, CompareOp::Eq)?, vec![1, 1, 1, 0]);
    let m = b.compare(&x, &y, CompareOp::Eq)?;
    assert_eq!(b.dtype(&m), DType::U32);
    // Integers, broadcast [2,1] against [3].
    let p = i(&[-1, 2], &[2, 1]);
    let q = i(&[-1, 0, 2], &[3]);
    let m = b.compare(&p, &q, CompareOp::Gt)?;
    assert_eq!(
        (b.shape(&m), uvals(&m)),
        (vec![2, 3], vec![0, 0, 0, 1, 1, 0])
    );
    assert!(matches!(
        b.compare(&x, &p, CompareOp::Eq),
        Err(CoreError::DTypeMismatch { .. })
    ));
    assert!(matches!(
        b.compare(&x, &arange(&[3]), CompareOp::Eq),
        Err(CoreError::ShapeMismatch { op: "compare", .. })
    ));
    Ok(())
}

#[test]
fn where_broadcasts_all_three() -> CoreResult<()> {
    let b = be();
    let cond = u(&[1, 0, 5], &[3, 1]);
    let a = f(&[1.0, 2.0], &[2]);
    let other = b.scalar(-1.0, DType::F32)?;
    let w = b.where_cond(&cond, &a, &other)?;
    assert_eq!(b.shape(&w), vec![3, 2]);
    assert_eq!(vals(&w), vec![1.0, 2.0, -1.0, -1.0, 1.0, 2.0]);
    // Float condition: NaN and -0.5 are true, 0 is false.
    let fc = f(&[f32::NAN, 0.0, -0.5], &[3]);
    let w = b.where_cond(&fc, &i(&[1, 2, 3], &[3]), &i(&[-1], &[1]))?;
    assert_eq!((b.dtype(&w), vals(&w)), (DType::I32, vec![1.0, -1.0, 3.0]));
    assert!(matches!(
        b.where_cond(&cond, &a, &i(&[0], &[1])),
        Err(CoreError::DTypeMismatch {
            op: "where_cond",
            ..
        })
    ));
    assert!(matches!(
        b.where_cond(&u(&[1, 0, 1, 0], &[4]), &a, &other),
        Err(CoreError::ShapeMismatch {
            op: "where_cond",
            ..
        })
    ));
    Ok(())
}
