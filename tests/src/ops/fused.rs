//! The fused ops a backend may accelerate: `softmax`, `log_softmax`, `gelu_tanh`, `rms_norm`,
//! `rope`, `attention`, `top_k` and `non_finite_rows`. The reference runs the trait's portable default bodies, so
//! these cases are what an overriding kernel must pass.

use mtp_core::{AttentionMask, Backend, Causality};

use crate::error::{backend_err, SuiteError};
use crate::harness::{Harness, FLOATS};
use crate::inputs::{Input, Layout};
use crate::op::Op;
use crate::tolerance::Tolerance;

/// Shapes of the row-wise cases.
const SHAPES: [&[usize]; 4] = [&[7], &[3, 5], &[2, 3, 4], &[2, 1, 3, 8]];

/// `softmax` along every axis, in every float dtype.
pub fn softmax<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "softmax");
    for dtype in FLOATS {
        for shape in SHAPES {
            for axis in 0..shape.len() {
                let x = h.gen.uniform(shape, -4.0, 4.0, dtype);
                h.check(&Op::Softmax(axis), &[x], Tolerance::accumulating(dtype))?;
            }
        }
    }
    Ok(())
}

/// `log_softmax` along every axis, in every float dtype.
pub fn log_softmax<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "log_softmax");
    for dtype in FLOATS {
        for shape in SHAPES {
            for axis in 0..shape.len() {
                let x = h.gen.uniform(shape, -4.0, 4.0, dtype);
                h.check(&Op::LogSoftmax(axis), &[x], Tolerance::accumulating(dtype))?;
            }
        }
    }
    Ok(())
}

/// `gelu_tanh` over negative, small and positive inputs.
pub fn gelu_tanh<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "gelu_tanh");
    for dtype in FLOATS {
        for shape in [&[][..], &[9], &[4, 8], &[2, 3, 5]] {
            let x = h.gen.uniform(shape, -5.0, 5.0, dtype);
            h.check(&Op::GeluTanh, &[x], Tolerance::accumulating(dtype))?;
        }
    }
    Ok(())
}

/// `rms_norm` over the last axis, with and without a weight, for two epsilons.
pub fn rms_norm<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "rms_norm");
    for dtype in FLOATS {
        for shape in [&[8][..], &[5, 8], &[2, 3, 16], &[1, 2, 3, 4]] {
            for eps in [1e-6, 1e-2] {
                let d = shape[shape.len() - 1];
                let x = h.gen.uniform(shape, -2.0, 2.0, dtype);
                let w = h.gen.uniform(&[d], 0.5, 1.5, dtype);
                let op = Op::RmsNorm { eps };
                h.check(
                    &op,
                    std::slice::from_ref(&x),
                    Tolerance::accumulating(dtype),
                )?;
                h.check(&op, &[x, w], Tolerance::accumulating(dtype))?;
            }
        }
    }
    Ok(())
}

/// HF's default rotary frequencies for `rotated` dims.
fn inv_freq(rotated: usize, theta: f32) -> Vec<f32> {
    (0..rotated / 2)
        .map(|i| 1.0 / theta.powf(2.0 * i as f32 / rotated as f32))
        .collect()
}

/// `rope` with full and partial rotation, at position 0 and later starts.
pub fn rope<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "rope");
    for dtype in FLOATS {
        for (shape, rotated) in [
            ([1, 2, 3, 8], 8),
            ([1, 2, 3, 8], 4),
            ([2, 1, 5, 4], 4),
            ([1, 4, 1, 16], 8),
            ([1, 1, 6, 6], 2),
        ] {
            for start in [0, 7, 100] {
                let x = h.gen.uniform(&shape, -1.0, 1.0, dtype);
                let op = Op::Rope {
                    start,
                    inv_freq: inv_freq(rotated, 10_000.0),
                };
                h.check(&op, &[x], Tolerance::accumulating(dtype))?;
            }
        }
    }
    Ok(())
}

/// One attention configuration: `(batch, hq, hkv, tq, tk, d, dv, mask)`.
type AttentionCase = (
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    AttentionMask,
);

/// A mask with every field given.
fn mask(
    query_start: usize,
    key_start: usize,
    causality: Causality,
    window: Option<usize>,
) -> AttentionMask {
    AttentionMask {
        query_start,
        key_start,
        causality,
        window,
    }
}

