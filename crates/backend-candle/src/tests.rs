//! Direct checks against the reference backend (the generic conformance suite lives in the
//! workspace's `tests/` crate).

use std::sync::Arc;

use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::reference::{HostArray, ReferenceBackend};
use mtp_core::testing::{LayerKind, TinyConfig, TinyDrafter, TinyDrafterConfig, TinyTarget};
use mtp_core::{AttentionMask, Backend, BinaryOp, CompareOp, DType, ReduceOp, SortOrder, UnaryOp};

use crate::{CandleBackend, CandleError};

type TestResult = Result<(), CandleError>;

const REL: f32 = 1e-5;

fn cb() -> CandleBackend {
    CandleBackend::cpu()
}

fn rb() -> ReferenceBackend {
    ReferenceBackend::new()
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The same f32 data on both backends.
fn pair(shape: &[usize], seed: u64) -> Result<(candle_core::Tensor, HostArray), CandleError> {
    let n = shape.iter().product();
    let data = values(n, seed);
    Ok((
        cb().from_f32(&data, shape, DType::F32)?,
        rb().from_f32(&data, shape, DType::F32)?,
    ))
}

fn assert_close_rel(got: &[f32], want: &[f32], rel: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let same_nan = g.is_nan() && w.is_nan();
        // relative, with an absolute floor for results near zero (cancellation).
        let ok = same_nan || g == w || (g - w).abs() <= rel * w.abs() + 1e-6;
        assert!(ok, "{what}[{i}]: candle {g} vs reference {w}");
    }
}

/// Compare a candle result with a reference result: shape, dtype and values.
fn check(got: &candle_core::Tensor, want: &HostArray, what: &str) {
    check_rel(got, want, REL, what);
}

fn check_rel(got: &candle_core::Tensor, want: &HostArray, rel: f32, what: &str) {
    let (c, r) = (cb(), rb());
    assert_eq!(c.shape(got), r.shape(want), "{what}: shape");
    assert_eq!(c.dtype(got), r.dtype(want), "{what}: dtype");
    let g = c.to_vec_f32(got).expect("candle host read");
    let w = r.to_vec_f32(want).expect("reference host read");
    assert_close_rel(&g, &w, rel, what);
}

#[test]
fn binary_ops_broadcast_like_numpy() -> TestResult {
    let (c, r) = (cb(), rb());
    for (sa, sb) in [
        (vec![2, 3], vec![3]),
        (vec![2, 1], vec![1, 3]),
        (vec![4, 1, 3], vec![2, 1]),
        (vec![], vec![2, 2]),
    ] {
        let (ca, ra) = pair(&sa, 1)?;
        let (cbb, rbb) = pair(&sb, 2)?;
        for op in [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Div,
            BinaryOp::Maximum,
            BinaryOp::Minimum,
        ] {
            check(
                &c.binary(&ca, &cbb, op)?,
                &r.binary(&ra, &rbb, op)?,
                &format!("{op:?} {sa:?} {sb:?}"),
            );
        }
        for op in [CompareOp::Lt, CompareOp::Eq, CompareOp::Ge] {
            let m = c.compare(&ca, &cbb, op)?;
            assert_eq!(c.dtype(&m), DType::U32);
            check(&m, &r.compare(&ra, &rbb, op)?, &format!("{op:?}"));
        }
    }
    let bad = c.binary(&pair(&[2, 3], 1)?.0, &pair(&[2], 1)?.0, BinaryOp::Add);
    assert!(bad.is_err());
    Ok(())
}

