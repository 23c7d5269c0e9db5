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
fn cpu_prefers_f32_for_every_stored_dtype() {
    let b = MlxBackend::cpu();
    for stored in [DType::F32, DType::F16, DType::BF16] {
        assert_eq!(b.preferred_dtype(stored), DType::F32, "{stored}");
    }
}

#[test]
fn weights_keep_their_stored_dtype_and_experts_route_per_row() -> crate::Result<()> {
    let b = MlxBackend::cpu();
    // bf16 bytes stay bf16 (no f32 detour), read exactly.
    let values = [1.5f32, -2.0, 0.125, 3.0, -0.5, 8.0];
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
        .collect();
    let w = b.from_le_bytes(&bytes, DType::BF16, &[2, 3], DType::BF16)?;
    assert_eq!(b.dtype(&w), DType::BF16);
    assert_eq!(b.to_vec_f32(&w)?, values);
    // Two experts [1, 3] (as `[E, out, in]` = [2, 1, 3]); rows 0 and 2 take expert 1.
    let w = b.reshape(&b.cast(&w, DType::F32)?, &[2, 1, 3])?;
    let x = b.from_f32(
        &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        &[3, 3],
        DType::F32,
    )?;
    let ids = b.from_u32(&[1, 0, 1], &[3])?;
    let y = b.to_vec_f32(&b.gather_linear(&x, &w, &ids)?)?;
    assert_eq!(y, vec![3.0, -2.0, 8.0]);
    Ok(())
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

/// MLX's quantized kernels against mtp-core's exact decoders (the reference backend).
mod quantized {
    use std::sync::Arc;

    use mtp_core::quant::{AffineParams, GgmlType, QuantScheme, QuantTensor};
    use mtp_core::reference::ReferenceBackend;
    use mtp_core::{Backend, DType};

    use crate::MlxBackend;

    fn rel_err(a: &[f32], b: &[f32]) -> f32 {
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
        a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
    }

    fn weights(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 % 2003) as f32 / 1001.5) - 1.0)
            .collect()
    }

    fn tensors() -> Vec<(&'static str, QuantTensor)> {
        let (rows, cols) = (8, 256);
        let w = weights(rows * cols);
        let q4 = QuantScheme::Q4.quantize(&w, rows, cols).unwrap();
        let q8 = QuantScheme::Q8.quantize(&w, rows, cols).unwrap();
        let params = AffineParams::new(4, 64).unwrap();
        let words: Vec<u32> = (0..rows * cols / 8)
            .map(|i| 0x9e37_79b9u32.wrapping_mul(i as u32 + 1))
            .collect();
        let scales: Vec<f32> = (0..rows * cols / 64)
            .map(|i| 0.01 + i as f32 * 1e-3)
            .collect();
        let biases: Vec<f32> = (0..rows * cols / 64)
            .map(|i| -0.05 + i as f32 * 2e-3)
            .collect();
        let affine = QuantTensor::affine(params, rows, cols, &words, scales, biases).unwrap();
        // A K-quant: dequantized at load on MLX.
        let mut q6 = vec![0u8; rows * GgmlType::Q6K.block_bytes()];
        for (i, b) in q6.iter_mut().enumerate() {
            *b = (i * 31 % 251) as u8;
        }
        for r in 0..rows {
            let at = r * 210 + 208;
            q6[at..at + 2].copy_from_slice(&[0x1f, 0x21]); // f16 0.01
        }
        let q6 = QuantTensor::ggml(GgmlType::Q6K, rows, cols, q6).unwrap();
        vec![
            ("q4_0", q4),
            ("q8_0", q8),
            ("affine4", affine),
            ("q6_k", q6),
        ]
    }

    #[test]
    fn quantized_matmul_and_rows_match_the_oracle() -> crate::Result<()> {
        let (mb, rb) = (MlxBackend::cpu(), ReferenceBackend::new());
        let x = weights(3 * 256);
        for (tag, t) in tensors() {
            let t = Arc::new(t);
            let mw = mb.quant_weight(t.clone(), DType::F32)?;
            assert_eq!(mw.uses_quantized_kernel(), tag != "q6_k", "{tag}");
            let got =
                mb.to_vec_f32(&mb.quant_linear(&mb.from_f32(&x, &[1, 3, 256], DType::F32)?, &mw)?)?;
            let rw = rb.quant_weight(t.clone(), DType::F32).unwrap();
            let xr = rb.from_f32(&x, &[1, 3, 256], DType::F32).unwrap();
            let want = rb.to_vec_f32(&rb.quant_linear(&xr, &rw).unwrap()).unwrap();
            let err = rel_err(&got, &want);
            eprintln!("{tag}: MLX quantized_matmul vs dequantized oracle, rel err {err:.2e}");
            assert!(err < 1e-5, "{tag}: {err}");
            let ids = mb.from_u32(&[5, 0, 7], &[1, 3])?;
            let rows = mb.to_vec_f32(&mb.quant_embedding(&mw, &ids, DType::F32)?)?;
            let want_rows = t.dequantize_rows(&[5, 0, 7]).unwrap();
            assert!(rel_err(&rows, &want_rows) < 1e-6, "{tag}: rows");
        }
        Ok(())
    }
}
