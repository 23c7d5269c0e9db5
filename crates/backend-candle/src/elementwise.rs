//! One function over every value of a contiguous `f32` buffer, in a loop the compiler
//! vectorises (AVX2 + FMA where the CPU has them, chosen at run time), split over the quantized
//! matmul's pool when the buffer is large. Every value is computed alone, so neither the split
//! nor the number of rows changes a bit of any value.

/// `out[i] = f(x[i])`, portable (whatever the build's baseline vectorises).
#[inline(always)]
fn map_into_portable(x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

/// [`map_into_portable`] with AVX2 and FMA enabled for the loop (`f` is inlined into it).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(unsafe_code)]
unsafe fn map_into_avx2(x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

/// `out[i] = f(x[i])` with the best loop this CPU runs.
pub(crate) fn map_into(x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA were detected just now.
        #[allow(unsafe_code)]
        return unsafe { map_into_avx2(x, out, f) };
    }
    map_into_portable(x, out, f)
}

/// `f` of every value of `x`; from `parallel_from` values on, split over the pool. A pool task
/// that panicked (a bug: the loop indexes nothing out of range) is an error, as in the
/// quantized products.
pub(crate) fn map_all(
    x: &[f32],
    parallel_from: usize,
    f: impl Fn(f32) -> f32 + Copy + Sync,
) -> crate::Result<Vec<f32>> {
    let pool = crate::qmatmul::pool::SpinPool::global();
    if x.len() < parallel_from || pool.threads() < 2 {
        let mut out = vec![0f32; x.len()];
        map_into(x, &mut out, f);
        return Ok(out);
    }
    let per_task = x.len().div_ceil(2 * pool.threads()).next_multiple_of(64);
    let out = pool
        .run_columns(1, x.len(), per_task, |start, out| {
            let out = &mut *out[0];
            map_into(&x[start..start + out.len()], out, f);
        })
        .map_err(|_| crate::qmatmul::QMatMulError::TaskPanicked)?;
    Ok(out)
}
