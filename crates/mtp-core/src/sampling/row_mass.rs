//! The total softmax weight of each logit row, summed on the device, with a bound on its
//! rounding: what lets top-p / min-p be settled from a row's largest logits alone
//! ([`LogitRow::Head`](super::LogitRow::Head)).
//!
//! Each row's `Σ_j exp((l_j − max) / T)` is computed in `f32` in two stages of at most
//! `c = ⌈√V⌉` terms (the row split into `⌈V / c⌉` chunks of `c`, the last padded with zeros),
//! so whatever order a backend sums a stage in, the rounding of a sum of `n` non-negative terms
//! stays within `(n − 1)·u` of it (Higham, *Accuracy and Stability of Numerical Algorithms*,
//! §4.2; `u = 2⁻²⁴`). Each term carries the rounding of `l − max` and of the scaling by `1/T`
//! (an argument error of at most `2|x|u`, so a relative error of `2|x|u` after `exp`, with
//! `|x| ≤ 104` for any term that is not flushed to zero) and of `exp` itself (taken as at most
//! 64 ulp, far above what libm or MLX give). Terms flushed to zero weigh under `2⁻¹⁴⁹` each,
//! against a total of at least 1 (the largest term is `exp(0)`).

use crate::backend::{ReduceOp, UnaryOp};
use crate::{Backend, DType};

/// Relative rounding of one `f32` operation.
const UNIT_ROUNDOFF: f64 = 1.0 / (1u64 << 24) as f64;

/// `[rows, 1]` (`F32`): each row's `Σ_j exp((l_j − max_row) / temperature)` for `logits`
/// `[rows, vocab]` (any float dtype; computed in `f32`).
pub(super) fn row_masses<B: Backend>(
    backend: &B,
    logits: &B::Array,
    rows: usize,
    vocab: usize,
    temperature: f32,
) -> Result<B::Array, B::Error> {
    let x = backend.reshape(logits, &[rows, vocab])?;
    let x = if backend.dtype(&x) == DType::F32 {
        x
    } else {
        backend.cast(&x, DType::F32)?
    };
    let max = backend.reduce(&x, 1, ReduceOp::Max)?;
    let shifted = backend.sub(&x, &max)?;
    let weights = backend.unary(
        &backend.affine(&shifted, 1.0 / temperature, 0.0)?,
        UnaryOp::Exp,
    )?;
    let (chunk, chunks) = stages(vocab);
    let padding = chunk * chunks - vocab;
    let weights = if padding == 0 {
        weights
    } else {
        let zeros = backend.full(&[rows, padding], 0.0, DType::F32)?;
        backend.concat(&[&weights, &zeros], 1)?
    };
    let chunked = backend.reshape(&weights, &[rows, chunks, chunk])?;
    let partial = backend.reduce(&chunked, 2, ReduceOp::Sum)?;
    let partial = backend.reshape(&partial, &[rows, chunks])?;
    backend.reduce(&partial, 1, ReduceOp::Sum)
}

/// The chunk length `⌈√V⌉` and the number of chunks `⌈V / chunk⌉` of a row of `vocab`.
fn stages(vocab: usize) -> (usize, usize) {
    let mut chunk = (vocab as f64).sqrt().ceil() as usize;
    while chunk * chunk < vocab {
        chunk += 1;
    }
    let chunk = chunk.max(1);
    (chunk, vocab.div_ceil(chunk))
}

/// Bounds `[low, high]` on the row's exact total weight (and on the host's `f64` sum of it)
/// given the device's `mass` of a row of `vocab` tokens (see the module docs).
pub(super) fn bounds(mass: f32, vocab: usize) -> (f64, f64) {
    let (chunk, chunks) = stages(vocab);
    let per_term = 2.0 * 104.0 + 64.0;
    let summation = (chunk + chunks) as f64;
    // The host's own f64 sum of the row is within `vocab · ε` of the exact one.
    let relative = (per_term + summation) * UNIT_ROUNDOFF + vocab as f64 * f64::EPSILON;
    let flushed = vocab as f64 * 2f64.powi(-149);
    let mass = f64::from(mass);
    (mass / (1.0 + relative), mass / (1.0 - relative) + flushed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::ReferenceBackend;
    use rand::{Rng, SeedableRng};

    #[test]
    fn stages_cover_the_row() {
        for vocab in [1, 2, 3, 10, 262_144, 262_145, 151_936] {
            let (chunk, chunks) = stages(vocab);
            assert!(
                chunk * chunks >= vocab && chunk * (chunks - 1) < vocab,
                "{vocab}"
            );
            assert!(chunk * chunk >= vocab && (chunk - 1) * (chunk - 1) < vocab.max(2));
        }
    }

    #[test]
    fn device_masses_fall_inside_their_bounds() {
        let b = ReferenceBackend::new();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for (vocab, temperature) in [(7, 1.0f32), (1000, 0.7), (5003, 1.3), (40_000, 0.05)] {
            let rows = 3;
            let logits: Vec<f32> = (0..rows * vocab)
                .map(|_| rng.random_range(-30.0f32..30.0))
                .collect();
            let x = b.from_f32(&logits, &[rows, vocab], DType::F32).unwrap();
            let masses = b
                .to_vec_f32(&row_masses(&b, &x, rows, vocab, temperature).unwrap())
                .unwrap();
            for (r, &mass) in masses.iter().enumerate() {
                let row = &logits[r * vocab..(r + 1) * vocab];
                let values: Vec<f64> = row.iter().map(|&l| f64::from(l)).collect();
                let exact: f64 = super::super::nucleus::weights(&values, f64::from(temperature))
                    .iter()
                    .sum();
                let (low, high) = bounds(mass, vocab);
                assert!(
                    low <= exact && exact <= high,
                    "{vocab}: {low} {exact} {high}"
                );
                assert!(high - low < 1e-3 * exact);
            }
        }
    }
}
