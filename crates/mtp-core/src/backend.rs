//! The backend contract: one trait, one array type with a runtime dtype, fallible ops.
//!
//! # Design
//!
//! A backend is a small handle (it knows its device) whose methods are the array operations the
//! decode loops, caches, acceptance math and a Gemma-style transformer need. Every op returns
//! `Result<_, Self::Error>`. Ops split in three groups:
//!
//! * **required**: creation, host reads, shape ops, elementwise/broadcast arithmetic, reductions,
//!   indexing and matmul: the small set every backend implements;
//! * **fused ops a backend may accelerate** ([`Backend::softmax`], [`Backend::rms_norm`],
//!   [`Backend::rope`], [`Backend::attention`], [`Backend::top_k`], [`Backend::gelu_tanh`]): they
//!   have portable default bodies written with the required ops, so *adding a kernel* means
//!   overriding one method and running the conformance suite against the reference backend;
//! * **quantized weights** ([`Backend::quant_weight`], [`Backend::quant_linear`],
//!   [`Backend::quant_embedding`]): a backend prepares a host [`QuantTensor`] in its own
//!   representation ([`Backend::QuantWeight`]); the default matmul and row lookup dequantize with
//!   mtp-core's exact decoders, so the reference backend is the oracle and a quantized kernel is
//!   one override;
//! * **hooks** for lazy or asynchronous backends ([`Backend::eval`], [`Backend::async_eval`]) and
//!   for in-place caches ([`Backend::write_slice`], [`Backend::deep_copy`]), no-ops or functional
//!   defaults on eager backends.
//!
//! # Conventions
//!
//! * Shapes are row-major `&[usize]`; axes are `usize` counted from the front.
//! * Binary ops broadcast with NumPy rules; a 0-d array is a scalar.
//! * Reductions, `argmax` and `cumsum` keep the reduced axis (size 1 for reductions).
//! * Index arrays are `U32` or `I32`; masks produced by comparisons are `U32` (0 or 1).
//! * Host reads ([`Backend::to_vec_f32`], [`Backend::to_vec_u32`]) are the only sync points.
//!
//! # Threading
//!
//! The trait asks for no `Sync` on arrays: MLX arrays must stay on one thread. Engines and models
//! take `&B` and never send arrays across threads.

use std::sync::Arc;

pub use crate::attention::{AttentionBias, AttentionMask, Causality};
use crate::attention_blocked::{blocked_attention_with_bias, ATTENTION_KEY_BLOCK};
use crate::quant::QuantTensor;
use crate::rotary::RopeCache;
use crate::{CoreError, DType};

/// Elementwise binary operations (broadcasting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`
    Div,
    /// `max(a, b)`
    Maximum,
    /// `min(a, b)`
    Minimum,
}

/// Elementwise unary operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `e^x`
    Exp,
    /// natural log
    Log,
    /// square root
    Sqrt,
    /// `1 / sqrt(x)`
    Rsqrt,
    /// hyperbolic tangent
    Tanh,
    /// absolute value
    Abs,
}

/// Elementwise comparisons; the result is a `U32` mask of 0/1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareOp {
    /// `a == b`
    Eq,
    /// `a != b`
    Ne,
    /// `a < b`
    Lt,
    /// `a <= b`
    Le,
    /// `a > b`
    Gt,
    /// `a >= b`
    Ge,
}

/// Reductions along one axis (the axis is kept with size 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// sum
    Sum,
    /// arithmetic mean
    Mean,
    /// maximum
    Max,
    /// minimum
    Min,
}

/// Sort direction for [`Backend::argsort`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SortOrder {
    /// smallest first
    Ascending,
    /// largest first
    Descending,
}

/// The element count of `shape`, or an error naming `op` when it overflows `usize`.
pub fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize, CoreError> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| CoreError::InvalidArgument {
            op,
            message: format!("shape {shape:?} is too large"),
        })
}

/// The byte width of one stored value of the float dtype `src` (`F32`: 4, `F16` / `BF16`: 2), or
/// an error naming `op` for an integer dtype.
fn stored_float_width(op: &'static str, src: DType) -> Result<usize, CoreError> {
    match src {
        DType::F32 => Ok(4),
        DType::F16 | DType::BF16 => Ok(2),
        other => Err(CoreError::InvalidArgument {
            op,
            message: format!("stored values of dtype {other} are not floats"),
        }),
    }
}

/// The number of whole `src` values in `len` bytes, or an error naming `op` (an integer `src`,
/// or bytes that end inside a value).
fn stored_float_count(op: &'static str, len: usize, src: DType) -> Result<usize, CoreError> {
    let width = stored_float_width(op, src)?;
    if !len.is_multiple_of(width) {
        return Err(CoreError::InvalidArgument {
            op,
            message: format!("{len} bytes do not hold whole {src} values"),
        });
    }
    Ok(len / width)
}

