//! The suite has teeth: a deliberately broken backend — the reference backend with one op
//! overridden wrongly — fails exactly the cases that cover that op, with a readable report,
//! and still passes unrelated ones.

use mtp_core::reference::{HostArray, HostDevice, ReferenceBackend};
use mtp_core::{
    AttentionMask, Backend, BinaryOp, CompareOp, CoreError, DType, ReduceOp, SortOrder, UnaryOp,
};
use mtp_tests::cases::{
    caches, creation, elementwise, errors, fused, hooks, invariance, linalg, reduce,
};
use mtp_tests::SuiteError;

/// The one thing a [`Broken`] backend gets wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    /// `softmax` 5 % too large.
    SoftmaxScaled,
    /// `rope` rotates the wrong way (negated angles).
    RopeWrongSign,
    /// `attention` ignores the sliding window.
    AttentionIgnoresWindow,
    /// float→int `cast` rounds half up instead of truncating.
    CastRounds,
    /// `write_slice` always writes at offset 0.
    WriteSliceAtZero,
    /// Descending `argsort` is the reversed ascending order (not stable on ties).
    DescendingArgsortUnstable,
    /// `transpose` panics on an axis out of range instead of returning `Err`.
    TransposePanics,
    /// `gather_linear` sends every row to expert 0 (routing ignored).
    GatherIgnoresRouting,
    /// `from_le_bytes` reads stored `BF16` bytes as `F16`.
    Bf16ReadAsF16,
    /// `linear` of more than one row rounds differently (a last-bit scale), as a kernel chosen
    /// by the number of rows would.
    LinearRoundsByRows,
}

/// The reference backend with one [`Flaw`].
#[derive(Debug, Clone)]
struct Broken {
    inner: ReferenceBackend,
    flaw: Flaw,
}

impl Broken {
    fn new(flaw: Flaw) -> Self {
        Self {
            inner: ReferenceBackend::new(),
            flaw,
        }
    }
}

impl Backend for Broken {
    type Device = HostDevice;
    type Array = HostArray;
    type Error = CoreError;
    type QuantWeight = std::sync::Arc<mtp_core::quant::QuantTensor>;

