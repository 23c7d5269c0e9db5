//! The op catalogue: one value per [`Backend`] op call (with its parameters), applied the same
//! way to the backend under test and to the reference backend.
//!
//! Rust closures cannot be generic, so a check cannot hand "the same closure" to two backend
//! types; an [`Op`] is the data of the call, and [`Op::apply`] makes it on any backend.

use mtp_core::{
    AttentionMask, Backend, BinaryOp, CompareOp, CoreError, DType, ReduceOp, SortOrder, UnaryOp,
};

/// One op call on array inputs; see [`Op::apply`] for the inputs each takes.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// The input itself: checks creation (`from_*`) and host reads of every layout.
    Identity,
    /// `cast(x, dtype)`.
    Cast(DType),
    /// `reshape(x, shape)`.
    Reshape(Vec<usize>),
    /// `transpose(x, a, b)`.
    Transpose(usize, usize),
    /// `slice(x, axis, start, len)`.
    Slice {
        /// Axis.
        axis: usize,
        /// First element.
        start: usize,
        /// Element count.
        len: usize,
    },
    /// `concat(inputs, axis)` over every input.
    Concat(usize),
    /// `binary(a, b, op)`.
    Binary(BinaryOp),
    /// The derived `add`/`sub`/`mul`/`div` helper for this op (only the four arithmetic ops).
    Derived(BinaryOp),
    /// `unary(x, op)`.
    Unary(UnaryOp),
    /// `compare(a, b, op)`.
    Compare(CompareOp),
    /// `where_cond(cond, a, b)`.
    WhereCond,
    /// `reduce(x, axis, op)`.
    Reduce(usize, ReduceOp),
    /// `argmax(x, axis)`.
    Argmax(usize),
    /// `argsort(x, axis, order)`.
    Argsort(usize, SortOrder),
    /// `cumsum(x, axis)`.
    Cumsum(usize),
    /// `embedding(table, ids)`.
    Embedding,
    /// `take_along_axis(x, indices, axis)`.
    TakeAlongAxis(usize),
    /// `scatter(x, indices, src, axis)`.
    Scatter(usize),
    /// `matmul(a, b)`.
    Matmul,
    /// `linear(x, w)`.
    Linear,
    /// `gather_linear(x, w, indices)`: row `r` of `x` times expert `indices[r]` of `w`.
    GatherLinear,
    /// `write_slice(dst, src, axis, start)`; the output is `dst` after the write.
    WriteSlice {
        /// Axis.
        axis: usize,
        /// Where the write starts.
        start: usize,
    },
    /// `deep_copy(x)`.
    DeepCopy,
    /// `affine(x, mul, add)`.
    Affine {
        /// Factor.
        mul: f32,
        /// Offset.
        add: f32,
    },
    /// `squeeze_last(x)`.
    SqueezeLast,
    /// `softmax(x, axis)`.
    Softmax(usize),
    /// `log_softmax(x, axis)`.
    LogSoftmax(usize),
    /// `gelu_tanh(x)`.
    GeluTanh,
    /// `rms_norm(x, weight, eps)`: one input for no weight, two for `x` and the weight.
    RmsNorm {
        /// Epsilon.
        eps: f32,
    },
    /// `rope(x, start, inv_freq)`.
    Rope {
        /// Position of the first row.
        start: usize,
        /// Inverse frequencies (`r / 2` entries).
        inv_freq: Vec<f32>,
    },
    /// `attention(q, k, v, mask, scale)`.
    Attention {
        /// The mask.
        mask: AttentionMask,
        /// Score scale.
        scale: f32,
    },
    /// `top_k(x, k)`: two outputs, values then indices.
    TopK(usize),
}

