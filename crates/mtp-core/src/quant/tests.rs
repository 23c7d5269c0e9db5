//! The decoders against gguf-py and MLX (fixtures recorded by `tools/quant_fixtures/record.py`),
//! the quantizer against gguf-py, and the validation errors.

use serde_json::Value;

use super::*;

fn cases(json: &str) -> Vec<Value> {
    let doc: Value = serde_json::from_str(json).expect("fixture JSON");
    doc["cases"].as_array().expect("cases").clone()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn usize_of(v: &Value) -> usize {
    v.as_u64().expect("integer") as usize
}

const GGUF: &str = include_str!("fixtures/gguf_blocks.json");
const MLX: &str = include_str!("fixtures/mlx_affine.json");

#[test]
fn every_gguf_type_dequantizes_bit_for_bit_like_gguf_py() {
    let mut seen = Vec::new();
    for case in cases(GGUF) {
        let ty = GgmlType::from_id(case["id"].as_u64().unwrap() as u32).unwrap();
        assert_eq!(ty.name(), case["type"].as_str().unwrap());
        let (rows, cols) = (usize_of(&case["rows"]), usize_of(&case["cols"]));
        let t = QuantTensor::ggml(ty, rows, cols, hex(case["bytes"].as_str().unwrap())).unwrap();
        let got = t.dequantize();
        let want = floats(&case["expected"]);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{ty} value {i}: {g} vs gguf-py {w}"
            );
        }
        seen.push(ty);
    }
    for ty in ALL_GGML_TYPES.iter().filter(|t| t.is_quantized()) {
        // Q8_K has no gguf-py implementation (nor a candle decoder): see the size-table test.
        assert!(
            seen.contains(ty) || *ty == GgmlType::Q8K,
            "no fixture for {ty}"
        );
    }
}

#[test]
fn q8_0_and_q4_0_quantize_bit_for_bit_like_gguf_py() {
    for case in cases(GGUF) {
        let name = case["type"].as_str().unwrap();
        let scheme = match name {
            "Q8_0" => QuantScheme::Q8,
            "Q4_0" => QuantScheme::Q4,
            _ => continue,
        };
        let (rows, cols) = (usize_of(&case["rows"]), usize_of(&case["cols"]));
        let t = scheme
            .quantize(&floats(&case["input"]), rows, cols)
            .unwrap();
        assert_eq!(
            t.data(),
            hex(case["bytes"].as_str().unwrap()).as_slice(),
            "{name}"
        );
    }
}

#[test]
fn rows_decode_alone_like_the_whole_tensor() {
    for case in cases(GGUF) {
        let ty = GgmlType::from_id(case["id"].as_u64().unwrap() as u32).unwrap();
        let (rows, cols) = (usize_of(&case["rows"]), usize_of(&case["cols"]));
        let t = QuantTensor::ggml(ty, rows, cols, hex(case["bytes"].as_str().unwrap())).unwrap();
        let all = t.dequantize();
        let picked = t.dequantize_rows(&[1, 0, 1]).unwrap();
        assert_eq!(&picked[..cols], &all[cols..]);
        assert_eq!(&picked[cols..2 * cols], &all[..cols]);
        assert!(matches!(
            t.dequantize_rows(&[rows]),
            Err(QuantError::RowOutOfRange { .. })
        ));
    }
}

