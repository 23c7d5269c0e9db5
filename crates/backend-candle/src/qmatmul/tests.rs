//! The batched kernels against the oracles: the reference backend's dequantized matmul (what
//! the model means), the exact product of the dequantized weights with the dequantized
//! quantized activations (what the kernel must compute, up to `f32` summation order), the
//! scalar kernel (for every SIMD kernel this CPU has), and ggml's activation quantizers.

use std::sync::Arc;

use mtp_core::quant::{quantize_ggml, GgmlType, QuantError, QuantTensor, QK_K};
use mtp_core::reference::ReferenceBackend;
use mtp_core::{Backend, DType};

use super::acts::{block_q8_k, quantize_q8_0, quantize_q8_k, BlockQ8K};
use super::{Layout, QMatMulError, QuantMatMul, Simd, SpinPool};
use crate::quantized_tests::{random_tensor, rel_err, Rng, QMATMUL_TOLERANCE};
use crate::CandleBackend;

/// The types with a batched kernel.
const TYPES: [GgmlType; 5] = [
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q4_0,
    GgmlType::Q4K,
    GgmlType::Q6K,
];

/// Activation row counts: single rows, verify widths, prefill chunks; around [`ROW_CHUNK`].
const ROW_COUNTS: [usize; 7] = [1, 2, 5, 8, 9, 17, 32];

/// `w` in every layout its type has.
fn every_layout(w: &Arc<QuantTensor>) -> Vec<QuantMatMul> {
    Layout::ALL
        .into_iter()
        .filter_map(|layout| QuantMatMul::with_layout(w.clone(), layout).ok())
        .collect()
}

fn random_x(n: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed | 1);
    (0..n * cols).map(|_| rng.unit() * 2.0).collect()
}

/// The activations as the kernel sees them: quantized to the dot partner, then decoded exactly.
fn quantized_x(ty: GgmlType, x: &[f32], n: usize, cols: usize) -> Vec<f32> {
    match ty {
        GgmlType::Q4K | GgmlType::Q6K => {
            let bytes: Vec<u8> = quantize_q8_k(x, cols)
                .blocks()
                .iter()
                .flat_map(q8_k_bytes)
                .collect();
            QuantTensor::ggml(GgmlType::Q8K, n, cols, bytes)
                .expect("Q8_K sizes")
                .dequantize()
        }
        _ => quantize_ggml(GgmlType::Q8_0, x, n, cols)
            .expect("Q8_0 sizes")
            .dequantize(),
    }
}

/// A Q8_K block as ggml's `block_q8_K` bytes (`f32` d, 256 quants, 16 `i16` sums).
fn q8_k_bytes(b: &BlockQ8K) -> Vec<u8> {
    let mut out = b.d.to_le_bytes().to_vec();
    out.extend(b.qs.iter().map(|&q| q as u8));
    out.extend(b.bsums.iter().flat_map(|s| s.to_le_bytes()));
    out
}

/// `x @ wᵀ` in `f64`.
fn exact_matmul(x: &[f32], w: &[f32], n: usize, rows: usize, cols: usize) -> Vec<f32> {
    let mut y = vec![0f32; n * rows];
    for j in 0..n {
        for r in 0..rows {
            let dot: f64 = (0..cols)
                .map(|c| f64::from(x[j * cols + c]) * f64::from(w[r * cols + c]))
                .sum();
            y[j * rows + r] = dot as f32;
        }
    }
    y
}

/// Per output, `|a - b| ≤ tol · (Σ |x_c w_c|)`: the error bound of an `f32` dot product
/// relative to its own magnitude, so that small outputs are held to the same standard.
fn assert_close_per_output(got: &[f32], want: &[f32], scale: &[f32], tol: f32, what: &str) {
    for (i, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
        assert!(
            (g - w).abs() <= tol * s.max(1e-6),
            "{what}: output {i}: got {g}, want {w} (scale {s})"
        );
    }
}

