//! Device specs (`cpu`, `cuda:N`, `metal:N`) and backend names.

use candle_core::{Device, DeviceLocation};

use crate::error::{CandleError, Result};

/// The device a spec asks for, before it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spec {
    Cpu,
    Cuda(usize),
    Metal(usize),
}

/// Parse `cpu`, `cuda`, `cuda:N`, `metal` or `metal:N` (case-insensitive, surrounding spaces
/// ignored; a missing ordinal is 0).
pub(crate) fn parse(spec: &str) -> Result<Spec> {
    let unknown = || CandleError::UnknownDevice {
        spec: spec.to_string(),
    };
    let lower = spec.trim().to_ascii_lowercase();
    let (kind, ordinal) = match lower.split_once(':') {
        Some((kind, n)) => {
            let n = n.trim().parse::<usize>().map_err(|_| unknown())?;
            (kind.trim().to_string(), n)
        }
        None => (lower, 0),
    };
    match kind.as_str() {
        "cpu" if ordinal == 0 && !spec.contains(':') => Ok(Spec::Cpu),
        "cuda" => Ok(Spec::Cuda(ordinal)),
        "metal" => Ok(Spec::Metal(ordinal)),
        _ => Err(unknown()),
    }
}

/// Open the device of a parsed spec, or explain why this build cannot.
pub(crate) fn open(spec: &str, parsed: Spec) -> Result<Device> {
    let unavailable = |e: candle_core::Error| CandleError::DeviceUnavailable {
        spec: spec.to_string(),
        source: Box::new(e),
    };
    match parsed {
        Spec::Cpu => Ok(Device::Cpu),
        Spec::Cuda(n) => {
            if cfg!(feature = "cuda") {
                Device::new_cuda(n).map_err(unavailable)
            } else {
                Err(CandleError::FeatureNotCompiled {
                    device: "cuda",
                    feature: "cuda",
                })
            }
        }
        Spec::Metal(n) => {
            if cfg!(all(feature = "metal", target_os = "macos")) {
                Device::new_metal(n).map_err(unavailable)
            } else if cfg!(feature = "metal") {
                Err(CandleError::PlatformUnsupported {
                    device: "metal",
                    platform: "macOS",
                })
            } else {
                Err(CandleError::FeatureNotCompiled {
                    device: "metal",
                    feature: "metal",
                })
            }
        }
    }
}

/// `candle-cpu`, `candle-cuda:0`, `candle-metal:0`.
pub(crate) fn name(device: &Device) -> String {
    match device.location() {
        DeviceLocation::Cpu => "candle-cpu".to_string(),
        DeviceLocation::Cuda { gpu_id } => format!("candle-cuda:{gpu_id}"),
        DeviceLocation::Metal { gpu_id } => format!("candle-metal:{gpu_id}"),
    }
}