#[test]
fn mlx_affine_dequantizes_like_mlx() {
    for case in cases(MLX) {
        let bits = case["bits"].as_u64().unwrap() as u32;
        let group = usize_of(&case["group_size"]);
        let (rows, cols) = (usize_of(&case["rows"]), usize_of(&case["cols"]));
        let words: Vec<u32> = case["words"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_u64().unwrap() as u32)
            .collect();
        let params = AffineParams::new(bits, group).unwrap();
        let t = QuantTensor::affine(
            params,
            rows,
            cols,
            &words,
            floats(&case["scales"]),
            floats(&case["biases"]),
        )
        .unwrap();
        let got = t.dequantize();
        let want = floats(&case["expected"]);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // MLX may fuse `scale * q + bias` (one rounding instead of two).
            let tol = 1e-6 * w.abs().max(1.0);
            assert!((g - w).abs() <= tol, "{params} value {i}: {g} vs mlx {w}");
        }
        // x @ Wᵀ with the dequantized weight against mlx.quantized_matmul.
        let x = floats(&case["x"]);
        let y = floats(&case["y"]);
        let n = usize_of(&case["x_rows"]);
        for r in 0..n {
            for o in 0..rows {
                let dot: f32 = (0..cols).map(|k| x[r * cols + k] * got[o * cols + k]).sum();
                let want = y[r * rows + o];
                assert!(
                    (dot - want).abs() <= 1e-4 * want.abs().max(1.0),
                    "{params} y[{r},{o}]"
                );
            }
        }
    }
}

#[test]
fn ggml_blocks_map_to_affine_groups() {
    for case in cases(GGUF) {
        let ty = GgmlType::from_id(case["id"].as_u64().unwrap() as u32).unwrap();
        let (rows, cols) = (usize_of(&case["rows"]), usize_of(&case["cols"]));
        let t = QuantTensor::ggml(ty, rows, cols, hex(case["bytes"].as_str().unwrap())).unwrap();
        let Some(a) = ggml_to_affine(&t) else {
            assert!(!matches!(
                ty,
                GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0
            ));
            continue;
        };
        for (x, y) in a.dequantize().iter().zip(t.dequantize()) {
            assert!((x - y).abs() <= 1e-6 * y.abs().max(1.0), "{ty}: {x} vs {y}");
        }
    }
}

#[test]
fn quantize_q8_and_q4_stay_within_their_steps() {
    let values: Vec<f32> = (0..4 * 64)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
        .collect();
    for (scheme, rel) in [(QuantScheme::Q8, 0.5 / 127.0), (QuantScheme::Q4, 1.0 / 8.0)] {
        let t = scheme.quantize(&values, 4, 64).unwrap();
        let back = t.dequantize();
        for block in 0..values.len() / 32 {
            let span = block * 32..(block + 1) * 32;
            let amax = values[span.clone()]
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()));
            for i in span {
                // Q8_0: half a step (amax / 254). Q4_0: q - 8 spans [-8, 7] steps of amax / 8,
                // so the side opposite the largest weight clips by up to one step. Plus the f16
                // rounding of the scale.
                let tol = amax * rel * 1.01 + amax * 1e-3;
                assert!((back[i] - values[i]).abs() <= tol, "{scheme} {i}");
            }
        }
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let unknown = GgmlType::from_id(99).unwrap_err();
    assert!(
        unknown
            .to_string()
            .contains("unknown GGML tensor type id 99"),
        "{unknown}"
    );
    // Block bytes that do not match the shape.
    let short = QuantTensor::ggml(GgmlType::Q4K, 2, 256, vec![0; 144]).unwrap_err();
    assert!(short.to_string().contains("144 bytes"), "{short}");
    let ragged = QuantTensor::ggml(GgmlType::Q8_0, 1, 40, vec![0; 68]).unwrap_err();
    assert!(
        ragged
            .to_string()
            .contains("whole number of 32-weight blocks"),
        "{ragged}"
    );
    assert!(GgmlType::Q4_0.tensor_bytes(usize::MAX, 64).is_err());
    // Affine: bad bits, bad group, sizes that do not match.
    assert!(AffineParams::new(3, 64)
        .unwrap_err()
        .to_string()
        .contains("bits"));
    assert!(AffineParams::new(4, 48)
        .unwrap_err()
        .to_string()
        .contains("group_size"));
    let p = AffineParams::new(4, 32).unwrap();
    let words = vec![0u32; 8];
    assert!(QuantTensor::affine(p, 1, 64, &words, vec![0.0; 2], vec![0.0; 2]).is_ok());
    let e = QuantTensor::affine(p, 1, 64, &words[..7], vec![0.0; 2], vec![0.0; 2]).unwrap_err();
    assert!(e.to_string().contains("7 packed words, expected 8"), "{e}");
    let e = QuantTensor::affine(p, 1, 64, &words, vec![0.0; 3], vec![0.0; 2]).unwrap_err();
    assert!(e.to_string().contains("3 scales"), "{e}");
    let e = QuantTensor::affine(p, 1, 60, &words, vec![0.0; 2], vec![0.0; 2]).unwrap_err();
    assert!(e.to_string().contains("32-weight groups"), "{e}");
    // The quantizer: only Q8_0/Q4_0, whole blocks, matching value counts.
    assert!(quantize_ggml(GgmlType::Q4K, &[0.0; 256], 1, 256).is_err());
    assert!(QuantScheme::Q8.quantize(&[0.0; 31], 1, 32).is_err());
    assert_eq!(QuantScheme::parse("Q8"), Some(QuantScheme::Q8));
    assert_eq!(QuantScheme::parse("q3"), None);
}

