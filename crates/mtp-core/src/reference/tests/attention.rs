//! The default attention against a naive nested-loop implementation.

use super::{assert_bitwise, assert_close, be, f, noise, vals};
use crate::attention_blocked::blocked_attention_with_bias;
use crate::{AttentionBias, AttentionMask, Backend, Causality, CoreError, CoreResult};

/// Shapes of one attention problem.
#[derive(Clone, Copy)]
struct Dims {
    b: usize,
    hq: usize,
    hkv: usize,
    tq: usize,
    tk: usize,
    d: usize,
    dv: usize,
}

/// Naive attention, in f64, straight from the definition.
fn naive(q: &[f32], k: &[f32], v: &[f32], n: Dims, mask: &AttentionMask, scale: f32) -> Vec<f32> {
    let Dims {
        b,
        hq,
        hkv,
        tq,
        tk,
        d,
        dv,
    } = n;
    let groups = hq / hkv;
    let mut out = vec![0.0f32; b * hq * tq * dv];
    for bi in 0..b {
        for h in 0..hq {
            let kh = h / groups;
            for i in 0..tq {
                let qp = mask.query_start + i;
                let qrow = &q[((bi * hq + h) * tq + i) * d..][..d];
                // (key index, score) of every visible key.
                let mut scores = Vec::new();
                for j in 0..tk {
                    let kp = mask.key_start + j;
                    let causal_ok = mask.causality == Causality::Bidirectional || kp <= qp;
                    let window_ok = mask.window.is_none_or(|w| qp.abs_diff(kp) < w);
                    if causal_ok && window_ok {
                        let krow = &k[((bi * hkv + kh) * tk + j) * d..][..d];
                        let dot: f64 = qrow
                            .iter()
                            .zip(krow)
                            .map(|(&a, &c)| f64::from(a) * f64::from(c))
                            .sum();
                        scores.push((j, dot * f64::from(scale)));
                    }
                }
                if scores.is_empty() {
                    continue; // zeros
                }
                let max = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|s| (s.1 - max).exp()).sum();
                let orow = &mut out[((bi * hq + h) * tq + i) * dv..][..dv];
                for (c, o) in orow.iter_mut().enumerate() {
                    let acc: f64 = scores
                        .iter()
                        .map(|&(j, s)| {
                            let vv = v[((bi * hkv + kh) * tk + j) * dv + c];
                            (s - max).exp() / z * f64::from(vv)
                        })
                        .sum();
                    *o = acc as f32;
                }
            }
        }
    }
    out
}

/// Runs the backend's attention and the naive one on the same random inputs.
fn compare(n: Dims, mask: AttentionMask, seed: u64) -> CoreResult<Vec<f32>> {
    let b = be();
    let qd = noise(n.b * n.hq * n.tq * n.d, seed);
    let kd = noise(n.b * n.hkv * n.tk * n.d, seed + 1);
    let vd = noise(n.b * n.hkv * n.tk * n.dv, seed + 2);
    let scale = 1.0 / (n.d as f32).sqrt();
    let q = f(&qd, &[n.b, n.hq, n.tq, n.d]);
    let k = f(&kd, &[n.b, n.hkv, n.tk, n.d]);
    let v = f(&vd, &[n.b, n.hkv, n.tk, n.dv]);
    let out = b.attention(&q, &k, &v, &mask, scale)?;
    assert_eq!(b.shape(&out), vec![n.b, n.hq, n.tq, n.dv]);
    let got = vals(&out);
    let want = naive(&qd, &kd, &vd, n, &mask, scale);
    assert_close(&got, &want, 1e-5);
    // The same attention a few keys at a time, with the online softmax of long contexts.
    let bias = AttentionBias::new(&b, mask, n.tq, n.tk, b.dtype(&q))?;
    for key_block in [1, 2, 3, n.tk] {
        let blocked = blocked_attention_with_bias(&b, &q, &k, &v, &bias, scale, key_block)?;
        assert_eq!(b.shape(&blocked), vec![n.b, n.hq, n.tq, n.dv]);
        assert_close(&vals(&blocked), &want, 1e-5);
    }
    Ok(got)
}

const SMALL: Dims = Dims {
    b: 2,
    hq: 2,
    hkv: 2,
    tq: 4,
    tk: 4,
    d: 8,
    dv: 8,
};

#[test]
fn causal() -> CoreResult<()> {
    compare(SMALL, AttentionMask::causal(0, 0), 40)?;
    Ok(())
}

#[test]
fn sliding_windows_2_and_3() -> CoreResult<()> {
    for w in [2, 3] {
        let mask = AttentionMask::causal(0, 0).with_window(Some(w));
        compare(SMALL, mask, 41)?;
        let longer = Dims {
            tq: 3,
            tk: 7,
            ..SMALL
        };
        compare(longer, AttentionMask::causal(4, 0).with_window(Some(w)), 42)?;
    }
    Ok(())
}