#[test]
fn non_contiguous_inputs_match_reference() -> TestResult {
    let (c, r) = (cb(), rb());
    let (cx, rx) = pair(&[3, 4, 5], 3)?;
    let ct = c.transpose(&cx, 0, 2)?;
    let rt = r.transpose(&rx, 0, 2)?;
    assert!(!ct.is_contiguous());
    check(
        &c.reshape(&ct, &[5, 12])?,
        &r.reshape(&rt, &[5, 12])?,
        "reshape",
    );
    check(
        &c.unary(&ct, UnaryOp::Exp)?,
        &r.unary(&rt, UnaryOp::Exp)?,
        "exp",
    );
    for axis in 0..3 {
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            check(
                &c.reduce(&ct, axis, op)?,
                &r.reduce(&rt, axis, op)?,
                &format!("{op:?} axis {axis}"),
            );
        }
        check(&c.argmax(&ct, axis)?, &r.argmax(&rt, axis)?, "argmax");
        check(&c.cumsum(&ct, axis)?, &r.cumsum(&rt, axis)?, "cumsum");
        check(&c.softmax(&ct, axis)?, &r.softmax(&rt, axis)?, "softmax");
        for order in [SortOrder::Ascending, SortOrder::Descending] {
            check(
                &c.argsort(&ct, axis, order)?,
                &r.argsort(&rt, axis, order)?,
                &format!("argsort {order:?}"),
            );
        }
    }
    check(
        &c.slice(&ct, 1, 1, 2)?,
        &r.slice(&rt, 1, 1, 2)?,
        "slice of transposed",
    );
    check(
        &c.concat(&[&ct, &ct], 1)?,
        &r.concat(&[&rt, &rt], 1)?,
        "concat",
    );
    // linear: x @ w^T with a transposed (strided) weight view.
    let (cxx, rxx) = pair(&[2, 3, 8], 4)?;
    let (cw, rw) = pair(&[6, 8], 5)?;
    check(&c.linear(&cxx, &cw)?, &r.linear(&rxx, &rw)?, "linear");
    // batched matmul with broadcasting and a transposed lhs.
    let (ca, ra) = pair(&[2, 1, 4, 3], 6)?;
    let (cbm, rbm) = pair(&[3, 4, 5], 7)?;
    let cat_ = c.transpose(&ca, 2, 3)?;
    let rat = r.transpose(&ra, 2, 3)?;
    check(&c.matmul(&cat_, &cbm)?, &r.matmul(&rat, &rbm)?, "matmul");
    Ok(())
}

#[test]
fn indexing_ops_match_reference() -> TestResult {
    let (c, r) = (cb(), rb());
    let (ct, rt) = pair(&[5, 4], 8)?;
    let ids = [3u32, 0, 4, 4, 1, 2];
    let (ci, ri) = (c.from_u32(&ids, &[2, 3])?, r.from_u32(&ids, &[2, 3])?);
    check(
        &c.embedding(&ct, &ci)?,
        &r.embedding(&rt, &ri)?,
        "embedding",
    );
    let signed = [1i32, 0, 2, 3];
    let (cs, rs) = (c.from_i32(&signed, &[4])?, r.from_i32(&signed, &[4])?);
    check(
        &c.embedding(&ct, &cs)?,
        &r.embedding(&rt, &rs)?,
        "embedding i32",
    );

    let (cx, rx) = pair(&[3, 4], 9)?;
    let idx = [3u32, 0, 1, 1, 2, 2];
    let (cidx, ridx) = (c.from_u32(&idx, &[3, 2])?, r.from_u32(&idx, &[3, 2])?);
    check(
        &c.take_along_axis(&cx, &cidx, 1)?,
        &r.take_along_axis(&rx, &ridx, 1)?,
        "take_along_axis",
    );
    let (csrc, rsrc) = pair(&[3, 2], 10)?;
    check(
        &c.scatter(&cx, &cidx, &csrc, 1)?,
        &r.scatter(&rx, &ridx, &rsrc, 1)?,
        "scatter",
    );
    // a non-contiguous x for scatter and gather
    let cxt = c.transpose(&cx, 0, 1)?;
    let rxt = r.transpose(&rx, 0, 1)?;
    let idx0 = [0u32, 2, 1];
    let (ci0, ri0) = (c.from_u32(&idx0, &[1, 3])?, r.from_u32(&idx0, &[1, 3])?);
    check(
        &c.take_along_axis(&cxt, &ci0, 0)?,
        &r.take_along_axis(&rxt, &ri0, 0)?,
        "take_along_axis transposed",
    );
    let out_of_range = c.from_u32(&[7], &[1])?;
    assert!(c.embedding(&ct, &out_of_range).is_err());
    let negative = c.from_i32(&[-1], &[1])?;
    assert!(c.embedding(&ct, &negative).is_err());
    Ok(())
}

