//! Reductions, argmax, argsort and cumsum.

use super::{arange, be, f, i, u, uvals, vals};
use crate::{Backend, CoreError, CoreResult, DType, ReduceOp, SortOrder};

#[test]
fn reduce_keeps_the_axis() -> CoreResult<()> {
    let b = be();
    let x = f(&[1.0, 5.0, -2.0, 4.0, 0.0, 3.0], &[2, 3]);
    let run = |axis, op| b.reduce(&x, axis, op).map(|y| (b.shape(&y), vals(&y)));
    assert_eq!(run(1, ReduceOp::Sum)?, (vec![2, 1], vec![4.0, 7.0]));
    assert_eq!(run(0, ReduceOp::Sum)?, (vec![1, 3], vec![5.0, 5.0, 1.0]));
    assert_eq!(
        run(1, ReduceOp::Mean)?,
        (vec![2, 1], vec![4.0 / 3.0, 7.0 / 3.0])
    );
    assert_eq!(run(0, ReduceOp::Mean)?, (vec![1, 3], vec![2.5, 2.5, 0.5]));
    assert_eq!(run(1, ReduceOp::Max)?, (vec![2, 1], vec![5.0, 4.0]));
    assert_eq!(run(0, ReduceOp::Min)?, (vec![1, 3], vec![1.0, 0.0, -2.0]));
    Ok(())
}

#[test]
fn reduce_middle_axis_of_rank3() -> CoreResult<()> {
    let b = be();
    let x = arange(&[2, 3, 2]);
    let s = b.reduce(&x, 1, ReduceOp::Sum)?;
    assert_eq!(b.shape(&s), vec![2, 1, 2]);
    // [0,2,4] [1,3,5] [6,8,10] [7,9,11]
    assert_eq!(vals(&s), vec![6.0, 9.0, 24.0, 27.0]);
    assert_eq!(
        vals(&b.reduce(&x, 1, ReduceOp::Max)?),
        vec![4.0, 5.0, 10.0, 11.0]
    );
    Ok(())
}

#[test]
fn reduce_integers_and_nan() -> CoreResult<()> {
    let b = be();
    let x = i(&[3, -4, 7, 1], &[2, 2]);
    assert_eq!(vals(&b.reduce(&x, 1, ReduceOp::Max)?), vec![3.0, 7.0]);
    assert_eq!(vals(&b.reduce(&x, 0, ReduceOp::Min)?), vec![3.0, -4.0]);
    let s = b.reduce(&x, 0, ReduceOp::Sum)?;
    assert_eq!((b.dtype(&s), vals(&s)), (DType::I32, vec![10.0, -3.0]));
    assert_eq!(
        uvals(&b.reduce(&u(&[1, 0, 1, 1], &[4]), 0, ReduceOp::Sum)?),
        vec![3]
    );
    assert!(matches!(
        b.reduce(&x, 0, ReduceOp::Mean),
        Err(CoreError::DTypeMismatch {
            op: "reduce",
            got: DType::I32,
            ..
        })
    ));
    let n = f(&[1.0, f32::NAN, 3.0], &[3]);
    assert!(vals(&b.reduce(&n, 0, ReduceOp::Max)?)[0].is_nan());
    assert!(vals(&b.reduce(&n, 0, ReduceOp::Min)?)[0].is_nan());
    // Infinities behave: max of all -inf is -inf.
    let m = f(&[f32::NEG_INFINITY, f32::NEG_INFINITY], &[2]);
    assert_eq!(
        vals(&b.reduce(&m, 0, ReduceOp::Max)?),
        vec![f32::NEG_INFINITY]
    );
    Ok(())
}

#[test]
fn reduce_errors() {
    let b = be();
    let x = arange(&[2, 3]);
    assert!(matches!(
        b.reduce(&x, 2, ReduceOp::Sum),
        Err(CoreError::AxisOutOfRange {
            op: "reduce",
            axis: 2,
            rank: 2
        })
    ));
    assert!(matches!(
        b.reduce(
            &b.scalar(1.0, DType::F32).expect("scalar"),
            0,
            ReduceOp::Sum
        ),
        Err(CoreError::AxisOutOfRange { .. })
    ));
    let empty = b.full(&[2, 0], 0.0, DType::F32).expect("empty");
    assert!(matches!(
        b.reduce(&empty, 1, ReduceOp::Max),
        Err(CoreError::InvalidArgument { .. })
    ));
    assert_eq!(
        vals(&b.reduce(&empty, 1, ReduceOp::Sum).expect("sum")),
        vec![0.0, 0.0]
    );
    assert!(matches!(
        b.argmax(&empty, 1),
        Err(CoreError::InvalidArgument { op: "argmax", .. })
    ));
    assert!(matches!(
        b.argmax(&x, 5),
        Err(CoreError::AxisOutOfRange { op: "argmax", .. })
    ));
    assert!(matches!(
        b.argsort(&x, 2, SortOrder::Ascending),
        Err(CoreError::AxisOutOfRange { op: "argsort", .. })
    ));
    assert!(matches!(
        b.cumsum(&x, 2),
        Err(CoreError::AxisOutOfRange { op: "cumsum", .. })
    ));
}