#[test]
fn every_type_and_row_count_equals_the_exact_product_of_the_quantized_operands() {
    for (t, ty) in TYPES.into_iter().enumerate() {
        let block = ty.block_size();
        for (k, &n) in ROW_COUNTS.iter().enumerate() {
            // Output rows not a multiple of the row chunk; columns a few blocks.
            let (rows, cols) = (13 + 6 * k, block * (1 + (k + t) % 3));
            let seed = 100 * t as u64 + k as u64;
            let w = Arc::new(random_tensor(ty, rows, cols, seed));
            let x = random_x(n, cols, seed + 7);
            let wd = w.dequantize();
            let want = exact_matmul(&quantized_x(ty, &x, n, cols), &wd, n, rows, cols);
            let abs_w: Vec<f32> = wd.iter().map(|v| v.abs()).collect();
            let abs_x: Vec<f32> = x.iter().map(|v| v.abs()).collect();
            let scale = exact_matmul(&abs_x, &abs_w, n, rows, cols);
            for k in every_layout(&w) {
                for simd in Simd::available() {
                    let got = k.forward_with(&x, n, simd).expect("forward");
                    let what = format!("{ty} {:?} {simd} n={n} [{rows}, {cols}]", k.layout());
                    assert_close_per_output(&got, &want, &scale, 1e-5, &what);
                }
            }
        }
    }
}

#[test]
fn every_type_matches_the_reference_backends_dequantized_matmul() -> crate::Result<()> {
    let (cb, rb) = (CandleBackend::cpu(), ReferenceBackend::new());
    for (t, ty) in TYPES.into_iter().enumerate() {
        let (rows, cols) = (37, 2 * QK_K);
        for (k, &n) in [1usize, 5, 17, 32].iter().enumerate() {
            let w = Arc::new(random_tensor(ty, rows, cols, 40 + t as u64 * 7 + k as u64));
            let x = random_x(n, cols, 3 + k as u64);
            let cw = cb.quant_weight(w.clone(), DType::F32)?;
            assert!(cw.uses_batched_kernel(), "{ty}");
            let got = cb
                .to_vec_f32(&cb.quant_linear(&cb.from_f32(&x, &[1, n, cols], DType::F32)?, &cw)?)?;
            let rw = rb.quant_weight(w, DType::F32)?;
            let want = rb
                .to_vec_f32(&rb.quant_linear(&rb.from_f32(&x, &[1, n, cols], DType::F32)?, &rw)?)?;
            let err = rel_err(&got, &want);
            assert!(err < QMATMUL_TOLERANCE, "{ty} n={n}: rel err {err}");
        }
    }
    Ok(())
}

#[test]
fn random_shapes_agree_between_simd_and_scalar_and_across_thread_counts() {
    let mut rng = Rng(2024);
    for round in 0..12 {
        let ty = TYPES[round % TYPES.len()];
        let n = 1 + (rng.next() % 33) as usize;
        let cols = ty.block_size() * (1 + (rng.next() % 4) as usize);
        // Enough rows for several tasks (tasks stream ≥ 32 KiB of weights), not a multiple of
        // anything.
        let rows = 1 + (rng.next() % 700) as usize;
        let w = Arc::new(random_tensor(ty, rows, cols, rng.next()));
        let x = random_x(n, cols, rng.next());
        for k in every_layout(&w) {
            let layout = k.layout();
            let scalar = k.forward_with(&x, n, Simd::Scalar).expect("scalar");
            for simd in Simd::available() {
                let got = k.forward_with(&x, n, simd).expect("simd");
                if layout == Layout::Interleaved {
                    // One order of operations on every instruction set.
                    assert_eq!(
                        got, scalar,
                        "{ty} interleaved {simd} n={n} [{rows}, {cols}]"
                    );
                }
                assert!(
                    rel_err(&got, &scalar) < 1e-5,
                    "{ty} {layout:?} {simd} n={n} [{rows}, {cols}]: {}",
                    rel_err(&got, &scalar)
                );
            }
            // Each output is computed by one task in a fixed order: any pool size gives the
            // same bits.
            for threads in [1, 3] {
                let pool = SpinPool::new(threads);
                let got = k.forward_in(&x, n, Simd::best(), &pool).expect("forward");
                assert_eq!(
                    got,
                    k.forward(&x, n).expect("forward"),
                    "{ty} {layout:?} {threads} threads"
                );
            }
        }
    }
}