#[test]
fn where_and_top_k_match_reference() -> TestResult {
    let (c, r) = (cb(), rb());
    let (ca, ra) = pair(&[2, 3], 11)?;
    let (cb_, rb_) = pair(&[3], 12)?;
    let cond = [1.0f32, 0.0, f32::NAN];
    let (cc, rc) = (
        c.from_f32(&cond, &[1, 3], DType::F32)?,
        r.from_f32(&cond, &[1, 3], DType::F32)?,
    );
    check(
        &c.where_cond(&cc, &ca, &cb_)?,
        &r.where_cond(&rc, &ra, &rb_)?,
        "where float cond",
    );
    let mask = c.compare(&ca, &cb_, CompareOp::Gt)?;
    let rmask = r.compare(&ra, &rb_, CompareOp::Gt)?;
    check(
        &c.where_cond(&mask, &ca, &cb_)?,
        &r.where_cond(&rmask, &ra, &rb_)?,
        "where mask",
    );
    let (cx, rx) = pair(&[2, 10], 13)?;
    let (cv, ci) = c.top_k(&cx, 4)?;
    let (rv, ri) = r.top_k(&rx, 4)?;
    check(&cv, &rv, "top_k values");
    check(&ci, &ri, "top_k indices");
    Ok(())
}

#[test]
fn ties_and_nan_follow_the_contract() -> TestResult {
    let c = cb();
    let x = c.from_f32(&[1.0, 3.0, 3.0, 0.0, 3.0], &[1, 5], DType::F32)?;
    assert_eq!(c.to_vec_u32(&c.argmax(&x, 1)?)?, vec![1]);
    assert_eq!(
        c.to_vec_u32(&c.argsort(&x, 1, SortOrder::Descending)?)?,
        vec![1, 2, 4, 0, 3]
    );
    assert_eq!(
        c.to_vec_u32(&c.argsort(&x, 1, SortOrder::Ascending)?)?,
        vec![3, 0, 1, 2, 4]
    );
    let n = c.from_f32(&[f32::NAN, 1.0, 2.0, f32::NAN], &[4], DType::F32)?;
    assert_eq!(c.to_vec_u32(&c.argmax(&n, 0)?)?, vec![2]);
    assert_eq!(
        c.to_vec_u32(&c.argsort(&n, 0, SortOrder::Ascending)?)?,
        vec![1, 2, 0, 3]
    );
    assert_eq!(
        c.to_vec_u32(&c.argsort(&n, 0, SortOrder::Descending)?)?,
        vec![2, 1, 0, 3]
    );
    assert!(c.to_vec_f32(&c.reduce(&n, 0, ReduceOp::Max)?)?[0].is_nan());
    let one = c.from_f32(&[1.0, 1.0, 1.0, 1.0], &[4], DType::F32)?;
    let m = c.to_vec_f32(&c.binary(&one, &n, BinaryOp::Maximum)?)?;
    assert!(m[0].is_nan() && m[3].is_nan() && m[2] == 2.0);
    Ok(())
}

#[test]
fn integer_ops() -> TestResult {
    let (c, r) = (cb(), rb());
    let data = [5i32, -3, 7, 2, 0, 9];
    let (cx, rx) = (c.from_i32(&data, &[2, 3])?, r.from_i32(&data, &[2, 3])?);
    for axis in 0..2 {
        check(&c.cumsum(&cx, axis)?, &r.cumsum(&rx, axis)?, "int cumsum");
        check(
            &c.reduce(&cx, axis, ReduceOp::Sum)?,
            &r.reduce(&rx, axis, ReduceOp::Sum)?,
            "int sum",
        );
    }
    assert!(c.reduce(&cx, 0, ReduceOp::Mean).is_err());
    let zero = c.from_i32(&[0], &[1])?;
    assert!(c.binary(&cx, &zero, BinaryOp::Div).is_err());
    let two = c.from_i32(&[2], &[1])?;
    check(
        &c.binary(&cx, &two, BinaryOp::Div)?,
        &r.binary(&rx, &r.from_i32(&[2], &[1])?, BinaryOp::Div)?,
        "int div",
    );
    assert!(c.to_vec_u32(&cx).is_err(), "negative values are not u32");
    assert!(c
        .to_vec_u32(&c.from_f32(&[1.0], &[1], DType::F32)?)
        .is_err());
    let u = c.full(&[2], 3.0, DType::U32)?;
    assert_eq!(c.to_vec_u32(&u)?, vec![3, 3]);
    assert!(c.full(&[2], -1.0, DType::U32).is_err());
    assert!(c.full(&[2], f32::NAN, DType::I32).is_err());
    Ok(())
}

