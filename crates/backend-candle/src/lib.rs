//! # backend-candle
//!
//! The mtp-core [`Backend`] on [candle](https://github.com/huggingface/candle) 0.11: arrays are
//! [`candle_core::Tensor`]s, devices are [`candle_core::Device`]s (CPU always; CUDA and Metal
//! behind candle's own feature names, `cuda` and `metal`; `accelerate` and `mkl` pass through).
//!
//! ```
//! use backend_candle::CandleBackend;
//! use mtp_core::{Backend, DType};
//!
//! # fn main() -> Result<(), backend_candle::CandleError> {
//! let backend = CandleBackend::from_spec("cpu")?;
//! let x = backend.from_f32(&[1.0, 2.0, 3.0], &[1, 3], DType::F32)?;
//! let p = backend.softmax(&x, 1)?;
//! assert_eq!(backend.to_vec_u32(&backend.argmax(&p, 1)?)?, vec![2]);
//! # Ok(())
//! # }
//! ```
//!
//! # Kernels and default bodies
//!
//! Every required op maps onto candle tensor ops (see `README.md` for the table). Of the fused
//! ops, `softmax` (`candle_nn::ops::softmax_last_dim`), `rms_norm` (`candle_nn::ops::rms_norm`),
//! `rope_with_tables` (`candle_nn::rotary_emb::rope`; `rope` and `rope_cached` reach it with host
//! tables or the model's device tables) and `gelu_tanh` (`Tensor::gelu`; a vectorised pass for
//! contiguous `f32` CPU tensors, `gelu.rs`) use candle kernels; `top_k` selects with a heap per
//! row on the CPU (`topk.rs`; GPUs keep the default sort); `argmax` and `non_finite_rows` scan
//! contiguous `f32` CPU rows once (`row_scan.rs`); `attention_with_bias` runs CPU query rows
//! in `f32`, `bf16` or `f16` in one pass each (`small_attention.rs`) and `linear` reads dense
//! CPU weights in place (`dense_rows/`), both row-invariant up to the [`RowInvariance`] limit
//! (a row gets the bits it gets alone), otherwise the trait's default, as do `attention` and
//! `log_softmax`; `gather_linear` (MoE
//! experts) runs one matmul per expert in use (`experts.rs`). The in-place cache hooks
//! are overridden: [`Backend::write_slice`] writes into the preallocated buffer with
//! `Tensor::slice_set`, and [`Backend::deep_copy`] copies the elements with `Tensor::force_contiguous`.
//!
//! # Aliasing
//!
//! Candle tensors share storage between views (`slice`, `reshape` of a contiguous tensor,
//! `transpose`, clones). `write_slice` mutates that storage, so every view of a cache buffer sees
//! the write — which is the point of an in-place cache; a snapshot that must not move uses
//! [`Backend::deep_copy`].
//!
//! # Differences from the reference backend
//!
//! * float→int [`Backend::cast`] follows Rust's `as` (truncates toward zero, saturates, NaN→0)
//!   and int→int casts wrap, where the reference rejects such values;
//! * integer add/sub/mul/sum use candle's kernels: they wrap in optimised builds of candle and
//!   panic on overflow where candle was built with overflow checks (a default `dev` profile);
//!   integer division by zero is caught (one flag read back to the host) and is an error;
//! * a `U32` index equal to `u32::MAX` is candle's "no index" marker: gathers give zero and
//!   scatters skip it instead of erroring (`I32` indices are widened to `I64` for candle, so any
//!   negative or too-large `I32` index is an error);
//! * `argmax` maps NaN to `-inf` before candle's kernel (which keeps the first index on ties), so
//!   NaN never wins; only a line like `[NaN, -inf]` differs (index 0 here, 1 in the reference);
//! * `argsort` sorts NaN like `+inf` (ascending) or `-inf` (descending), so it comes last but
//!   ties with infinities by index.

#![warn(missing_docs)]

mod dense_rows;
mod device;
mod elementwise;
mod error;
mod experts;
mod fast_exp;
mod fused;
mod gelu;
mod ops;
pub mod qmatmul;
mod quantized;
#[cfg(test)]
mod quantized_tests;
mod row_invariance;
mod row_scan;
mod small_attention;
mod tanh;
#[cfg(test)]
mod tests;
mod topk;

pub use error::{CandleError, Result};
pub use quantized::{CandleQuantWeight, BATCHED_QMATMUL_ENV};
pub use row_invariance::{RowInvariance, BOUNDED_ROWS, ROW_INVARIANT_ENV, VERIFY_ROWS};

use std::sync::Arc;

use candle_core::{Device, Tensor};
use mtp_core::quant::QuantTensor;
use mtp_core::{Backend, BinaryOp, CompareOp, DType, ReduceOp, SortOrder, UnaryOp};

/// The candle backend: a handle on one candle [`Device`].
#[derive(Debug, Clone)]
pub struct CandleBackend {
    device: Device,
    row_invariance: RowInvariance,
}

