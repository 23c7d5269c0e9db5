//! The χ² goodness-of-fit test of the engine-level distribution checks.

use statrs::distribution::{ChiSquared, ContinuousCDF};

/// The statistic, its degrees of freedom and the p-value of `counts` (from `draws` draws)
/// against the probabilities `expected`; cells expecting fewer than 5 are pooled into one.
pub fn chi_square(counts: &[usize], expected: &[f64], draws: usize) -> (f64, usize, f64) {
    let (mut chi2, mut cells) = (0.0, 0usize);
    let (mut pooled_obs, mut pooled_exp) = (0.0, 0.0);
    for (obs, p) in counts.iter().zip(expected) {
        let e = p * draws as f64;
        if e < 5.0 {
            pooled_obs += *obs as f64;
            pooled_exp += e;
        } else {
            chi2 += (*obs as f64 - e).powi(2) / e;
            cells += 1;
        }
    }
    if pooled_exp > 0.0 {
        chi2 += (pooled_obs - pooled_exp).powi(2) / pooled_exp.max(1e-9);
        cells += 1;
    }
    let dof = cells.saturating_sub(1).max(1);
    let p = 1.0 - ChiSquared::new(dof as f64).expect("dof >= 1").cdf(chi2);
    (chi2, dof, p)
}
