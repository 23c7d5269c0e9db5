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
}

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
            BackendChoice::Mlx => bail!(
                "the MLX backend is not built yet; use --backend candle or --backend reference"
            ),
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
