//! Linear algebra: `matmul` (2-D, batched 3-D and 4-D, broadcast leading axes) and the derived
//! `linear` (`x @ w^T`).

use mtp_core::Backend;

use crate::error::SuiteError;
use crate::harness::{Harness, FLOATS};
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
