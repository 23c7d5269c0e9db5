//! Seeded random weights for the test models.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Backend, DType};

/// A seeded source of weight tensors.
pub(crate) struct WeightRng {
    rng: ChaCha8Rng,
}

impl WeightRng {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Uniform values in `[-scale, scale)`.
    pub fn uniform(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| self.rng.random_range(-1.0f32..1.0) * scale)
            .collect()
    }

    /// A `[rows, cols]` `dtype` matrix with entries of standard deviation about
    /// `gain / sqrt(cols)`.
    pub fn matrix_in<B: Backend>(
        &mut self,
        backend: &B,
        rows: usize,
        cols: usize,
        gain: f32,
        dtype: DType,
    ) -> Result<B::Array, B::Error> {
        backend.from_f32(&self.matrix_values(rows, cols, gain), &[rows, cols], dtype)
    }

    /// The values of [`matrix_in`](Self::matrix_in), on the host (the same draws).
    pub fn matrix_values(&mut self, rows: usize, cols: usize, gain: f32) -> Vec<f32> {
        // Uniform on [-a, a) has std a / sqrt(3).
        let scale = gain * 3f32.sqrt() / (cols as f32).sqrt();
        self.uniform(rows * cols, scale)
    }

    /// A `dtype` norm weight near 1.
    pub fn norm_in<B: Backend>(
        &mut self,
        backend: &B,
        n: usize,
        dtype: DType,
    ) -> Result<B::Array, B::Error> {
        let w: Vec<f32> = self.uniform(n, 0.2).into_iter().map(|x| 1.0 + x).collect();
        backend.from_f32(&w, &[n], dtype)
    }
}

/// Rotary inverse frequencies for `rotated` of `head_dim` dims (HF's default rope).
pub(crate) fn inv_freq(rotated: usize, theta: f32) -> Vec<f32> {
    (0..rotated / 2)
        .map(|i| 1.0 / theta.powf(2.0 * i as f32 / rotated as f32))
        .collect()
}