/// The portable body of [`Backend::attention_with_bias`] (query heads folded per KV head, two
/// matmuls, the table added, softmax, blind rows zeroed), for a backend whose own kernel covers
/// only some shapes. Several queries over more than [`ATTENTION_KEY_BLOCK`] keys (a prefill
/// chunk late in a long prompt) go through [`blocked_attention_with_bias`], whose transient
/// scores do not grow with the context.
pub fn default_attention_with_bias<B: Backend>(
    backend: &B,
    q: &B::Array,
    k: &B::Array,
    v: &B::Array,
    bias: &AttentionBias<B>,
    scale: f32,
) -> Result<B::Array, B::Error> {
    let qs = backend.shape(q);
    let ks = backend.shape(k);
    let vs = backend.shape(v);
    let ([b, hq, tq, d], [kb, hkv, tk, kd], [vb, vh, vt, dv]) = (&qs[..], &ks[..], &vs[..]) else {
        return Err(CoreError::ShapeMismatch {
            op: "attention",
            lhs: qs,
            rhs: ks,
        }
        .into());
    };
    let consistent = b == kb && b == vb && d == kd && hkv == vh && tk == vt;
    let fits = bias.tq() == *tq && bias.tk() == *tk;
    if !consistent || !fits || *hkv == 0 || hq % hkv != 0 {
        return Err(CoreError::ShapeMismatch {
            op: "attention",
            lhs: qs,
            rhs: ks,
        }
        .into());
    }
    let (b, hq, tq, d, hkv, tk, dv) = (*b, *hq, *tq, *d, *hkv, *tk, *dv);
    if tq > 1 && tk > ATTENTION_KEY_BLOCK {
        // A prefill chunk over a long context: scores one block of keys at a time.
        return blocked_attention_with_bias(backend, q, k, v, bias, scale, ATTENTION_KEY_BLOCK);
    }
    let groups = hq / hkv;
    // Fold the query heads of one KV head into the row axis: [b, hkv, groups * tq, d].
    let qg = backend.reshape(q, &[b, hkv, groups * tq, d])?;
    let kt = backend.transpose(k, 2, 3)?;
    let mut scores = backend.affine(&backend.matmul(&qg, &kt)?, scale, 0.0)?;
    let dtype = backend.dtype(&scores);
    if let Some(table) = bias.table() {
        // [b * hkv * groups, tq, tk] + [tq, tk]: the one table serves every head.
        let rows = backend.reshape(&scores, &[b * hkv * groups, tq, tk])?;
        let table = if backend.dtype(table) == dtype {
            table.clone()
        } else {
            backend.cast(table, dtype)?
        };
        scores = backend.reshape(&backend.add(&rows, &table)?, &[b, hkv, groups * tq, tk])?;
    }
    let mut probs = backend.softmax(&scores, 3)?;
    if bias.has_blind_rows() {
        // Rows with no visible key are NaN after softmax (-inf - -inf); zero them.
        let finite = backend.compare(&probs, &probs, CompareOp::Eq)?;
        let zeros = backend.scalar(0.0, dtype)?;
        probs = backend.where_cond(&finite, &probs, &zeros)?;
    }
    let out = backend.matmul(&probs, v)?;
    backend.reshape(&out, &[b, hq, tq, dv])
}

/// The portable body of [`Backend::linear`] (a transpose of `w` and a matmul), for a backend
/// whose own version covers only some arrays.
pub fn default_linear<B: Backend>(b: &B, x: &B::Array, w: &B::Array) -> Result<B::Array, B::Error> {
    let x_shape = b.shape(x);
    let w_shape = b.shape(w);
    let (Some(&inner), [out, w_in]) = (x_shape.last(), w_shape.as_slice()) else {
        return Err(CoreError::ShapeMismatch {
            op: "linear",
            lhs: x_shape,
            rhs: w_shape,
        }
        .into());
    };
    if inner != *w_in {
        return Err(CoreError::ShapeMismatch {
            op: "linear",
            lhs: x_shape,
            rhs: w_shape,
        }
        .into());
    }
    let rows: usize = x_shape[..x_shape.len() - 1].iter().product();
    let flat = b.reshape(x, &[rows, inner])?;
    let wt = b.transpose(w, 0, 1)?;
    let y = b.matmul(&flat, &wt)?;
    let mut out_shape = x_shape[..x_shape.len() - 1].to_vec();
    out_shape.push(*out);
    b.reshape(&y, &out_shape)
}

/// The portable body of [`Backend::non_finite_rows`] (NaN lifted to +∞, then the row maximum
/// compared with ±∞), for a backend whose fused version covers only some arrays.
pub fn default_non_finite_rows<B: Backend>(
    b: &B,
    x: &B::Array,
    axis: usize,
) -> Result<B::Array, B::Error> {
    let infinity = b.scalar(f32::INFINITY, b.dtype(x))?;
    let nan = b.compare(x, x, CompareOp::Ne)?;
    let lifted = b.where_cond(&nan, &infinity, x)?;
    let max = b.reduce(&lifted, axis, ReduceOp::Max)?;
    b.compare(&b.unary(&max, UnaryOp::Abs)?, &infinity, CompareOp::Eq)
}

/// An error naming `op` unless `len` stored bytes of the float dtype `src` hold whole values that
/// exactly fill `shape` and `dtype` is a float dtype: the argument rule of every backend's
/// [`Backend::from_le_bytes`].
pub fn check_le_source(
    op: &'static str,
    len: usize,
    src: DType,
    shape: &[usize],
    dtype: DType,
) -> Result<(), CoreError> {
    check_f32_source(op, stored_float_count(op, len, src)?, shape, dtype)
}

/// Little-endian `F32`, `F16` or `BF16` values as `f32` (exact: every half value is an `f32`).
pub fn decode_le_floats(op: &'static str, bytes: &[u8], src: DType) -> Result<Vec<f32>, CoreError> {
    stored_float_count(op, bytes.len(), src)?;
    Ok(match src {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    })
}

