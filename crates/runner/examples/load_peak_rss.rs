//! Load a target model directory on candle's CPU (or MLX's, with the `mlx` feature) and print the
//! process's peak resident memory (Linux `VmHWM`) next to the size of its weight files: how much
//! memory loading needs.
//!
//! ```text
//! cargo run --release -p runner --example load_peak_rss -- DIR [f32|f16|bf16] [candle|mlx]
//! scripts/cargo-mlx run -p runner --features mlx --example load_peak_rss -- DIR bf16 mlx
//! ```
//!
//! The model is evaluated before the peak is read (MLX arrays are lazy: a conversion to the
//! compute dtype happens at the first evaluation), so the number covers loading and the first
//! materialisation of every weight.

use std::path::{Path, PathBuf};

use mtp_core::{Backend, DType};
use runner::loading::{load_target_with_report, LoadOptions, LoadReport};

/// A `/proc/self/status` field in KiB.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn weight_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            total += std::fs::metadata(&path)?.len();
        }
    }
    Ok(total)
}

/// Load `dir` on `backend` in `dtype` and run one token through it (every weight materialised).
fn load<B: Backend>(backend: &B, dir: &Path, dtype: DType) -> Result<LoadReport, String> {
    use mtp_core::model::TargetModel;
    let (model, report) = load_target_with_report(backend, dir, &LoadOptions::with_dtype(dtype))
        .map_err(|e| e.to_string())?;
    let forward = || -> Result<(), B::Error> {
        let mut caches = model.new_caches(backend)?;
        let ids = backend.from_u32(&[0], &[1, 1])?;
        let out = model.forward(backend, &ids, 0, &mut caches)?;
        backend.to_vec_f32(&model.unembed(backend, &out.hidden)?)?;
        Ok(())
    };
    forward().map_err(|e| e.to_string())?;
    Ok(report)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: load_peak_rss DIR [f32|f16|bf16] [candle|mlx]";
    let dir = PathBuf::from(args.next().ok_or(usage)?);
    let dtype = match args.next().as_deref() {
        None | Some("f32") => DType::F32,
        Some("f16") => DType::F16,
        Some("bf16") => DType::BF16,
        Some(other) => return Err(format!("unknown dtype {other}; {usage}").into()),
    };
    let backend = args.next().unwrap_or_else(|| "candle".into());
    let before = status_kib("VmRSS:").unwrap_or(0);
    let report = match backend.as_str() {
        "candle" => load(&runner::backend_candle::CandleBackend::cpu(), &dir, dtype)?,
        #[cfg(feature = "mlx")]
        "mlx" => load(&runner::backend_mlx::MlxBackend::cpu(), &dir, dtype)?,
        other => {
            return Err(
                format!("unknown backend {other} (mlx needs the `mlx` feature); {usage}").into(),
            )
        }
    };
    let peak = status_kib("VmHWM:").unwrap_or(0);
    let mib = |kib: u64| kib as f64 / 1024.0;
    let files = weight_bytes(&dir)? as f64 / (1024.0 * 1024.0);
    println!(
        "{} on {backend}: weights {files:.1} MiB on disk; compute {dtype}; read {:.1} MiB, \
         skipped {:.1} MiB; RSS before {:.1} MiB, peak {:.1} MiB ({:.2}x the files; {:.2}x \
         above the start)",
        dir.display(),
        report.stats.read_bytes as f64 / (1024.0 * 1024.0),
        report.stats.skipped_bytes as f64 / (1024.0 * 1024.0),
        mib(before),
        mib(peak),
        mib(peak) / files,
        (mib(peak) - mib(before)) / files,
    );
    Ok(())
}
