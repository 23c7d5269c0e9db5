//! Fused ops backed by candle-nn kernels, and the in-place cache hooks.

use candle_core::Tensor;
use mtp_core::CoreError;

use crate::error::Result;
use crate::ops::{self, require_float};

/// Softmax along `axis` with `candle_nn::ops::softmax_last_dim`; another axis is moved last
/// (transpose + contiguous) and back.
pub(crate) fn softmax(x: &Tensor, axis: usize) -> Result<Tensor> {
    const OP: &str = "softmax";
    require_float(OP, x)?;
    let rank = x.rank();
    if axis >= rank {
        return Err(CoreError::AxisOutOfRange { op: OP, axis, rank }.into());
    }
    if x.elem_count() == 0 {
        return Ok(x.clone());
    }
    let last = rank - 1;
    if axis == last {
        return Ok(candle_nn::ops::softmax_last_dim(&x.contiguous()?)?);
    }
    let moved = x.transpose(axis, last)?.contiguous()?;
    Ok(candle_nn::ops::softmax_last_dim(&moved)?.transpose(axis, last)?)
}

/// RMS norm over the last axis with `candle_nn::ops::rms_norm` (`x / sqrt(mean(x^2) + eps) * w`,
/// the sum of squares accumulated in f32). Without a weight it runs with a weight of ones; a
/// weight that is not `[d]` in `x`'s dtype is applied afterwards with a broadcast multiply.
pub(crate) fn rms_norm(x: &Tensor, weight: Option<&Tensor>, eps: f32) -> Result<Tensor> {
    const OP: &str = "rms_norm";
    let rank = x.rank();
    let Some(last) = rank.checked_sub(1) else {
        return Err(CoreError::AxisOutOfRange {
            op: OP,
            axis: 0,
            rank,
        }
        .into());
    };
    require_float(OP, x)?;
    if x.elem_count() == 0 {
        return match weight {
            Some(w) => ops::binary(x, w, mtp_core::BinaryOp::Mul),
            None => Ok(x.clone()),
        };
    }
    let d = x.dims()[last];
    let x = x.contiguous()?;
    match weight {
        Some(w) if w.dims() == [d] && w.dtype() == x.dtype() => {
            Ok(candle_nn::ops::rms_norm(&x, &w.contiguous()?, eps)?)
        }
        other => {
            let ones = Tensor::ones(d, x.dtype(), x.device())?;
            let normed = candle_nn::ops::rms_norm(&x, &ones, eps)?;
            match other {
                Some(w) => ops::binary(&normed, w, mtp_core::BinaryOp::Mul),
                None => Ok(normed),
            }
        }
    }
}

/// Rotary embedding on `[b, h, t, d]` with `candle_nn::rotary_emb::rope` (half-split layout) on
/// the rotated dims, the pass-through dims joined back after, with the `[t, half]` tables given
/// (built by the trait: on the host per call for `rope`, once per model for `rope_cached`).
pub(crate) fn rope_with_tables(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    const OP: &str = "rope";
    let dtype = require_float(OP, x)?;
    let (shape, table) = (x.dims(), cos.dims());
    let ([_, _, t, d], [tt, half]) = (shape, table) else {
        return Err(CoreError::ShapeMismatch {
            op: OP,
            lhs: shape.to_vec(),
            rhs: table.to_vec(),
        }
        .into());
    };
    let (t, d, half) = (*t, *d, *half);
    if t != *tt || 2 * half > d || sin.dims() != table {
        return Err(CoreError::ShapeMismatch {
            op: OP,
            lhs: shape.to_vec(),
            rhs: table.to_vec(),
        }
        .into());
    }
    if t == 0 || x.elem_count() == 0 {
        return Ok(x.clone());
    }
    let as_table = |c: &Tensor| -> Result<Tensor> {
        let c = if ops::dtype_of(OP, c)? == dtype {
            c.clone()
        } else {
            ops::cast(c, dtype)?
        };
        Ok(c.contiguous()?)
    };
    let (cos, sin) = (as_table(cos)?, as_table(sin)?);
    let rot = 2 * half;
    if rot == d {
        return Ok(candle_nn::rotary_emb::rope(&x.contiguous()?, &cos, &sin)?);
    }
    let rotated = candle_nn::rotary_emb::rope(&x.narrow(3, 0, rot)?.contiguous()?, &cos, &sin)?;
    let pass = x.narrow(3, rot, d - rot)?;
    Ok(Tensor::cat(&[&rotated, &pass], 3)?)
}

/// GELU, tanh approximation: candle's `gelu` is exactly
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (half dtypes computed in f32, rounded once).
///
/// A contiguous `f32` CPU tensor takes [`crate::gelu`]'s one-pass vectorised form instead
/// (within a few ulps; no libm call per element).
pub(crate) fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    require_float("gelu_tanh", x)?;
    if let Some(values) = crate::row_scan::contiguous_f32(x, crate::gelu::gelu_all) {
        return Ok(Tensor::from_vec(values?, x.dims(), x.device())?);
    }
    Ok(x.gelu()?)
}

/// Write `src` into `dst` along `axis` at `start`, in place with `Tensor::slice_set`.
///
/// `dst` normally is a contiguous buffer from `full`; a non-contiguous `dst` is first replaced by
/// a contiguous copy of itself. A `src` that is not contiguous, or that shares storage with
/// `dst`, is copied first (candle refuses to read and write one storage at once).
pub(crate) fn write_slice(dst: &mut Tensor, src: &Tensor, axis: usize, start: usize) -> Result<()> {
    const OP: &str = "write_slice";
    mtp_core::backend::check_write_slice(dst.dims(), src.dims(), axis, start)?;
    let (dt, st) = (ops::dtype_of(OP, dst)?, ops::dtype_of(OP, src)?);
    if dt != st {
        return Err(CoreError::DTypeMismatch {
            op: OP,
            expected: "src in dst's dtype",
            got: st,
        }
        .into());
    }
    if src.elem_count() == 0 {
        return Ok(());
    }
    if !dst.is_contiguous() {
        *dst = dst.force_contiguous()?;
    }
    let src = if src.is_contiguous() && storage_addr(src) != storage_addr(dst) {
        src.clone()
    } else {
        src.force_contiguous()?
    };
    dst.slice_set(&src, axis, start)?;
    Ok(())
}

/// The address of the storage behind `x` (equal for tensors that share storage). The read guard
/// is dropped before returning, so two calls never hold two locks at once.
fn storage_addr(x: &Tensor) -> usize {
    let (storage, _) = x.storage_and_layout();
    std::ptr::from_ref::<candle_core::Storage>(&*storage).addr()
}

/// A real copy of the elements of `x` (`Tensor::force_contiguous`: exactly the elements its
/// layout covers, so a copy of a slice of a cache buffer costs the slice, not the buffer), so
/// that in-place writes to either array never reach the other.
pub(crate) fn deep_copy(x: &Tensor) -> Result<Tensor> {
    Ok(x.force_contiguous()?)
}
