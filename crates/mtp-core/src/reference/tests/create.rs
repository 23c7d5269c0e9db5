//! Creation, host reads, casts and half-precision rounding.

use super::{assert_close, be, f, i, u, uvals, vals};
use crate::{Backend, BinaryOp, CoreError, CoreResult, DType, ReduceOp};

#[test]
fn from_data_and_read_back() -> CoreResult<()> {
    let b = be();
    let x = b.from_f32(&[1.5, -2.0, 3.25, 0.0, 7.0, 8.0], &[2, 3], DType::F32)?;
    assert_eq!(b.shape(&x), vec![2, 3]);
    assert_eq!(b.dtype(&x), DType::F32);
    assert_eq!(vals(&x), vec![1.5, -2.0, 3.25, 0.0, 7.0, 8.0]);

    let ids = b.from_u32(&[4, 0, 9], &[3])?;
    assert_eq!(b.dtype(&ids), DType::U32);
    assert_eq!(uvals(&ids), vec![4, 0, 9]);
    assert_eq!(vals(&ids), vec![4.0, 0.0, 9.0]);

    let s = b.from_i32(&[-3, 5], &[2, 1])?;
    assert_eq!(b.dtype(&s), DType::I32);
    assert_eq!(vals(&s), vec![-3.0, 5.0]);

    let scalar = b.from_f32(&[2.5], &[], DType::F32)?;
    assert_eq!(b.shape(&scalar), Vec::<usize>::new());
    assert_eq!(vals(&scalar), vec![2.5]);

    let empty = b.from_f32(&[], &[0, 3], DType::F32)?;
    assert_eq!(vals(&empty), Vec::<f32>::new());
    Ok(())
}

#[test]
fn full_and_scalar() -> CoreResult<()> {
    let b = be();
    assert_eq!(vals(&b.full(&[2, 2], 1.5, DType::F32)?), vec![1.5; 4]);
    assert_eq!(uvals(&b.full(&[3], 3.7, DType::U32)?), vec![3, 3, 3]);
    assert_eq!(vals(&b.full(&[2], -2.9, DType::I32)?), vec![-2.0, -2.0]);
    let s = b.scalar(0.1, DType::BF16)?;
    assert_eq!(b.shape(&s), Vec::<usize>::new());
    assert_eq!(vals(&s), vec![half::bf16::from_f32(0.1).to_f32()]);
    Ok(())
}

#[test]
fn creation_errors() {
    let b = be();
    assert!(matches!(
        b.from_f32(&[1.0, 2.0, 3.0], &[2, 2], DType::F32),
        Err(CoreError::InvalidArgument { op: "from_f32", .. })
    ));
    assert!(matches!(
        b.from_f32(&[1.0], &[1], DType::U32),
        Err(CoreError::DTypeMismatch {
            op: "from_f32",
            got: DType::U32,
            ..
        })
    ));
    assert!(matches!(
        b.from_u32(&[1], &[2]),
        Err(CoreError::InvalidArgument { .. })
    ));
    assert!(matches!(
        b.from_i32(&[1, 2], &[]),
        Err(CoreError::InvalidArgument { .. })
    ));
    assert!(matches!(
        b.full(&[2], -1.0, DType::U32),
        Err(CoreError::InvalidArgument { .. })
    ));
    assert!(matches!(
        b.full(&[2], f32::NAN, DType::I32),
        Err(CoreError::InvalidArgument { .. })
    ));
    assert!(matches!(
        b.full(&[usize::MAX, 2], 0.0, DType::F32),
        Err(CoreError::InvalidArgument { op: "full", .. })
    ));
}

#[test]
fn to_vec_u32_errors() {
    let b = be();
    assert!(matches!(
        b.to_vec_u32(&i(&[1, -1], &[2])),
        Err(CoreError::InvalidArgument {
            op: "to_vec_u32",
            ..
        })
    ));
    assert!(matches!(
        b.to_vec_u32(&f(&[1.0], &[1])),
        Err(CoreError::DTypeMismatch {
            op: "to_vec_u32",
            got: DType::F32,
            ..
        })
    ));
    assert_eq!(uvals(&i(&[0, 7], &[2])), vec![0, 7]);
}

