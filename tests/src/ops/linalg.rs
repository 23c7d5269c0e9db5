//! Linear algebra: `matmul` (2-D, batched 3-D and 4-D, broadcast leading axes), the derived
//! `linear` (`x @ w^T`) and the mixture-of-experts `gather_linear` (each row times its expert's
//! `w^T`).

use mtp_core::Backend;

use crate::error::SuiteError;
use crate::harness::{Harness, FLOATS};
use crate::inputs::Input;
use crate::op::Op;
use crate::tolerance::Tolerance;

/// `[.., m, k] x [.., k, n]` operand shapes: plain, batched, broadcast leading axes, vectors as
/// 1-row / 1-column matrices.
const MATMUL_SHAPES: [(&[usize], &[usize]); 9] = [
    (&[3, 4], &[4, 5]),
    (&[1, 8], &[8, 1]),
    (&[5, 1], &[1, 3]),
    (&[16, 32], &[32, 8]),
    (&[2, 3, 4], &[2, 4, 5]),
    (&[2, 3, 3, 4], &[2, 3, 4, 2]),
    (&[2, 1, 3, 4], &[3, 4, 5]),
    (&[3, 4], &[2, 4, 5]),
    (&[2, 3, 6], &[6, 2]),
];

/// `matmul` over every shape pair in every float dtype, on contiguous, transposed and sliced
/// operands.
pub fn matmul<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "matmul");
    for dtype in FLOATS {
        for (a, b) in MATMUL_SHAPES {
            let x = h.gen.uniform(a, -1.0, 1.0, dtype);
            let y = h.gen.uniform(b, -1.0, 1.0, dtype);
            h.check(&Op::Matmul, &[x, y], Tolerance::accumulating(dtype))?;
        }
    }
    Ok(())
}

/// `linear(x, w)` for `x` of rank 1 to 3 and `w` of shape `[out, in]`.
pub fn linear<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "linear");
    for dtype in FLOATS {
        for (x, w) in [
            (&[6][..], &[4, 6]),
            (&[3, 6], &[5, 6]),
            (&[2, 3, 16], &[8, 16]),
            (&[1, 1, 4], &[32, 4]),
        ] {
            let x = h.gen.uniform(x, -1.0, 1.0, dtype);
            let w = h.gen.uniform(w, -1.0, 1.0, dtype);
            h.check(&Op::Linear, &[x, w], Tolerance::accumulating(dtype))?;
        }
    }
    Ok(())
}

/// `gather_linear` operands: `x` `[n, in]`, `experts` matrices `[out, in]`, and the expert of
/// each row (repeats, rows of one expert not adjacent, unused experts; one row; one expert;
/// sizes past one SIMD block).
struct GatherCase {
    inner: usize,
    experts: usize,
    out: usize,
    ids: &'static [u32],
}

const GATHER_CASES: [GatherCase; 4] = [
    GatherCase {
        inner: 8,
        experts: 4,
        out: 6,
        ids: &[3],
    },
    GatherCase {
        inner: 5,
        experts: 4,
        out: 3,
        ids: &[2, 0, 2, 3, 0, 0, 2],
    },
    GatherCase {
        inner: 16,
        experts: 1,
        out: 8,
        ids: &[0; 12],
    },
    GatherCase {
        inner: 32,
        experts: 6,
        out: 24,
        ids: &[5, 1, 1, 4, 0, 5, 2, 1, 0],
    },
];

/// `gather_linear` in every float dtype with `U32` and `I32` expert ids, on contiguous,
/// transposed and sliced operands: each row routed to its own expert, as a verification batch
/// of a mixture of experts routes its tokens.
pub fn gather_linear<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "gather_linear");
    for dtype in FLOATS {
        for case in &GATHER_CASES {
            for signed in [false, true] {
                let n = case.ids.len();
                let x = h.gen.uniform(&[n, case.inner], -1.0, 1.0, dtype);
                let w = h
                    .gen
                    .uniform(&[case.experts, case.out, case.inner], -1.0, 1.0, dtype);
                let ids = if signed {
                    Input::i32(&[n], case.ids.iter().map(|&e| e as i32).collect())
                } else {
                    Input::u32(&[n], case.ids.to_vec())
                };
                h.check(
                    &Op::GatherLinear,
                    &[x, w, ids],
                    Tolerance::accumulating(dtype),
                )?;
            }
        }
    }
    Ok(())
}
