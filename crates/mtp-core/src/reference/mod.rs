//! The host reference backend: plain Rust loops over `Vec<f32>`, the oracle of every parity test.
//!
//! "Obviously correct beats fast": every op is a straightforward loop over contiguous row-major
//! storage and returns a new immutable [`HostArray`]. Sums, means, cumulative sums and matrix
//! products accumulate in `f64` in index order and round once to the dtype; each output element
//! is computed from its own inputs only, so computing a row alone or inside a batch gives
//! bit-identical results. F16 and BF16 arrays hold `f32` values rounded to the dtype after every
//! op, mimicking real half-precision storage.
//!
//! The fused ops (softmax, rms_norm, rope, attention, top_k, gelu_tanh) keep the trait's default
//! bodies: those *are* the reference.
//!
//! Semantics beyond the trait's documentation:
//!
//! * integer arithmetic wraps to the dtype; integer division truncates toward zero and dividing
//!   by zero is an error; `Mean` is float-only, `Sum`/`Max`/`Min` work on integers too;
//! * float→int casts (and `full` of an integer dtype) truncate toward zero and reject NaN,
//!   infinities and values outside the dtype's range; int→int casts reject values that do not fit;
//! * `Max`/`Min` (reduce and binary) propagate NaN; `argmax` treats NaN as smaller than every
//!   number; `argsort` puts NaN last in both orders; comparisons with NaN are false except `Ne`;
//! * `where_cond` treats every nonzero condition (NaN included) as true.
//! * over an empty axis, `Sum` gives 0 and `Mean` NaN, while `Max`, `Min` and `argmax` are errors;
//! * index arrays are never wrapped: negative or too-large indices are `IndexOutOfRange`.

mod array;
mod create;
mod elementwise;
mod indexing;
mod linalg;
mod reduce;
mod shape_ops;
#[cfg(test)]
mod tests;

pub use array::HostArray;

use std::sync::Arc;

use crate::quant::QuantTensor;
use crate::{Backend, BinaryOp, CompareOp, CoreError, DType, ReduceOp, SortOrder, UnaryOp};

/// The host "device" of the [`ReferenceBackend`] (there is only one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostDevice;

/// The host reference backend; see the [module docs](self).
#[derive(Debug, Clone, Copy, Default)]
pub struct ReferenceBackend {
    device: HostDevice,
}

impl ReferenceBackend {
    /// A reference backend on the host.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Backend for ReferenceBackend {
    type Device = HostDevice;
    type Array = HostArray;
    type Error = CoreError;
    type QuantWeight = Arc<QuantTensor>;

    fn name(&self) -> String {
        "reference".to_string()
    }

    fn device(&self) -> &HostDevice {
        &self.device
    }

    fn quant_weight(
        &self,
        tensor: Arc<QuantTensor>,
        _dtype: DType,
    ) -> Result<Arc<QuantTensor>, CoreError> {
        Ok(tensor)
    }

    fn quant_source<'w>(&self, w: &'w Arc<QuantTensor>) -> &'w QuantTensor {
        w
    }

    fn from_f32(
        &self,
        data: &[f32],
        shape: &[usize],
        dtype: DType,
    ) -> Result<HostArray, CoreError> {
        create::from_f32(data, shape, dtype)
    }

    fn from_u32(&self, data: &[u32], shape: &[usize]) -> Result<HostArray, CoreError> {
        create::from_u32(data, shape)
    }

    fn from_i32(&self, data: &[i32], shape: &[usize]) -> Result<HostArray, CoreError> {
        create::from_i32(data, shape)
    }

    fn full(&self, shape: &[usize], value: f32, dtype: DType) -> Result<HostArray, CoreError> {
        create::full(shape, value, dtype)
    }

    fn to_vec_f32(&self, x: &HostArray) -> Result<Vec<f32>, CoreError> {
        Ok(create::to_vec_f32(x))
    }

    fn to_vec_u32(&self, x: &HostArray) -> Result<Vec<u32>, CoreError> {
        create::to_vec_u32(x)
    }

    fn shape(&self, x: &HostArray) -> Vec<usize> {
        x.shape().to_vec()
    }

    fn dtype(&self, x: &HostArray) -> DType {
        x.dtype()
    }

    fn cast(&self, x: &HostArray, dtype: DType) -> Result<HostArray, CoreError> {
        create::cast(x, dtype)
    }

    fn reshape(&self, x: &HostArray, shape: &[usize]) -> Result<HostArray, CoreError> {
        shape_ops::reshape(x, shape)
    }

    fn transpose(&self, x: &HostArray, a: usize, b: usize) -> Result<HostArray, CoreError> {
        shape_ops::transpose(x, a, b)
    }

    fn slice(
        &self,
        x: &HostArray,
        axis: usize,
        start: usize,
        len: usize,
    ) -> Result<HostArray, CoreError> {
        shape_ops::slice(x, axis, start, len)
    }

    fn concat(&self, xs: &[&HostArray], axis: usize) -> Result<HostArray, CoreError> {
        shape_ops::concat(xs, axis)
    }

    fn binary(&self, a: &HostArray, b: &HostArray, op: BinaryOp) -> Result<HostArray, CoreError> {
        elementwise::binary(a, b, op)
    }

    fn unary(&self, x: &HostArray, op: UnaryOp) -> Result<HostArray, CoreError> {
        elementwise::unary(x, op)
    }

    fn compare(&self, a: &HostArray, b: &HostArray, op: CompareOp) -> Result<HostArray, CoreError> {
        elementwise::compare(a, b, op)
    }

    fn where_cond(
        &self,
        cond: &HostArray,
        a: &HostArray,
        b: &HostArray,
    ) -> Result<HostArray, CoreError> {
        elementwise::where_cond(cond, a, b)
    }

    fn reduce(&self, x: &HostArray, axis: usize, op: ReduceOp) -> Result<HostArray, CoreError> {
        reduce::reduce(x, axis, op)
    }

    fn argmax(&self, x: &HostArray, axis: usize) -> Result<HostArray, CoreError> {
        reduce::argmax(x, axis)
    }

    fn argsort(
        &self,
        x: &HostArray,
        axis: usize,
        order: SortOrder,
    ) -> Result<HostArray, CoreError> {
        reduce::argsort(x, axis, order)
    }

    fn cumsum(&self, x: &HostArray, axis: usize) -> Result<HostArray, CoreError> {
        reduce::cumsum(x, axis)
    }

    fn embedding(&self, table: &HostArray, ids: &HostArray) -> Result<HostArray, CoreError> {
        indexing::embedding(table, ids)
    }

    fn take_along_axis(
        &self,
        x: &HostArray,
        indices: &HostArray,
        axis: usize,
    ) -> Result<HostArray, CoreError> {
        indexing::take_along_axis(x, indices, axis)
    }

    fn scatter(
        &self,
        x: &HostArray,
        indices: &HostArray,
        src: &HostArray,
        axis: usize,
    ) -> Result<HostArray, CoreError> {
        indexing::scatter(x, indices, src, axis)
    }

    fn matmul(&self, a: &HostArray, b: &HostArray) -> Result<HostArray, CoreError> {
        linalg::matmul(a, b)
    }
}
