//! The trait's default fused ops on the reference backend: softmax, log_softmax, rms_norm,
//! gelu_tanh, rope and top_k (attention has its own file).

use super::{assert_close, be, f, noise, uvals, vals};
use crate::{Backend, CoreError, CoreResult, DType};

#[test]
fn softmax_matches_the_formula() -> CoreResult<()> {
    let b = be();
    let data = [1.0, 2.0, 3.0, -1.0, 0.0, 1000.0, 5.0, 5.0, 5.0];
    let x = f(&data, &[3, 3]);
    let s = vals(&b.softmax(&x, 1)?);
    for r in 0..3 {
        let row = &data[r * 3..][..3];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f64> = row.iter().map(|&v| f64::from(v - max).exp()).collect();
        let z: f64 = e.iter().sum();
        let want: Vec<f32> = e.iter().map(|v| (v / z) as f32).collect();
        assert_close(&s[r * 3..][..3], &want, 1e-6);
        let total: f32 = s[r * 3..][..3].iter().sum();
        assert!((total - 1.0).abs() < 1e-6, "row {r} sums to {total}");
    }
    // Along axis 0.
    let s0 = vals(&b.softmax(&f(&[0.0, 0.0, 2f32.ln(), 0.0], &[2, 2]), 0)?);
    assert_close(&s0, &[1.0 / 3.0, 0.5, 2.0 / 3.0, 0.5], 1e-6);

    let ls = vals(&b.log_softmax(&x, 1)?);
    let want: Vec<f32> = s[..3].iter().map(|v| v.ln()).collect();
    assert_close(&ls[..3], &want, 1e-6);
    assert_close(&ls[3..6], &[-1001.0, -1000.0, 0.0], 1e-6);
    assert_close(&ls[6..], &[-(3f32.ln()); 3], 1e-6);
    Ok(())
}

#[test]
fn rms_norm_with_and_without_weight() -> CoreResult<()> {
    let b = be();
    let (rows, d) = (3, 8);
    let data = noise(rows * d, 20);
    let weight = noise(d, 21);
    let eps = 1e-6;
    let x = f(&data, &[rows, d]);
    let plain = vals(&b.rms_norm(&x, None, eps)?);
    let scaled = vals(&b.rms_norm(&x, Some(&f(&weight, &[d])), eps)?);
    for r in 0..rows {
        let row = &data[r * d..][..d];
        let ms: f64 = row
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            / d as f64;
        let inv = 1.0 / (ms + f64::from(eps)).sqrt();
        let want: Vec<f32> = row.iter().map(|&v| (f64::from(v) * inv) as f32).collect();
        assert_close(&plain[r * d..][..d], &want, 1e-6);
        let want_w: Vec<f32> = want.iter().zip(&weight).map(|(&v, &w)| v * w).collect();
        assert_close(&scaled[r * d..][..d], &want_w, 1e-6);
    }
    assert!(matches!(
        b.rms_norm(&b.scalar(1.0, DType::F32)?, None, eps),
        Err(CoreError::AxisOutOfRange { op: "rms_norm", .. })
    ));
    Ok(())
}

#[test]
fn gelu_tanh_at_known_points() -> CoreResult<()> {
    let b = be();
    let x = f(&[0.0, 1.0, -1.0, 2.0, -3.0, 0.5], &[6]);
    let want = [
        0.0,
        0.841_192,
        -0.158_808_01,
        1.954_597_7,
        -0.003_637_392,
        0.345_714,
    ];
    assert_close(&vals(&b.gelu_tanh(&x)?), &want, 2e-6);
    Ok(())
}

/// The direct rope formula on one `[b, h, t, d]` array, in f64.
fn rope_direct(x: &[f32], shape: [usize; 4], start: usize, inv_freq: &[f32]) -> Vec<f32> {
    let [bs, h, t, d] = shape;
    let half = inv_freq.len();
    let mut out = x.to_vec();
    for row in 0..bs * h * t {
        let pos = start + row % t;
        let base = row * d;
        for i in 0..half {
            let angle = f64::from(pos as f32 * inv_freq[i]);
            let (s, c) = angle.sin_cos();
            let (x1, x2) = (f64::from(x[base + i]), f64::from(x[base + i + half]));
            out[base + i] = (x1 * c - x2 * s) as f32;
            out[base + i + half] = (x2 * c + x1 * s) as f32;
        }
    }
    out
}

#[test]
fn rope_full_partial_and_identity() -> CoreResult<()> {
    let b = be();
    let shape = [1, 2, 3, 4];
    let data = noise(24, 30);
    let x = f(&data, &shape);
    let inv_freq = [1.0, 0.1];
    // Full rotation: r = d = 4.
    let y = vals(&b.rope(&x, 5, &inv_freq)?);
    assert_close(&y, &rope_direct(&data, shape, 5, &inv_freq), 1e-5);

    // Partial rotation: d = 6, r = 4; dims 4 and 5 pass through untouched.
    let pshape = [2, 1, 3, 6];
    let pdata = noise(36, 31);
    let p = vals(&b.rope(&f(&pdata, &pshape), 2, &inv_freq)?);
    let want = rope_direct(
        &pdata
            .chunks(6)
            .flat_map(|c| c[..4].to_vec())
            .collect::<Vec<_>>(),
        [2, 1, 3, 4],
        2,
        &inv_freq,
    );
    for row in 0..6 {
        assert_close(&p[row * 6..][..4], &want[row * 4..][..4], 1e-5);
        assert_eq!(p[row * 6 + 4..][..2], pdata[row * 6 + 4..][..2]);
    }

    // Position 0 is the identity (a single step at start 0).
    let one = f(&data[..8], &[1, 2, 1, 4]);
    assert_eq!(vals(&b.rope(&one, 0, &inv_freq)?), data[..8].to_vec());

    assert!(matches!(
        b.rope(&f(&data[..12], &[3, 4]), 0, &inv_freq),
        Err(CoreError::InvalidArgument { op: "rope", .. })
    ));
    assert!(matches!(
        b.rope(&x, 0, &[1.0, 1.0, 1.0]),
        Err(CoreError::InvalidArgument { op: "rope", .. })
    ));
    Ok(())
}

#[test]
fn top_k_values_and_indices() -> CoreResult<()> {
    let b = be();
    let x = f(&[0.1, 0.5, 0.3, 0.5, -1.0, 2.0, 1.0, 0.0], &[2, 4]);
    let (v, idx) = b.top_k(&x, 2)?;
    assert_eq!(b.shape(&v), vec![2, 2]);
    assert_eq!(vals(&v), vec![0.5, 0.5, 2.0, 1.0]);
    assert_eq!(uvals(&idx), vec![1, 3, 1, 2]);
    let (v, idx) = b.top_k(&x, 4)?;
    assert_eq!(vals(&v), vec![0.5, 0.5, 0.3, 0.1, 2.0, 1.0, 0.0, -1.0]);
    assert_eq!(uvals(&idx), vec![1, 3, 2, 0, 1, 2, 3, 0]);
    assert!(matches!(
        b.top_k(&x, 0),
        Err(CoreError::InvalidArgument { op: "top_k", .. })
    ));
    assert!(matches!(
        b.top_k(&x, 5),
        Err(CoreError::InvalidArgument { op: "top_k", .. })
    ));
    Ok(())
}