/// An error naming `op` unless `len` host values exactly fill `shape` (for the `from_*`
/// constructors of every backend).
pub fn check_data_len(op: &'static str, len: usize, shape: &[usize]) -> Result<(), CoreError> {
    let numel = checked_numel(op, shape)?;
    if numel != len {
        return Err(CoreError::InvalidArgument {
            op,
            message: format!("{len} values for shape {shape:?} ({numel} elements)"),
        });
    }
    Ok(())
}

/// An error naming `op` unless `dtype` is a float dtype and `len` host values exactly fill
/// `shape`: the argument rule of every backend's `from_f32`.
pub fn check_f32_source(
    op: &'static str,
    len: usize,
    shape: &[usize],
    dtype: DType,
) -> Result<(), CoreError> {
    if !dtype.is_float() {
        return Err(CoreError::DTypeMismatch {
            op,
            expected: "a float dtype",
            got: dtype,
        });
    }
    check_data_len(op, len, shape)
}

/// The inclusive range of values of an integer dtype (`I32` for the float dtypes).
pub fn int_range(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::U32 => (0, i64::from(u32::MAX)),
        _ => (i64::from(i32::MIN), i64::from(i32::MAX)),
    }
}

/// `v` converted to the integer `dtype`, truncating toward zero; non-finite or out-of-range
/// values are an error naming `op` (the rule of every backend's `full` with an integer dtype).
pub fn float_to_int(op: &'static str, dtype: DType, v: f64) -> Result<i64, CoreError> {
    let (lo, hi) = int_range(dtype);
    let t = v.trunc();
    if !t.is_finite() || t < lo as f64 || t > hi as f64 {
        return Err(CoreError::InvalidArgument {
            op,
            message: format!("{v} does not fit {dtype}"),
        });
    }
    Ok(t as i64)
}

/// `I32` values read back by [`Backend::to_vec_u32`] as `u32`s; a negative one is an error
/// naming `op`.
pub fn i32s_as_u32s(op: &'static str, values: Vec<i32>) -> Result<Vec<u32>, CoreError> {
    values
        .into_iter()
        .map(|v| {
            u32::try_from(v).map_err(|_| CoreError::InvalidArgument {
                op,
                message: format!("value {v} is not a u32"),
            })
        })
        .collect()
}

/// Check a [`Backend::write_slice`] of a `src` shape into a `dst` shape along `axis` at `start`
/// (same rank, equal dims off `axis`, fits inside `dst`) and return the written length.
pub fn check_write_slice(
    dst: &[usize],
    src: &[usize],
    axis: usize,
    start: usize,
) -> Result<usize, CoreError> {
    let rank = dst.len();
    if axis >= rank {
        return Err(CoreError::AxisOutOfRange {
            op: "write_slice",
            axis,
            rank,
        });
    }
    let len = src.get(axis).copied().unwrap_or(0);
    let fits = start.checked_add(len).is_some_and(|end| end <= dst[axis]);
    let others_match = src.len() == rank
        && dst
            .iter()
            .zip(src)
            .enumerate()
            .all(|(i, (d, s))| i == axis || d == s);
    if !fits || !others_match {
        return Err(CoreError::ShapeMismatch {
            op: "write_slice",
            lhs: dst.to_vec(),
            rhs: src.to_vec(),
        });
    }
    Ok(len)
}

/// The cos/sin tables of a [`Backend::rope`] call, computed on the host in `f32` (shared by the
/// default body and backend kernels so every backend rotates by the same angles).
#[derive(Debug, Clone, PartialEq)]
pub struct RopeTables {
    /// Positions (rows of the tables).
    pub t: usize,
    /// Head dimension of `x`.
    pub head_dim: usize,
    /// Rotated pairs (`inv_freq.len()`); dims `2 * half ..` pass through.
    pub half: usize,
    /// `cos(position * inv_freq[i])`, row-major `[t, half]`.
    pub cos: Vec<f32>,
    /// `sin(position * inv_freq[i])`, row-major `[t, half]`.
    pub sin: Vec<f32>,
}

impl RopeTables {
    /// Check `shape` (`[b, h, t, d]`) against `inv_freq` and build the tables for positions
    /// `start .. start + t`.
    pub fn new(shape: &[usize], start: usize, inv_freq: &[f32]) -> Result<Self, CoreError> {
        let [_, _, t, d] = shape[..] else {
            return Err(CoreError::InvalidArgument {
                op: "rope",
                message: format!("expected [b, h, t, d], got {shape:?}"),
            });
        };
        let half = inv_freq.len();
        if 2 * half > d || half == 0 {
            return Err(CoreError::InvalidArgument {
                op: "rope",
                message: format!("{half} frequencies do not fit head dim {d}"),
            });
        }
        let mut cos = Vec::with_capacity(t * half);
        let mut sin = Vec::with_capacity(t * half);
        for pos in start..start + t {
            for &f in inv_freq {
                let angle = pos as f32 * f;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        Ok(Self {
            t,
            head_dim: d,
            half,
            cos,
            sin,
        })
    }
}

/// When a backend's ops do their work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Execution {
    /// Each op computes its result before it returns (the reference backend, candle on the CPU).
    #[default]
    Eager,
    /// Ops record a graph; [`Backend::eval`], [`Backend::async_eval`] or a host read runs it
    /// (MLX).
    Lazy,
}

/// The array backend every model, cache and decode loop is written against.
///
/// See the [module docs](self) for the conventions. Implementations: the host
/// [`ReferenceBackend`](crate::reference::ReferenceBackend) in this crate (the oracle of every
/// parity test), candle in `backend-candle`, MLX in `backend-mlx`.
// `from_*` constructors take the backend handle (it knows the device), not a value to convert.
#[allow(clippy::wrong_self_convention)]
pub trait Backend: Clone + std::fmt::Debug + 'static {
    /// Where arrays live (a CPU, a GPU ordinal, ...).
    type Device: Clone + std::fmt::Debug + 'static;
    /// One array type with a runtime [`DType`]. Cloning is cheap (reference counted).
    type Array: Clone + std::fmt::Debug + 'static;
    /// The backend's error; backend-neutral code reports its own problems as [`CoreError`].
    type Error: std::error::Error + Send + Sync + 'static + From<CoreError>;
    /// A quantized weight prepared for this backend's kernels (by [`quant_weight`](Self::quant_weight)).
    /// It keeps the host [`QuantTensor`] it came from ([`quant_source`](Self::quant_source)),
    /// which the portable defaults decode. Backends without quantized kernels use
    /// `Arc<QuantTensor>` itself.
    type QuantWeight: Clone + std::fmt::Debug + 'static;

