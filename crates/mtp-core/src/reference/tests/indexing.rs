//! Embedding, take_along_axis and scatter.

use super::{arange, be, f, i, u, uvals, vals};
use crate::{Backend, CoreError, CoreResult, DType};

#[test]
fn embedding_rows_for_any_id_shape() -> CoreResult<()> {
    let b = be();
    let table = f(&[0.0, 1.0, 10.0, 11.0, 20.0, 21.0], &[3, 2]);
    let e = b.embedding(&table, &u(&[2, 0, 1, 1], &[2, 2]))?;
    assert_eq!(b.shape(&e), vec![2, 2, 2]);
    assert_eq!(vals(&e), vec![20.0, 21.0, 0.0, 1.0, 10.0, 11.0, 10.0, 11.0]);
    let e = b.embedding(&table, &i(&[1], &[]))?;
    assert_eq!((b.shape(&e), vals(&e)), (vec![2], vec![10.0, 11.0]));
    let h = b.embedding(&b.cast(&table, DType::BF16)?, &u(&[0], &[1]))?;
    assert_eq!(b.dtype(&h), DType::BF16);

    assert!(matches!(
        b.embedding(&table, &u(&[3], &[1])),
        Err(CoreError::IndexOutOfRange {
            op: "embedding",
            index: 3,
            size: 3
        })
    ));
    assert!(matches!(
        b.embedding(&table, &i(&[-1], &[1])),
        Err(CoreError::IndexOutOfRange {
            op: "embedding",
            index: -1,
            size: 3
        })
    ));
    assert!(matches!(
        b.embedding(&table, &f(&[0.0], &[1])),
        Err(CoreError::DTypeMismatch {
            op: "embedding",
            ..
        })
    ));
    assert!(matches!(
        b.embedding(&u(&[1, 2], &[1, 2]), &u(&[0], &[1])),
        Err(CoreError::DTypeMismatch {
            op: "embedding",
            ..
        })
    ));
    assert!(matches!(
        b.embedding(&arange(&[2, 2, 2]), &u(&[0], &[1])),
        Err(CoreError::InvalidArgument {
            op: "embedding",
            ..
        })
    ));
    Ok(())
}

#[test]
fn take_along_axis_1_and_0() -> CoreResult<()> {
    let b = be();
    let x = f(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0], &[2, 3]);
    let t = b.take_along_axis(&x, &u(&[2, 0, 1, 1], &[2, 2]), 1)?;
    assert_eq!(
        (b.shape(&t), vals(&t)),
        (vec![2, 2], vec![30.0, 10.0, 50.0, 50.0])
    );
    let t = b.take_along_axis(&x, &i(&[1, 0, 1], &[1, 3]), 0)?;
    assert_eq!(
        (b.shape(&t), vals(&t)),
        (vec![1, 3], vec![40.0, 20.0, 60.0])
    );
    // Integer data, 3-D, middle axis.
    let y = b.cast(&arange(&[2, 3, 2]), DType::U32)?;
    let t = b.take_along_axis(&y, &u(&[2, 0, 0, 1], &[2, 1, 2]), 1)?;
    assert_eq!(uvals(&t), vec![4, 1, 6, 9]);

    assert!(matches!(
        b.take_along_axis(&x, &u(&[0, 3], &[2, 1]), 1),
        Err(CoreError::IndexOutOfRange {
            op: "take_along_axis",
            index: 3,
            size: 3
        })
    ));
    assert!(matches!(
        b.take_along_axis(&x, &u(&[0, 0, 0], &[3, 1]), 1),
        Err(CoreError::ShapeMismatch {
            op: "take_along_axis",
            ..
        })
    ));
    assert!(matches!(
        b.take_along_axis(&x, &u(&[0, 0], &[2]), 0),
        Err(CoreError::ShapeMismatch { .. })
    ));
    assert!(matches!(
        b.take_along_axis(&x, &f(&[0.0, 0.0], &[2, 1]), 1),
        Err(CoreError::DTypeMismatch { .. })
    ));
    assert!(matches!(
        b.take_along_axis(&x, &u(&[0, 0], &[2, 1]), 2),
        Err(CoreError::AxisOutOfRange { .. })
    ));
    Ok(())
}

#[test]
fn scatter_axis_1_and_0_later_duplicates_win() -> CoreResult<()> {
    let b = be();
    let x = b.full(&[2, 3], 0.0, DType::F32)?;
    let s = b.scatter(
        &x,
        &u(&[2, 0, 1, 1], &[2, 2]),
        &f(&[1.0, 2.0, 3.0, 4.0], &[2, 2]),
        1,
    )?;
    assert_eq!(
        (b.shape(&s), vals(&s)),
        (vec![2, 3], vec![2.0, 0.0, 1.0, 0.0, 4.0, 0.0])
    );
    let s = b.scatter(
        &x,
        &i(&[1, 0, 1], &[1, 3]),
        &f(&[7.0, 8.0, 9.0], &[1, 3]),
        0,
    )?;
    assert_eq!(vals(&s), vec![0.0, 8.0, 0.0, 7.0, 0.0, 9.0]);
    // The input is untouched.
    assert_eq!(vals(&x), vec![0.0; 6]);
    let s = b.scatter(
        &u(&[1, 1, 1], &[3]),
        &u(&[2, 2], &[2]),
        &u(&[5, 6], &[2]),
        0,
    )?;
    assert_eq!(uvals(&s), vec![1, 1, 6]);

    let idx = u(&[0, 1], &[1, 2]);
    assert!(matches!(
        b.scatter(&x, &idx, &f(&[1.0, 2.0, 3.0], &[1, 3]), 1),
        Err(CoreError::ShapeMismatch { op: "scatter", .. })
    ));
    assert!(matches!(
        b.scatter(&x, &idx, &u(&[1, 2], &[1, 2]), 1),
        Err(CoreError::DTypeMismatch { op: "scatter", .. })
    ));
    assert!(matches!(
        b.scatter(&x, &u(&[0, 0, 0, 3], &[2, 2]), &f(&[1.0; 4], &[2, 2]), 1),
        Err(CoreError::IndexOutOfRange {
            op: "scatter",
            index: 3,
            size: 3
        })
    ));
    assert!(matches!(
        b.scatter(&x, &idx, &f(&[1.0, 2.0], &[1, 2]), 0),
        Err(CoreError::ShapeMismatch { op: "scatter", .. })
    ));
    Ok(())
}