#[test]
fn long_cumsum_uses_the_scan_and_matches() -> TestResult {
    let (c, r) = (cb(), rb());
    let n = 3000;
    let data: Vec<f32> = values(n, 14).iter().map(|v| v.abs()).collect();
    let cx = c.from_f32(&data, &[1, n], DType::F32)?;
    let rx = r.from_f32(&data, &[1, n], DType::F32)?;
    check_rel(&c.cumsum(&cx, 1)?, &r.cumsum(&rx, 1)?, 1e-5, "cumsum 3000");
    Ok(())
}

#[test]
fn fused_ops_match_default_bodies() -> TestResult {
    let (c, r) = (cb(), rb());
    let (cx, rx) = pair(&[2, 3, 4, 8], 15)?;
    let (cw, rw) = pair(&[8], 16)?;
    check(
        &c.rms_norm(&cx, Some(&cw), 1e-6)?,
        &r.rms_norm(&rx, Some(&rw), 1e-6)?,
        "rms_norm",
    );
    check(
        &c.rms_norm(&cx, None, 1e-6)?,
        &r.rms_norm(&rx, None, 1e-6)?,
        "rms_norm without weight",
    );
    let ct = c.transpose(&cx, 1, 2)?;
    let rt = r.transpose(&rx, 1, 2)?;
    check(
        &c.rms_norm(&ct, Some(&cw), 1e-6)?,
        &r.rms_norm(&rt, Some(&rw), 1e-6)?,
        "rms_norm transposed",
    );
    check(&c.gelu_tanh(&cx)?, &r.gelu_tanh(&rx)?, "gelu_tanh");
    check(&c.softmax(&cx, 3)?, &r.softmax(&rx, 3)?, "softmax last");
    check(&c.softmax(&cx, 1)?, &r.softmax(&rx, 1)?, "softmax axis 1");
    check(
        &c.log_softmax(&cx, 3)?,
        &r.log_softmax(&rx, 3)?,
        "log_softmax",
    );
    let full: Vec<f32> = (0..4).map(|i| 10_000f32.powf(-(i as f32) / 4.0)).collect();
    check(
        &c.rope(&cx, 5, &full)?,
        &r.rope(&rx, 5, &full)?,
        "rope full",
    );
    check(
        &c.rope(&ct, 0, &full[..2])?,
        &r.rope(&rt, 0, &full[..2])?,
        "rope partial, transposed",
    );
    assert!(c.rope(&cx, 0, &[1.0; 5]).is_err());
    // attention keeps the default body: grouped heads, causal window, a fully masked row.
    let (cq, rq) = pair(&[1, 4, 3, 8], 17)?;
    let (ck, rk) = pair(&[1, 2, 5, 8], 18)?;
    let (cv, rv) = pair(&[1, 2, 5, 8], 19)?;
    for mask in [
        AttentionMask::causal(2, 0),
        AttentionMask::causal(2, 0).with_window(Some(2)),
        AttentionMask::causal(0, 1),
    ] {
        check(
            &c.attention(&cq, &ck, &cv, &mask, 0.35)?,
            &r.attention(&rq, &rk, &rv, &mask, 0.35)?,
            &format!("attention {mask:?}"),
        );
    }
    Ok(())
}

#[test]
fn half_precision_round_trips() -> TestResult {
    let (c, r) = (cb(), rb());
    let data = values(24, 20);
    for dtype in [DType::F16, DType::BF16] {
        let cx = c.from_f32(&data, &[4, 6], dtype)?;
        let rx = r.from_f32(&data, &[4, 6], dtype)?;
        assert_eq!(c.dtype(&cx), dtype);
        // storage rounding is identical: exact equality.
        assert_eq!(c.to_vec_f32(&cx)?, r.to_vec_f32(&rx)?, "{dtype} storage");
        let back = c.cast(&c.cast(&cx, DType::F32)?, dtype)?;
        assert_eq!(c.to_vec_f32(&back)?, c.to_vec_f32(&cx)?, "{dtype} via f32");
        let tol = if dtype == DType::F16 { 2e-3 } else { 1.6e-2 };
        check_rel(
            &c.reduce(&cx, 1, ReduceOp::Sum)?,
            &r.reduce(&rx, 1, ReduceOp::Sum)?,
            tol,
            "half sum",
        );
        check_rel(
            &c.softmax(&cx, 1)?,
            &r.softmax(&rx, 1)?,
            tol * 2.0,
            "half softmax",
        );
        let full = c.full(&[3], 0.1, dtype)?;
        assert_eq!(
            c.to_vec_f32(&full)?,
            r.to_vec_f32(&r.full(&[3], 0.1, dtype)?)?
        );
    }
    Ok(())
}

