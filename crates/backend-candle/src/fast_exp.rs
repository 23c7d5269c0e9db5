//! `e^v` without a libm call or a branch, so loops over it vectorise: Cephes' `expf` (range
//! reduction by `ln 2` in two parts, a degree-5 polynomial, the exponent set in the bits),
//! about 1 ulp on `[-87, 87]`. Used by the vectorised GELU and the few-row attention's softmax.

/// Cephes `expf` for `v` clamped to `[-87, 87]` (beyond it `e^v` is below `f32`'s normal range
/// or infinite; the callers need neither: the GELU is then `x` or `-0`, and a softmax weight
/// `e^{-87}` is 1.6e-38, nothing next to the maximum's `1`). NaN stays NaN.
#[inline(always)]
pub(crate) fn exp(v: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and removing 1.5 · 2²³ rounds to the nearest integer (ties to even) without a call.
    const ROUND: f32 = 12_582_912.0;
    let v = v.clamp(-87.0, 87.0);
    let n = (v * LOG2_E + ROUND) - ROUND;
    let r = v - n * LN2_HI - n * LN2_LO;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 5e-1;
    let e = p * r * r + r + 1.0;
    // 2ⁿ from its exponent bits (n is an integer in [-126, 126] after the clamp).
    e * f32::from_bits((((n as i32) + 127) as u32) << 23)
}
