//! One pass over each last-axis row of a contiguous `f32` CPU tensor, read in place: the greedy
//! argmax and the non-finite check of a step's logits (262 144 values a row on Gemma 3).
//!
//! candle computes them as tensor ops: the argmax masks NaN with a comparison and a select
//! before its kernel, and the trait's non-finite check is five elementwise and reduction ops —
//! about eight full-row passes and as many row-sized allocations per decoded token. The scans
//! here give the same answers in one read each, with no allocation but the result.

use candle_core::{CpuStorage, Storage, Tensor};

/// `f(row)` for every row along the last axis of `x` when `x` is an `f32` CPU tensor laid out
/// contiguously and `axis` is its last axis; `None` otherwise (the caller's general path runs).
pub(crate) fn map_rows<T>(x: &Tensor, axis: usize, f: impl Fn(&[f32]) -> T) -> Option<Vec<T>> {
    let len = *x.dims().last()?;
    if axis + 1 != x.dims().len() || len == 0 {
        return None;
    }
    contiguous_f32(x, |values| values.chunks_exact(len).map(f).collect())
}

/// `f(values)` over every value of `x` when `x` is an `f32` CPU tensor laid out contiguously;
/// `None` otherwise.
pub(crate) fn contiguous_f32<T>(x: &Tensor, f: impl FnOnce(&[f32]) -> T) -> Option<T> {
    let (storage, layout) = x.storage_and_layout();
    let Storage::Cpu(CpuStorage::F32(values)) = &*storage else {
        return None;
    };
    let (start, end) = layout.contiguous_offsets()?;
    Some(f(values.get(start..end)?))
}

/// The first index of the largest value of `row`, NaN never winning (candle's argmax with NaN
/// read as −∞, as `ops::argmax` computes it: an all-NaN or all-−∞ row gives 0).
///
/// Two passes the compiler vectorises: the largest value (per lane, in [`SCAN_LANES`] lanes;
/// `v > m` is false for a NaN, so NaN never enters), then the first index holding it. A
/// branch per element (one pass keeping the best index) ran at about 2 GB/s on a 262 144-logit
/// row; these run at cache speed, and the second usually stops early.
pub(crate) fn argmax(row: &[f32]) -> u32 {
    let (chunks, rest) = row.as_chunks::<SCAN_LANES>();
    let mut lanes = [f32::NEG_INFINITY; SCAN_LANES];
    for chunk in chunks {
        lanes = std::array::from_fn(|l| {
            if chunk[l] > lanes[l] {
                chunk[l]
            } else {
                lanes[l]
            }
        });
    }
    let mut best = lanes
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, |m, v| if v > m { v } else { m });
    for &v in rest {
        if v > best {
            best = v;
        }
    }
    if best == f32::NEG_INFINITY {
        // Every value is −∞ or NaN: index 0, as the one-pass rule gives.
        return 0;
    }
    // The first chunk holding it (a compare the compiler vectorises), then its place there.
    let found = chunks
        .iter()
        .position(|c| c.iter().fold(false, |hit, &v| hit | (v == best)));
    let at = match found {
        Some(c) => c * SCAN_LANES + chunks[c].iter().position(|&v| v == best).unwrap_or(0),
        None => {
            let tail = row.len() - rest.len();
            tail + rest.iter().position(|&v| v == best).unwrap_or(0)
        }
    };
    at as u32
}

/// Lanes of [`argmax`]'s first pass (two 256-bit registers).
const SCAN_LANES: usize = 16;

/// 1 where `row` holds a NaN or +∞ or has no finite value (all −∞), else 0
/// ([`mtp_core::Backend::non_finite_rows`]).
pub(crate) fn non_finite(row: &[f32]) -> u32 {
    let mut max = f32::NEG_INFINITY;
    for &v in row {
        if v.is_nan() || v == f32::INFINITY {
            return 1;
        }
        max = max.max(v);
    }
    u32::from(max == f32::NEG_INFINITY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_keeps_the_first_maximum_and_never_picks_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0, f32::NAN]), 1);
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY, 0.5]), 2);
        assert_eq!(argmax(&[f32::INFINITY, f32::INFINITY]), 0);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NAN, f32::NEG_INFINITY]), 0);
        assert_eq!(argmax(&[]), 0);
    }

    #[test]
    fn argmax_equals_the_one_pass_rule_on_long_rows() {
        // The rule it replaced: keep the first index whose value beats every earlier one.
        fn one_pass(row: &[f32]) -> u32 {
            let lifted = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
            let mut best = row.first().copied().map_or(f32::NEG_INFINITY, lifted);
            let mut at = 0;
            for (i, &v) in row.iter().enumerate().skip(1) {
                if best < v {
                    best = v;
                    at = i;
                }
            }
            at as u32
        }
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for len in [1, 15, 16, 17, 33, 1000, 4099] {
            for _ in 0..20 {
                let row: Vec<f32> = (0..len)
                    .map(|_| match next() % 16 {
                        0 => f32::NAN,
                        1 => f32::NEG_INFINITY,
                        2 => f32::INFINITY,
                        // Few distinct values, so ties are common.
                        r => (r % 5) as f32 - 2.0,
                    })
                    .collect();
                assert_eq!(argmax(&row), one_pass(&row), "{row:?}");
            }
        }
    }

    #[test]
    fn non_finite_flags_nan_plus_infinity_and_rows_without_a_finite_value() {
        assert_eq!(non_finite(&[1.0, f32::NEG_INFINITY, 2.0]), 0);
        assert_eq!(non_finite(&[1.0, f32::NAN]), 1);
        assert_eq!(non_finite(&[f32::INFINITY, 1.0]), 1);
        assert_eq!(non_finite(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 1);
    }

    #[test]
    fn only_contiguous_f32_cpu_rows_along_the_last_axis_are_scanned() {
        let dev = candle_core::Device::Cpu;
        let x = Tensor::new(&[[1f32, 5.0, 2.0], [7.0, 0.0, 7.0]], &dev).expect("tensor");
        assert_eq!(map_rows(&x, 1, argmax), Some(vec![1, 0]));
        assert_eq!(map_rows(&x, 0, argmax), None);
        assert_eq!(map_rows(&x.t().expect("t"), 1, argmax), None);
        let sliced = x.narrow(0, 1, 1).expect("narrow");
        assert_eq!(map_rows(&sliced, 1, argmax), Some(vec![0]));
        let half = x.to_dtype(candle_core::DType::F16).expect("f16");
        assert_eq!(map_rows(&half, 1, argmax), None);
    }
}