    /// A short name for logs and reports ("reference", "candle-cpu", ...).
    fn name(&self) -> String;
    /// The device this backend computes on.
    fn device(&self) -> &Self::Device;

    // ------------------------------------------------------------------ creation and host reads

    /// An array from host `f32` data, stored as `dtype` (a float dtype).
    fn from_f32(
        &self,
        data: &[f32],
        shape: &[usize],
        dtype: DType,
    ) -> Result<Self::Array, Self::Error>;
    /// An array from stored little-endian values (`src`: `F32`, `F16` or `BF16`, the layout of a
    /// safetensors tensor), stored as `dtype` (a float dtype). This is how weights leave a
    /// memory-mapped file: the default decodes them to host `f32` and calls
    /// [`from_f32`](Self::from_f32); backends override it to copy the bytes to the device as
    /// stored and convert there, so no `f32` copy of a half-precision weight exists on the host.
    fn from_le_bytes(
        &self,
        bytes: &[u8],
        src: DType,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Self::Array, Self::Error> {
        let values = decode_le_floats("from_le_bytes", bytes, src)?;
        self.from_f32(&values, shape, dtype)
    }
    /// A `U32` array from host data.
    fn from_u32(&self, data: &[u32], shape: &[usize]) -> Result<Self::Array, Self::Error>;
    /// An `I32` array from host data.
    fn from_i32(&self, data: &[i32], shape: &[usize]) -> Result<Self::Array, Self::Error>;
    /// An array of `shape` filled with `value`, stored as `dtype`.
    fn full(&self, shape: &[usize], value: f32, dtype: DType) -> Result<Self::Array, Self::Error>;
    /// Every element as `f32`, row-major (a sync point).
    fn to_vec_f32(&self, x: &Self::Array) -> Result<Vec<f32>, Self::Error>;
    /// Every element of an integer array as `u32`, row-major (a sync point). Negative values are
    /// an error.
    fn to_vec_u32(&self, x: &Self::Array) -> Result<Vec<u32>, Self::Error>;
    /// The shape of `x`.
    fn shape(&self, x: &Self::Array) -> Vec<usize>;
    /// The dtype of `x`.
    fn dtype(&self, x: &Self::Array) -> DType;
    /// `x` converted to `dtype` (float→int truncates toward zero).
    fn cast(&self, x: &Self::Array, dtype: DType) -> Result<Self::Array, Self::Error>;

    // ------------------------------------------------------------------ shape ops

    /// `x` with a new shape of the same element count.
    fn reshape(&self, x: &Self::Array, shape: &[usize]) -> Result<Self::Array, Self::Error>;
    /// `x` with axes `a` and `b` swapped.
    fn transpose(&self, x: &Self::Array, a: usize, b: usize) -> Result<Self::Array, Self::Error>;
    /// `len` elements of `x` along `axis` starting at `start`.
    fn slice(
        &self,
        x: &Self::Array,
        axis: usize,
        start: usize,
        len: usize,
    ) -> Result<Self::Array, Self::Error>;
    /// The arrays joined along `axis` (all other dims equal, one dtype).
    fn concat(&self, xs: &[&Self::Array], axis: usize) -> Result<Self::Array, Self::Error>;

    // ------------------------------------------------------------------ elementwise

    /// Elementwise binary op with broadcasting. Both operands share a dtype.
    fn binary(
        &self,
        a: &Self::Array,
        b: &Self::Array,
        op: BinaryOp,
    ) -> Result<Self::Array, Self::Error>;
    /// Elementwise unary op on a float array.
    fn unary(&self, x: &Self::Array, op: UnaryOp) -> Result<Self::Array, Self::Error>;
    /// Elementwise comparison with broadcasting; a `U32` mask of 0/1.
    fn compare(
        &self,
        a: &Self::Array,
        b: &Self::Array,
        op: CompareOp,
    ) -> Result<Self::Array, Self::Error>;
    /// `cond != 0 ? a : b`, broadcasting all three.
    fn where_cond(
        &self,
        cond: &Self::Array,
        a: &Self::Array,
        b: &Self::Array,
    ) -> Result<Self::Array, Self::Error>;

    // ------------------------------------------------------------------ reductions and scans

    /// Reduce along `axis`, keeping it with size 1.
    fn reduce(
        &self,
        x: &Self::Array,
        axis: usize,
        op: ReduceOp,
    ) -> Result<Self::Array, Self::Error>;
    /// Index of the largest element along `axis` (first on ties), as `U32`, axis kept (size 1).
    fn argmax(&self, x: &Self::Array, axis: usize) -> Result<Self::Array, Self::Error>;
    /// Indices that sort `x` along `axis` (stable), as `U32`.
    fn argsort(
        &self,
        x: &Self::Array,
        axis: usize,
        order: SortOrder,
    ) -> Result<Self::Array, Self::Error>;
    /// Inclusive cumulative sum along `axis`.
    fn cumsum(&self, x: &Self::Array, axis: usize) -> Result<Self::Array, Self::Error>;

    // ------------------------------------------------------------------ indexing

    /// Rows of `table` (`[n, d]`) picked by integer `ids` of any shape: `ids.shape ++ [d]`.
    fn embedding(&self, table: &Self::Array, ids: &Self::Array)
        -> Result<Self::Array, Self::Error>;
    /// NumPy `take_along_axis`: `out[.., i, ..] = x[.., indices[.., i, ..], ..]` along `axis`;
    /// `indices` has the rank of `x` and equal dims except along `axis`.
    fn take_along_axis(
        &self,
        x: &Self::Array,
        indices: &Self::Array,
        axis: usize,
    ) -> Result<Self::Array, Self::Error>;
    /// NumPy `put_along_axis`: a copy of `x` with `src` written at `indices` along `axis`
    /// (`indices` and `src` share a shape).
    fn scatter(
        &self,
        x: &Self::Array,
        indices: &Self::Array,
        src: &Self::Array,
        axis: usize,
    ) -> Result<Self::Array, Self::Error>;

    // ------------------------------------------------------------------ linear algebra

    /// Matrix product over the last two axes, broadcasting leading axes:
    /// `[.., m, k] x [.., k, n] -> [.., m, n]`.
    fn matmul(&self, a: &Self::Array, b: &Self::Array) -> Result<Self::Array, Self::Error>;

    // ------------------------------------------------------------------ quantized weights

    /// Prepare the quantized `tensor` (`[rows, cols]`) for [`quant_linear`](Self::quant_linear)
    /// and [`quant_embedding`](Self::quant_embedding) with activations of the compute `dtype`:
    /// upload its blocks for a kernel, re-express them in a format the backend's kernels take,
    /// or keep the host tensor (the portable choice).
    fn quant_weight(
        &self,
        tensor: Arc<QuantTensor>,
        dtype: DType,
    ) -> Result<Self::QuantWeight, Self::Error>;

    /// The host tensor a prepared weight was made from.
    fn quant_source<'w>(&self, w: &'w Self::QuantWeight) -> &'w QuantTensor;

