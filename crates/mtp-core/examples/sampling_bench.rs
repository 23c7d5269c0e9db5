//! Micro-benchmark of the host sampling pipeline on one whole logit row of Gemma's vocabulary
//! (262,144 tokens): the distribution under each setting, a draw from it, and the selection of
//! a row's best logits. Prints one JSON object (medians in milliseconds) to stdout.
//!
//! ```sh
//! cargo run --release -p mtp-core --example sampling_bench [-- --vocab 262144 --reps 200 --only I]
//! ```
//!
//! The row is synthetic but shaped like a language model's: a Gaussian bulk (σ = 2.5) with a
//! few dozen tokens well above it, as a 270M Gemma's logits are.

use std::time::Instant;

use mtp_core::sampling::{best_k, Sampler, SamplerOptions};
use rand::{Rng, SeedableRng};

fn main() {
    let mut vocab = 262_144usize;
    let mut reps = 200usize;
    // `--only I`: the I-th setting alone (0-based), for a profiler.
    let mut only = None;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().and_then(|v| v.parse().ok());
        match (flag.as_str(), value) {
            ("--vocab", Some(v)) => vocab = v,
            ("--reps", Some(v)) => reps = v,
            ("--only", Some(v)) => only = Some(v),
            _ => {
                eprintln!("usage: sampling_bench [--vocab N] [--reps N] [--only I]");
                std::process::exit(2);
            }
        }
    }
    let row = language_model_row(vocab, 7);
    let history: Vec<u32> = (0..64).map(|i| (i * 4099 % vocab) as u32).collect();

    let settings: [(&str, SamplerOptions); 4] = [
        (
            "softmax T=0.8 (top-k/top-p off)",
            SamplerOptions {
                temperature: 0.8,
                ..Default::default()
            },
        ),
        (
            "softmax T=0.8, repeat 1.1 + presence + frequency",
            SamplerOptions {
                temperature: 0.8,
                repeat_penalty: 1.1,
                presence_penalty: 0.2,
                frequency_penalty: 0.1,
                ..Default::default()
            },
        ),
        (
            "ollama defaults: T=0.8, top-k 40, top-p 0.9 (dense row)",
            SamplerOptions {
                temperature: 0.8,
                top_k: 40,
                top_p: 0.9,
                ..Default::default()
            },
        ),
        (
            "T=0.8, top-p 0.9, top-k off (dense row)",
            SamplerOptions {
                temperature: 0.8,
                top_p: 0.9,
                ..Default::default()
            },
        ),
    ];
    let mut cases = Vec::new();
    for (index, (name, options)) in settings.into_iter().enumerate() {
        if only.is_some_and(|i| i != index) {
            continue;
        }
        let options = SamplerOptions {
            seed: Some(1),
            ..options
        };
        let mut sampler = match Sampler::new(options, &history) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{name}: {e}");
                std::process::exit(1);
            }
        };
        let distribution_ms = median_ms(reps, || {
            std::hint::black_box(sampler.distribution(&row, &[]).ok());
        });
        let Ok(dist) = sampler.distribution(&row, &[]) else {
            eprintln!("{name}: no distribution");
            std::process::exit(1);
        };
        let draw_ms = median_ms(reps, || {
            std::hint::black_box(sampler.sample(&dist));
        });
        let prob_ms = median_ms(reps, || {
            std::hint::black_box(dist.prob(12_345));
        });
        cases.push(serde_json::json!({
            "setting": name,
            "distribution_ms": distribution_ms,
            "draw_ms": draw_ms,
            "prob_ms": prob_ms,
            "support": dist.support_len(),
        }));
    }
    let best_40_ms = median_ms(reps, || {
        let items = row
            .iter()
            .enumerate()
            .map(|(i, &v)| (i as u32, f64::from(v)));
        std::hint::black_box(best_k(items, 40));
    });
    let report = serde_json::json!({
        "vocab": vocab,
        "reps": reps,
        "cases": cases,
        "best_k_40_of_row_ms": best_40_ms,
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
}

/// A logit row shaped like a language model's: Gaussian bulk, a few tokens far above it.
fn language_model_row(vocab: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut row: Vec<f32> = (0..vocab)
        .map(|_| {
            // Box–Muller.
            let (u, v): (f64, f64) = (rng.random_range(1e-12..1.0), rng.random());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos() * 2.5) as f32
        })
        .collect();
    for _ in 0..40 {
        let at = rng.random_range(0..vocab);
        row[at] = rng.random_range(8.0..18.0);
    }
    row
}

/// The median wall time of `reps` calls of `f`, in milliseconds (after 3 warm-up calls).
fn median_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let mut times: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
