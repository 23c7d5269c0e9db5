//! GELU (tanh approximation) over a contiguous `f32` CPU tensor in one vectorised pass.
//!
//! candle's `gelu` calls libm's `tanhf` once per element (about 20 ns each here); a prefill of
//! 500 tokens through Gemma 3 270M's 18 MLPs is 18 M of them. The identity
//! `0.5 (1 + tanh u) = 1 / (1 + e^{-2u})` turns the approximation into
//! `gelu(x) = x / (1 + e^{-2u})`, `u = √(2/π) (x + 0.044715 x³)`, which needs one exponential
//! and no cancellation near `u = 0`; the exponential is [`crate::fast_exp::exp`], written
//! without calls or branches so the loop vectorises (8 lanes with AVX2 + FMA where the CPU has them,
//! chosen at run time). Within a few `f32` ulps of the exact value, scaled by the problem's own
//! conditioning (rounding `u` moves `e^{-2u}` by `|2u|` of its relative error; tested against the
//! `f64` form).

/// `x / (1 + e^{-2u})` for one value (inlined into each vectorised loop).
#[inline(always)]
fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let u = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    x / (1.0 + crate::fast_exp::exp(-2.0 * u))
}

/// `out[i] = gelu(x[i])`, portable (whatever the build's baseline vectorises).
fn gelu_into_portable(x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = gelu(v);
    }
}

/// [`gelu_into_portable`] with AVX2 and FMA enabled for the loop.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(unsafe_code)]
unsafe fn gelu_into_avx2(x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = gelu(v);
    }
}

/// `out[i] = gelu(x[i])` with the best loop this CPU runs.
fn gelu_into(x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA were detected just now.
        #[allow(unsafe_code)]
        return unsafe { gelu_into_avx2(x, out) };
    }
    gelu_into_portable(x, out)
}

/// Values from which [`gelu_all`] splits the work over the quantized matmul's pool (a verify of
/// a few tokens through a 2048-wide MLP and up; one decode row stays on the caller).
const PARALLEL_FROM: usize = 4096;

/// GELU (tanh approximation) of every value of `x`; every value is computed alone, so the split
/// changes no bits. A pool task that panicked (a bug: the loop indexes nothing out of range) is
/// an error, as in the quantized products.
pub(crate) fn gelu_all(x: &[f32]) -> crate::Result<Vec<f32>> {
    let pool = crate::qmatmul::pool::SpinPool::global();
    if x.len() < PARALLEL_FROM || pool.threads() < 2 {
        let mut out = vec![0f32; x.len()];
        gelu_into(x, &mut out);
        return Ok(out);
    }
    let per_task = x.len().div_ceil(2 * pool.threads()).next_multiple_of(64);
    let out = pool
        .run_columns(1, x.len(), per_task, |start, out| {
            let out = &mut *out[0];
            gelu_into(&x[start..start + out.len()], out);
        })
        .map_err(|_| crate::qmatmul::QMatMulError::TaskPanicked)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tanh form in `f64`, as `x / (1 + e^{-2u})` (the same value; `f64`'s `1 + tanh u`
    /// would cancel to 0 for very negative `x`).
    fn gelu_tanh_f64(x: f32) -> f64 {
        let x = f64::from(x);
        let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        let reference = 0.5 * x * (1.0 + u.tanh());
        let stable = x / (1.0 + (-2.0 * u).exp());
        assert!((reference - stable).abs() <= 1e-15 * (1.0 + x.abs()), "{x}");
        stable
    }

    #[test]
    fn matches_the_tanh_form_across_the_range() {
        let xs: Vec<f32> = (-200_000..=200_000)
            .map(|i| i as f32 * 1e-4)
            .chain([
                -1e4, -100.0, -30.0, -10.0, -1e-30, 0.0, 1e-30, 10.0, 30.0, 100.0, 1e4,
            ])
            .collect();
        let got = gelu_all(&xs).expect("no task panics");
        let mut portable = vec![0f32; xs.len()];
        gelu_into_portable(&xs, &mut portable);
        // Split over the pool or not, the same bits.
        let mut serial = vec![0f32; xs.len()];
        gelu_into(&xs, &mut serial);
        assert_eq!(got, serial);
        for ((&x, &g), &p) in xs.iter().zip(&got).zip(&portable) {
            let want = gelu_tanh_f64(x);
            let err = (f64::from(g) - want).abs();
            // Rounding `u` in f32 moves e^{-2u} by |2u| of its relative error: the problem's
            // own conditioning (the f32 tanh form is far worse there: `1 + tanh u` cancels).
            let xd = f64::from(x);
            let u = (2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd * xd * xd);
            let conditioning = 1.0 + (2.0 * u).abs().min(200.0);
            assert!(
                err <= 8.0 * f64::from(f32::EPSILON) * conditioning * want.abs() + 1e-30,
                "gelu({x}) = {g}, want {want}"
            );
            assert!(
                (g - p).abs() <= 2.0 * f32::EPSILON * g.abs().max(1e-30),
                "{x}: {g} vs {p}"
            );
        }
        assert!(gelu_all(&[f32::NAN]).expect("no task panics")[0].is_nan());
    }
}
