//! Attention over a long context one block of keys at a time, with an online softmax.
//!
//! A prefill chunk of `tq` queries over `tk` cached keys would materialise `[heads, tq, tk]`
//! scores and as many probabilities: at 32k positions that is hundreds of megabytes per layer,
//! growing with the context. Here the keys are taken [`ATTENTION_KEY_BLOCK`] at a time and the
//! softmax is normalised online (Milakov & Gimelshein 2018, "Online normalizer calculation for
//! softmax"; the tiling of FlashAttention, Dao et al. 2022): for each block the running row
//! maximum `m`, the running sum `l` of `exp(s - m)` and the running output `o` are rescaled by
//! `exp(m_old - m_new)` and the block's terms added, so the transient scores are
//! `[heads, tq, ATTENTION_KEY_BLOCK]` whatever the context. The result equals the one-shot
//! softmax up to float rounding (the sums are accumulated in another order); the running values
//! are kept in `f32` whatever the compute dtype.

use crate::attention::AttentionBias;
use crate::backend::{Backend, BinaryOp, ReduceOp, UnaryOp};
use crate::DType;

/// Keys per block of [`blocked_attention_with_bias`]; attention over at most this many keys
/// (every decode step and short prompt) takes the one-shot path.
pub const ATTENTION_KEY_BLOCK: usize = 2048;

/// Attention of `q` `[b, hq, tq, d]` over `k` `[b, hkv, tk, d]` and `v` `[b, hkv, tk, dv]`
/// (grouped-query: `hq` a multiple of `hkv`) with the additive mask of `bias`, `key_block` keys
/// at a time with an online softmax; see the [module docs](self). The shapes are those
/// [`default_attention_with_bias`](crate::backend::default_attention_with_bias) checks; a row
/// that sees no key gives zeros, as there.
pub fn blocked_attention_with_bias<B: Backend>(
    backend: &B,
    q: &B::Array,
    k: &B::Array,
    v: &B::Array,
    bias: &AttentionBias<B>,
    scale: f32,
    key_block: usize,
) -> Result<B::Array, B::Error> {
    let (qs, ks, vs) = (backend.shape(q), backend.shape(k), backend.shape(v));
    let (&[b, hq, tq, d], &[_, hkv, tk, _], &[_, _, _, dv]) = (&qs[..], &ks[..], &vs[..]) else {
        return Err(crate::CoreError::ShapeMismatch {
            op: "attention",
            lhs: qs,
            rhs: ks,
        }
        .into());
    };
    let out_dtype = backend.dtype(q);
    let to_f32 = |x: &B::Array| -> Result<B::Array, B::Error> {
        if backend.dtype(x) == DType::F32 {
            Ok(x.clone())
        } else {
            backend.cast(x, DType::F32)
        }
    };
    let groups = hq / hkv.max(1);
    let rows = groups * tq;
    // The query heads of one KV head folded into the row axis: [b, hkv, groups * tq, d].
    let qg = to_f32(&backend.reshape(q, &[b, hkv, rows, d])?)?;
    let table = bias.table().map(to_f32).transpose()?;
    // The running maximum starts finite, so that a block a row cannot see (all scores -inf)
    // gives exp(-inf) = 0 rather than exp(-inf - -inf) = NaN.
    let mut max = backend.full(&[b, hkv, rows, 1], -f32::MAX, DType::F32)?;
    let mut sum = backend.full(&[b, hkv, rows, 1], 0.0, DType::F32)?;
    let mut out = backend.full(&[b, hkv, rows, dv], 0.0, DType::F32)?;
    let key_block = key_block.max(1);
    let mut start = 0;
    while start < tk {
        let len = key_block.min(tk - start);
        let kb = to_f32(&backend.slice(k, 2, start, len)?)?;
        let vb = to_f32(&backend.slice(v, 2, start, len)?)?;
        let kt = backend.transpose(&kb, 2, 3)?;
        let mut scores = backend.affine(&backend.matmul(&qg, &kt)?, scale, 0.0)?;
        if let Some(table) = &table {
            // [b * hkv * groups, tq, len] + [tq, len]: one table slice serves every head.
            let part = backend.slice(table, 1, start, len)?;
            let per_head = backend.reshape(&scores, &[b * hkv * groups, tq, len])?;
            scores = backend.reshape(&backend.add(&per_head, &part)?, &[b, hkv, rows, len])?;
        }
        let block_max = backend.reduce(&scores, 3, ReduceOp::Max)?;
        let new_max = backend.binary(&max, &block_max, BinaryOp::Maximum)?;
        let probs = backend.unary(&backend.sub(&scores, &new_max)?, UnaryOp::Exp)?;
        let rescale = backend.unary(&backend.sub(&max, &new_max)?, UnaryOp::Exp)?;
        sum = backend.add(
            &backend.mul(&sum, &rescale)?,
            &backend.reduce(&probs, 3, ReduceOp::Sum)?,
        )?;
        out = backend.add(&backend.mul(&out, &rescale)?, &backend.matmul(&probs, &vb)?)?;
        max = new_max;
        start += len;
    }
    // A row that saw no key has sum 0 and output 0: dividing by max(sum, tiny) keeps it 0.
    let floor = backend.scalar(f32::MIN_POSITIVE, DType::F32)?;
    let sum = backend.binary(&sum, &floor, BinaryOp::Maximum)?;
    let out = backend.div(&out, &sum)?;
    let out = if out_dtype == DType::F32 {
        out
    } else {
        backend.cast(&out, out_dtype)?
    };
    backend.reshape(&out, &[b, hq, tq, dv])
}
