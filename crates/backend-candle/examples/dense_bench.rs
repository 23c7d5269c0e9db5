//! Times dense `linear` on the CPU: the few-row kernel (in calls of at most 16 rows) against
//! candle's packed matmul, for row counts from a decode step to a prefill chunk, at Gemma 3
//! 270M's MLP shape, in f32 and bf16.
//!
//! `cargo run --release -p backend-candle --example dense_bench`

use std::time::Instant;

use backend_candle::CandleBackend;
use mtp_core::{Backend, DType};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let b = CandleBackend::cpu();
    let (out, cols) = (2048, 640);
    let w_host: Vec<f32> = (0..out * cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    for dtype in [DType::F32, DType::BF16] {
        let w = b.from_f32(&w_host, &[out, cols], dtype)?;
        for n in [1usize, 5, 16, 17, 32, 64, 128, 256, 512] {
            let x_host: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 31) % 97) as f32 / 97.0 - 0.5)
                .collect();
            let x = b.from_f32(&x_host, &[n, cols], dtype)?;
            let chunks: Vec<_> = (0..n)
                .step_by(16)
                .map(|s| b.slice(&x, 0, s, 16.min(n - s)))
                .collect::<Result<_, _>>()?;
            let time = |f: &dyn Fn() -> Result<(), Box<dyn std::error::Error>>| -> Result<f64, Box<dyn std::error::Error>> {
                f()?;
                let mut best = f64::INFINITY;
                for _ in 0..5 {
                    let t = Instant::now();
                    for _ in 0..10 {
                        f()?;
                    }
                    best = best.min(t.elapsed().as_secs_f64() / 10.0);
                }
                Ok(best * 1e3)
            };
            let kernel = time(&|| {
                for c in &chunks {
                    b.eval(&[&b.linear(c, &w)?])?;
                }
                Ok(())
            })?;
            let packed = time(&|| {
                b.eval(&[&mtp_core::backend::default_linear(&b, &x, &w)?])?;
                Ok(())
            })?;
            println!("{dtype} n={n:4}: kernel {kernel:8.3} ms, candle matmul {packed:8.3} ms, ratio {:.2}", kernel / packed);
        }
    }
    Ok(())
}