impl CandleBackend {
    /// A backend computing on `device`, its [`RowInvariance`] from [`ROW_INVARIANT_ENV`].
    pub fn new(device: Device) -> Self {
        Self {
            device,
            row_invariance: RowInvariance::from_env(),
        }
    }

    /// The same backend with the CPU kernels taking the forwards `row_invariance` names.
    pub fn with_row_invariance(mut self, row_invariance: RowInvariance) -> Self {
        self.row_invariance = row_invariance;
        self
    }

    /// Which forwards give each row the bits it gets alone (see [`RowInvariance`]).
    pub fn row_invariance(&self) -> RowInvariance {
        self.row_invariance
    }

    /// A backend on the CPU.
    pub fn cpu() -> Self {
        Self::new(Device::Cpu)
    }

    /// A backend from a device spec: `cpu`, `cuda`, `cuda:N`, `metal` or `metal:N` (no ordinal
    /// means 0; case and surrounding spaces are ignored).
    ///
    /// # Errors
    ///
    /// [`CandleError::UnknownDevice`] for any other spec;
    /// [`CandleError::FeatureNotCompiled`] for `cuda`/`metal` when this crate was built without
    /// the matching cargo feature; [`CandleError::PlatformUnsupported`] for `metal` outside
    /// macOS; [`CandleError::DeviceUnavailable`] when candle cannot open the device.
    pub fn from_spec(spec: &str) -> Result<Self> {
        let parsed = device::parse(spec)?;
        Ok(Self::new(device::open(spec, parsed)?))
    }
}

impl Default for CandleBackend {
    fn default() -> Self {
        Self::cpu()
    }
}

impl Backend for CandleBackend {
    type Device = Device;
    type Array = Tensor;
    type Error = CandleError;
    type QuantWeight = CandleQuantWeight;

    fn name(&self) -> String {
        device::name(&self.device)
    }

    fn device(&self) -> &Device {
        &self.device
    }

    /// GGUF blocks become a candle `QMatMul` on this device; affine weights a dense tensor.
    fn quant_weight(&self, tensor: Arc<QuantTensor>, dtype: DType) -> Result<CandleQuantWeight> {
        quantized::prepare(&self.device, tensor, dtype)
    }