#[test]
fn q8_k_quantizer_follows_ggml() {
    // The value of largest magnitude `max` (the first on ties: -127 before 127) maps to -127
    // (iscale = -127 / max = 1 here); halves round to even (ggml's `nearest_int`), and the
    // sums of 16 are of the quants.
    let mut x = [0f32; QK_K];
    x[3] = -127.0;
    x[4] = 127.0;
    x[10] = 2.5;
    x[11] = 3.5;
    x[12] = -0.5;
    x[20] = 126.5;
    x[40] = -1.25;
    let b = block_q8_k(&x);
    assert_eq!(b.d, 1.0);
    assert_eq!(
        (b.qs[3], b.qs[4], b.qs[10], b.qs[11], b.qs[12]),
        (-127, 127, 2, 4, 0)
    );
    assert_eq!((b.qs[20], b.qs[40]), (126, -1));
    assert_eq!(b.bsums[..3], [6, 126, -1]);
    // With the positive extreme first, the signs flip: iscale = -1.
    let mut x = [0f32; QK_K];
    x[0] = 50.0;
    x[1] = -50.0;
    x[2] = 0.5;
    let b = block_q8_k(&x);
    assert_eq!((b.qs[0], b.qs[1], b.qs[2]), (-127, 127, -1));
    assert_eq!(b.d, -50.0 / 127.0);
    // A zero block is all zeros with d = 0.
    let z = block_q8_k(&[0.0; QK_K]);
    assert!(z.d == 0.0 && z.qs.iter().all(|&q| q == 0) && z.bsums.iter().all(|&s| s == 0));
    // Random blocks: through mtp-core's exact Q8_K decoder the values are within half a step,
    // the extreme is ±127, and the bsums are the sums.
    let x = random_x(3, QK_K, 5);
    let blocks = quantize_q8_k(&x, QK_K);
    let decoded = quantized_x(GgmlType::Q4K, &x, 3, QK_K);
    for (j, b) in blocks.blocks().iter().enumerate() {
        let xs = &x[j * QK_K..][..QK_K];
        let top = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(b.qs.iter().any(|&q| q == -127 || q == 127));
        for (i, &v) in xs.iter().enumerate() {
            let d = decoded[j * QK_K + i];
            assert!((d - v).abs() <= top / 127.0 * 0.5 * 1.0001, "{v} → {d}");
        }
        for (g, &s) in b.bsums.iter().enumerate() {
            assert_eq!(
                i32::from(s),
                b.qs[16 * g..16 * g + 16]
                    .iter()
                    .map(|&q| i32::from(q))
                    .sum::<i32>()
            );
        }
    }
}

#[test]
fn q8_0_activations_are_mtp_cores_quantizer_blocks() {
    let (n, cols) = (4, 96);
    let mut x = random_x(n, cols, 11);
    // Exact halves after scaling (max 127 gives id = 1): 0.5, 1.5, -2.5, ... and a zero row.
    for (i, v) in x[cols..2 * cols].iter_mut().enumerate() {
        *v = if i % 32 == 0 {
            127.0
        } else {
            (i % 9) as f32 - 4.5
        };
    }
    x[2 * cols..3 * cols].fill(0.0);
    let ours = quantize_q8_0(&x, n, cols).expect("sizes");
    let theirs = quantize_ggml(GgmlType::Q8_0, &x, n, cols).expect("sizes");
    for (b, bytes) in ours
        .blocks()
        .iter()
        .zip(theirs.data().chunks_exact(GgmlType::Q8_0.block_bytes()))
    {
        let d = half::f16::from_le_bytes([bytes[0], bytes[1]]).to_f32();
        assert_eq!(b.d.to_bits(), d.to_bits());
        assert_eq!(b.qs.map(|q| q as u8), bytes[2..]);
        assert_eq!(b.us, b.qs.map(|q| (q as u8) ^ 0x80));
        let sum: i32 = b.qs.iter().map(|&q| i32::from(q)).sum();
        assert_eq!(b.minus_128_sum, -128 * sum);
    }
    assert_eq!(ours.row(2).len(), cols / 32);
    assert!(matches!(
        quantize_q8_0(&x[..cols - 1], 1, cols - 1),
        Err(QMatMulError::Quant(_))
    ));
    assert!(matches!(
        quantize_q8_0(&x[..cols], 2, cols),
        Err(QMatMulError::Quant(_))
    ));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let w = Arc::new(random_tensor(GgmlType::Q8_0, 4, 64, 1));
    let k = QuantMatMul::new(w).expect("supported");
    assert_eq!(
        k.forward(&[0.0; 65], 1),
        Err(QMatMulError::InputSize {
            len: 65,
            rows: 1,
            cols: 64
        })
    );
    assert!(matches!(
        k.forward(&[0.0; 64], usize::MAX),
        Err(QMatMulError::InputSize { .. })
    ));
    assert_eq!(k.forward(&[], 0), Ok(vec![]));
    for ty in [GgmlType::Q4_1, GgmlType::Q5K, GgmlType::Q8K, GgmlType::F16] {
        let w = Arc::new(random_tensor(ty, 2, 256, 3));
        assert!(
            matches!(
                QuantMatMul::new(w),
                Err(QMatMulError::UnsupportedFormat { .. })
            ),
            "{ty}"
        );
    }
    if !Simd::Avx2.is_available() {
        assert_eq!(
            k.forward_with(&[0.0; 64], 1, Simd::Avx2),
            Err(QMatMulError::SimdUnavailable { simd: Simd::Avx2 })
        );
    }
}

