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