#[test]
fn write_slice_is_in_place_and_deep_copy_isolates() -> TestResult {
    let c = cb();
    let mut buf = c.full(&[1, 2, 6, 3], 0.0, DType::F32)?;
    let alias = buf.clone();
    let (src, _) = pair(&[1, 2, 2, 3], 21)?;
    c.write_slice(&mut buf, &src, 2, 1)?;
    // In place: a clone made before the write sees it (shared storage).
    assert_eq!(c.to_vec_f32(&alias)?, c.to_vec_f32(&buf)?);
    let got = c.to_vec_f32(&c.slice(&buf, 2, 1, 2)?)?;
    assert_eq!(got, c.to_vec_f32(&src)?);
    let untouched = c.to_vec_f32(&c.slice(&buf, 2, 3, 3)?)?;
    assert!(untouched.iter().all(|&v| v == 0.0));

    // A fork made with deep_copy is isolated in both directions.
    let mut fork = c.deep_copy(&buf)?;
    let before = c.to_vec_f32(&fork)?;
    let ones = c.full(&[1, 2, 1, 3], 1.0, DType::F32)?;
    c.write_slice(&mut buf, &ones, 2, 0)?;
    assert_eq!(
        c.to_vec_f32(&fork)?,
        before,
        "original write reached the fork"
    );
    let twos = c.full(&[1, 2, 1, 3], 2.0, DType::F32)?;
    c.write_slice(&mut fork, &twos, 2, 5)?;
    let last = c.to_vec_f32(&c.slice(&buf, 2, 5, 1)?)?;
    assert!(
        last.iter().all(|&v| v == 0.0),
        "fork write reached the original"
    );

    // A non-contiguous src, and a src that is a view of dst itself.
    let (t, _) = pair(&[1, 3, 2, 2], 22)?;
    let tsrc = c.transpose(&t, 1, 2)?; // [1, 2, 3, 2] strided
    let mut b2 = c.full(&[1, 2, 3, 4], 0.0, DType::F32)?;
    c.write_slice(&mut b2, &tsrc, 3, 2)?;
    assert_eq!(c.to_vec_f32(&c.slice(&b2, 3, 2, 2)?)?, c.to_vec_f32(&tsrc)?);
    let own = c.slice(&b2, 3, 2, 2)?;
    c.write_slice(&mut b2, &own, 3, 0)?;
    assert_eq!(c.to_vec_f32(&c.slice(&b2, 3, 0, 2)?)?, c.to_vec_f32(&tsrc)?);

    // Errors instead of panics.
    assert!(c.write_slice(&mut buf, &src, 2, 5).is_err());
    assert!(c.write_slice(&mut buf, &src, 7, 0).is_err());
    let half = c.cast(&src, DType::F16)?;
    assert!(c.write_slice(&mut buf, &half, 2, 0).is_err());
    Ok(())
}

#[test]
fn from_spec_parses_and_explains() {
    assert!(CandleBackend::from_spec("cpu").is_ok());
    assert!(CandleBackend::from_spec(" CPU ").is_ok());
    assert_eq!(CandleBackend::cpu().name(), "candle-cpu");
    for bad in ["", "gpu", "cuda:x", "cpu:1", "metal:-1", "tpu:0"] {
        assert!(
            matches!(
                CandleBackend::from_spec(bad),
                Err(CandleError::UnknownDevice { .. })
            ),
            "{bad:?}"
        );
    }
    #[cfg(not(feature = "cuda"))]
    for spec in ["cuda", "cuda:1"] {
        assert!(matches!(
            CandleBackend::from_spec(spec),
            Err(CandleError::FeatureNotCompiled {
                device: "cuda",
                feature: "cuda"
            })
        ));
    }
    #[cfg(not(feature = "metal"))]
    assert!(matches!(
        CandleBackend::from_spec("metal:0"),
        Err(CandleError::FeatureNotCompiled {
            device: "metal",
            feature: "metal"
        })
    ));
    #[cfg(all(feature = "metal", not(target_os = "macos")))]
    assert!(matches!(
        CandleBackend::from_spec("metal"),
        Err(CandleError::PlatformUnsupported { .. })
    ));
}