#[test]
fn the_backend_uses_the_kernel_for_half_inputs_and_embeddings() -> crate::Result<()> {
    let cb = CandleBackend::cpu();
    let w = Arc::new(random_tensor(GgmlType::Q5_0, 10, 64, 9));
    let cw = cb.quant_weight(w.clone(), DType::F32)?;
    let x = random_x(2, 64, 4);
    let f32_out = cb.to_vec_f32(&cb.quant_linear(&cb.from_f32(&x, &[2, 64], DType::F32)?, &cw)?)?;
    let bf = cb.quant_linear(&cb.from_f32(&x, &[2, 64], DType::BF16)?, &cw)?;
    assert_eq!(cb.dtype(&bf), DType::BF16);
    assert_eq!(cb.shape(&bf), vec![2, 10]);
    assert!(rel_err(&cb.to_vec_f32(&bf)?, &f32_out) < 2e-2);
    let rows = cb.quant_embedding(&cw, &cb.from_u32(&[9, 0], &[1, 2])?, DType::F32)?;
    assert_eq!(cb.shape(&rows), vec![1, 2, 64]);
    assert_eq!(
        cb.to_vec_f32(&rows)?,
        w.dequantize_rows(&[9, 0]).expect("rows")
    );
    assert!(cb
        .quant_embedding(&cw, &cb.from_u32(&[10], &[1])?, DType::F32)
        .is_err());
    // A type without a batched kernel keeps candle's QMatMul.
    let other = cb.quant_weight(
        Arc::new(random_tensor(GgmlType::Q4_1, 2, 64, 2)),
        DType::F32,
    )?;
    assert!(other.uses_quantized_kernel() && !other.uses_batched_kernel());
    Ok(())
}

