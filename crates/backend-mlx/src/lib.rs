//! # backend-mlx
//!
//! The mtp-core `Backend` on [mlx-rs](https://github.com/oxiglade/mlx-rs)
//! 0.33 (MLX 0.32.2): arrays are `mlx_rs::Array`s, lazy until an eval or a host read. On macOS
//! it is stock mlx-rs with Metal and Accelerate; on Linux the MLX CPU backend from the PyPI
//! `mlx-cpu` wheel, built through `scripts/cargo-mlx` (this repository's own build script for
//! mlx-sys; see `README.md`).
//!
//! Everything is behind the cargo feature `mlx`: without it this crate is empty, so the
//! workspace builds and tests without cmake, libclang or the wheel.
//!
//! ```ignore
//! use backend_mlx::MlxBackend;
//! use mtp_core::{Backend, DType};
//!
//! let backend = MlxBackend::from_spec("cpu")?;
//! let x = backend.from_f32(&[1.0, 2.0, 3.0], &[1, 3], DType::F32)?;
//! let p = backend.softmax(&x, 1)?;
//! assert_eq!(backend.to_vec_u32(&backend.argmax(&p, 1)?)?, vec![2]);
//! ```
//!
//! # Kernels and laziness
//!
//! Every required op maps onto one MLX op or a few (see `README.md` for the table). Of the fused
//! ops, `softmax` (`mlx::softmax`, precise), `rms_norm` (`mlx::fast::rms_norm`), `rope` and
//! `rope_cached` (`mlx::fast::rope`, angles computed on the device: no tables),
//! `attention_with_bias` (`mlx::fast::scaled_dot_product_attention` with the forward's prepared
//! mask, or none when every key is visible; grouped KV heads native) and `gather_linear` (the
//! mixture-of-experts matmul: `mlx::gather_mm`, each row against its expert's matrix in place)
//! use MLX kernels; `gelu_tanh`, `log_softmax` and `top_k` keep the trait's default bodies (MLX
//! fuses nothing there on the CPU). Weights arrive through `from_le_bytes` as MLX arrays of their
//! stored dtype (no host `f32` copy of a bf16 checkpoint); `preferred_dtype` is `F32` on the CPU
//! and the checkpoint's own half dtype on Metal (see `README.md`).
//!
//! Ops only record a graph: the engine's `eval` / `async_eval` hooks and the host reads
//! (`to_vec_*`) run it, so a decode round costs one evaluation.
//!
//! # Threads
//!
//! MLX is not thread-safe. A `MlxBackend` and its arrays must stay on the thread that made
//! them: the runner builds the backend, loads the models and runs the whole decode loop on one
//! thread (the `mtp` CLI's main thread); the crate's tests run with `--test-threads=1`.
//! `MlxBackend::new` makes its device MLX's default device for the process.
//!
//! # Aliasing
//!
//! MLX arrays are values. `write_slice` uses MLX's
//! `slice_update` and replaces the written array (reusing its buffer when nothing else holds
//! it); views and clones taken before the write keep the old contents, so
//! `deep_copy` is a plain clone.

#![warn(missing_docs)]

#[cfg(feature = "mlx")]
mod backend;
#[cfg(feature = "mlx")]
mod convert;
#[cfg(feature = "mlx")]
mod device;
#[cfg(feature = "mlx")]
mod error;
#[cfg(feature = "mlx")]
mod fused;
#[cfg(all(test, feature = "mlx"))]
mod mlx_tests;
#[cfg(feature = "mlx")]
mod ops;
#[cfg(feature = "mlx")]
mod quantized;

#[cfg(feature = "mlx")]
pub use backend::MlxBackend;
#[cfg(feature = "mlx")]
pub use device::MlxDevice;
#[cfg(feature = "mlx")]
pub use error::{MlxError, Result};
#[cfg(feature = "mlx")]
pub use mlx_rs;
#[cfg(feature = "mlx")]
pub use quantized::MlxQuantWeight;