impl Op {
    /// Make this call on `backend` with `inputs` (their count must fit the op) and return its
    /// outputs (one array; two for [`Op::TopK`]).
    pub fn apply<X: Backend>(
        &self,
        backend: &X,
        inputs: &[&X::Array],
    ) -> Result<Vec<X::Array>, X::Error> {
        let b = backend;
        let one = |r: Result<X::Array, X::Error>| r.map(|a| vec![a]);
        match (self, inputs) {
            (Op::Identity, [x]) => Ok(vec![(*x).clone()]),
            (Op::Cast(d), [x]) => one(b.cast(x, *d)),
            (Op::Reshape(s), [x]) => one(b.reshape(x, s)),
            (Op::Transpose(p, q), [x]) => one(b.transpose(x, *p, *q)),
            (Op::Slice { axis, start, len }, [x]) => one(b.slice(x, *axis, *start, *len)),
            (Op::Concat(axis), xs) => one(b.concat(xs, *axis)),
            (Op::Binary(op), [x, y]) => one(b.binary(x, y, *op)),
            (Op::Derived(BinaryOp::Add), [x, y]) => one(b.add(x, y)),
            (Op::Derived(BinaryOp::Sub), [x, y]) => one(b.sub(x, y)),
            (Op::Derived(BinaryOp::Mul), [x, y]) => one(b.mul(x, y)),
            (Op::Derived(BinaryOp::Div), [x, y]) => one(b.div(x, y)),
            (Op::Unary(op), [x]) => one(b.unary(x, *op)),
            (Op::Compare(op), [x, y]) => one(b.compare(x, y, *op)),
            (Op::WhereCond, [c, x, y]) => one(b.where_cond(c, x, y)),
            (Op::Reduce(axis, op), [x]) => one(b.reduce(x, *axis, *op)),
            (Op::Argmax(axis), [x]) => one(b.argmax(x, *axis)),
            (Op::Argsort(axis, order), [x]) => one(b.argsort(x, *axis, *order)),
            (Op::Cumsum(axis), [x]) => one(b.cumsum(x, *axis)),
            (Op::Embedding, [t, ids]) => one(b.embedding(t, ids)),
            (Op::TakeAlongAxis(axis), [x, i]) => one(b.take_along_axis(x, i, *axis)),
            (Op::Scatter(axis), [x, i, s]) => one(b.scatter(x, i, s, *axis)),
            (Op::Matmul, [x, y]) => one(b.matmul(x, y)),
            (Op::Linear, [x, w]) => one(b.linear(x, w)),
            (Op::GatherLinear, [x, w, i]) => one(b.gather_linear(x, w, i)),
            (Op::WriteSlice { axis, start }, [dst, src]) => {
                let mut out = (*dst).clone();
                b.write_slice(&mut out, src, *axis, *start)?;
                Ok(vec![out])
            }
            (Op::DeepCopy, [x]) => one(b.deep_copy(x)),
            (Op::Affine { mul, add }, [x]) => one(b.affine(x, *mul, *add)),
            (Op::SqueezeLast, [x]) => one(b.squeeze_last(x)),
            (Op::Softmax(axis), [x]) => one(b.softmax(x, *axis)),
            (Op::LogSoftmax(axis), [x]) => one(b.log_softmax(x, *axis)),
            (Op::GeluTanh, [x]) => one(b.gelu_tanh(x)),
            (Op::RmsNorm { eps }, [x]) => one(b.rms_norm(x, None, *eps)),
            (Op::RmsNorm { eps }, [x, w]) => one(b.rms_norm(x, Some(w), *eps)),
            (Op::Rope { start, inv_freq }, [x]) => one(b.rope(x, *start, inv_freq)),
            (Op::Attention { mask, scale }, [q, k, v]) => one(b.attention(q, k, v, mask, *scale)),
            (Op::TopK(k), [x]) => {
                let (values, indices) = b.top_k(x, *k)?;
                Ok(vec![values, indices])
            }
            _ => Err(CoreError::InvalidArgument {
                op: "conformance suite",
                message: format!("{self} does not take {} inputs", inputs.len()),
            }
            .into()),
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Identity => write!(f, "from_* and host reads"),
            Op::Cast(d) => write!(f, "cast(to {d})"),
            Op::Reshape(s) => write!(f, "reshape(to {s:?})"),
            Op::Transpose(a, b) => write!(f, "transpose({a}, {b})"),
            Op::Slice { axis, start, len } => {
                write!(f, "slice(axis {axis}, start {start}, len {len})")
            }
            Op::Concat(axis) => write!(f, "concat(axis {axis})"),
            Op::Binary(op) => write!(f, "binary({op:?})"),
            Op::Derived(op) => write!(f, "{}", format!("{op:?}").to_lowercase()),
            Op::Unary(op) => write!(f, "unary({op:?})"),
            Op::Compare(op) => write!(f, "compare({op:?})"),
            Op::WhereCond => write!(f, "where_cond"),
            Op::Reduce(axis, op) => write!(f, "reduce({op:?}, axis {axis})"),
            Op::Argmax(axis) => write!(f, "argmax(axis {axis})"),
            Op::Argsort(axis, order) => write!(f, "argsort({order:?}, axis {axis})"),
            Op::Cumsum(axis) => write!(f, "cumsum(axis {axis})"),
            Op::Embedding => write!(f, "embedding"),
            Op::TakeAlongAxis(axis) => write!(f, "take_along_axis(axis {axis})"),
            Op::Scatter(axis) => write!(f, "scatter(axis {axis})"),
            Op::Matmul => write!(f, "matmul"),
            Op::Linear => write!(f, "linear"),
            Op::GatherLinear => write!(f, "gather_linear"),
            Op::WriteSlice { axis, start } => write!(f, "write_slice(axis {axis}, start {start})"),
            Op::DeepCopy => write!(f, "deep_copy"),
            Op::Affine { mul, add } => write!(f, "affine(mul {mul}, add {add})"),
            Op::SqueezeLast => write!(f, "squeeze_last"),
            Op::Softmax(axis) => write!(f, "softmax(axis {axis})"),
            Op::LogSoftmax(axis) => write!(f, "log_softmax(axis {axis})"),
            Op::GeluTanh => write!(f, "gelu_tanh"),
            Op::RmsNorm { eps } => write!(f, "rms_norm(eps {eps:e})"),
            Op::Rope { start, inv_freq } => {
                write!(f, "rope(start {start}, {} frequencies)", inv_freq.len())
            }
            Op::Attention { mask, scale } => write!(
                f,
                "attention({:?}, window {:?}, query_start {}, key_start {}, scale {scale})",
                mask.causality, mask.window, mask.query_start, mask.key_start
            ),
            Op::TopK(k) => write!(f, "top_k(k {k})"),
        }
    }
}