#[test]
fn argmax_first_index_on_ties() -> CoreResult<()> {
    let b = be();
    let x = f(&[1.0, 3.0, 3.0, 2.0, 5.0, 5.0, 5.0, 0.0], &[2, 4]);
    let a = b.argmax(&x, 1)?;
    assert_eq!(
        (b.dtype(&a), b.shape(&a), uvals(&a)),
        (DType::U32, vec![2, 1], vec![1, 0])
    );
    let a0 = b.argmax(&x, 0)?;
    assert_eq!((b.shape(&a0), uvals(&a0)), (vec![1, 4], vec![1, 1, 1, 0]));
    // NaN never wins; an all-NaN line gives 0.
    let n = f(&[f32::NAN, 1.0, 0.0, f32::NAN, f32::NAN, f32::NAN], &[2, 3]);
    assert_eq!(uvals(&b.argmax(&n, 1)?), vec![1, 0]);
    // -inf everywhere: first index.
    assert_eq!(
        uvals(&b.argmax(&f(&[f32::NEG_INFINITY; 3], &[3]), 0)?),
        vec![0]
    );
    assert_eq!(uvals(&b.argmax(&i(&[-5, 9, 9], &[3]), 0)?), vec![1]);
    Ok(())
}

#[test]
fn argsort_is_stable() -> CoreResult<()> {
    let b = be();
    let x = f(&[3.0, 1.0, 2.0, 1.0, 3.0], &[5]);
    let asc = b.argsort(&x, 0, SortOrder::Ascending)?;
    assert_eq!(
        (b.dtype(&asc), uvals(&asc)),
        (DType::U32, vec![1, 3, 2, 0, 4])
    );
    assert_eq!(
        uvals(&b.argsort(&x, 0, SortOrder::Descending)?),
        vec![0, 4, 2, 1, 3]
    );
    // Along axis 0 of a [3, 2] array.
    let y = f(&[2.0, 0.0, 1.0, 0.0, 2.0, -1.0], &[3, 2]);
    assert_eq!(
        uvals(&b.argsort(&y, 0, SortOrder::Ascending)?),
        vec![1, 2, 0, 0, 2, 1]
    );
    assert_eq!(
        uvals(&b.argsort(&y, 0, SortOrder::Descending)?),
        vec![0, 0, 2, 1, 1, 2]
    );
    // NaN goes last in both orders.
    let n = f(&[f32::NAN, 1.0, 2.0], &[3]);
    assert_eq!(
        uvals(&b.argsort(&n, 0, SortOrder::Ascending)?),
        vec![1, 2, 0]
    );
    assert_eq!(
        uvals(&b.argsort(&n, 0, SortOrder::Descending)?),
        vec![2, 1, 0]
    );
    assert_eq!(
        uvals(&b.argsort(&u(&[5, 1, 5, 0], &[4]), 0, SortOrder::Descending)?),
        vec![0, 2, 1, 3]
    );
    Ok(())
}

#[test]
fn cumsum_inclusive() -> CoreResult<()> {
    let b = be();
    let x = f(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let c = b.cumsum(&x, 1)?;
    assert_eq!(
        (b.shape(&c), vals(&c)),
        (vec![2, 3], vec![1.0, 3.0, 6.0, 4.0, 9.0, 15.0])
    );
    assert_eq!(vals(&b.cumsum(&x, 0)?), vec![1.0, 2.0, 3.0, 5.0, 7.0, 9.0]);
    let ci = b.cumsum(&i(&[1, -3, 5], &[3]), 0)?;
    assert_eq!(
        (b.dtype(&ci), vals(&ci)),
        (DType::I32, vec![1.0, -2.0, 3.0])
    );
    // f64 accumulation: 1e8 + 1 - 1e8 style cancellation keeps the small term exactly.
    let big = f(&[16_777_216.0, 1.0, -16_777_216.0], &[3]);
    assert_eq!(vals(&b.cumsum(&big, 0)?)[2], 1.0);
    assert_eq!(vals(&b.reduce(&big, 0, ReduceOp::Sum)?), vec![1.0]);
    Ok(())
}
