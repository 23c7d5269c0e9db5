//! Matrix product over the last two axes with NumPy broadcasting of the leading axes.
//!
//! Each output element `out[i, j] = sum_p a[i, p] * b[p, j]` is accumulated in `f64` in the
//! fixed order `p = 0..k` (the products of two `f32` values are exact in `f64`) and rounded once
//! to the dtype, so a row computed alone or inside a batch is bit-identical.

use super::array::{
    broadcast_shape, broadcast_strides, checked_numel, for_each_offset, require_float,
    require_same_dtype, HostArray, Storage,
};
use crate::{CoreError, CoreResult};

pub(super) fn matmul(a: &HostArray, b: &HostArray) -> CoreResult<HostArray> {
    const OP: &str = "matmul";
    require_float(OP, a)?;
    require_same_dtype(OP, a, b)?;
    let (ra, rb) = (a.rank(), b.rank());
    if ra < 2 || rb < 2 {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!(
                "operands need rank >= 2, got {:?} and {:?}",
                a.shape(),
                b.shape()
            ),
        });
    }
    let (m, k) = (a.shape()[ra - 2], a.shape()[ra - 1]);
    let (kb, n) = (b.shape()[rb - 2], b.shape()[rb - 1]);
    if k != kb {
        return Err(CoreError::ShapeMismatch {
            op: OP,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        });
    }
    let (a_batch, b_batch) = (&a.shape()[..ra - 2], &b.shape()[..rb - 2]);
    let batch = broadcast_shape(OP, a_batch, b_batch).map_err(|_| CoreError::ShapeMismatch {
        op: OP,
        lhs: a.shape().to_vec(),
        rhs: b.shape().to_vec(),
    })?;
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    let total = checked_numel(OP, &out_shape)?;
    // Strides over the batch axes, in units of whole matrices.
    let sa = broadcast_strides(a_batch, &batch);
    let sb = broadcast_strides(b_batch, &batch);
    let (Storage::Float(x), Storage::Float(y)) = (a.storage(), b.storage()) else {
        return Err(CoreError::DTypeMismatch {
            op: OP,
            expected: "a float dtype",
            got: a.dtype(),
        });
    };
    let mut out = Vec::with_capacity(total);
    let mut acc = vec![0.0f64; n];
    for_each_offset(&batch, [&sa, &sb], |[ia, ib]| {
        let am = &x[ia * m * k..(ia + 1) * m * k];
        let bm = &y[ib * k * n..(ib + 1) * k * n];
        for i in 0..m {
            acc.iter_mut().for_each(|v| *v = 0.0);
            let a_row = &am[i * k..(i + 1) * k];
            // i-p-j order: each acc[j] still sums its products in order p = 0..k.
            for (p, &av) in a_row.iter().enumerate() {
                let av = f64::from(av);
                for (s, &bv) in acc.iter_mut().zip(&bm[p * n..(p + 1) * n]) {
                    *s += av * f64::from(bv);
                }
            }
            out.extend_from_slice(&acc);
        }
    });
    Ok(HostArray::from_f64_values(out_shape, a.dtype(), out))
}