    /// `x @ Wᵀ` for a quantized weight `W` (`[out, in]`; `x` is `[.., in]`), in `x`'s dtype.
    ///
    /// The default dequantizes `W` exactly ([`QuantTensor::dequantize`]) and calls
    /// [`linear`](Self::linear): the oracle every quantized kernel is compared with. Backends
    /// override it with their kernels.
    fn quant_linear(
        &self,
        x: &Self::Array,
        w: &Self::QuantWeight,
    ) -> Result<Self::Array, Self::Error> {
        let t = self.quant_source(w);
        let dense = self.from_f32(&t.dequantize(), &t.shape(), self.dtype(x))?;
        self.linear(x, &dense)
    }

    /// Rows of a quantized table `W` (`[rows, cols]`) picked by integer `ids` of any shape, as
    /// `dtype`: `ids.shape ++ [cols]`. Only the requested rows are decoded.
    ///
    /// The default reads `ids` on the host (a sync point) and decodes those rows with
    /// [`QuantTensor::dequantize_rows`]; an out-of-range id is an error.
    fn quant_embedding(
        &self,
        w: &Self::QuantWeight,
        ids: &Self::Array,
        dtype: DType,
    ) -> Result<Self::Array, Self::Error> {
        let t = self.quant_source(w);
        let mut shape = self.shape(ids);
        let rows: Vec<usize> = self
            .to_vec_u32(ids)?
            .into_iter()
            .map(|i| i as usize)
            .collect();
        let values = t.dequantize_rows(&rows).map_err(CoreError::from)?;
        shape.push(t.cols());
        self.from_f32(&values, &shape, dtype)
    }

    // ------------------------------------------------------------------ hooks

    /// The compute dtype this backend runs best for weights stored as `stored` (what a loader's
    /// "auto" dtype picks). The default is `F32`, the fastest and most exact on CPUs; GPU backends
    /// keep half-precision weights in their own dtype.
    fn preferred_dtype(&self, stored: DType) -> DType {
        let _ = stored;
        DType::F32
    }

    /// Whether ops run when called or build a graph that runs later (default: eager). Lazy
    /// backends get the engine's evaluation overlap (see `engine::EvalOverlap`).
    fn execution(&self) -> Execution {
        Execution::Eager
    }

    /// Force evaluation of lazy arrays (no-op on eager backends).
    fn eval(&self, _xs: &[&Self::Array]) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Start evaluating lazy arrays without waiting (no-op on eager backends).
    fn async_eval(&self, _xs: &[&Self::Array]) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Write `src` into `dst` along `axis` at `start` (`dst` keeps its shape). Backends with
    /// mutable storage override this to write in place; the default rebuilds `dst`.
    fn write_slice(
        &self,
        dst: &mut Self::Array,
        src: &Self::Array,
        axis: usize,
        start: usize,
    ) -> Result<(), Self::Error> {
        let dst_shape = self.shape(dst);
        let len = check_write_slice(&dst_shape, &self.shape(src), axis, start)?;
        let total = dst_shape[axis];
        let mut parts = Vec::with_capacity(3);
        let head = self.slice(dst, axis, 0, start)?;
        let tail = self.slice(dst, axis, start + len, total - start - len)?;
        if start > 0 {
            parts.push(&head);
        }
        parts.push(src);
        if start + len < total {
            parts.push(&tail);
        }
        *dst = self.concat(&parts, axis)?;
        Ok(())
    }