/// The attention configurations: prefill, decode, verification, sliding windows 1/2/3 (also
/// at a rotating cache's offsets), bidirectional, GQA 4/2 and 8/1, MHA, `dv != d`, and queries
/// that see no key at all (their output must be zeros).
fn attention_cases() -> Vec<AttentionCase> {
    use Causality::{Bidirectional as Bi, Causal};
    let mut cases = vec![
        (1, 4, 2, 5, 5, 8, 8, mask(0, 0, Causal, None)),
        (1, 4, 2, 1, 7, 8, 8, mask(6, 0, Causal, None)),
        (1, 4, 2, 3, 9, 8, 8, mask(6, 0, Causal, None)),
        (1, 8, 1, 4, 6, 4, 4, mask(2, 0, Causal, None)),
        (2, 2, 2, 3, 3, 8, 8, mask(0, 0, Causal, None)),
        (1, 4, 2, 4, 4, 8, 4, mask(0, 0, Causal, None)),
        (1, 4, 2, 4, 6, 4, 12, mask(2, 0, Causal, None)),
        (1, 4, 2, 4, 5, 8, 8, mask(0, 0, Bi, None)),
        (2, 4, 1, 3, 6, 4, 4, mask(0, 0, Bi, Some(2))),
        // Queries 0..3 see nothing of keys 3..6; query 3 sees key 3.
        (1, 4, 2, 4, 3, 8, 8, mask(0, 3, Causal, None)),
        // Every query far past a window of 2: all outputs are zeros.
        (1, 2, 1, 2, 4, 4, 4, mask(10, 0, Causal, Some(2))),
        // A prefill chunk late in a long context: more keys than one block of the blocked
        // attention (`mtp_core::attention_blocked`), the causal edge inside the last block.
        (1, 4, 2, 20, 2100, 8, 8, mask(2080, 0, Causal, None)),
        // A window that hides the whole first block of keys from every query.
        (1, 2, 1, 18, 4200, 4, 4, mask(4190, 0, Causal, Some(1000))),
    ];
    for window in [1, 2, 3] {
        cases.push((1, 4, 2, 5, 5, 8, 8, mask(0, 0, Causal, Some(window))));
        // A rotating cache's view: keys from position 4, queries at 6..9.
        cases.push((1, 4, 2, 3, 5, 8, 8, mask(6, 4, Causal, Some(window))));
        cases.push((1, 8, 1, 2, 4, 4, 4, mask(3, 0, Bi, Some(window))));
    }
    cases
}

/// `attention` over every configuration (prefill, decode, verification, sliding windows 1/2/3,
/// bidirectional, GQA 4/2 and 8/1, `dv != d`, queries with no visible key, a chunk over more
/// keys than one block), in every float
/// dtype, with the usual `1/sqrt(d)` scale and another.
pub fn attention<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "attention");
    for dtype in FLOATS {
        for (b, hq, hkv, tq, tk, d, dv, mask) in attention_cases() {
            for scale in [1.0 / (d as f32).sqrt(), 0.7] {
                let q = h.gen.uniform(&[b, hq, tq, d], -1.0, 1.0, dtype);
                let k = h.gen.uniform(&[b, hkv, tk, d], -1.0, 1.0, dtype);
                let v = h.gen.uniform(&[b, hkv, tk, dv], -1.0, 1.0, dtype);
                let op = Op::Attention { mask, scale };
                h.check(&op, &[q, k, v], Tolerance::accumulating(dtype))?;
            }
        }
    }
    Ok(())
}

/// `top_k` along the last axis on distinct values: values and indices, largest first.
pub fn top_k<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "top_k");
    for dtype in FLOATS {
        for shape in [&[10][..], &[3, 8], &[2, 2, 6], &[1, 32]] {
            let n = shape[shape.len() - 1];
            for k in [1, 3, n] {
                let x = h.gen.distinct(shape, dtype);
                h.check(&Op::TopK(k), &[x], Tolerance::EXACT)?;
            }
        }
    }
    Ok(())
}

/// `non_finite_rows` along the last axis and along axis 0, in every float dtype, on rows with a
/// NaN, a +∞, only −∞, a −∞ mask among finite values, and finite values only: exact flags.
pub fn non_finite_rows<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    #[rustfmt::skip]
    let rows: [f32; 20] = [
        1.0, nan, 2.0, -3.0,   // NaN
        0.5, inf, -1.0, 0.0,   // +inf
        -inf, -inf, -inf, -inf, // nothing finite
        -inf, 4.0, -2.0, 1.0,  // a -inf mask: fine
        3.0, -7.5, 0.25, 65000.0, // finite
    ];
    let last_axis = [1u32, 1, 1, 0, 0];
    let first_axis = [0u32, 1, 0, 0]; // only column 1 holds a NaN or +inf
    for dtype in FLOATS {
        for (shape, axis, expected) in [
            (&[5, 4][..], 1, &last_axis[..]),
            (&[1, 5, 4], 2, &last_axis),
            (&[5, 4], 0, &first_axis),
        ] {
            let what = || format!("non_finite_rows({dtype}{shape:?}, axis {axis})");
            let x = Input::float(shape, rows.to_vec(), dtype);
            let x = backend_err(backend, what, x.build(backend, Layout::Contiguous))?;
            let flags = backend_err(backend, what, backend.non_finite_rows(&x, axis))?;
            let mut want_shape = shape.to_vec();
            want_shape[axis] = 1;
            let got_shape = backend.shape(&flags);
            let got = backend_err(backend, what, backend.to_vec_u32(&flags))?;
            if got_shape != want_shape || got != expected {
                return Err(SuiteError::Mismatch {
                    backend: backend.name(),
                    check: what(),
                    detail: format!(
                        "got {got:?} of shape {got_shape:?}, expected {expected:?} of shape \
                         {want_shape:?}"
                    ),
                });
            }
        }
    }
    Ok(())
}