    fn quant_source<'w>(&self, w: &'w CandleQuantWeight) -> &'w QuantTensor {
        w.source()
    }

    /// candle's quantized matmul (`QMatMul::forward`).
    fn quant_linear(&self, x: &Tensor, w: &CandleQuantWeight) -> Result<Tensor> {
        w.linear(x)
    }

    /// candle's quantized row lookup (`QMatMul::embedding`: only the rows asked for are decoded).
    fn quant_embedding(&self, w: &CandleQuantWeight, ids: &Tensor, dtype: DType) -> Result<Tensor> {
        w.rows(ids, dtype)
    }

    fn from_f32(&self, data: &[f32], shape: &[usize], dtype: DType) -> Result<Tensor> {
        ops::from_f32(&self.device, data, shape, dtype)
    }

    fn from_le_bytes(
        &self,
        bytes: &[u8],
        src: DType,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Tensor> {
        ops::from_le_bytes(&self.device, bytes, src, shape, dtype)
    }

    /// `F32` on the CPU (candle's CPU matmuls are fastest in f32); on CUDA and Metal the
    /// checkpoint's own half dtype (half the memory and bandwidth), else `F32`.
    fn preferred_dtype(&self, stored: DType) -> DType {
        match stored {
            DType::F16 | DType::BF16 if !self.device.is_cpu() => stored,
            _ => DType::F32,
        }
    }

    fn from_u32(&self, data: &[u32], shape: &[usize]) -> Result<Tensor> {
        ops::from_u32(&self.device, data, shape)
    }

    fn from_i32(&self, data: &[i32], shape: &[usize]) -> Result<Tensor> {
        ops::from_i32(&self.device, data, shape)
    }

    fn full(&self, shape: &[usize], value: f32, dtype: DType) -> Result<Tensor> {
        ops::full(&self.device, shape, value, dtype)
    }

    fn to_vec_f32(&self, x: &Tensor) -> Result<Vec<f32>> {
        ops::to_vec_f32(x)
    }

    fn to_vec_u32(&self, x: &Tensor) -> Result<Vec<u32>> {
        ops::to_vec_u32(x)
    }

    fn shape(&self, x: &Tensor) -> Vec<usize> {
        x.dims().to_vec()
    }

    /// The dtype of `x`. A tensor built outside this backend in a dtype mtp-core has no name for
    /// reports the nearest one (other floats as `F32`, signed ints as `I32`, unsigned as `U32`);
    /// ops on it fail with [`CandleError::UnsupportedDType`].
    fn dtype(&self, x: &Tensor) -> DType {
        use candle_core::DType as C;
        match x.dtype() {
            C::F16 => DType::F16,
            C::BF16 => DType::BF16,
            C::I16 | C::I32 | C::I64 => DType::I32,
            C::U8 | C::U32 => DType::U32,
            _ => DType::F32,
        }
    }

    fn cast(&self, x: &Tensor, dtype: DType) -> Result<Tensor> {
        ops::cast(x, dtype)
    }

    fn reshape(&self, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
        ops::reshape(x, shape)
    }

    fn transpose(&self, x: &Tensor, a: usize, b: usize) -> Result<Tensor> {
        ops::transpose(x, a, b)
    }

    fn slice(&self, x: &Tensor, axis: usize, start: usize, len: usize) -> Result<Tensor> {
        ops::slice(x, axis, start, len)
    }

    fn concat(&self, xs: &[&Tensor], axis: usize) -> Result<Tensor> {
        ops::concat(xs, axis)
    }

    fn binary(&self, a: &Tensor, b: &Tensor, op: BinaryOp) -> Result<Tensor> {
        ops::binary(a, b, op)
    }

    fn unary(&self, x: &Tensor, op: UnaryOp) -> Result<Tensor> {
        ops::unary(x, op)
    }

    fn compare(&self, a: &Tensor, b: &Tensor, op: CompareOp) -> Result<Tensor> {
        ops::compare(a, b, op)
    }

    fn where_cond(&self, cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        ops::where_cond(cond, a, b)
    }

    fn reduce(&self, x: &Tensor, axis: usize, op: ReduceOp) -> Result<Tensor> {
        ops::reduce(x, axis, op)
    }

    fn argmax(&self, x: &Tensor, axis: usize) -> Result<Tensor> {
        ops::argmax(x, axis)
    }

    /// Query rows in `f32`, `bf16` or `f16` on the CPU, up to the [`RowInvariance`] limit: one
    /// pass per row over the caches (`src/small_attention.rs`); anything else the trait's
    /// default.
    fn attention_with_bias(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        bias: &mtp_core::AttentionBias<Self>,
        scale: f32,
    ) -> Result<Tensor> {
        let max_rows = self.row_invariance.max_rows();
        match small_attention::attention(q, k, v, bias, scale, max_rows)? {
            Some(out) => Ok(out),
            None => mtp_core::backend::default_attention_with_bias(self, q, k, v, bias, scale),
        }
    }

    fn non_finite_rows(&self, x: &Tensor, axis: usize) -> Result<Tensor> {
        match ops::non_finite_rows(x, axis)? {
            Some(flags) => Ok(flags),
            None => mtp_core::backend::default_non_finite_rows(self, x, axis),
        }
    }

    fn argsort(&self, x: &Tensor, axis: usize, order: SortOrder) -> Result<Tensor> {
        ops::argsort(x, axis, order)
    }

    fn cumsum(&self, x: &Tensor, axis: usize) -> Result<Tensor> {
        ops::cumsum(x, axis)
    }

    fn embedding(&self, table: &Tensor, ids: &Tensor) -> Result<Tensor> {
        ops::embedding(table, ids)
    }

    fn take_along_axis(&self, x: &Tensor, indices: &Tensor, axis: usize) -> Result<Tensor> {
        ops::take_along_axis(x, indices, axis)
    }

    fn scatter(&self, x: &Tensor, indices: &Tensor, src: &Tensor, axis: usize) -> Result<Tensor> {
        ops::scatter(x, indices, src, axis)
    }

    fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        ops::matmul(a, b)
    }

    /// `f32`, `bf16` or `f16` rows on the CPU, up to the [`RowInvariance`] limit: each weight
    /// row read in place and dotted with every row (`dense_rows`: no packing of the transposed
    /// weight per call, a row's bits independent of how many rows came with it); otherwise
    /// candle's matmul.
    fn linear(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        match dense_rows::linear(x, w, self.row_invariance.max_rows()) {
            Some(y) => y,
            None => mtp_core::backend::default_linear(self, x, w),
        }
    }

    // ------------------------------------------------------------------ hooks (in place)

    fn write_slice(&self, dst: &mut Tensor, src: &Tensor, axis: usize, start: usize) -> Result<()> {
        fused::write_slice(dst, src, axis, start)
    }

    fn deep_copy(&self, x: &Tensor) -> Result<Tensor> {
        fused::deep_copy(x)
    }

    // ------------------------------------------------------------------ fused ops (kernels)

    fn softmax(&self, x: &Tensor, axis: usize) -> Result<Tensor> {
        fused::softmax(x, axis)
    }

    fn gelu_tanh(&self, x: &Tensor) -> Result<Tensor> {
        fused::gelu_tanh(x)
    }

    fn rms_norm(&self, x: &Tensor, weight: Option<&Tensor>, eps: f32) -> Result<Tensor> {
        fused::rms_norm(x, weight, eps)
    }

    fn rope_with_tables(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        fused::rope_with_tables(x, cos, sin)
    }

    fn top_k(&self, x: &Tensor, k: usize) -> Result<(Tensor, Tensor)> {
        topk::top_k(x, k)
    }

    fn gather_linear(&self, x: &Tensor, w: &Tensor, indices: &Tensor) -> Result<Tensor> {
        experts::gather_linear(x, w, indices)
    }
}
