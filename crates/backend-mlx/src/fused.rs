//! The fused ops on MLX kernels (`mlx::fast` and `softmax`), the in-place cache write and the
//! evaluation hooks.

use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::TryIndexMutOp;
use mlx_rs::{ops, transforms, Array};
use mtp_core::backend::check_write_slice;
use mtp_core::{AttentionBias, CoreError, DType};

use crate::convert::{axis, require_float, require_int, same_dtype, shape_of, to_i32, to_mlx};
use crate::device::MlxDevice;
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

/// The expert-gathered linear layer of a mixture of experts: row `r` of `x` (`[n, in]`) times
/// the transpose of expert `indices[r]` of `w` (`[experts, out, in]`), `[n, out]`.
///
/// With MLX's gathered matmul (`mlx::gather_mm`) wherever MLX has it: each row is a
/// `[1, in] x [in, out]` product read straight from its expert's matrix (the transpose is a
/// view), so neither the `n` expert matrices the trait's default gathers nor a host read of the
/// ids exist. MLX 0.32's CPU `GatherMM` takes only `float32` ("Currently only supports
/// float32"), so `F16` / `BF16` on the CPU gather the rows' expert matrices (`take`) and run one
/// batched `matmul` in that dtype, as the trait's default does; on Metal every float dtype uses
/// `gather_mm`. Expert ids are not range-checked (MLX's gathers do not check indices; a router's
/// top-k ids are always in range).
pub(crate) fn gather_linear(
    x: &Array,
    w: &Array,
    indices: &Array,
    device: MlxDevice,
) -> Result<Array> {
    const OP: &str = "gather_linear";
    let dtype = require_float(OP, x)?;
    same_dtype(OP, x, w)?;
    require_int(OP, indices)?;
    let (xs, ws) = (shape_of(x), shape_of(w));
    let mismatch = || CoreError::ShapeMismatch {
        op: OP,
        lhs: xs.clone(),
        rhs: ws.clone(),
    };
    let ([n, inner], [_, out, w_in]) = (&xs[..], &ws[..]) else {
        return Err(mismatch().into());
    };
    if inner != w_in || indices.size() != *n {
        return Err(mismatch().into());
    }
    let (n, inner, out) = (to_i32(OP, *n)?, to_i32(OP, *inner)?, to_i32(OP, *out)?);
    // `[n, 1, in]` rows against `[.., in, out]` expert matrices: out `[n, 1, out]`.
    let rows = x.reshape(&[n, 1, inner]).op(OP)?;
    let experts = indices.reshape(&[n]).op(OP)?;
    let y = if dtype == DType::F32 || device == MlxDevice::Gpu {
        // The rows' own batch index is implied (no lhs indices); the experts' are `indices`.
        let wt = w.swap_axes(1, 2).op(OP)?;
        ops::gather_mm(&rows, &wt, None::<&Array>, &experts, false).op(OP)?
    } else {
        let picked = w.take_axis(&experts, 0).op(OP)?;
        rows.matmul(picked.swap_axes(1, 2).op(OP)?).op(OP)?
    };
    y.reshape(&[n, out]).op(OP)
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
