//! Time per call of the batched quantized CPU matmul against candle's `QMatMul`, on the real
//! model's shapes (Gemma 3 270M Q4_K_M: d = 640, 4 × 256 query dims, 1 × 256 KV, ffn 2048, the
//! tied 262 144-row Q8_0 head), for 1 … 32 activation rows, interleaved in one run.
//!
//! ```text
//! nice cargo run --release -p backend-candle --example qmatmul_bench -- [--reps N] [--json PATH]
//!     [--only NAME] [--rows 1,5] [--ours-only]
//! ```
//!
//! Weights are random valid GGUF blocks (speed does not depend on the values). For each shape
//! and row count: the median time per call of ours and candle's, the weight bytes streamed per
//! second, and `t(n) / t(1)` (the cost of a verify of `n` rows against one decode row).

use std::sync::Arc;
use std::time::{Duration, Instant};

use backend_candle::qmatmul::{QuantMatMul, Simd};
use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType, QMatMul};
use candle_core::{Device, Module, Tensor};
use mtp_core::quant::{GgmlType, QuantTensor};

/// The real model's matmul shapes: (name, type, output rows, input cols).
const SHAPES: [(&str, GgmlType, usize, usize); 8] = [
    ("q 640→1024", GgmlType::Q5_0, 1024, 640),
    ("k/v 640→256", GgmlType::Q5_0, 256, 640),
    ("v 640→256", GgmlType::Q8_0, 256, 640),
    ("o 1024→640", GgmlType::Q4K, 640, 1024),
    ("gate/up 640→2048", GgmlType::Q5_0, 2048, 640),
    ("down 2048→640", GgmlType::Q4K, 640, 2048),
    ("down 2048→640", GgmlType::Q6K, 640, 2048),
    ("head 640→262144", GgmlType::Q8_0, 262_144, 640),
];

const ROWS: [usize; 7] = [1, 2, 4, 5, 8, 16, 32];

/// Random valid blocks of `ty`: random bytes with small finite `f16` scales.
fn random_weight(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> QuantTensor {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let scales: &[usize] = match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4K => &[0, 2],
        GgmlType::Q6K => &[208],
        _ => &[],
    };
    let blocks = rows * cols / ty.block_size();
    let mut data = Vec::with_capacity(blocks * ty.block_bytes());
    for _ in 0..blocks {
        let mut block: Vec<u8> = (0..ty.block_bytes()).map(|_| next() as u8).collect();
        for &at in scales {
            let d = half::f16::from_f32((next() % 1000) as f32 * 1e-5).to_le_bytes();
            block[at..at + 2].copy_from_slice(&d);
        }
        data.extend(block);
    }
    QuantTensor::ggml(ty, rows, cols, data).expect("sizes")
}

fn candle_type(ty: GgmlType) -> GgmlDType {
    match ty {
        GgmlType::Q5_0 => GgmlDType::Q5_0,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q4K => GgmlDType::Q4K,
        _ => GgmlDType::Q6K,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let reps: usize = arg("--reps").map_or(Ok(5), |v| v.parse())?;
    let json = arg("--json");
    // `--only NAME`: the shapes whose name contains NAME; `--rows 1,5`: those row counts.
    let only = arg("--only");
    let row_counts: Vec<usize> = match arg("--rows") {
        Some(list) => list
            .split(',')
            .map(|v| v.trim().parse())
            .collect::<Result<_, _>>()?,
        None => ROWS.to_vec(),
    };
    // `--ours-only`: skip candle's kernel (for profiling ours).
    let ours_only = args.iter().any(|a| a == "--ours-only");
    let dev = Device::Cpu;
    println!(
        "simd {}, rayon threads {}, {} reps (median)",
        Simd::best(),
        rayon::current_num_threads(),
        reps
    );
    println!("| shape | type | rows | ours µs | candle µs | candle/ours | ours GB/s | ours t(n)/t(1) | candle t(n)/t(1) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut records = Vec::new();
    for (si, &(name, ty, rows, cols)) in SHAPES.iter().enumerate() {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let w = Arc::new(random_weight(ty, rows, cols, 17 + si as u64));
        let ours = QuantMatMul::new(w.clone())?;
        // What our kernel streams: the GGUF rows, or the interleaved copy (Q5_0 widened).
        let bytes = ours.bytes();
        let layout = format!("{:?}", ours.layout()).to_lowercase();
        let theirs = QMatMul::from_qtensor(qtensor_from_ggml(
            candle_type(ty),
            w.data(),
            vec![rows, cols],
            &dev,
        )?)?;
        let (mut ours_1, mut theirs_1) = (0f64, 0f64);
        for &n in &row_counts {
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            let xt = Tensor::from_slice(&x, (n, cols), &dev)?;
            // Warm-up, then interleave the two kernels rep by rep.
            ours.forward(&x, n)?;
            if !ours_only {
                theirs.forward(&xt)?;
            }
            let (mut to, mut tt) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                let t = Instant::now();
                std::hint::black_box(ours.forward(&x, n)?);
                to.push(t.elapsed());
                let t = Instant::now();
                if !ours_only {
                    std::hint::black_box(theirs.forward(&xt)?);
                }
                tt.push(t.elapsed());
            }
            let (o, c) = (median(to).as_secs_f64(), median(tt).as_secs_f64());
            if n == 1 {
                (ours_1, theirs_1) = (o, c);
            }
            let gbs = bytes as f64 / o / 1e9;
            println!(
                "| {name} | {ty} {layout} | {n} | {:.1} | {:.1} | {:.2}× | {gbs:.1} | {:.2} | {:.2} |",
                o * 1e6,
                c * 1e6,
                c / o,
                o / ours_1,
                c / theirs_1
            );
            records.push(format!(
                "{{\"shape\":\"{name}\",\"type\":\"{ty}\",\"layout\":\"{layout}\",\"out\":{rows},\"in\":{cols},\"rows\":{n},\
                 \"weight_bytes\":{bytes},\"ours_s\":{o:e},\"candle_s\":{c:e}}}"
            ));
        }
    }
    if let Some(path) = json {
        std::fs::write(&path, format!("[\n{}\n]\n", records.join(",\n")))?;
        println!("wrote {path}");
    }
    Ok(())
}
