//! `top_k` along the last axis. On the CPU the values already live in host memory, so a
//! selection per row replaces the trait default's full `argsort` of every row (a 262k-token
//! vocabulary sorted per sampled row; the selection is [`mtp_core::sampling::largest`]: chunk
//! maxima bound the `k`-th value, a `k`-entry heap ranks what reaches it); on GPUs the default
//! (sort, slice, gather) stays on the device.

use candle_core::Tensor;
use mtp_core::sampling::largest;
use mtp_core::{CoreError, SortOrder};

use crate::error::Result;
use crate::ops;

/// The `k` largest values along the last axis and their `U32` indices, largest first.
pub(crate) fn top_k(x: &Tensor, k: usize) -> Result<(Tensor, Tensor)> {
    const OP: &str = "top_k";
    let dims = x.dims().to_vec();
    let Some((&n, outer)) = dims.split_last() else {
        return Err(CoreError::AxisOutOfRange {
            op: OP,
            axis: 0,
            rank: 0,
        }
        .into());
    };
    if k == 0 || k > n {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("k = {k} for an axis of {n}"),
        }
        .into());
    }
    let dtype = ops::require_float(OP, x)?;
    let last = dims.len() - 1;
    if !x.device().is_cpu() {
        let order = ops::argsort(x, last, SortOrder::Descending)?;
        let idx = ops::slice(&order, last, 0, k)?;
        return Ok((ops::take_along_axis(x, &idx, last)?, idx));
    }
    let data = ops::to_vec_f32(x)?;
    let mut values = Vec::with_capacity(data.len() / n * k);
    let mut indices = Vec::with_capacity(data.len() / n * k);
    for row in data.chunks(n) {
        // The order is a stable descending sort, NaN as -inf.
        for (index, value) in largest(row, k) {
            values.push(value);
            indices.push(index);
        }
    }
    let mut shape = outer.to_vec();
    shape.push(k);
    Ok((
        ops::from_f32(x.device(), &values, &shape, dtype)?,
        ops::from_u32(x.device(), &indices, &shape)?,
    ))
}
