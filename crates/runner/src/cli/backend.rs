//! The backend chosen at run time: an enum over the backends compiled into this binary.

use anyhow::bail;
use mtp_core::reference::ReferenceBackend;

use super::args::{BackendChoice, ModelArgs};

/// A backend compiled into this binary, opened on its device.
pub enum AnyBackend {
    /// mtp-core's host reference backend.
    Reference(ReferenceBackend),
    /// Candle on the requested device.
    #[cfg(feature = "candle")]
    Candle(runner::backend_candle::CandleBackend),
    /// MLX on the requested device. MLX is not thread-safe: the backend, the models and the
    /// decode loop all stay on the thread that opened it (the command's main thread).
    #[cfg(feature = "mlx")]
    Mlx(runner::backend_mlx::MlxBackend),
}

/// Run `$body` with `$b` bound to the concrete backend inside an [`AnyBackend`] (one
/// monomorphised copy of `$body` per compiled-in backend):
/// `with_backend!(backend, |b| run_on(b, ..))`.
macro_rules! with_backend {
    ($any:expr, |$b:ident| $body:expr) => {
        match $any {
            $crate::cli::backend::AnyBackend::Reference($b) => $body,
            #[cfg(feature = "candle")]
            $crate::cli::backend::AnyBackend::Candle($b) => $body,
            #[cfg(feature = "mlx")]
            $crate::cli::backend::AnyBackend::Mlx($b) => $body,
        }
    };
}
pub(crate) use with_backend;

impl AnyBackend {
    /// Open `--backend` on `--device`, with an actionable error for a backend or device that is
    /// not available in this build.
    pub fn open(args: &ModelArgs) -> anyhow::Result<Self> {
        let device = args.device.trim();
        match args.backend {
            BackendChoice::Reference => {
                if !device.eq_ignore_ascii_case("cpu") {
                    bail!(
                        "the reference backend runs on the CPU only (asked for --device \
                         {device}); use --backend candle for GPUs"
                    );
                }
                Ok(Self::Reference(ReferenceBackend::default()))
            }
            BackendChoice::Candle => open_candle(device),
            BackendChoice::Mlx => open_mlx(device),
        }
    }
}

#[cfg(feature = "candle")]
fn open_candle(device: &str) -> anyhow::Result<AnyBackend> {
    use anyhow::Context;
    let backend = runner::backend_candle::CandleBackend::from_spec(device)
        .with_context(|| format!("cannot use device `{device}` with the candle backend"))?;
    Ok(AnyBackend::Candle(backend))
}

#[cfg(not(feature = "candle"))]
fn open_candle(_device: &str) -> anyhow::Result<AnyBackend> {
    bail!(
        "this mtp was built without the candle backend (cargo feature `candle`); rebuild with it \
         or use --backend reference"
    )
}

#[cfg(feature = "mlx")]
fn open_mlx(device: &str) -> anyhow::Result<AnyBackend> {
    use anyhow::Context;
    let backend = runner::backend_mlx::MlxBackend::from_spec(device)
        .with_context(|| format!("cannot use device `{device}` with the MLX backend"))?;
    Ok(AnyBackend::Mlx(backend))
}

#[cfg(not(feature = "mlx"))]
fn open_mlx(_device: &str) -> anyhow::Result<AnyBackend> {
    bail!(
        "this mtp was built without the MLX backend (cargo feature `mlx`; on Linux build it with \
         scripts/cargo-mlx, see README.md); use --backend candle or --backend reference"
    )
}
