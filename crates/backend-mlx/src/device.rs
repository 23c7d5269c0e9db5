//! [`MlxDevice`] and its specs (`cpu`, `gpu`/`metal`).

use crate::error::{MlxError, Result};

/// Where MLX computes. (`mlx_rs::Device` is a handle without `Clone`; this is the plain value the
/// backend keeps and turns into one when it sets MLX's default device.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MlxDevice {
    /// The CPU (on Linux, the `mlx-cpu` wheel's backend).
    Cpu,
    /// The Apple GPU through Metal (macOS only).
    Gpu,
}

impl MlxDevice {
    /// The device a spec names: `cpu`, or `gpu` / `metal` (macOS only). Case and surrounding
    /// spaces are ignored; an ordinal `:0` is accepted (MLX has one device of each kind).
    ///
    /// # Errors
    ///
    /// [`MlxError::UnknownDevice`] for any other spec; [`MlxError::PlatformUnsupported`] for the
    /// GPU outside macOS.
    pub fn from_spec(spec: &str) -> Result<Self> {
        let lower = spec.trim().to_ascii_lowercase();
        let kind = lower.strip_suffix(":0").unwrap_or(&lower).trim();
        match kind {
            "cpu" => Ok(Self::Cpu),
            "gpu" | "metal" if cfg!(target_os = "macos") => Ok(Self::Gpu),
            "gpu" | "metal" => Err(MlxError::PlatformUnsupported {
                device: "metal",
                platform: "macOS",
            }),
            _ => Err(MlxError::UnknownDevice {
                spec: spec.to_string(),
            }),
        }
    }

    /// The mlx-rs device handle.
    pub fn to_mlx(self) -> mlx_rs::Device {
        match self {
            Self::Cpu => mlx_rs::Device::cpu(),
            Self::Gpu => mlx_rs::Device::gpu(),
        }
    }

    /// `mlx-cpu` or `mlx-metal`.
    pub fn backend_name(self) -> &'static str {
        match self {
            Self::Cpu => "mlx-cpu",
            Self::Gpu => "mlx-metal",
        }
    }
}
