//! Direct checks of the MLX backend (the conformance suite in `tests/` covers every op against
//! the reference backend; these pin MLX-specific behaviour). Run with `--test-threads=1`.

use mtp_core::{AttentionMask, Backend, DType};

use crate::{MlxBackend, MlxError};

#[test]
fn softmax_and_argmax_on_cpu() -> crate::Result<()> {
    let b = MlxBackend::cpu();
    assert_eq!(b.name(), "mlx-cpu");
    let x = b.from_f32(&[1.0, 2.0, 3.0], &[1, 3], DType::F32)?;
    let p = b.to_vec_f32(&b.softmax(&x, 1)?)?;
    assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    assert_eq!(b.to_vec_u32(&b.argmax(&x, 1)?)?, vec![2]);
    Ok(())
}

#[test]
fn device_specs() {
    assert!(MlxBackend::from_spec(" CPU ").is_ok());
    assert!(matches!(
        MlxBackend::from_spec("cuda:1"),
        Err(MlxError::UnknownDevice { .. })
    ));
    if !cfg!(target_os = "macos") {
        assert!(matches!(
            MlxBackend::from_spec("metal"),
            Err(MlxError::PlatformUnsupported { .. })
        ));
    }
}

#[test]
fn write_slice_leaves_earlier_clones_alone() -> crate::Result<()> {
    let b = MlxBackend::cpu();
    let mut dst = b.full(&[2, 4], 0.0, DType::F32)?;
    let before = dst.clone();
    let src = b.full(&[2, 2], 1.0, DType::F32)?;
    b.write_slice(&mut dst, &src, 1, 1)?;
    assert_eq!(b.to_vec_f32(&dst)?, vec![0., 1., 1., 0., 0., 1., 1., 0.]);
    assert_eq!(b.to_vec_f32(&before)?, vec![0.0; 8]);
    Ok(())
}

#[test]
fn attention_rows_without_keys_are_zero() -> crate::Result<()> {
    let b = MlxBackend::cpu();
    let q = b.full(&[1, 2, 2, 4], 0.5, DType::F32)?;
    let k = b.full(&[1, 1, 2, 4], 0.25, DType::F32)?;
    let v = b.full(&[1, 1, 2, 4], 2.0, DType::F32)?;
    // Queries at positions 0 and 1, keys at 1 and 2: the first query sees nothing.
    let mask = AttentionMask::causal(0, 1);
    let out = b.to_vec_f32(&b.attention(&q, &k, &v, &mask, 0.5)?)?;
    assert_eq!(out[..4], [0.0; 4]);
    assert!(out[4..8].iter().all(|&o| (o - 2.0).abs() < 1e-6));
    Ok(())
}

#[test]
fn integer_division_truncates_and_rejects_zero() -> crate::Result<()> {
    let b = MlxBackend::cpu();
    let a = b.from_i32(&[7, -7, 7, -7], &[4])?;
    let d = b.from_i32(&[2, 2, -2, -2], &[4])?;
    let q = b.cast(&b.div(&a, &d)?, DType::F32)?;
    assert_eq!(b.to_vec_f32(&q)?, vec![3.0, -3.0, -3.0, 3.0]);
    let z = b.from_i32(&[1, 0, 1, 1], &[4])?;
    assert!(b.div(&a, &z).is_err());
    Ok(())
}