#[test]
fn casts() -> CoreResult<()> {
    let b = be();
    let x = f(&[-1.7, 2.9, 0.5, -0.2], &[2, 2]);
    let xi = b.cast(&x, DType::I32)?;
    assert_eq!(b.dtype(&xi), DType::I32);
    assert_eq!(b.shape(&xi), vec![2, 2]);
    assert_eq!(vals(&xi), vec![-1.0, 2.0, 0.0, 0.0]);
    let xu = b.cast(&f(&[3.99, 0.0], &[2]), DType::U32)?;
    assert_eq!(uvals(&xu), vec![3, 0]);
    let back = b.cast(&i(&[-4, 9], &[2]), DType::F32)?;
    assert_eq!(vals(&back), vec![-4.0, 9.0]);
    assert_eq!(uvals(&b.cast(&i(&[5], &[1]), DType::U32)?), vec![5]);
    assert_eq!(vals(&b.cast(&u(&[5], &[1]), DType::I32)?), vec![5.0]);

    // Errors: negative to U32, NaN to int, too large for I32.
    assert!(matches!(
        b.cast(&f(&[-1.0], &[1]), DType::U32),
        Err(CoreError::InvalidArgument { .. })
    ));
    assert!(matches!(
        b.cast(&f(&[f32::NAN], &[1]), DType::I32),
        Err(CoreError::InvalidArgument { .. })
    ));
    assert!(matches!(
        b.cast(&i(&[-1], &[1]), DType::U32),
        Err(CoreError::InvalidArgument { .. })
    ));
    assert!(matches!(
        b.cast(&u(&[u32::MAX], &[1]), DType::I32),
        Err(CoreError::InvalidArgument { op: "cast", .. })
    ));
    Ok(())
}

#[test]
fn f16_and_bf16_round_on_creation_and_cast() -> CoreResult<()> {
    let b = be();
    // 1 + 2^-11 is halfway between f16 neighbours 1 and 1 + 2^-10: ties to even give 1.
    let tie = 1.0 + 2f32.powi(-11);
    let h = b.from_f32(&[tie, 0.1, 70000.0, 1.0 + 2f32.powi(-10)], &[4], DType::F16)?;
    assert_eq!(b.dtype(&h), DType::F16);
    let hv = vals(&h);
    assert_eq!(hv[0], 1.0);
    assert_eq!(hv[1], 0.099_975_586); // f16 nearest to 0.1
    assert_eq!(hv[2], f32::INFINITY); // beyond f16 max (65504)
    assert_eq!(hv[3], 1.0 + 2f32.powi(-10)); // representable

    // bf16 has 7 mantissa bits: 1 + 2^-8 ties to 1, 1 + 1.5 * 2^-7 ties up to 1 + 2^-6.
    let bf = b.from_f32(
        &[1.0 + 2f32.powi(-8), 1.0 + 1.5 * 2f32.powi(-7), 0.1],
        &[3],
        DType::BF16,
    )?;
    assert_eq!(
        vals(&bf),
        vec![1.0, 1.0 + 2f32.powi(-6), half::bf16::from_f32(0.1).to_f32()]
    );

    // Casting rounds too, and int -> half rounds large integers.
    let c = b.cast(&f(&[0.1, 2049.0], &[2]), DType::F16)?;
    assert_eq!(vals(&c), vec![0.099_975_586, 2048.0]);
    let ci = b.cast(&u(&[257], &[1]), DType::BF16)?;
    assert_eq!(vals(&ci), vec![256.0]);
    assert_eq!(vals(&b.cast(&c, DType::F32)?), vec![0.099_975_586, 2048.0]);
    Ok(())
}

#[test]
fn half_precision_ops_round_their_results() -> CoreResult<()> {
    let b = be();
    let tiny = 2f32.powi(-11);
    for dtype in [DType::F16, DType::BF16] {
        let one = b.from_f32(&[1.0, 1.0], &[2], dtype)?;
        let eps = b.from_f32(&[tiny, 3.0], &[2], dtype)?;
        let sum = b.binary(&one, &eps, BinaryOp::Add)?;
        assert_eq!(b.dtype(&sum), dtype);
        // 1 + 2^-11 is not representable in either: it rounds back to 1.
        assert_eq!(vals(&sum), vec![1.0, 4.0]);
        // 1/3 rounds to the dtype.
        let third = b.binary(&one, &b.full(&[2], 3.0, dtype)?, BinaryOp::Div)?;
        let want = match dtype {
            DType::F16 => half::f16::from_f32(1.0 / 3.0).to_f32(),
            _ => half::bf16::from_f32(1.0 / 3.0).to_f32(),
        };
        assert_eq!(vals(&third), vec![want, want]);
        // Sum reductions round their f64 total once.
        let s = b.reduce(&b.full(&[3], 0.1, dtype)?, 0, ReduceOp::Sum)?;
        let stored = vals(&b.full(&[1], 0.1, dtype)?)[0];
        let total = (f64::from(stored) * 3.0) as f32;
        let want = match dtype {
            DType::F16 => half::f16::from_f32(total).to_f32(),
            _ => half::bf16::from_f32(total).to_f32(),
        };
        assert_close(&vals(&s), &[want], 0.0);
    }
    // In F32 the same sum is exact.
    let one = f(&[1.0], &[1]);
    let eps = f(&[tiny], &[1]);
    assert_eq!(
        vals(&b.binary(&one, &eps, BinaryOp::Add)?),
        vec![1.0 + tiny]
    );
    Ok(())
}
