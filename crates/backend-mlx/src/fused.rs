//! The fused ops on MLX kernels (`mlx::fast` and `softmax`), the in-place cache write and the
//! evaluation hooks.

use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::TryIndexMutOp;
use mlx_rs::{ops, transforms, Array};
use mtp_core::backend::check_write_slice;
use mtp_core::{AttentionBias, CoreError};

use crate::convert::{axis, require_float, same_dtype, shape_of, to_i32, to_mlx};
use crate::error::{Context, Result};
use crate::ops::range_on_axis;
use crate::MlxBackend;

pub(crate) fn softmax(x: &Array, axis_: usize) -> Result<Array> {
    const OP: &str = "softmax";
    require_float(OP, x)?;
    let ax = axis(OP, x, axis_)?;
    // `precise`: half inputs are exponentiated and summed in f32, like the reference's f64.
    ops::softmax_axis(x, ax, true).op(OP)
}

/// `mlx::fast::rms_norm` when the weight is `[d]` in `x`'s dtype (or absent); otherwise the
/// normalised `x` times the weight, broadcast.
pub(crate) fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
    const OP: &str = "rms_norm";
    require_float(OP, x)?;
    let Some(&d) = x.shape().last() else {
        return Err(CoreError::AxisOutOfRange {
            op: OP,
            axis: 0,
            rank: 0,
        }
        .into());
    };
    match weight {
        None => fast::rms_norm(x, None, eps).op(OP),
        Some(w) => {
            same_dtype(OP, x, w)?;
            if w.shape() == [d] {
                fast::rms_norm(x, Some(w), eps).op(OP)
            } else {
                let normed = fast::rms_norm(x, None, eps).op(OP)?;
                ops::multiply(&normed, w).op(OP)
            }
        }
    }
}

/// `mlx::fast::rope` in the half-split (non-traditional) layout on the first `2 * half` dims.
///
/// MLX takes *periods* (`freqs`, angle = position / freq) where the trait takes inverse
/// frequencies, so the table passed is `1 / inv_freq` (a zero frequency becomes an infinite
/// period: no rotation, as in the reference).
pub(crate) fn rope(x: &Array, start: usize, inv_freq: &[f32]) -> Result<Array> {
    const OP: &str = "rope";
    require_float(OP, x)?;
    let shape = shape_of(x);
    let [_, _, _, d] = shape[..] else {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("expected [b, h, t, d], got {shape:?}"),
        }
        .into());
    };
    let half = inv_freq.len();
    if half == 0 || 2 * half > d {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("{half} frequencies do not fit head dim {d}"),
        }
        .into());
    }
    let periods: Vec<f32> = inv_freq.iter().map(|f| f.recip()).collect();
    let periods = Array::from_slice(&periods, &[to_i32(OP, half)?]);
    let offset = to_i32(OP, start)?;
    let rotated = to_i32(OP, 2 * half)?;
    fast::rope(x, rotated, false, None, 1.0, offset, &periods).op(OP)
}

/// `mlx::fast::scaled_dot_product_attention` with the prepared `[tq, tk]` additive table, or no
/// mask when every key is visible (grouped KV heads are native to MLX). Query rows that see no
/// key come out of MLX's softmax as NaN; when the bias says there are some, they are replaced by
/// zeros, the trait's rule.
pub(crate) fn attention(
    q: &Array,
    k: &Array,
    v: &Array,
    bias: &AttentionBias<MlxBackend>,
    scale: f32,
) -> Result<Array> {
    const OP: &str = "attention";
    let dtype = require_float(OP, q)?;
    same_dtype(OP, q, k)?;
    same_dtype(OP, q, v)?;
    let (qs, ks, vs) = (shape_of(q), shape_of(k), shape_of(v));
    let mismatch = || CoreError::ShapeMismatch {
        op: OP,
        lhs: qs.clone(),
        rhs: ks.clone(),
    };
    let ([b, hq, tq, d], [kb, hkv, tk, kd], [vb, vh, vt, _]) = (&qs[..], &ks[..], &vs[..]) else {
        return Err(mismatch().into());
    };
    let consistent = b == kb && b == vb && d == kd && hkv == vh && tk == vt;
    let fits = bias.tq() == *tq && bias.tk() == *tk;
    if !consistent || !fits || *hkv == 0 || hq % hkv != 0 {
        return Err(mismatch().into());
    }
    let (tq, tk) = (*tq, *tk);
    let out = match bias.table() {
        Some(table) => {
            let table = if table.dtype() == to_mlx(dtype) {
                table.clone()
            } else {
                table.as_dtype(to_mlx(dtype)).op(OP)?
            };
            fast::scaled_dot_product_attention(
                q,
                k,
                v,
                scale,
                ScaledDotProductAttentionMask::Array(&table),
                None,
            )
        }
        None => fast::scaled_dot_product_attention(
            q,
            k,
            v,
            scale,
            None::<ScaledDotProductAttentionMask>,
            None,
        ),
    }
    .op(OP)?;
    if !bias.has_blind_rows() {
        return Ok(out);
    }
    let mask = bias.mask();
    let blind_rows: Vec<u32> = (0..tq)
        .map(|row| u32::from(mask.row_is_blind(row, tk)))
        .collect();
    let blind = Array::from_slice(&blind_rows, &[to_i32(OP, tq)?, 1])
        .as_dtype(mlx_rs::Dtype::Bool)
        .op(OP)?;
    let zeros = ops::zeros_like(&out).op(OP)?;
    ops::select(&blind, &zeros, &out).op(OP)
}

/// Write `src` into `dst` along `axis` at `start` with MLX's `slice_update`. MLX arrays are
/// values: `dst` is replaced by the updated array (MLX reuses the buffer when nothing else holds
/// it), and clones taken before the write keep the old contents.
pub(crate) fn write_slice(dst: &mut Array, src: &Array, axis_: usize, start: usize) -> Result<()> {
    const OP: &str = "write_slice";
    same_dtype(OP, dst, src)?;
    let len = check_write_slice(&shape_of(dst), &shape_of(src), axis_, start)?;
    let ax = axis(OP, dst, axis_)?;
    let index = range_on_axis(ax, to_i32(OP, start)?, to_i32(OP, start + len)?);
    dst.try_index_mut(&index[..], src).op(OP)
}

pub(crate) fn eval(xs: &[&Array]) -> Result<()> {
    transforms::eval(xs.iter().copied()).op("eval")
}

pub(crate) fn async_eval(xs: &[&Array]) -> Result<()> {
    transforms::async_eval(xs.iter().copied()).op("async_eval")
}