    fn name(&self) -> String {
        format!("broken({:?})", self.flaw)
    }
    fn device(&self) -> &HostDevice {
        self.inner.device()
    }
    fn quant_weight(
        &self,
        tensor: std::sync::Arc<mtp_core::quant::QuantTensor>,
        dtype: DType,
    ) -> Result<Self::QuantWeight, CoreError> {
        self.inner.quant_weight(tensor, dtype)
    }
    fn quant_source<'w>(&self, w: &'w Self::QuantWeight) -> &'w mtp_core::quant::QuantTensor {
        w
    }
    fn from_f32(
        &self,
        data: &[f32],
        shape: &[usize],
        dtype: DType,
    ) -> Result<HostArray, CoreError> {
        self.inner.from_f32(data, shape, dtype)
    }
    fn from_u32(&self, data: &[u32], shape: &[usize]) -> Result<HostArray, CoreError> {
        self.inner.from_u32(data, shape)
    }
    fn from_le_bytes(
        &self,
        bytes: &[u8],
        src: DType,
        shape: &[usize],
        dtype: DType,
    ) -> Result<HostArray, CoreError> {
        let src = match (self.flaw, src) {
            (Flaw::Bf16ReadAsF16, DType::BF16) => DType::F16,
            _ => src,
        };
        self.inner.from_le_bytes(bytes, src, shape, dtype)
    }
    fn from_i32(&self, data: &[i32], shape: &[usize]) -> Result<HostArray, CoreError> {
        self.inner.from_i32(data, shape)
    }
    fn full(&self, shape: &[usize], value: f32, dtype: DType) -> Result<HostArray, CoreError> {
        self.inner.full(shape, value, dtype)
    }
    fn to_vec_f32(&self, x: &HostArray) -> Result<Vec<f32>, CoreError> {
        self.inner.to_vec_f32(x)
    }
    fn to_vec_u32(&self, x: &HostArray) -> Result<Vec<u32>, CoreError> {
        self.inner.to_vec_u32(x)
    }
    fn shape(&self, x: &HostArray) -> Vec<usize> {
        self.inner.shape(x)
    }
    fn dtype(&self, x: &HostArray) -> DType {
        self.inner.dtype(x)
    }
    fn cast(&self, x: &HostArray, dtype: DType) -> Result<HostArray, CoreError> {
        let from = self.inner.dtype(x);
        if self.flaw == Flaw::CastRounds && from.is_float() && dtype.is_int() {
            let half = self.inner.scalar(0.5, from)?;
            return self.inner.cast(&self.inner.add(x, &half)?, dtype);
        }
        self.inner.cast(x, dtype)
    }
    fn reshape(&self, x: &HostArray, shape: &[usize]) -> Result<HostArray, CoreError> {
        self.inner.reshape(x, shape)
    }
    fn transpose(&self, x: &HostArray, a: usize, b: usize) -> Result<HostArray, CoreError> {
        let rank = self.inner.shape(x).len();
        if self.flaw == Flaw::TransposePanics && a.max(b) >= rank {
            panic!("transpose: axis out of range");
        }
        self.inner.transpose(x, a, b)
    }
    fn slice(
        &self,
        x: &HostArray,
        axis: usize,
        start: usize,
        len: usize,
    ) -> Result<HostArray, CoreError> {
        self.inner.slice(x, axis, start, len)
    }
    fn concat(&self, xs: &[&HostArray], axis: usize) -> Result<HostArray, CoreError> {
        self.inner.concat(xs, axis)
    }
    fn binary(&self, a: &HostArray, b: &HostArray, op: BinaryOp) -> Result<HostArray, CoreError> {
        self.inner.binary(a, b, op)
    }
    fn unary(&self, x: &HostArray, op: UnaryOp) -> Result<HostArray, CoreError> {
        self.inner.unary(x, op)
    }
    fn compare(&self, a: &HostArray, b: &HostArray, op: CompareOp) -> Result<HostArray, CoreError> {
        self.inner.compare(a, b, op)
    }
    fn where_cond(
        &self,
        cond: &HostArray,
        a: &HostArray,
        b: &HostArray,
    ) -> Result<HostArray, CoreError> {
        self.inner.where_cond(cond, a, b)
    }
    fn reduce(&self, x: &HostArray, axis: usize, op: ReduceOp) -> Result<HostArray, CoreError> {
        self.inner.reduce(x, axis, op)
    }
    fn argmax(&self, x: &HostArray, axis: usize) -> Result<HostArray, CoreError> {
        self.inner.argmax(x, axis)
    }
    fn argsort(
        &self,
        x: &HostArray,
        axis: usize,
        order: SortOrder,
    ) -> Result<HostArray, CoreError> {
        if self.flaw != Flaw::DescendingArgsortUnstable || order == SortOrder::Ascending {
            return self.inner.argsort(x, axis, order);
        }
        // Reverse the ascending order along `axis`.
        let ascending = self.inner.argsort(x, axis, SortOrder::Ascending)?;
        let shape = self.inner.shape(x);
        let (outer, len, inner): (usize, usize, usize) = (
            shape[..axis].iter().product(),
            shape[axis],
            shape[axis + 1..].iter().product(),
        );
        let mut reversed = Vec::with_capacity(outer * len * inner);
        for _ in 0..outer {
            for j in 0..len {
                reversed.extend(std::iter::repeat_n((len - 1 - j) as u32, inner));
            }
        }
        let reversed = self.inner.from_u32(&reversed, &shape)?;
        self.inner.take_along_axis(&ascending, &reversed, axis)
    }
    fn cumsum(&self, x: &HostArray, axis: usize) -> Result<HostArray, CoreError> {
        self.inner.cumsum(x, axis)
    }
    fn embedding(&self, table: &HostArray, ids: &HostArray) -> Result<HostArray, CoreError> {
        self.inner.embedding(table, ids)
    }
    fn take_along_axis(
        &self,
        x: &HostArray,
        indices: &HostArray,
        axis: usize,
    ) -> Result<HostArray, CoreError> {
        self.inner.take_along_axis(x, indices, axis)
    }
    fn scatter(
        &self,
        x: &HostArray,
        indices: &HostArray,
        src: &HostArray,
        axis: usize,
    ) -> Result<HostArray, CoreError> {
        self.inner.scatter(x, indices, src, axis)
    }
    fn matmul(&self, a: &HostArray, b: &HostArray) -> Result<HostArray, CoreError> {
        self.inner.matmul(a, b)
    }
    fn linear(&self, x: &HostArray, w: &HostArray) -> Result<HostArray, CoreError> {
        let y = self.inner.linear(x, w)?;
        let shape = self.inner.shape(x);
        let rows: usize = shape[..shape.len().saturating_sub(1)].iter().product();
        if self.flaw == Flaw::LinearRoundsByRows && rows > 1 {
            return self.inner.affine(&y, 1.0 + 2f32.powi(-20), 0.0);
        }
        Ok(y)
    }
    fn gather_linear(
        &self,
        x: &HostArray,
        w: &HostArray,
        indices: &HostArray,
    ) -> Result<HostArray, CoreError> {
        if self.flaw == Flaw::GatherIgnoresRouting {
            let first = self
                .inner
                .full(&self.inner.shape(indices), 0.0, DType::U32)?;
            return self.inner.gather_linear(x, w, &first);
        }
        self.inner.gather_linear(x, w, indices)
    }
    fn write_slice(
        &self,
        dst: &mut HostArray,
        src: &HostArray,
        axis: usize,
        start: usize,
    ) -> Result<(), CoreError> {
        let start = if self.flaw == Flaw::WriteSliceAtZero {
            0
        } else {
            start
        };
        self.inner.write_slice(dst, src, axis, start)
    }
    fn softmax(&self, x: &HostArray, axis: usize) -> Result<HostArray, CoreError> {
        let s = self.inner.softmax(x, axis)?;
        if self.flaw == Flaw::SoftmaxScaled {
            return self.inner.affine(&s, 1.05, 0.0);
        }
        Ok(s)
    }
    fn rope(&self, x: &HostArray, start: usize, inv_freq: &[f32]) -> Result<HostArray, CoreError> {
        if self.flaw == Flaw::RopeWrongSign {
            let negated: Vec<f32> = inv_freq.iter().map(|f| -f).collect();
            return self.inner.rope(x, start, &negated);
        }
        self.inner.rope(x, start, inv_freq)
    }
    fn attention(
        &self,
        q: &HostArray,
        k: &HostArray,
        v: &HostArray,
        mask: &AttentionMask,
        scale: f32,
    ) -> Result<HostArray, CoreError> {
        if self.flaw == Flaw::AttentionIgnoresWindow {
            let unwindowed = mask.with_window(None);
            return self.inner.attention(q, k, v, &unwindowed, scale);
        }
        self.inner.attention(q, k, v, mask, scale)
    }
}