#[test]
fn the_size_table_matches_ggml() {
    // ggml.c type_traits: (block size, type size).
    let table = [
        (GgmlType::Q4_0, 32, 18),
        (GgmlType::Q4_1, 32, 20),
        (GgmlType::Q5_0, 32, 22),
        (GgmlType::Q5_1, 32, 24),
        (GgmlType::Q8_0, 32, 34),
        (GgmlType::Q2K, 256, 84),
        (GgmlType::Q3K, 256, 110),
        (GgmlType::Q4K, 256, 144),
        (GgmlType::Q5K, 256, 176),
        (GgmlType::Q6K, 256, 210),
        (GgmlType::Q8K, 256, 292),
    ];
    for (ty, bs, bb) in table {
        assert_eq!((ty.block_size(), ty.block_bytes()), (bs, bb), "{ty}");
        assert_eq!(GgmlType::from_id(ty.id()).unwrap(), ty);
    }
    // Q8_K: w = d q.
    let mut block = vec![0u8; 292];
    block[..4].copy_from_slice(&0.5f32.to_le_bytes());
    block[4] = 3;
    block[5] = (-4i8) as u8;
    let t = QuantTensor::ggml(GgmlType::Q8K, 1, 256, block).unwrap();
    assert_eq!(&t.dequantize()[..3], &[1.5, -2.0, 0.0]);
}

#[test]
fn the_default_hooks_dequantize_exactly() {
    use crate::reference::ReferenceBackend;
    use crate::{Backend, DType};
    use std::sync::Arc;

    let b = ReferenceBackend::new();
    let values: Vec<f32> = (0..3 * 64)
        .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
        .collect();
    let t = Arc::new(QuantScheme::Q4.quantize(&values, 3, 64).unwrap());
    let dense = t.dequantize();
    let w = b.quant_weight(t.clone(), DType::F32).unwrap();
    let x: Vec<f32> = (0..2 * 64).map(|i| (i as f32 * 0.1).cos()).collect();
    let xa = b.from_f32(&x, &[1, 2, 64], DType::F32).unwrap();
    let got = b.to_vec_f32(&b.quant_linear(&xa, &w).unwrap()).unwrap();
    let want = b
        .to_vec_f32(
            &b.linear(&xa, &b.from_f32(&dense, &[3, 64], DType::F32).unwrap())
                .unwrap(),
        )
        .unwrap();
    assert_eq!(got, want);
    let ids = b.from_u32(&[2, 0], &[1, 2]).unwrap();
    let rows = b.quant_embedding(&w, &ids, DType::F32).unwrap();
    assert_eq!(b.shape(&rows), vec![1, 2, 64]);
    let rows = b.to_vec_f32(&rows).unwrap();
    assert_eq!(&rows[..64], &dense[128..]);
    assert_eq!(&rows[64..], &dense[..64]);
    let bad = b.from_u32(&[3], &[1]).unwrap();
    assert!(b.quant_embedding(&w, &bad, DType::F32).is_err());
    let short = b.from_f32(&[0.0; 32], &[1, 32], DType::F32).unwrap();
    assert!(b.quant_linear(&short, &w).is_err());
}
