//! How close a backend's float results must be to the reference backend's.
//!
//! # The rule
//!
//! An element `got` matches `expected` when
//!
//! ```text
//! |got - expected| <= rel * max(|expected|, abs)
//! ```
//!
//! that is, the error is measured relative to the expected magnitude, but never relative to
//! anything smaller than the floor `abs` (so near zero the allowed absolute error is
//! `rel * abs`). Two NaNs match; infinities must be equal. Integer results (indices, masks,
//! integer arithmetic) always match exactly, whatever the tolerance.
//!
//! # Presets and why
//!
//! * [`Tolerance::EXACT`] — copies, gathers, shape ops, casts, max/min: a backend moves values
//!   and must not change them.
//! * [`Tolerance::rounding`] — one correctly rounded (or libm-accurate) op per element
//!   (`binary`, `unary`). The floor is tiny, so small results are judged relatively:
//!   f32 `rel 1e-5` (about 80 ulp, room for fast `exp`/`tanh`/`rsqrt` approximations);
//!   f16 `rel 2e-3` (two f16 ulp: the relative spacing of f16 is at most `2^-10 ≈ 9.8e-4`);
//!   bf16 `rel 1.6e-2` (two bf16 ulp, `2^-7 ≈ 7.8e-3` each); floor `1e-6` for f32 and `1e-4`
//!   for the half types (below f16's smallest normal, `6.1e-5`, relative precision is lost).
//! * [`Tolerance::accumulating`] — sums, means, scans, matrix products and every composed or
//!   fused op (softmax, norms, rope, attention, GELU, affine). The suite feeds these inputs of
//!   magnitude about 1, so the floor is `1`: an error is judged against the scale of the terms,
//!   not against a result that cancellation made small. f32 `rel 1e-5`; f16 `rel 1e-2` and bf16
//!   `rel 5e-2`, about ten roundings' worth: the reference rounds half-precision results after
//!   *every* op of a composed body while a fused kernel (or an f32 accumulator) rounds once, and
//!   a backend may accumulate a half-precision sum in half precision.
//!
//! The presets still catch real bugs: a wrong sign, a missing scale, a wrong axis or a
//! mis-strided read moves results by whole units (see `tests/teeth.rs`).

use mtp_core::DType;

/// Allowed difference between a backend's float result and the reference's (see the
/// [module docs](self) for the rule and the presets).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative error allowed, measured against `max(|expected|, abs)`.
    pub rel: f32,
    /// Magnitude floor of the relative measure: near zero the absolute error allowed is
    /// `rel * abs`.
    pub abs: f32,
}

/// The worst element of a comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Worst {
    /// Its flat (row-major) index.
    pub index: usize,
    /// The backend's value.
    pub got: f32,
    /// The reference value.
    pub expected: f32,
    /// Largest absolute error over all elements.
    pub max_abs: f32,
    /// Largest error relative to `max(|expected|, abs)` over all elements.
    pub max_rel: f32,
}

impl Tolerance {
    /// Bit-for-bit equality (NaN matches NaN).
    pub const EXACT: Self = Self { rel: 0.0, abs: 0.0 };

    /// One correctly rounded elementwise op in `dtype`.
    pub fn rounding(dtype: DType) -> Self {
        match dtype {
            DType::F16 => Self {
                rel: 2e-3,
                abs: 1e-4,
            },
            DType::BF16 => Self {
                rel: 1.6e-2,
                abs: 1e-4,
            },
            _ => Self {
                rel: 1e-5,
                abs: 1e-6,
            },
        }
    }

    /// Accumulating, composed or fused ops in `dtype`, on inputs of magnitude about 1.
    pub fn accumulating(dtype: DType) -> Self {
        match dtype {
            DType::F16 => Self {
                rel: 1e-2,
                abs: 1.0,
            },
            DType::BF16 => Self {
                rel: 5e-2,
                abs: 1.0,
            },
            _ => Self {
                rel: 1e-5,
                abs: 1.0,
            },
        }
    }

    /// This tolerance with `rel` multiplied by `factor` (for long reductions or whole models).
    pub fn scaled(self, factor: f32) -> Self {
        Self {
            rel: self.rel * factor,
            abs: self.abs,
        }
    }

    /// The error of `got` against `expected` in this tolerance's measure (0 for matching NaNs
    /// or equal infinities, infinite when one side is NaN or infinite and the other is not).
    pub fn error(&self, got: f32, expected: f32) -> f32 {
        if got == expected || (got.is_nan() && expected.is_nan()) {
            return 0.0;
        }
        if !got.is_finite() || !expected.is_finite() {
            return f32::INFINITY;
        }
        let scale = expected.abs().max(self.abs);
        let diff = (got - expected).abs();
        if scale > 0.0 {
            diff / scale
        } else {
            f32::INFINITY
        }
    }

    /// Whether `got` matches `expected`.
    pub fn accepts(&self, got: f32, expected: f32) -> bool {
        self.error(got, expected) <= self.rel
    }

    /// Compare two equally long slices: `Ok` with the worst element when all match,
    /// `Err` with the worst element otherwise (`None` worst for empty slices).
    pub fn compare(&self, got: &[f32], expected: &[f32]) -> Result<Option<Worst>, Worst> {
        let mut worst: Option<Worst> = None;
        let mut max_abs = 0f32;
        let mut max_rel = 0f32;
        let mut failed = false;
        for (index, (&g, &e)) in got.iter().zip(expected).enumerate() {
            let rel = self.error(g, e);
            let abs = if rel == 0.0 { 0.0 } else { (g - e).abs() };
            max_abs = max_abs.max(if abs.is_nan() { f32::INFINITY } else { abs });
            if worst.is_none() || rel > max_rel {
                worst = Some(Worst {
                    index,
                    got: g,
                    expected: e,
                    max_abs: 0.0,
                    max_rel: 0.0,
                });
            }
            max_rel = max_rel.max(rel);
            failed |= rel > self.rel;
        }
        let worst = worst.map(|w| Worst {
            max_abs,
            max_rel,
            ..w
        });
        match (failed, worst) {
            (true, Some(w)) => Err(w),
            (_, w) => Ok(w),
        }
    }
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.rel == 0.0 {
            return f.write_str("exact");
        }
        write!(
            f,
            "|got - expected| <= {:e} * max(|expected|, {:e})",
            self.rel, self.abs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_bounds_the_relative_measure() {
        let t = Tolerance {
            rel: 1e-2,
            abs: 1.0,
        };
        assert!(t.accepts(0.005, 0.0));
        assert!(!t.accepts(0.02, 0.0));
        assert!(!t.accepts(105.0, 100.0));
        assert!(t.accepts(100.5, 100.0));
        assert!(t.accepts(f32::NAN, f32::NAN));
        assert!(!t.accepts(f32::NAN, 1.0));
        assert!(Tolerance::EXACT.accepts(f32::NEG_INFINITY, f32::NEG_INFINITY));
        assert!(!Tolerance::EXACT.accepts(1.0 + f32::EPSILON, 1.0));
    }

    #[test]
    fn compare_reports_the_worst_element() {
        let t = Tolerance::rounding(DType::F32);
        let worst = t.compare(&[1.0, 2.0, 3.5], &[1.0, 2.0, 3.0]).unwrap_err();
        assert_eq!(worst.index, 2);
        assert_eq!(worst.max_abs, 0.5);
        assert!(t.compare(&[1.0], &[1.0]).is_ok());
    }
}
