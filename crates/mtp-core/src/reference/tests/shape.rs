//! Reshape, transpose, slice, concat and the default write_slice / deep_copy.

use super::{arange, be, f, i, u, uvals, vals};
use crate::{Backend, CoreError, CoreResult, DType};

#[test]
fn reshape_keeps_row_major_order() -> CoreResult<()> {
    let b = be();
    let x = arange(&[2, 3]);
    let y = b.reshape(&x, &[3, 1, 2])?;
    assert_eq!(b.shape(&y), vec![3, 1, 2]);
    assert_eq!(vals(&y), vals(&x));
    let s = b.reshape(&f(&[4.0], &[1, 1]), &[])?;
    assert_eq!(b.shape(&s), Vec::<usize>::new());
    let ids = b.reshape(&u(&[1, 2, 3, 4], &[4]), &[2, 2])?;
    assert_eq!((b.dtype(&ids), uvals(&ids)), (DType::U32, vec![1, 2, 3, 4]));
    assert!(matches!(
        b.reshape(&x, &[4]),
        Err(CoreError::ShapeMismatch { op: "reshape", .. })
    ));
    Ok(())
}

#[test]
fn transpose_outer_and_inner_axes() -> CoreResult<()> {
    let b = be();
    let x = arange(&[2, 3, 4]);
    let xv = vals(&x);
    let at = |p: usize, q: usize, r: usize| xv[(p * 3 + q) * 4 + r];

    let t02 = b.transpose(&x, 0, 2)?;
    assert_eq!(b.shape(&t02), vec![4, 3, 2]);
    let tv = vals(&t02);
    for r in 0..4 {
        for q in 0..3 {
            for p in 0..2 {
                assert_eq!(tv[(r * 3 + q) * 2 + p], at(p, q, r));
            }
        }
    }

    let t21 = b.transpose(&x, 2, 1)?;
    assert_eq!(b.shape(&t21), vec![2, 4, 3]);
    let tv = vals(&t21);
    for p in 0..2 {
        for r in 0..4 {
            for q in 0..3 {
                assert_eq!(tv[(p * 4 + r) * 3 + q], at(p, q, r));
            }
        }
    }
    // Hand-checked 2-D case, on integers.
    let m = i(&[1, 2, 3, 4, 5, 6], &[2, 3]);
    assert_eq!(
        vals(&b.transpose(&m, 0, 1)?),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    // Same axis: identity.
    assert_eq!(vals(&b.transpose(&x, 1, 1)?), xv);
    assert!(matches!(
        b.transpose(&x, 0, 3),
        Err(CoreError::AxisOutOfRange {
            op: "transpose",
            axis: 3,
            rank: 3
        })
    ));
    Ok(())
}

#[test]
fn slice_middle_axis() -> CoreResult<()> {
    let b = be();
    let x = arange(&[2, 4, 3]);
    let s = b.slice(&x, 1, 1, 2)?;
    assert_eq!(b.shape(&s), vec![2, 2, 3]);
    assert_eq!(
        vals(&s),
        vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0]
    );
    let last = b.slice(&x, 2, 2, 1)?;
    assert_eq!(
        vals(&last),
        vec![2.0, 5.0, 8.0, 11.0, 14.0, 17.0, 20.0, 23.0]
    );
    let empty = b.slice(&x, 0, 2, 0)?;
    assert_eq!(b.shape(&empty), vec![0, 4, 3]);
    assert!(matches!(
        b.slice(&x, 1, 3, 2),
        Err(CoreError::IndexOutOfRange {
            op: "slice",
            index: 5,
            size: 4
        })
    ));
    assert!(matches!(
        b.slice(&x, 1, usize::MAX, 2),
        Err(CoreError::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        b.slice(&x, 3, 0, 1),
        Err(CoreError::AxisOutOfRange { op: "slice", .. })
    ));
    Ok(())
}

#[test]
fn concat_middle_axis() -> CoreResult<()> {
    let b = be();
    let a = arange(&[2, 1, 2]); // [[[0,1]],[[2,3]]]
    let c = b.affine(&arange(&[2, 2, 2]), 1.0, 10.0)?; // 10..17
    let j = b.concat(&[&a, &c], 1)?;
    assert_eq!(b.shape(&j), vec![2, 3, 2]);
    assert_eq!(
        vals(&j),
        vec![0.0, 1.0, 10.0, 11.0, 12.0, 13.0, 2.0, 3.0, 14.0, 15.0, 16.0, 17.0]
    );
    let j0 = b.concat(&[&u(&[1, 2], &[1, 2]), &u(&[3, 4, 5, 6], &[2, 2])], 0)?;
    assert_eq!(
        (b.shape(&j0), uvals(&j0)),
        (vec![3, 2], vec![1, 2, 3, 4, 5, 6])
    );
    let single = b.concat(&[&a], 2)?;
    assert_eq!(vals(&single), vals(&a));

    assert!(matches!(
        b.concat(&[], 0),
        Err(CoreError::InvalidArgument { op: "concat", .. })
    ));
    assert!(matches!(
        b.concat(&[&a, &b.cast(&a, DType::F16)?], 1),
        Err(CoreError::DTypeMismatch {
            op: "concat",
            got: DType::F16,
            ..
        })
    ));
    assert!(matches!(
        b.concat(&[&a, &c], 0),
        Err(CoreError::ShapeMismatch { op: "concat", .. })
    ));
    assert!(matches!(
        b.concat(&[&a, &arange(&[2, 2])], 1),
        Err(CoreError::ShapeMismatch { op: "concat", .. })
    ));
    assert!(matches!(
        b.concat(&[&a, &c], 3),
        Err(CoreError::AxisOutOfRange { .. })
    ));
    Ok(())
}

#[test]
fn default_write_slice_and_deep_copy() -> CoreResult<()> {
    let b = be();
    let mut dst = b.full(&[2, 4], 0.0, DType::F32)?;
    let keep = b.deep_copy(&dst)?;
    b.write_slice(&mut dst, &f(&[1.0, 2.0, 3.0, 4.0], &[2, 2]), 1, 1)?;
    assert_eq!(vals(&dst), vec![0.0, 1.0, 2.0, 0.0, 0.0, 3.0, 4.0, 0.0]);
    assert_eq!(vals(&keep), vec![0.0; 8]);
    let too_long = f(&[1.0; 6], &[2, 3]);
    assert!(matches!(
        b.write_slice(&mut dst, &too_long, 1, 2),
        Err(CoreError::ShapeMismatch {
            op: "write_slice",
            ..
        })
    ));
    Ok(())
}
