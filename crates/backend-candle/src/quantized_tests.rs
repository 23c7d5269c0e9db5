//! candle's quantized kernels against mtp-core's exact decoders (the oracle, itself checked
//! against gguf-py in mtp-core): dequantization bit for bit, `QMatMul` within a stated
//! tolerance, embedding rows exactly.

use std::sync::Arc;

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::Device;
use mtp_core::quant::{AffineParams, GgmlType, QuantScheme, QuantTensor, ALL_GGML_TYPES};
use mtp_core::reference::ReferenceBackend;
use mtp_core::{Backend, DType};

use super::quantized::ggml_dtype;
use crate::{CandleBackend, CandleError};

type TestResult = Result<(), CandleError>;

/// A small deterministic generator.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next() % 2001) as f32 / 1000.0 - 1.0
    }
}

/// Byte offsets of the `f16` scales inside one block (`f32` for Q8_K), which random bytes must
/// not turn into infinities or NaNs.
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q3K => &[108],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q6K => &[208],
        _ => &[],
    }
}

/// Random valid blocks of `ty` for a `[rows, cols]` tensor.
pub(crate) fn random_tensor(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> QuantTensor {
    let mut rng = Rng(seed | 1);
    let blocks = rows * cols / ty.block_size();
    let mut data = Vec::with_capacity(blocks * ty.block_bytes());
    for _ in 0..blocks {
        let mut block: Vec<u8> = (0..ty.block_bytes()).map(|_| rng.next() as u8).collect();
        for &at in scale_offsets(ty) {
            let d = half::f16::from_f32(rng.unit() * 0.05).to_le_bytes();
            block[at..at + 2].copy_from_slice(&d);
        }
        if ty == GgmlType::Q8K {
            block[..4].copy_from_slice(&(rng.unit() * 0.01).to_le_bytes());
        }
        data.extend(block);
    }
    QuantTensor::ggml(ty, rows, cols, data).expect("valid sizes")
}

/// The block types candle has kernels for (all but Q8_K, which it cannot decode; weights of that
/// type run dense).
fn quantized_types() -> impl Iterator<Item = GgmlType> {
    ALL_GGML_TYPES
        .into_iter()
        .filter(|t| t.is_quantized() && *t != GgmlType::Q8K)
}

#[test]
fn candle_dequantizes_every_type_like_the_oracle() -> TestResult {
    for ty in quantized_types() {
        let t = random_tensor(ty, 3, 512, 7 + u64::from(ty.id()));
        let q = qtensor_from_ggml(ggml_dtype(ty), t.data(), t.shape().to_vec(), &Device::Cpu)?;
        let theirs = q
            .dequantize(&Device::Cpu)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let ours = t.dequantize();
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1e-3),
                "{ty} value {i}: ours {a}, candle {b}"
            );
        }
    }
    Ok(())
}

/// `max |a - b| / max |b|`.
pub(crate) fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// candle's quantized matmul rounds the activations to 8 bits per block (Q8_0 / Q8_K, as ggml
/// does), so it matches the dequantized oracle only to about 1 % of the output range.
pub(crate) const QMATMUL_TOLERANCE: f32 = 2e-2;

#[test]
fn qmatmul_matches_the_dequantized_oracle_per_type() -> TestResult {
    let (cb, rb) = (CandleBackend::cpu(), ReferenceBackend::new());
    let mut rng = Rng(99);
    for ty in quantized_types() {
        let (out, inp) = (8, 512);
        let t = Arc::new(random_tensor(ty, out, inp, 31 + u64::from(ty.id())));
        let x: Vec<f32> = (0..3 * inp).map(|_| rng.unit()).collect();
        let cw = cb.quant_weight(t.clone(), DType::F32)?;
        assert!(cw.uses_quantized_kernel(), "{ty}");
        let got =
            cb.to_vec_f32(&cb.quant_linear(&cb.from_f32(&x, &[1, 3, inp], DType::F32)?, &cw)?)?;
        let rw = rb.quant_weight(t, DType::F32)?;
        let want =
            rb.to_vec_f32(&rb.quant_linear(&rb.from_f32(&x, &[1, 3, inp], DType::F32)?, &rw)?)?;
        let err = rel_err(&got, &want);
        eprintln!("{ty}: QMatMul vs dequantized oracle, rel err {err:.2e}");
        assert!(err < QMATMUL_TOLERANCE, "{ty}: rel err {err}");
    }
    Ok(())
}