#[test]
fn bidirectional() -> CoreResult<()> {
    let mask = AttentionMask {
        query_start: 0,
        key_start: 0,
        causality: Causality::Bidirectional,
        window: None,
    };
    compare(
        Dims {
            tq: 3,
            tk: 5,
            ..SMALL
        },
        mask,
        43,
    )?;
    // Bidirectional with a window is symmetric around the query.
    compare(
        Dims {
            tq: 3,
            tk: 5,
            ..SMALL
        },
        AttentionMask {
            window: Some(2),
            ..mask
        },
        44,
    )?;
    Ok(())
}

#[test]
fn grouped_kv_heads() -> CoreResult<()> {
    let n = Dims {
        b: 1,
        hq: 4,
        hkv: 2,
        tq: 3,
        tk: 5,
        d: 4,
        dv: 6,
    };
    compare(n, AttentionMask::causal(2, 0), 45)?;
    compare(n, AttentionMask::causal(2, 0).with_window(Some(2)), 46)?;
    Ok(())
}

#[test]
fn query_and_key_offsets() -> CoreResult<()> {
    let n = Dims {
        b: 1,
        hq: 4,
        hkv: 2,
        tq: 3,
        tk: 6,
        d: 4,
        dv: 4,
    };
    compare(n, AttentionMask::causal(5, 2), 47)?;
    compare(n, AttentionMask::causal(5, 2).with_window(Some(3)), 48)?;
    Ok(())
}

#[test]
fn a_query_that_sees_no_key_gets_zeros() -> CoreResult<()> {
    // Keys at positions 2..6; queries at 0..3: query 0 and 1 see nothing.
    let n = Dims {
        b: 1,
        hq: 2,
        hkv: 1,
        tq: 3,
        tk: 4,
        d: 4,
        dv: 3,
    };
    let got = compare(n, AttentionMask::causal(0, 2), 49)?;
    for h in 0..2 {
        let rows = &got[h * 3 * 3..][..9];
        assert_eq!(rows[..6], [0.0; 6]);
        assert!(rows[6..].iter().any(|&v| v != 0.0));
    }
    // A window that excludes every key.
    let got = compare(n, AttentionMask::causal(10, 0).with_window(Some(2)), 50)?;
    assert!(got.iter().all(|&v| v == 0.0));
    Ok(())
}

#[test]
fn queries_alone_equal_queries_together() -> CoreResult<()> {
    let b = be();
    let n = Dims {
        b: 1,
        hq: 4,
        hkv: 2,
        tq: 3,
        tk: 7,
        d: 8,
        dv: 8,
    };
    let qd = noise(n.hq * n.tq * n.d, 60);
    let k = f(&noise(n.hkv * n.tk * n.d, 61), &[1, n.hkv, n.tk, n.d]);
    let v = f(&noise(n.hkv * n.tk * n.dv, 62), &[1, n.hkv, n.tk, n.dv]);
    let q = f(&qd, &[1, n.hq, n.tq, n.d]);
    for mask in [
        AttentionMask::causal(4, 0),
        AttentionMask::causal(4, 0).with_window(Some(3)),
    ] {
        let all = vals(&b.attention(&q, &k, &v, &mask, 0.35)?);
        for i in 0..n.tq {
            let qi = b.slice(&q, 2, i, 1)?;
            let alone_mask = AttentionMask {
                query_start: mask.query_start + i,
                ..mask
            };
            let alone = vals(&b.attention(&qi, &k, &v, &alone_mask, 0.35)?);
            for h in 0..n.hq {
                let row = &all[(h * n.tq + i) * n.dv..][..n.dv];
                assert_bitwise(row, &alone[h * n.dv..][..n.dv]);
            }
        }
    }
    Ok(())
}

#[test]
fn attention_shape_errors() {
    let b = be();
    let q = f(&noise(2 * 3 * 4, 70), &[1, 3, 2, 4]);
    let k = f(&noise(2 * 2 * 4, 71), &[1, 2, 2, 4]);
    // hq = 3 is not a multiple of hkv = 2.
    assert!(matches!(
        b.attention(&q, &k, &k, &AttentionMask::causal(0, 0), 1.0),
        Err(CoreError::ShapeMismatch {
            op: "attention",
            ..
        })
    ));
    let q3 = f(&noise(8, 72), &[2, 4]);
    assert!(matches!(
        b.attention(&q3, &k, &k, &AttentionMask::causal(0, 0), 1.0),
        Err(CoreError::ShapeMismatch { .. })
    ));
}

#[test]
fn a_chunk_over_more_keys_than_one_block_matches_the_definition() -> CoreResult<()> {
    // The default attention takes key blocks of ATTENTION_KEY_BLOCK here.
    let n = Dims {
        b: 1,
        hq: 4,
        hkv: 2,
        tq: 5,
        tk: crate::attention_blocked::ATTENTION_KEY_BLOCK + 37,
        d: 4,
        dv: 4,
    };
    compare(n, AttentionMask::causal(n.tk - 3, 0), 60)?;
    compare(
        n,
        AttentionMask::causal(n.tk - 3, 0).with_window(Some(40)),
        61,
    )?;
    Ok(())
}