type Case = fn(&Broken) -> Result<(), SuiteError>;

/// `flaw` fails every case of `caught` (with a report naming `op`) and passes `control`.
fn assert_caught(flaw: Flaw, op: &str, caught: &[(&str, Case)], control: (&str, Case)) {
    let backend = Broken::new(flaw);
    for (name, case) in caught {
        match case(&backend) {
            Ok(()) => panic!("{name} did not catch {flaw:?}"),
            Err(error) => {
                let report = mtp_tests::report("teeth", name, &error);
                assert!(
                    report.contains(op),
                    "{flaw:?}: the report does not name {op}: {report}"
                );
                eprintln!("{report}");
            }
        }
    }
    let (name, case) = control;
    if let Err(error) = case(&backend) {
        panic!("{flaw:?} should not fail the unrelated case {name}: {error}");
    }
}

#[test]
fn a_scaled_softmax_is_caught() {
    assert_caught(
        Flaw::SoftmaxScaled,
        "softmax",
        &[("fused::softmax", fused::softmax)],
        ("elementwise::unary", elementwise::unary),
    );
}

#[test]
fn a_rope_with_the_wrong_sign_is_caught() {
    assert_caught(
        Flaw::RopeWrongSign,
        "rope",
        &[("fused::rope", fused::rope)],
        ("fused::softmax", fused::softmax),
    );
}

#[test]
fn an_attention_that_ignores_the_window_is_caught() {
    assert_caught(
        Flaw::AttentionIgnoresWindow,
        "attention",
        &[("fused::attention", fused::attention)],
        ("fused::rope", fused::rope),
    );
}

#[test]
fn a_rounding_cast_is_caught() {
    assert_caught(
        Flaw::CastRounds,
        "cast",
        &[("creation::cast_all_pairs", creation::cast_all_pairs)],
        ("creation::from_f32", creation::from_f32),
    );
}

#[test]
fn a_misplaced_write_slice_is_caught() {
    assert_caught(
        Flaw::WriteSliceAtZero,
        "write_slice",
        &[("hooks::write_slice", hooks::write_slice)],
        ("hooks::eval_and_async_eval", hooks::eval_and_async_eval),
    );
    // The caches write through write_slice: their rollback check fails too.
    assert!(caches::full_cache_rollback(&Broken::new(Flaw::WriteSliceAtZero)).is_err());
}

#[test]
fn an_unstable_descending_argsort_is_caught_only_by_the_tie_case() {
    assert_caught(
        Flaw::DescendingArgsortUnstable,
        "argsort",
        &[("reduce::argsort_is_stable", reduce::argsort_is_stable)],
        // Without ties the reversed ascending order is right.
        ("reduce::argsort", reduce::argsort),
    );
}

#[test]
fn a_panic_on_invalid_input_is_reported_not_propagated() {
    let backend = Broken::new(Flaw::TransposePanics);
    match errors::bad_axes_are_errors(&backend) {
        Err(SuiteError::Panicked { what, .. }) => assert!(what.contains("transpose")),
        other => panic!("expected a Panicked report, got {other:?}"),
    }
    assert!(elementwise::binary(&backend).is_ok());
}

#[test]
fn a_gather_that_ignores_the_routing_is_caught() {
    assert_caught(
        Flaw::GatherIgnoresRouting,
        "gather_linear",
        &[("linalg::gather_linear", linalg::gather_linear)],
        ("linalg::linear", linalg::linear),
    );
}

#[test]
fn bf16_weights_read_as_f16_are_caught() {
    assert_caught(
        Flaw::Bf16ReadAsF16,
        "from_le_bytes",
        &[("creation::from_le_bytes", creation::from_le_bytes)],
        ("creation::from_f32", creation::from_f32),
    );
}

#[test]
fn a_linear_that_rounds_by_the_number_of_rows_is_caught() {
    assert_caught(
        Flaw::LinearRoundsByRows,
        "linear",
        &[("invariance::linear_rows", invariance::linear_rows)],
        ("linalg::linear", linalg::linear),
    );
}