    /// A copy of `x` that later in-place writes to either array cannot affect. Backends whose
    /// arrays are immutable keep the default (a cheap clone).
    fn deep_copy(&self, x: &Self::Array) -> Result<Self::Array, Self::Error> {
        Ok(x.clone())
    }

    // ------------------------------------------------------------------ derived helpers

    /// `a + b`.
    fn add(&self, a: &Self::Array, b: &Self::Array) -> Result<Self::Array, Self::Error> {
        self.binary(a, b, BinaryOp::Add)
    }
    /// `a - b`.
    fn sub(&self, a: &Self::Array, b: &Self::Array) -> Result<Self::Array, Self::Error> {
        self.binary(a, b, BinaryOp::Sub)
    }
    /// `a * b`.
    fn mul(&self, a: &Self::Array, b: &Self::Array) -> Result<Self::Array, Self::Error> {
        self.binary(a, b, BinaryOp::Mul)
    }
    /// `a / b`.
    fn div(&self, a: &Self::Array, b: &Self::Array) -> Result<Self::Array, Self::Error> {
        self.binary(a, b, BinaryOp::Div)
    }

    /// A 0-d array holding `value` in `dtype`.
    fn scalar(&self, value: f32, dtype: DType) -> Result<Self::Array, Self::Error> {
        self.full(&[], value, dtype)
    }

    /// `x * mul + add`, elementwise, in `x`'s dtype.
    fn affine(&self, x: &Self::Array, mul: f32, add: f32) -> Result<Self::Array, Self::Error> {
        let dtype = self.dtype(x);
        let scaled = self.mul(x, &self.scalar(mul, dtype)?)?;
        if add == 0.0 {
            return Ok(scaled);
        }
        self.add(&scaled, &self.scalar(add, dtype)?)
    }

    /// `x @ w^T` for a linear layer with weight `w` of shape `[out, in]`; `x` is `[.., in]`.
    /// The default ([`default_linear`]) is a transpose and a [`matmul`](Self::matmul).
    fn linear(&self, x: &Self::Array, w: &Self::Array) -> Result<Self::Array, Self::Error> {
        default_linear(self, x, w)
    }

    /// `x` without its last axis when that axis has size 1 (shape helper).
    fn squeeze_last(&self, x: &Self::Array) -> Result<Self::Array, Self::Error> {
        let mut shape = self.shape(x);
        if shape.last() != Some(&1) {
            return Err(CoreError::InvalidArgument {
                op: "squeeze_last",
                message: format!("last axis of {shape:?} is not 1"),
            }
            .into());
        }
        shape.pop();
        self.reshape(x, &shape)
    }

    // ------------------------------------------------------------------ fused ops (overridable)

    /// Softmax along `axis`, computed in `x`'s dtype with the max subtracted first.
    fn softmax(&self, x: &Self::Array, axis: usize) -> Result<Self::Array, Self::Error> {
        let max = self.reduce(x, axis, ReduceOp::Max)?;
        let shifted = self.sub(x, &max)?;
        let e = self.unary(&shifted, UnaryOp::Exp)?;
        let sum = self.reduce(&e, axis, ReduceOp::Sum)?;
        self.div(&e, &sum)
    }

    /// Log-softmax along `axis`.
    fn log_softmax(&self, x: &Self::Array, axis: usize) -> Result<Self::Array, Self::Error> {
        let max = self.reduce(x, axis, ReduceOp::Max)?;
        let shifted = self.sub(x, &max)?;
        let e = self.unary(&shifted, UnaryOp::Exp)?;
        let sum = self.reduce(&e, axis, ReduceOp::Sum)?;
        self.sub(&shifted, &self.unary(&sum, UnaryOp::Log)?)
    }

    /// GELU with the tanh approximation:
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    fn gelu_tanh(&self, x: &Self::Array) -> Result<Self::Array, Self::Error> {
        let x3 = self.mul(&self.mul(x, x)?, x)?;
        let inner = self.add(x, &self.affine(&x3, 0.044_715, 0.0)?)?;
        let scaled = self.affine(&inner, (2.0 / std::f32::consts::PI).sqrt(), 0.0)?;
        let t = self.unary(&scaled, UnaryOp::Tanh)?;
        let one_plus = self.affine(&t, 1.0, 1.0)?;
        self.mul(&self.affine(x, 0.5, 0.0)?, &one_plus)
    }

    /// RMS normalisation over the last axis: `x / sqrt(mean(x^2) + eps) * weight`, the weight
    /// (shape `[d]`) used as given; `None` for a norm without scale.
    fn rms_norm(
        &self,
        x: &Self::Array,
        weight: Option<&Self::Array>,
        eps: f32,
    ) -> Result<Self::Array, Self::Error> {
        let rank = self.shape(x).len();
        let Some(last) = rank.checked_sub(1) else {
            return Err(CoreError::AxisOutOfRange {
                op: "rms_norm",
                axis: 0,
                rank,
            }
            .into());
        };
        let sq = self.mul(x, x)?;
        let mean = self.reduce(&sq, last, ReduceOp::Mean)?;
        let inv = self.unary(&self.affine(&mean, 1.0, eps)?, UnaryOp::Rsqrt)?;
        let normed = self.mul(x, &inv)?;
        match weight {
            Some(w) => self.mul(&normed, w),
            None => Ok(normed),
        }
    }