#[test]
fn a_row_of_a_batch_gets_the_bits_it_gets_alone() {
    for (t, ty) in TYPES.into_iter().enumerate() {
        let (rows, cols, n) = (300, 2 * QK_K, 11);
        let x = random_x(n, cols, 5);
        for k in every_layout(&Arc::new(random_tensor(ty, rows, cols, 70 + t as u64))) {
            for simd in Simd::available() {
                let batch = k.forward_with(&x, n, simd).expect("batch");
                for j in [0, 4, 10] {
                    let alone = k
                        .forward_with(&x[j * cols..][..cols], 1, simd)
                        .expect("one row");
                    assert_eq!(
                        &batch[j * rows..][..rows],
                        &alone[..],
                        "{ty} {:?} {simd} row {j}",
                        k.layout()
                    );
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn f16c_scale_conversion_equals_half_for_every_bit_pattern() {
    if !Simd::Avx2.is_available() {
        return;
    }
    for bits in 0..=u16::MAX {
        let b = bits.to_le_bytes();
        let want = half::f16::from_bits(bits).to_f32();
        // SAFETY: F16C was detected (part of `Simd::Avx2`).
        #[allow(unsafe_code)]
        let got = unsafe { super::simd_x86::f16_at(&b, 0) };
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "{bits:#06x}: {got} vs {want}"
        );
    }
}

#[test]
fn vnni_kernels_give_the_avx2_kernels_bits() {
    if !(Simd::Avx2.is_available() && Simd::Avx512Vnni.is_available()) {
        eprintln!("skipped: this CPU lacks AVX2 or AVX-512 VNNI");
        return;
    }
    let mut rng = Rng(41);
    for (t, ty) in TYPES.into_iter().enumerate() {
        for n in ROW_COUNTS {
            let (rows, cols) = (1 + (rng.next() % 300) as usize, 2 * QK_K);
            let x = random_x(n, cols, rng.next());
            for k in every_layout(&Arc::new(random_tensor(ty, rows, cols, 90 + t as u64))) {
                assert_eq!(
                    k.forward_with(&x, n, Simd::Avx512Vnni).expect("vnni"),
                    k.forward_with(&x, n, Simd::Avx2).expect("avx2"),
                    "{ty} {:?} n={n} [{rows}, {cols}]",
                    k.layout()
                );
            }
        }
    }
}

#[test]
fn the_interleaved_layout_is_exact_and_not_for_q4_0() {
    for (t, ty) in TYPES.into_iter().enumerate() {
        // Rows not a multiple of the group; a padded last group.
        let (rows, cols) = (21 + t, 2 * ty.block_size());
        let w = Arc::new(random_tensor(ty, rows, cols, 300 + t as u64));
        let k = QuantMatMul::with_layout(w.clone(), Layout::Interleaved);
        if ty == GgmlType::Q4_0 {
            assert!(
                matches!(k, Err(QMatMulError::UnsupportedFormat { .. })),
                "{ty}"
            );
            continue;
        }
        let k = k.expect("interleaved");
        assert_eq!(k.layout(), Layout::Interleaved);
        // Rows decode to the GGUF blocks' bits, and the GGUF bytes come back.
        let ids = [0, 7, 8, rows - 1, 3];
        let got = k.decode_rows(&ids).expect("rows");
        let want = w.dequantize_rows(&ids).expect("rows");
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{ty}"
        );
        assert_eq!(k.to_tensor().expect("rebuilt").data(), w.data(), "{ty}");
        assert!(matches!(
            k.decode_rows(&[rows]),
            Err(QMatMulError::Quant(QuantError::RowOutOfRange { .. }))
        ));
    }
}

#[test]
fn the_interleaved_k_quants_give_the_portable_row_kernels_bits() {
    // The K-quant copy keeps each block's decoded form and the portable kernel's order of
    // operations, so every instruction set on it gives the scalar row kernel's bits.
    let mut rng = Rng(77);
    for ty in [GgmlType::Q4K, GgmlType::Q6K] {
        for n in ROW_COUNTS {
            let (rows, cols) = (1 + (rng.next() % 100) as usize, 3 * QK_K);
            let w = Arc::new(random_tensor(ty, rows, cols, rng.next()));
            let x = random_x(n, cols, rng.next());
            let want = QuantMatMul::with_layout(w.clone(), Layout::Rows)
                .and_then(|k| k.forward_with(&x, n, Simd::Scalar))
                .expect("rows");
            let k = QuantMatMul::with_layout(w, Layout::Interleaved).expect("interleaved");
            for simd in Simd::available() {
                let got = k.forward_with(&x, n, simd).expect("interleaved");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{ty} {simd} n={n} [{rows}, {cols}]"
                );
            }
        }
    }
}

#[test]
fn a_block_encodes_back_to_its_bytes() {
    use super::block32::Block32;
    fn round_trip<B: Block32>(ty: GgmlType) {
        let w = random_tensor(ty, 4, 128, 17);
        for block in w.data().chunks_exact(B::BYTES) {
            let (_, q) = B::decode(block);
            let mut out = vec![0u8; B::BYTES];
            B::encode(B::scale_bits(block), &q, &mut out);
            assert_eq!(out, block, "{ty}");
        }
    }
    round_trip::<super::q8_0::Q8_0>(GgmlType::Q8_0);
    round_trip::<super::q5_0::Q5_0>(GgmlType::Q5_0);
    round_trip::<super::q4_0::Q4_0>(GgmlType::Q4_0);
}

#[test]
fn a_non_finite_activation_makes_its_output_row_nan() {
    for ty in TYPES {
        let (rows, cols, n) = (11, ty.block_size() * 2, 3);
        let w = Arc::new(random_tensor(ty, rows, cols, 5));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = random_x(n, cols, 9);
            x[cols + 7] = bad; // row 1 only
            for k in every_layout(&w) {
                for simd in Simd::available() {
                    let got = k.forward_with(&x, n, simd).expect("forward");
                    let what = format!("{ty} {:?} {simd} {bad}", k.layout());
                    assert!(got[rows..2 * rows].iter().all(|v| v.is_nan()), "{what}");
                    assert!(got[..rows].iter().all(|v| v.is_finite()), "{what}");
                    assert!(got[2 * rows..].iter().all(|v| v.is_finite()), "{what}");
                }
            }
        }
    }
}
