//! Load a target model directory on candle's CPU and print the process's peak resident memory
//! (Linux `VmHWM`) next to the size of its weight files: how much memory loading needs.
//!
//! ```text
//! cargo run --release -p runner --example load_peak_rss -- DIR [f32|f16|bf16]
//! ```

use std::path::PathBuf;

use mtp_core::DType;
use runner::backend_candle::CandleBackend;
use runner::loading::{load_target_with_report, LoadOptions};

/// A `/proc/self/status` field in KiB.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn weight_bytes(dir: &std::path::Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            total += std::fs::metadata(&path)?.len();
        }
    }
    Ok(total)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: load_peak_rss DIR [f32|f16|bf16]")?,
    );
    let dtype = match args.next().as_deref() {
        None | Some("f32") => DType::F32,
        Some("f16") => DType::F16,
        Some("bf16") => DType::BF16,
        Some(other) => return Err(format!("unknown dtype {other}").into()),
    };
    let before = status_kib("VmRSS:").unwrap_or(0);
    let backend = CandleBackend::cpu();
    let (_model, report) =
        load_target_with_report(&backend, &dir, &LoadOptions::with_dtype(dtype))?;
    let peak = status_kib("VmHWM:").unwrap_or(0);
    let mib = |kib: u64| kib as f64 / 1024.0;
    let files = weight_bytes(&dir)? as f64 / (1024.0 * 1024.0);
    println!(
        "{}: weights {files:.1} MiB on disk; compute {dtype}; read {:.1} MiB, skipped {:.1} MiB; \
         RSS before {:.1} MiB, peak {:.1} MiB ({:.2}x the files)",
        dir.display(),
        report.stats.read_bytes as f64 / (1024.0 * 1024.0),
        report.stats.skipped_bytes as f64 / (1024.0 * 1024.0),
        mib(before),
        mib(peak),
        mib(peak) / files,
    );
    Ok(())
}
