//! Gemma 4 models over any [`Backend`](mtp_core::Backend): the text target and its MTP
//! assistant; Gemma 3 text models ([`gemma3`], safetensors or GGUF); and the [`registry`] of
//! `model_type`s the loader builds. See `README.md` in this folder for where each Gemma 4
//! config field is implemented.

pub mod assistant_host;
pub mod config;
pub mod gemma3;
pub mod gemma4;
pub mod gemma4_assistant;
pub mod gemma4_assistant_gguf;
pub mod gemma4_gguf;
mod layers;
mod moe;
pub mod nn;
mod packed;
pub mod registry;

pub use assistant_host::{AssistantHost, AssistantTarget};
pub use gemma3::Gemma3Target;
pub use gemma4::Gemma4Target;
pub use gemma4_assistant::Gemma4Assistant;
pub use registry::{Family, LoadedDrafter, LoadedTarget};
