//! [`MlxBackend`]: the handle and its `impl Backend`, delegating to `ops` and `fused`.

use std::sync::Arc;

use mlx_rs::Array;
use mtp_core::quant::QuantTensor;
use mtp_core::{
    AttentionBias, Backend, BinaryOp, CompareOp, DType, Execution, ReduceOp, RopeCache, SortOrder,
    UnaryOp,
};

use crate::convert::{nearest_dtype, shape_of};
use crate::device::MlxDevice;
use crate::error::Result;
use crate::quantized::{self, MlxQuantWeight};
use crate::{fused, ops};

/// The MLX backend: a handle on one [`MlxDevice`] (the CPU, or the GPU on macOS).
#[derive(Debug, Clone)]
pub struct MlxBackend {
    device: MlxDevice,
}

impl MlxBackend {
    /// A backend computing on `device`, which becomes MLX's default device for the process
    /// (MLX ops run on the default device's stream).
    pub fn new(device: MlxDevice) -> Self {
        mlx_rs::Device::set_default(&device.to_mlx());
        Self { device }
    }

    /// A backend on the CPU.
    pub fn cpu() -> Self {
        Self::new(MlxDevice::Cpu)
    }

    /// A backend from a device spec (see [`MlxDevice::from_spec`]).
    ///
    /// # Errors
    ///
    /// As [`MlxDevice::from_spec`].
    pub fn from_spec(spec: &str) -> Result<Self> {
        Ok(Self::new(MlxDevice::from_spec(spec)?))
    }
}

impl Default for MlxBackend {
    fn default() -> Self {
        Self::cpu()
    }
}

impl Backend for MlxBackend {
    type Device = MlxDevice;
    type Array = Array;
    type Error = crate::MlxError;
    type QuantWeight = MlxQuantWeight;

    /// `mlx-cpu` or `mlx-metal`.
    fn name(&self) -> String {
        self.device.backend_name().to_string()
    }

    fn device(&self) -> &MlxDevice {
        &self.device
    }

    /// Affine weights (and GGUF Q4_0 / Q4_1 / Q8_0, re-expressed as affine) for MLX's
    /// `quantized_matmul`; other GGUF types dequantized to the compute dtype.
    fn quant_weight(&self, tensor: Arc<QuantTensor>, dtype: DType) -> Result<MlxQuantWeight> {
        quantized::prepare(tensor, dtype)
    }

