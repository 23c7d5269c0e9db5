//! The expert-gathered linear layer of mixture-of-experts models ([`Backend::gather_linear`]).
//!
//! candle 0.11 has no gathered matmul kernel, so this runs one matmul per expert in use: the
//! expert ids are read to the host (free on the CPU, one sync on a GPU), the rows routed to each
//! expert are picked with `index_select`, multiplied by that expert's matrix (a view of the
//! weight, never a copy) and added back into place with `index_add`. Unlike the trait's default
//! body, no per-row copy of an expert matrix is made.
//!
//! [`Backend::gather_linear`]: mtp_core::Backend::gather_linear

use std::collections::BTreeMap;

use candle_core::{DType, Tensor};
use mtp_core::CoreError;

use crate::error::Result;

/// `[n, in] x [experts, out, in]` routed by `indices` (`n` ids) → `[n, out]`.
pub(crate) fn gather_linear(x: &Tensor, w: &Tensor, indices: &Tensor) -> Result<Tensor> {
    const OP: &str = "gather_linear";
    let mismatch = || CoreError::ShapeMismatch {
        op: OP,
        lhs: x.dims().to_vec(),
        rhs: w.dims().to_vec(),
    };
    let (&[n, inner], &[experts, out, w_in]) = (x.dims(), w.dims()) else {
        return Err(mismatch().into());
    };
    if inner != w_in || indices.elem_count() != n {
        return Err(mismatch().into());
    }
    // `index_select` and the per-expert matmul need contiguous operands; a loaded expert stack
    // and a model's activations already are (then this is a cheap clone, not a copy).
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    let ids = indices
        .flatten_all()?
        .to_dtype(DType::U32)?
        .to_vec1::<u32>()?;
    let mut rows_of: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (row, &expert) in ids.iter().enumerate() {
        if expert as usize >= experts {
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: format!("expert id {expert} for {experts} experts"),
            }
            .into());
        }
        // `row < n`, which fits u32 like every index candle takes.
        rows_of.entry(expert).or_default().push(row as u32);
    }
    let mut y = Tensor::zeros((n, out), x.dtype(), x.device())?;
    for (expert, rows) in rows_of {
        let count = rows.len();
        let rows = Tensor::from_vec(rows, count, x.device())?;
        let picked = x.index_select(&rows, 0)?;
        let weight = w.get(expert as usize)?;
        let part = picked.matmul(&weight.t()?)?;
        y = y.index_add(&rows, &part, 0)?;
    }
    Ok(y)
}