#[test]
fn errors_not_panics_on_bad_input() -> TestResult {
    let c = cb();
    let (x, _) = pair(&[2, 3], 23)?;
    assert!(c.from_f32(&[1.0; 5], &[2, 3], DType::F32).is_err());
    assert!(c.from_f32(&[1.0; 6], &[2, 3], DType::U32).is_err());
    assert!(c.reshape(&x, &[4]).is_err());
    assert!(c.transpose(&x, 0, 2).is_err());
    assert!(c.slice(&x, 1, 2, 2).is_err());
    assert!(c.slice(&x, 1, usize::MAX, 2).is_err());
    assert!(c.concat(&[], 0).is_err());
    assert!(c.reduce(&x, 2, ReduceOp::Sum).is_err());
    assert!(c.argmax(&x, 5).is_err());
    assert!(c.matmul(&x, &x).is_err());
    assert!(c.unary(&c.from_u32(&[1], &[1])?, UnaryOp::Exp).is_err());
    assert!(c.softmax(&x, 2).is_err());
    assert!(c.top_k(&x, 4).is_err());
    let empty = c.full(&[2, 0], 0.0, DType::F32)?;
    assert!(c.reduce(&empty, 1, ReduceOp::Max).is_err());
    assert!(c.argmax(&empty, 1).is_err());
    assert_eq!(c.shape(&c.reduce(&empty, 1, ReduceOp::Sum)?), vec![2, 1]);
    assert_eq!(
        c.shape(&c.argsort(&empty, 1, SortOrder::Ascending)?),
        vec![2, 0]
    );
    assert_eq!(c.shape(&c.softmax(&empty, 1)?), vec![2, 0]);
    let f64_tensor = candle_core::Tensor::new(&[1.0f64, 2.0], c.device())?;
    assert!(matches!(
        c.unary(&f64_tensor, UnaryOp::Exp),
        Err(CandleError::UnsupportedDType { .. })
    ));
    Ok(())
}

/// Greedy tokens of plain decoding and of MTP decoding with the tiny target and drafter.
fn greedy_runs<B: Backend>(
    backend: &B,
    config: TinyConfig,
) -> Result<(Vec<u32>, Vec<u32>), B::Error> {
    let no_env: mtp_core::engine::EnvLookup = Arc::new(|_| None);
    let target = TinyTarget::new(backend, config)?;
    let drafter = TinyDrafter::new(backend, &target, TinyDrafterConfig::default())?;
    let request = GenerateRequest::greedy(vec![1, 2, 3], 24);
    let plain = Engine::new(backend, &target)
        .with_env(no_env.clone())
        .generate(&request, &mut DiscardSink, &CancelToken::new())?;
    let mtp = Engine::new(backend, &target)
        .with_env(no_env)
        .with_drafter(&drafter)
        .generate(&request, &mut DiscardSink, &CancelToken::new())?;
    assert!(mtp.mtp.is_some(), "the drafter was not used");
    Ok((plain.tokens, mtp.tokens))
}

/// MTP changes speed, never the greedy tokens, and candle-cpu produces the reference backend's
/// tokens.
fn check_engine(config: TinyConfig) -> TestResult {
    let (plain, mtp) = greedy_runs(&cb(), config.clone())?;
    let (reference, reference_mtp) = greedy_runs(&rb(), config)?;
    assert_eq!(plain.len(), 24);
    assert_eq!(reference_mtp, reference);
    assert_eq!(
        mtp, plain,
        "greedy MTP differs from plain greedy on candle-cpu"
    );
    assert_eq!(
        plain, reference,
        "candle-cpu differs from the reference backend"
    );
    Ok(())
}

/// Full-attention layers only (full caches, in-place writes, partial rope).
#[test]
fn engine_greedy_full_layers() -> TestResult {
    check_engine(TinyConfig {
        layers: vec![LayerKind::Full, LayerKind::Full],
        ..TinyConfig::default()
    })
}

/// The default tiny model: a sliding-window layer (rotating cache) and a full one. This caught
/// a rotating cache that returned a view of its ring and then wrote the ring in place.
#[test]
fn engine_greedy_default_model() -> TestResult {
    check_engine(TinyConfig::default())
}

