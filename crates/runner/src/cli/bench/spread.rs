//! Min / median / max of repeated measurements.

use serde::Serialize;

/// The spread of repeated measurements of one quantity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Smallest sample.
    pub min: f64,
    /// Median (the mean of the middle two for an even count).
    pub median: f64,
    /// Largest sample.
    pub max: f64,
}

impl Spread {
    /// The spread of `samples`; `None` when there are none or one is not finite.
    pub fn of(samples: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut xs: Vec<f64> = samples.into_iter().collect();
        if xs.is_empty() || xs.iter().any(|x| !x.is_finite()) {
            return None;
        }
        xs.sort_by(f64::total_cmp);
        let n = xs.len();
        let median = if n % 2 == 1 {
            xs[n / 2]
        } else {
            (xs[n / 2 - 1] + xs[n / 2]) / 2.0
        };
        Some(Self {
            min: xs[0],
            median,
            max: xs[n - 1],
        })
    }
}

/// `a / b`, or `None` when `b` is zero or the result is not finite.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    let r = a / b;
    (b != 0.0 && r.is_finite()).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_and_even_medians() {
        let s = Spread::of([3.0, 1.0, 2.0]).expect("samples");
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
        let s = Spread::of([4.0, 1.0, 2.0, 3.0]).expect("samples");
        assert_eq!((s.min, s.median, s.max), (1.0, 2.5, 4.0));
    }

    #[test]
    fn empty_or_non_finite_is_none() {
        assert_eq!(Spread::of(Vec::new()), None);
        assert_eq!(Spread::of([1.0, f64::NAN]), None);
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(1.0, 4.0), Some(0.25));
    }
}
