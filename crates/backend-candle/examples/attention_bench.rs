//! Times the few-row CPU attention (`src/small_attention.rs`) at Gemma 3 270M's shapes: 4
//! query heads sharing one key/value head of 256, a 221-token context (the grounded bench
//! prompts' length), 1 and 5 query rows (a decode step, a verify of 4 drafts).
//!
//! cargo run --release -p backend-candle --example attention_bench

use mtp_core::{AttentionBias, AttentionMask, Backend, DType};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let b = backend_candle::CandleBackend::from_spec("cpu")?;
    let (tk, d, heads) = (221usize, 256usize, 4usize);
    // Deterministic values in [-0.5, 0.5).
    let values = |n: usize, seed: u32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 1000)
            .map(|v| v as f32 / 1000.0 - 0.5)
            .collect()
    };
    println!("| query rows | median µs | fastest µs |\n|---|---|---|");
    for tq in [1usize, 5] {
        let q = b.from_f32(&values(heads * tq * d, 1), &[1, heads, tq, d], DType::F32)?;
        let k = b.from_f32(&values(tk * d, 2), &[1, 1, tk, d], DType::F32)?;
        let v = b.from_f32(&values(tk * d, 3), &[1, 1, tk, d], DType::F32)?;
        let bias = AttentionBias::new(&b, AttentionMask::causal(tk - tq, 0), tq, tk, DType::F32)?;
        let calls = 200;
        let mut micros: Vec<f64> = (0..7)
            .map(|_| {
                let t0 = std::time::Instant::now();
                for _ in 0..calls {
                    let out = b.attention_with_bias(&q, &k, &v, &bias, 1.0 / 16.0)?;
                    std::hint::black_box(out);
                }
                Ok(t0.elapsed().as_secs_f64() / calls as f64 * 1e6)
            })
            .collect::<Result<_, Box<dyn std::error::Error>>>()?;
        micros.sort_by(f64::total_cmp);
        println!("| {tq} | {:.1} | {:.1} |", micros[3], micros[0]);
    }
    Ok(())
}