    /// Rotary position embedding on `x` of shape `[b, h, t, d]` for the contiguous positions
    /// `start .. start + t`.
    ///
    /// `inv_freq` has `r / 2` entries for the `r <= d` rotated dims, in the half-split (NeoX /
    /// HF `rotate_half`) layout: for `i < r/2`, dims `i` and `i + r/2` rotate by
    /// `angle = position * inv_freq[i]`; dims `r..d` pass through. A layer with its own
    /// frequencies (or a proportional scheme with zero frequencies) passes its own table.
    ///
    /// The default builds the tables on the host ([`RopeTables`]) and calls
    /// [`rope_with_tables`](Self::rope_with_tables); models use
    /// [`rope_cached`](Self::rope_cached), whose tables are built once per model.
    fn rope(
        &self,
        x: &Self::Array,
        start: usize,
        inv_freq: &[f32],
    ) -> Result<Self::Array, Self::Error> {
        let RopeTables {
            t, half, cos, sin, ..
        } = RopeTables::new(&self.shape(x), start, inv_freq)?;
        let dtype = self.dtype(x);
        let cos = self.from_f32(&cos, &[t, half], dtype)?;
        let sin = self.from_f32(&sin, &[t, half], dtype)?;
        self.rope_with_tables(x, &cos, &sin)
    }

    /// [`rope`](Self::rope) with its frequencies' tables kept on the device by `cache` (built
    /// once per model, sliced per call): bit-for-bit the same rotation, without host work. A
    /// backend whose rope kernel computes its own angles overrides this to use
    /// [`RopeCache::inv_freq`].
    fn rope_cached(
        &self,
        x: &Self::Array,
        start: usize,
        cache: &RopeCache<Self>,
    ) -> Result<Self::Array, Self::Error> {
        let shape = self.shape(x);
        // Check the shape against the frequencies (the same errors as `rope`).
        let half = cache.inv_freq().len();
        let [_, _, t, d] = shape[..] else {
            return Err(CoreError::InvalidArgument {
                op: "rope",
                message: format!("expected [b, h, t, d], got {shape:?}"),
            }
            .into());
        };
        if 2 * half > d || half == 0 {
            return Err(CoreError::InvalidArgument {
                op: "rope",
                message: format!("{half} frequencies do not fit head dim {d}"),
            }
            .into());
        }
        let (cos, sin) = cache.tables(self, start, t, self.dtype(x))?;
        self.rope_with_tables(x, &cos, &sin)
    }

    /// The rotation of [`rope`](Self::rope) with its tables given: `cos` and `sin` are
    /// `[t, half]` in `x`'s dtype for `x` of shape `[b, h, t, d]`, `2 * half <= d`.
    fn rope_with_tables(
        &self,
        x: &Self::Array,
        cos: &Self::Array,
        sin: &Self::Array,
    ) -> Result<Self::Array, Self::Error> {
        let shape = self.shape(x);
        let table = self.shape(cos);
        let ([_, _, t, d], [tt, half]) = (&shape[..], &table[..]) else {
            return Err(CoreError::ShapeMismatch {
                op: "rope",
                lhs: shape,
                rhs: table,
            }
            .into());
        };
        let (d, half) = (*d, *half);
        if t != tt || 2 * half > d || self.shape(sin) != table {
            return Err(CoreError::ShapeMismatch {
                op: "rope",
                lhs: shape,
                rhs: table,
            }
            .into());
        }
        let rot = 2 * half;
        let x1 = self.slice(x, 3, 0, half)?;
        let x2 = self.slice(x, 3, half, half)?;
        let r1 = self.sub(&self.mul(&x1, cos)?, &self.mul(&x2, sin)?)?;
        let r2 = self.add(&self.mul(&x2, cos)?, &self.mul(&x1, sin)?)?;
        if rot == d {
            self.concat(&[&r1, &r2], 3)
        } else {
            let pass = self.slice(x, 3, rot, d - rot)?;
            self.concat(&[&r1, &r2, &pass], 3)
        }
    }

    /// Scaled dot-product attention with grouped KV heads.
    ///
    /// `q: [b, hq, tq, d]`, `k: [b, hkv, tk, d]`, `v: [b, hkv, tk, dv]` with `hq` a multiple of
    /// `hkv` (query head `i` reads KV head `i / (hq / hkv)`); returns `[b, hq, tq, dv]`.
    /// Scores are `scale * q k^T` plus the [`AttentionMask`]; a query that sees no key at all
    /// gets zeros.
    ///
    /// The default prepares the mask ([`AttentionBias::new`]: no table when every key is
    /// visible) and calls [`attention_with_bias`](Self::attention_with_bias). A model that runs
    /// many layers with one mask prepares it once instead (`ForwardMasks`).
    fn attention(
        &self,
        q: &Self::Array,
        k: &Self::Array,
        v: &Self::Array,
        mask: &AttentionMask,
        scale: f32,
    ) -> Result<Self::Array, Self::Error> {
        let (qs, ks) = (self.shape(q), self.shape(k));
        let (Some(&tq), Some(&tk)) = (qs.get(2), ks.get(2)) else {
            return Err(CoreError::ShapeMismatch {
                op: "attention",
                lhs: qs,
                rhs: ks,
            }
            .into());
        };
        let bias = AttentionBias::new(self, *mask, tq, tk, self.dtype(q))?;
        self.attention_with_bias(q, k, v, &bias, scale)
    }

