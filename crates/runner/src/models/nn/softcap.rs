//! Logit soft-capping: `cap * tanh(x / cap)` (Gemma 2/3/4's `final_logit_softcapping`).

use mtp_core::{Backend, UnaryOp};

/// `cap * tanh(x / cap)` when `cap` is set and positive (HF skips a cap of `None`, and a cap of
/// 0 would divide by zero), else `x` unchanged.
pub fn soft_cap<B: Backend>(b: &B, x: B::Array, cap: Option<f64>) -> Result<B::Array, B::Error> {
    match cap {
        Some(cap) if cap > 0.0 => {
            let cap = b.scalar(cap as f32, b.dtype(&x))?;
            let t = b.unary(&b.div(&x, &cap)?, UnaryOp::Tanh)?;
            b.mul(&t, &cap)
        }
        _ => Ok(x),
    }
}
