//! Tests of the reference backend: every op against hand-computed values, every error kind,
//! half-precision rounding, the determinism property and the trait's default fused ops.

mod attention;
mod create;
mod elementwise;
mod fused;
mod indexing;
mod matmul;
mod reduce;
mod shape;

use super::{HostArray, ReferenceBackend};
use crate::{Backend, CoreError, CoreResult, DType};

pub(super) fn be() -> ReferenceBackend {
    ReferenceBackend::new()
}

/// An F32 array.
pub(super) fn f(data: &[f32], shape: &[usize]) -> HostArray {
    be().from_f32(data, shape, DType::F32)
        .expect("valid test array")
}

/// A U32 array.
pub(super) fn u(data: &[u32], shape: &[usize]) -> HostArray {
    be().from_u32(data, shape).expect("valid test array")
}

/// An I32 array.
pub(super) fn i(data: &[i32], shape: &[usize]) -> HostArray {
    be().from_i32(data, shape).expect("valid test array")
}

/// `0, 1, 2, ...` as an F32 array of `shape`.
pub(super) fn arange(shape: &[usize]) -> HostArray {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|v| v as f32).collect();
    f(&data, shape)
}

/// Deterministic pseudo-random values in `[-1, 1)`.
pub(super) fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Every element as `f32`.
pub(super) fn vals(x: &HostArray) -> Vec<f32> {
    be().to_vec_f32(x).expect("readable")
}

/// Every element of an integer array as `u32`.
pub(super) fn uvals(x: &HostArray) -> Vec<u32> {
    be().to_vec_u32(x).expect("readable")
}

/// Asserts elementwise closeness (NaN matches NaN, infinities must be equal).
#[track_caller]
pub(super) fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "lengths differ: {got:?} vs {want:?}");
    for (k, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(
            ok,
            "element {k}: got {g}, want {w}\n got: {got:?}\nwant: {want:?}"
        );
    }
}

/// Asserts bit-identical `f32` slices.
#[track_caller]
pub(super) fn assert_bitwise(got: &[f32], want: &[f32]) {
    let g: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
    let w: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
    assert_eq!(g, w, "not bit-identical:\n got: {got:?}\nwant: {want:?}");
}

#[test]
fn name_device_and_debug() {
    let b = be();
    assert_eq!(b.name(), "reference");
    assert_eq!(*b.device(), super::HostDevice);
    let x = arange(&[3, 4]);
    let text = format!("{x:?}");
    assert!(
        text.contains("[3, 4]") && text.contains("12 values"),
        "{text}"
    );
    assert_eq!(x.shape(), &[3, 4]);
    assert_eq!(x.dtype(), DType::F32);
    assert_eq!(x.numel(), 12);
    assert_eq!(x.rank(), 2);
}

#[test]
fn errors_carry_the_op_name() -> CoreResult<()> {
    let err = be().reshape(&arange(&[2, 3]), &[4]).unwrap_err();
    assert!(matches!(
        err,
        CoreError::ShapeMismatch { op: "reshape", .. }
    ));
    assert!(err.to_string().starts_with("reshape"), "{err}");
    Ok(())
}