#[test]
fn quantized_embedding_rows_equal_the_dequantized_rows() -> TestResult {
    let cb = CandleBackend::cpu();
    for ty in quantized_types().chain([GgmlType::Q8K]) {
        let t = Arc::new(random_tensor(ty, 6, 256, 5 + u64::from(ty.id())));
        let w = cb.quant_weight(t.clone(), DType::F32)?;
        let ids = cb.from_u32(&[4, 0, 4, 5], &[2, 2])?;
        let rows = cb.quant_embedding(&w, &ids, DType::F32)?;
        assert_eq!(cb.shape(&rows), vec![2, 2, 256]);
        let want = t.dequantize_rows(&[4, 0, 4, 5]).expect("rows");
        assert_eq!(cb.to_vec_f32(&rows)?, want, "{ty}");
        let bad = cb.from_u32(&[6], &[1])?;
        assert!(
            cb.quant_embedding(&w, &bad, DType::F32).is_err(),
            "{ty}: id 6 of 6 rows"
        );
    }
    Ok(())
}

#[test]
fn the_host_tensor_of_a_weight_is_its_bytes_and_shared_where_held() -> TestResult {
    let cb = CandleBackend::cpu();
    for ty in quantized_types() {
        let t = Arc::new(random_tensor(ty, 40, 512, 9 + u64::from(ty.id())));
        let w = cb.quant_weight(t.clone(), DType::F32)?;
        let source = cb.quant_source(&w);
        assert_eq!(source.data(), t.data(), "{ty}");
        // Kept or held beside an interleaved K-quant copy: the same allocation, not a copy.
        // (Only an interleaved 32-weight copy, which dropped the tensor, rebuilds it.)
        let interleaved_32 = matches!(ty, GgmlType::Q8_0 | GgmlType::Q5_0)
            && crate::qmatmul::Simd::Avx2.is_available();
        if !interleaved_32 {
            assert!(
                std::ptr::eq(source.data().as_ptr(), t.data().as_ptr()),
                "{ty}"
            );
        }
    }
    Ok(())
}

#[test]
fn affine_weights_run_dense_and_match_the_oracle() -> TestResult {
    let (cb, rb) = (CandleBackend::cpu(), ReferenceBackend::new());
    let params = AffineParams::new(4, 32).expect("params");
    let words: Vec<u32> = (0..4 * 64 / 8)
        .map(|i| 0x9e37_79b9u32.wrapping_mul(i + 1))
        .collect();
    let scales = vec![0.01, -0.02, 0.03, 0.015, 0.02, 0.01, -0.01, 0.05];
    let biases = vec![-0.1, 0.2, 0.0, 0.05, -0.05, 0.1, 0.3, -0.2];
    let t = Arc::new(QuantTensor::affine(params, 4, 64, &words, scales, biases).expect("affine"));
    let x: Vec<f32> = (0..2 * 64).map(|i| (i as f32 * 0.37).sin()).collect();
    let cw = cb.quant_weight(t.clone(), DType::F32)?;
    assert!(!cw.uses_quantized_kernel());
    let got = cb.to_vec_f32(&cb.quant_linear(&cb.from_f32(&x, &[2, 64], DType::F32)?, &cw)?)?;
    let rw = rb.quant_weight(t, DType::F32)?;
    let want = rb.to_vec_f32(&rb.quant_linear(&rb.from_f32(&x, &[2, 64], DType::F32)?, &rw)?)?;
    assert!(rel_err(&got, &want) < 1e-5);
    Ok(())
}

#[test]
fn q8_at_load_then_qmatmul_stays_near_the_dense_product() -> TestResult {
    let cb = CandleBackend::cpu();
    let mut rng = Rng(3);
    let (out, inp) = (16, 256);
    let w: Vec<f32> = (0..out * inp).map(|_| rng.unit()).collect();
    let x: Vec<f32> = (0..inp).map(|_| rng.unit()).collect();
    let dense = cb.linear(
        &cb.from_f32(&x, &[1, inp], DType::F32)?,
        &cb.from_f32(&w, &[out, inp], DType::F32)?,
    )?;
    for (scheme, tol) in [(QuantScheme::Q8, 1e-2), (QuantScheme::Q4, 1.5e-1)] {
        let t = Arc::new(scheme.quantize(&w, out, inp).expect("quantize"));
        let q = cb.quant_weight(t, DType::F32)?;
        let y = cb.quant_linear(&cb.from_f32(&x, &[1, inp], DType::F32)?, &q)?;
        let err = rel_err(&cb.to_vec_f32(&y)?, &cb.to_vec_f32(&dense)?);
        eprintln!("--quantize {scheme}: rel err vs dense {err:.2e}");
        assert!(err < tol, "{scheme}: {err}");
    }
    Ok(())
}

#[test]
fn a_shape_mismatch_is_an_error() -> TestResult {
    let cb = CandleBackend::cpu();
    let t = Arc::new(
        QuantScheme::Q8
            .quantize(&[0.5; 64], 2, 32)
            .expect("quantize"),
    );
    let w = cb.quant_weight(t, DType::F32)?;
    let x = cb.from_f32(&[0.0; 16], &[1, 16], DType::F32)?;
    assert!(matches!(cb.quant_linear(&x, &w), Err(CandleError::Core(_))));
    Ok(())
}
