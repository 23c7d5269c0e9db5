//! Matrix products: 2-D, batched, broadcast, half precision, errors and determinism.

use super::{arange, assert_bitwise, assert_close, be, f, noise, u, vals};
use crate::{Backend, CoreError, CoreResult, DType};

/// Naive matmul of one `[m, k] x [k, n]` pair of row-major matrices, in f64.
fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
            out[i * n + j] = s as f32;
        }
    }
    out
}

#[test]
fn matmul_2d_by_hand() -> CoreResult<()> {
    let b = be();
    let x = f(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let y = f(&[5.0, 6.0, 7.0, 8.0], &[2, 2]);
    let z = b.matmul(&x, &y)?;
    assert_eq!(
        (b.shape(&z), vals(&z)),
        (vec![2, 2], vec![19.0, 22.0, 43.0, 50.0])
    );
    let p = arange(&[2, 3]); // [[0,1,2],[3,4,5]]
    let q = f(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
    let z = b.matmul(&p, &q)?;
    assert_eq!(
        (b.shape(&z), vals(&z)),
        (vec![2, 2], vec![2.0, 3.0, 8.0, 9.0])
    );
    // linear (x @ w^T) goes through transpose + matmul.
    let w = f(&[1.0, 1.0, 1.0, 0.0, 0.0, 2.0], &[2, 3]);
    let l = b.linear(&p, &w)?;
    assert_eq!(
        (b.shape(&l), vals(&l)),
        (vec![2, 2], vec![3.0, 4.0, 12.0, 10.0])
    );
    Ok(())
}

#[test]
fn matmul_batched_3d() -> CoreResult<()> {
    let b = be();
    let (m, k, n) = (2, 3, 4);
    let xd = noise(3 * m * k, 1);
    let yd = noise(3 * k * n, 2);
    let z = b.matmul(&f(&xd, &[3, m, k]), &f(&yd, &[3, k, n]))?;
    assert_eq!(b.shape(&z), vec![3, m, n]);
    let zv = vals(&z);
    for bt in 0..3 {
        let want = naive(
            &xd[bt * m * k..][..m * k],
            &yd[bt * k * n..][..k * n],
            m,
            k,
            n,
        );
        assert_bitwise(&zv[bt * m * n..][..m * n], &want);
    }
    Ok(())
}

#[test]
fn matmul_broadcasts_leading_axes() -> CoreResult<()> {
    let b = be();
    let (m, k, n) = (3, 4, 2);
    // Rank 2 against rank 4: [m, k] x [2, 3, k, n] -> [2, 3, m, n].
    let xd = noise(m * k, 3);
    let yd = noise(6 * k * n, 4);
    let z = b.matmul(&f(&xd, &[m, k]), &f(&yd, &[2, 3, k, n]))?;
    assert_eq!(b.shape(&z), vec![2, 3, m, n]);
    let zv = vals(&z);
    for bt in 0..6 {
        let want = naive(&xd, &yd[bt * k * n..][..k * n], m, k, n);
        assert_bitwise(&zv[bt * m * n..][..m * n], &want);
    }
    // [2, 1, m, k] x [3, k, n] -> [2, 3, m, n]: a varies along axis 0, b along axis 1.
    let xd = noise(2 * m * k, 5);
    let yd = noise(3 * k * n, 6);
    let z = b.matmul(&f(&xd, &[2, 1, m, k]), &f(&yd, &[3, k, n]))?;
    assert_eq!(b.shape(&z), vec![2, 3, m, n]);
    let zv = vals(&z);
    for p in 0..2 {
        for q in 0..3 {
            let want = naive(
                &xd[p * m * k..][..m * k],
                &yd[q * k * n..][..k * n],
                m,
                k,
                n,
            );
            assert_bitwise(&zv[(p * 3 + q) * m * n..][..m * n], &want);
        }
    }
    // Rank 4 against rank 2.
    let z = b.matmul(&f(&yd, &[3, 1, k, n]), &f(&noise(n * 5, 7), &[n, 5]))?;
    assert_eq!(b.shape(&z), vec![3, 1, k, 5]);
    Ok(())
}

#[test]
fn matmul_half_precision_rounds_the_result() -> CoreResult<()> {
    let b = be();
    let xd = noise(2 * 8, 8);
    let yd = noise(8 * 3, 9);
    for dtype in [DType::F16, DType::BF16] {
        let x = b.from_f32(&xd, &[2, 8], dtype)?;
        let y = b.from_f32(&yd, &[8, 3], dtype)?;
        let z = b.matmul(&x, &y)?;
        assert_eq!(b.dtype(&z), dtype);
        let exact = naive(&vals(&x), &vals(&y), 2, 8, 3);
        let want: Vec<f32> = exact
            .iter()
            .map(|&v| match dtype {
                DType::F16 => half::f16::from_f32(v).to_f32(),
                _ => half::bf16::from_f32(v).to_f32(),
            })
            .collect();
        assert_bitwise(&vals(&z), &want);
    }
    Ok(())
}

#[test]
fn matmul_errors() {
    let b = be();
    let x = arange(&[2, 3]);
    assert!(matches!(
        b.matmul(&x, &arange(&[2, 3])),
        Err(CoreError::ShapeMismatch { op: "matmul", .. })
    ));
    assert!(matches!(
        b.matmul(&arange(&[2, 2, 3]), &arange(&[3, 3, 1])),
        Err(CoreError::ShapeMismatch { op: "matmul", .. })
    ));
    assert!(matches!(
        b.matmul(&arange(&[3]), &arange(&[3, 1])),
        Err(CoreError::InvalidArgument { op: "matmul", .. })
    ));
    assert!(matches!(
        b.matmul(&u(&[1, 2], &[1, 2]), &u(&[1, 2], &[2, 1])),
        Err(CoreError::DTypeMismatch { op: "matmul", .. })
    ));
    let xh = b.cast(&x, DType::F16).expect("cast");
    assert!(matches!(
        b.matmul(&x, &b.transpose(&xh, 0, 1).expect("t")),
        Err(CoreError::DTypeMismatch { .. })
    ));
}

#[test]
fn matmul_rows_alone_equal_rows_in_a_batch() -> CoreResult<()> {
    let b = be();
    let (m, k, n) = (5, 37, 19);
    let xd = noise(m * k, 10);
    let w = f(&noise(k * n, 11), &[k, n]);
    let all = vals(&b.matmul(&f(&xd, &[m, k]), &w)?);
    for r in 0..m {
        let alone = vals(&b.matmul(&f(&xd[r * k..][..k], &[1, k]), &w)?);
        assert_bitwise(&all[r * n..][..n], &alone);
    }
    // Close to a naive f64 product as well.
    assert_close(&all, &naive(&xd, &vals(&w), m, k, n), 1e-6);
    Ok(())
}