    /// The additive `[tq, tk]` table of `mask` (`0` where a key is visible, `-inf` elsewhere) in
    /// `dtype`, for [`AttentionBias::new`]. The default builds it on the host
    /// ([`AttentionMask::to_additive`]) and uploads it; a backend may build it on the device.
    fn mask_table(
        &self,
        mask: &AttentionMask,
        tq: usize,
        tk: usize,
        dtype: DType,
    ) -> Result<Self::Array, Self::Error> {
        self.from_f32(&mask.to_additive(tq, tk), &[tq, tk], dtype)
    }

    /// [`attention`](Self::attention) with the mask already prepared for this shape: the
    /// prepared table (if any) is broadcast over batch and heads, and rows that see no key are
    /// zeroed only when the bias says some exist.
    fn attention_with_bias(
        &self,
        q: &Self::Array,
        k: &Self::Array,
        v: &Self::Array,
        bias: &AttentionBias<Self>,
        scale: f32,
    ) -> Result<Self::Array, Self::Error> {
        default_attention_with_bias(self, q, k, v, bias, scale)
    }

    /// Expert-gathered linear layer (mixture of experts): row `r` of `x` (`[n, in]`) times the
    /// transpose of expert `indices[r]` of `w` (`[experts, out, in]`), giving `[n, out]`.
    /// `indices` is an integer array of `n` expert ids; each row may use another expert (a
    /// verification batch routes every token to its own experts).
    ///
    /// The default gathers each row's expert matrix with [`embedding`](Self::embedding) and runs
    /// one batched [`matmul`](Self::matmul): exact, but it materialises `n` expert matrices.
    /// Backends override it with a gathered matmul kernel or a loop over the experts in use.
    fn gather_linear(
        &self,
        x: &Self::Array,
        w: &Self::Array,
        indices: &Self::Array,
    ) -> Result<Self::Array, Self::Error> {
        let (x_shape, w_shape) = (self.shape(x), self.shape(w));
        let ([n, inner], [experts, out, w_in]) = (x_shape.as_slice(), w_shape.as_slice()) else {
            return Err(CoreError::ShapeMismatch {
                op: "gather_linear",
                lhs: x_shape,
                rhs: w_shape,
            }
            .into());
        };
        let idx_count: usize = self.shape(indices).iter().product();
        if inner != w_in || idx_count != *n {
            return Err(CoreError::ShapeMismatch {
                op: "gather_linear",
                lhs: x_shape,
                rhs: w_shape,
            }
            .into());
        }
        let table = self.reshape(w, &[*experts, out * inner])?;
        let ids = self.reshape(indices, &[*n])?;
        let picked = self.reshape(&self.embedding(&table, &ids)?, &[*n, *out, *inner])?;
        let rows = self.reshape(x, &[*n, 1, *inner])?;
        let y = self.matmul(&rows, &self.transpose(&picked, 1, 2)?)?;
        self.reshape(&y, &[*n, *out])
    }

    /// [`gather_linear`](Self::gather_linear) over quantized experts: row `r` of `x`
    /// (`[n, in]`) times the transpose of `experts[indices[r]]` (each `[out, in]`), giving
    /// `[n, out]` in `x`'s dtype. `indices` holds `n` expert ids.
    ///
    /// The default ([`default_quant_gather_linear`](crate::experts::default_quant_gather_linear))
    /// reads the ids on the host (a sync point), runs [`quant_linear`](Self::quant_linear) once
    /// per expert in use over the rows routed to it, and gathers the results back in row order;
    /// experts no row picks are never read. A backend with a gathered quantized kernel
    /// overrides it.
    fn quant_gather_linear(
        &self,
        x: &Self::Array,
        experts: &[Self::QuantWeight],
        indices: &Self::Array,
    ) -> Result<Self::Array, Self::Error> {
        crate::experts::default_quant_gather_linear(self, x, experts, indices)
    }

    /// The `k` largest values along the last axis and their indices (`U32`), largest first.
    fn top_k(&self, x: &Self::Array, k: usize) -> Result<(Self::Array, Self::Array), Self::Error> {
        let shape = self.shape(x);
        let Some(last) = shape.len().checked_sub(1) else {
            return Err(CoreError::AxisOutOfRange {
                op: "top_k",
                axis: 0,
                rank: 0,
            }
            .into());
        };
        if k == 0 || k > shape[last] {
            return Err(CoreError::InvalidArgument {
                op: "top_k",
                message: format!("k = {k} for an axis of {}", shape[last]),
            }
            .into());
        }
        let order = self.argsort(x, last, SortOrder::Descending)?;
        let idx = self.slice(&order, last, 0, k)?;
        let values = self.take_along_axis(x, &idx, last)?;
        Ok((values, idx))
    }

    /// Which rows along `axis` no token can be chosen from: a `U32` array with `axis` kept (size
    /// 1) that is 1 where the row holds a NaN or +∞ or has no finite value (all −∞), else 0.
    ///
    /// The engine reads it in the same host read as a greedy round's argmax ids, so a model that
    /// computes NaN is an error instead of an arbitrary token. The default body (NaN lifted to
    /// +∞, then the row maximum compared with ±∞) is five elementwise/reduction ops; a backend
    /// may fuse it.
    fn non_finite_rows(&self, x: &Self::Array, axis: usize) -> Result<Self::Array, Self::Error> {
        default_non_finite_rows(self, x, axis)
    }
}