#[test]
fn gather_linear_routes_each_row_to_its_expert() -> TestResult {
    // 7 rows over 4 experts: a repeated expert, an unused one, rows of one expert not adjacent.
    let (xc, xr) = pair(&[7, 5], 91)?;
    let (wc, wr) = pair(&[4, 3, 5], 92)?;
    let ids = [2u32, 0, 2, 3, 0, 0, 2];
    let ic = cb().from_u32(&ids, &[7])?;
    let ir = rb().from_u32(&ids, &[7])?;
    let got = cb().gather_linear(&xc, &wc, &ic)?;
    let want = rb().gather_linear(&xr, &wr, &ir)?;
    assert_eq!(got.dims(), [7, 3]);
    check_rel(&got, &want, REL, "gather_linear");
    // Row r is x[r] @ w[ids[r]]^T, written out.
    let (x, w) = (values(35, 91), values(60, 92));
    let rows = cb().to_vec_f32(&got)?;
    for (r, &e) in ids.iter().enumerate() {
        for o in 0..3 {
            let dot: f32 = (0..5)
                .map(|i| x[r * 5 + i] * w[e as usize * 15 + o * 5 + i])
                .sum();
            assert!((rows[r * 3 + o] - dot).abs() < 1e-5, "row {r} out {o}");
        }
    }
    let bad = cb().from_u32(&[4, 0, 0, 0, 0, 0, 0], &[7])?;
    assert!(cb().gather_linear(&xc, &wc, &bad).is_err());
    Ok(())
}

#[test]
fn from_le_bytes_matches_the_reference_decode() -> TestResult {
    let data = values(24, 93);
    let stored: [(DType, Vec<u8>); 3] = [
        (
            DType::F32,
            data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        (
            DType::F16,
            data.iter()
                .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                .collect(),
        ),
        (
            DType::BF16,
            data.iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect(),
        ),
    ];
    for (src, bytes) in &stored {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let got = cb().from_le_bytes(bytes, *src, &[4, 6], dtype)?;
            let want = rb().from_le_bytes(bytes, *src, &[4, 6], dtype)?;
            check_rel(&got, &want, 0.0, &format!("{src} stored, {dtype} array"));
        }
    }
    // Too few bytes for the shape, and an integer source, are errors.
    let (_, f32_bytes) = &stored[0];
    assert!(cb()
        .from_le_bytes(&f32_bytes[..90], DType::F32, &[4, 6], DType::F32)
        .is_err());
    assert!(cb()
        .from_le_bytes(f32_bytes, DType::U32, &[4, 6], DType::F32)
        .is_err());
    Ok(())
}

/// The GPU path of `argmax` (the smallest index equal to the maximum; candle's CUDA argmax may
/// return any index of a tie) agrees with the CPU path on ties, along every axis and in half
/// precision; it runs on the CPU here.
#[test]
fn first_max_index_keeps_the_first_of_tied_maxima() -> TestResult {
    let c = cb();
    let data = [1.0, 3.0, 3.0, 0.0, 3.0, 2.0, 2.0, 2.0, -1.0, 5.0, 5.0, 4.0];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let x = c.from_f32(&data, &[3, 4], dtype)?;
        for axis in 0..2 {
            let want = c.to_vec_u32(&c.argmax(&x, axis)?)?;
            let got = crate::ops::first_max_index(&x, axis)?;
            assert_eq!(
                got.dims(),
                c.argmax(&x, axis)?.dims(),
                "{dtype} axis {axis}"
            );
            assert_eq!(c.to_vec_u32(&got)?, want, "{dtype} axis {axis}");
        }
    }
    let row = c.from_f32(&[2.0, 7.0, 7.0, 7.0], &[4], DType::F32)?;
    assert_eq!(
        c.to_vec_u32(&crate::ops::first_max_index(&row, 0)?)?,
        vec![1]
    );
    Ok(())
}

/// Empty arrays are read and cast without a kernel launch (CUDA refuses a launch of zero
/// blocks), and keep their shape.
#[test]
fn empty_arrays_read_and_cast() -> TestResult {
    let c = cb();
    let x = c.from_f32(&[1.0, 2.0, 3.0], &[3], DType::F16)?;
    let empty = c.slice(&x, 0, 3, 0)?;
    assert!(c.to_vec_f32(&empty)?.is_empty());
    let cast = c.cast(&empty, DType::I32)?;
    assert_eq!(c.shape(&cast), vec![0]);
    assert!(c.to_vec_u32(&cast)?.is_empty());
    Ok(())
}