    fn quant_source<'w>(&self, w: &'w MlxQuantWeight) -> &'w QuantTensor {
        w.source()
    }

    /// MLX's `quantized_matmul` (transposed weight).
    fn quant_linear(&self, x: &Array, w: &MlxQuantWeight) -> Result<Array> {
        w.linear(x)
    }

    /// The packed rows gathered on the device, then `dequantize`d (no host read).
    fn quant_embedding(&self, w: &MlxQuantWeight, ids: &Array, dtype: DType) -> Result<Array> {
        w.rows(ids, dtype)
    }

    fn from_f32(&self, data: &[f32], shape: &[usize], dtype: DType) -> Result<Array> {
        ops::from_f32(data, shape, dtype)
    }

    /// The stored bytes become an MLX array of their own dtype (no host `f32` copy), converted
    /// by MLX when `dtype` differs.
    fn from_le_bytes(
        &self,
        bytes: &[u8],
        src: DType,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Array> {
        ops::from_le_bytes(bytes, src, shape, dtype)
    }

    /// `F32` on the CPU, whatever the checkpoint stores; on the GPU (Metal) the checkpoint's own
    /// `F16` / `BF16`, else `F32`.
    ///
    /// On the CPU (the only MLX device on Linux) decoding — what speculation speeds up — is not
    /// faster in bf16: measured on a 445 MB bf16 Gemma 4 checkpoint (2-core machine, 24 tokens,
    /// two runs each), decode ran at 1.71 / 2.37 tokens/s in f32 and 1.64 / 1.70 in bf16, while
    /// a 48-token prefill ran 2.2-2.9x faster in bf16 (MLX's own half-precision GEMM against the
    /// wheel's reference BLAS). f32 also computes what HF's f32 references compute; `--dtype
    /// bf16` halves the memory when that matters more. Metal computes f16 and bf16 natively at
    /// half the memory traffic, as mlx-lm runs checkpoints (not measured here: no Mac).
    fn preferred_dtype(&self, stored: DType) -> DType {
        match (self.device, stored) {
            (MlxDevice::Gpu, DType::F16 | DType::BF16) => stored,
            _ => DType::F32,
        }
    }

    fn from_u32(&self, data: &[u32], shape: &[usize]) -> Result<Array> {
        ops::from_u32(data, shape)
    }

    fn from_i32(&self, data: &[i32], shape: &[usize]) -> Result<Array> {
        ops::from_i32(data, shape)
    }

    fn full(&self, shape: &[usize], value: f32, dtype: DType) -> Result<Array> {
        ops::full(shape, value, dtype)
    }

    fn to_vec_f32(&self, x: &Array) -> Result<Vec<f32>> {
        ops::to_vec_f32(x)
    }

    fn to_vec_u32(&self, x: &Array) -> Result<Vec<u32>> {
        ops::to_vec_u32(x)
    }

    fn shape(&self, x: &Array) -> Vec<usize> {
        shape_of(x)
    }

    /// The dtype of `x`. An array built outside this backend in a dtype mtp-core has no name for
    /// reports the nearest one (other floats as `F32`, signed ints as `I32`, unsigned and bool
    /// as `U32`); ops on it fail with [`MlxError::UnsupportedDType`](crate::MlxError).
    fn dtype(&self, x: &Array) -> DType {
        nearest_dtype(x.dtype())
    }

    fn cast(&self, x: &Array, dtype: DType) -> Result<Array> {
        ops::cast(x, dtype)
    }

    fn reshape(&self, x: &Array, shape: &[usize]) -> Result<Array> {
        ops::reshape(x, shape)
    }

    fn transpose(&self, x: &Array, a: usize, b: usize) -> Result<Array> {
        ops::transpose(x, a, b)
    }

    fn slice(&self, x: &Array, axis: usize, start: usize, len: usize) -> Result<Array> {
        ops::slice(x, axis, start, len)
    }

    fn concat(&self, xs: &[&Array], axis: usize) -> Result<Array> {
        ops::concat(xs, axis)
    }

    fn binary(&self, a: &Array, b: &Array, op: BinaryOp) -> Result<Array> {
        ops::binary(a, b, op)
    }

    fn unary(&self, x: &Array, op: UnaryOp) -> Result<Array> {
        ops::unary(x, op)
    }

    fn compare(&self, a: &Array, b: &Array, op: CompareOp) -> Result<Array> {
        ops::compare(a, b, op)
    }

    fn where_cond(&self, cond: &Array, a: &Array, b: &Array) -> Result<Array> {
        ops::where_cond(cond, a, b)
    }

    fn reduce(&self, x: &Array, axis: usize, op: ReduceOp) -> Result<Array> {
        ops::reduce(x, axis, op)
    }

    fn argmax(&self, x: &Array, axis: usize) -> Result<Array> {
        ops::argmax(x, axis)
    }

    fn argsort(&self, x: &Array, axis: usize, order: SortOrder) -> Result<Array> {
        ops::argsort(x, axis, order)
    }

    fn cumsum(&self, x: &Array, axis: usize) -> Result<Array> {
        ops::cumsum(x, axis)
    }

    fn embedding(&self, table: &Array, ids: &Array) -> Result<Array> {
        ops::embedding(table, ids)
    }

    fn take_along_axis(&self, x: &Array, indices: &Array, axis: usize) -> Result<Array> {
        ops::take_along_axis(x, indices, axis)
    }

    fn scatter(&self, x: &Array, indices: &Array, src: &Array, axis: usize) -> Result<Array> {
        ops::scatter(x, indices, src, axis)
    }

    fn matmul(&self, a: &Array, b: &Array) -> Result<Array> {
        ops::matmul(a, b)
    }

    // ------------------------------------------------------------------ hooks

    fn execution(&self) -> Execution {
        Execution::Lazy
    }

    fn eval(&self, xs: &[&Array]) -> Result<()> {
        fused::eval(xs)
    }

    fn async_eval(&self, xs: &[&Array]) -> Result<()> {
        fused::async_eval(xs)
    }

    fn write_slice(&self, dst: &mut Array, src: &Array, axis: usize, start: usize) -> Result<()> {
        fused::write_slice(dst, src, axis, start)
    }

    // ------------------------------------------------------------------ fused ops (kernels)

    fn softmax(&self, x: &Array, axis: usize) -> Result<Array> {
        fused::softmax(x, axis)
    }

    fn rms_norm(&self, x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
        fused::rms_norm(x, weight, eps)
    }

    fn rope(&self, x: &Array, start: usize, inv_freq: &[f32]) -> Result<Array> {
        fused::rope(x, start, inv_freq)
    }

    /// `mlx::fast::rope` computes its angles on the device: the cache's frequencies are all it
    /// needs (no tables).
    fn rope_cached(&self, x: &Array, start: usize, cache: &RopeCache<Self>) -> Result<Array> {
        fused::rope(x, start, cache.inv_freq())
    }

    /// MLX's gathered matmul (`gather_mm`): each row against its expert's matrix in place
    /// (half dtypes on the CPU, where MLX's `GatherMM` takes only f32: `take` + `matmul`).
    fn gather_linear(&self, x: &Array, w: &Array, indices: &Array) -> Result<Array> {
        fused::gather_linear(x, w, indices, self.device)
    }

    fn attention_with_bias(
        &self,
        q: &Array,
        k: &Array,
        v: &Array,
        bias: &AttentionBias<Self>,
        scale: f32,
    ) -> Result<Array> {
        fused::attention(q, k, v, bias, scale)
    }
}
