//! The loop every kernel shares: for each weight row, for each chunk of activation rows, one
//! call computing that chunk's dot products, stored per activation row.

use std::ops::Range;

use super::acts::Quantized;
use super::ROW_CHUNK;

/// For weight rows `rows` (`row_bytes` bytes each in `weights`) and every chunk of
/// [`ROW_CHUNK`] activation rows of `acts`, `dot(weight row, chunk rows, rows in chunk)` gives
/// the chunk's results, stored as `out[j][i]` (activation row `j`, weight row `rows.start + i`).
/// Inlined into each kernel, so `dot` is compiled with the kernel's target features.
#[inline(always)]
pub(super) fn each_chunk<X>(
    weights: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    acts: &Quantized<X>,
    out: &mut [&mut [f32]],
    mut dot: impl FnMut(&[u8], &[&[X]; ROW_CHUNK], usize) -> [f32; ROW_CHUNK],
) {
    let n = out.len();
    let chunks = acts.row_chunks(n);
    for (i, r) in rows.enumerate() {
        let w_row = &weights[r * row_bytes..][..row_bytes];
        for (c, xs) in chunks.iter().enumerate() {
            let (j0, m) = (c * ROW_CHUNK, ROW_CHUNK.min(n - c * ROW_CHUNK));
            let acc = dot(w_row, xs, m);
            for (jj, &a) in acc[..m].iter().enumerate() {
                out[j0 + jj][i] = a;
            }
        }
    }
}

/// A row kernel whose chunk body `$chunk::<B, M>(weight row, chunk rows) -> [f32; M]` is
/// monomorphised for every chunk size `M` in `1..=ROW_CHUNK` (a constant trip count, so the
/// accumulators live in registers), called per weight row and chunk of activation rows.
/// The generated function has the target features `$features`, the chunk bodies' own.
#[cfg(target_arch = "x86_64")]
macro_rules! fixed_chunk_rows {
    (
        $(#[$doc:meta])*
        $vis:vis unsafe fn $name:ident<B: $bound:path>($act:ty) = $chunk:ident, $features:literal
    ) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        $vis unsafe fn $name<B: $bound>(
            weights: &[u8],
            row_bytes: usize,
            rows: std::ops::Range<usize>,
            acts: &$crate::qmatmul::acts::Quantized<$act>,
            out: &mut [&mut [f32]],
        ) {
            use $crate::qmatmul::ROW_CHUNK;
            let n = out.len();
            let chunks = acts.row_chunks(n);
            for (i, r) in rows.enumerate() {
                let w_row = &weights[r * row_bytes..][..row_bytes];
                for (c, xs) in chunks.iter().enumerate() {
                    let j0 = c * ROW_CHUNK;
                    let out = &mut out[j0..(j0 + ROW_CHUNK).min(n)];
                    // SAFETY: this function has the chunk body's target features, and the
                    // caller's contract covers its block layout.
                    unsafe {
                        match out.len() {
                            1 => $crate::qmatmul::row_loop::store(out, i, $chunk::<B, 1>(w_row, xs)),
                            2 => $crate::qmatmul::row_loop::store(out, i, $chunk::<B, 2>(w_row, xs)),
                            3 => $crate::qmatmul::row_loop::store(out, i, $chunk::<B, 3>(w_row, xs)),
                            4 => $crate::qmatmul::row_loop::store(out, i, $chunk::<B, 4>(w_row, xs)),
                            5 => $crate::qmatmul::row_loop::store(out, i, $chunk::<B, 5>(w_row, xs)),
                            6 => $crate::qmatmul::row_loop::store(out, i, $chunk::<B, 6>(w_row, xs)),
                            7 => $crate::qmatmul::row_loop::store(out, i, $chunk::<B, 7>(w_row, xs)),
                            _ => $crate::qmatmul::row_loop::store(out, i, $chunk::<B, 8>(w_row, xs)),
                        }
                    }
                }
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(super) use fixed_chunk_rows;

/// `out[jj][i] = acc[jj]`: one weight row's results for a chunk of activation rows.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn store<const M: usize>(out: &mut [&mut [f32]], i: usize, acc: [f32; M]) {
    for (o, a) in out.iter_mut().zip(acc) {
        o[i] = a;
    }
}
