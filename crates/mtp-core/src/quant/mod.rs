//! Quantized weights, described without naming a framework.
//!
//! * [`GgmlType`] — the GGUF block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K … Q6_K, Q8_K)
//!   with their ggml type ids, block sizes and bytes per block;
//! * [`AffineParams`] — MLX affine group quantization (bits, group size; packed `u32` words with
//!   per-group scales and biases);
//! * [`QuantTensor`] — a quantized `[rows, cols]` weight on the host, checked against its shape
//!   when built, with pure-Rust dequantization of every format ([`QuantTensor::dequantize`],
//!   and [`QuantTensor::dequantize_rows`] for embedding lookups): the oracle the backends'
//!   quantized kernels are tested against, bit-identical to ggml's reference code;
//! * [`QuantScheme`] — the one quantizer of dense weights at load (`--quantize q8|q4`: GGUF Q8_0
//!   / Q4_0), and [`ggml_to_affine`] for backends whose kernels take affine groups.
//!
//! How a backend computes with a quantized weight is [`Backend::QuantWeight`](crate::Backend::QuantWeight)
//! and [`Backend::quant_linear`](crate::Backend::quant_linear).

mod affine;
mod blocks;
mod error;
mod ggml;
mod quantize;
mod tensor;
#[cfg(test)]
mod tests;

pub use affine::{AffineParams, AFFINE_BITS, AFFINE_GROUP_SIZES};
pub use error::QuantError;
pub use ggml::{GgmlType, ALL_GGML_TYPES, QK_K};
pub use quantize::{ggml_to_affine, quantize_ggml, QuantScheme};
pub use tensor::{QuantFormat, QuantTensor};
