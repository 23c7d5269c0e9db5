//! Quantizing dense weights at load (`--quantize q8|q4`, what ollama does at import): one shared
//! quantizer producing GGUF Q8_0 / Q4_0 blocks, bit-identical to ggml's reference
//! `quantize_row_q8_0_ref` / `quantize_row_q4_0_ref` (and `gguf-py`'s numpy port), and the
//! lossless re-expression of Q4_0 / Q4_1 / Q8_0 blocks as MLX affine groups.

use super::affine::AffineParams;
use super::ggml::GgmlType;
use super::tensor::{QuantFormat, QuantTensor};
use super::QuantError;

/// What a dense checkpoint is quantized to at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantScheme {
    /// 8-bit: GGUF Q8_0 (32 weights per `f16` scale).
    Q8,
    /// 4-bit: GGUF Q4_0 (32 weights per `f16` scale, offset 8).
    Q4,
}

impl QuantScheme {
    /// `"q8"` or `"q4"` (case-insensitive).
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "q8" | "q8_0" => Some(Self::Q8),
            "q4" | "q4_0" => Some(Self::Q4),
            _ => None,
        }
    }

    /// The GGUF block type it produces.
    pub fn ggml_type(self) -> GgmlType {
        match self {
            Self::Q8 => GgmlType::Q8_0,
            Self::Q4 => GgmlType::Q4_0,
        }
    }

    /// Quantize row-major `[rows, cols]` `values` (see [`quantize_ggml`]).
    pub fn quantize(
        self,
        values: &[f32],
        rows: usize,
        cols: usize,
    ) -> Result<QuantTensor, QuantError> {
        quantize_ggml(self.ggml_type(), values, rows, cols)
    }
}

impl std::fmt::Display for QuantScheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Q8 => "q8",
            Self::Q4 => "q4",
        })
    }
}

/// ggml's `roundf`: halves away from zero (Rust's `f32::round`).
fn round_away(x: f32) -> f32 {
    x.round()
}

/// One Q8_0 block: `d = max|x| / 127`, `q = round(x / d)`.
fn block_q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    out.extend_from_slice(&half::f16::from_f32(d).to_le_bytes());
    out.extend(x.iter().map(|&v| round_away(v * id) as i8 as u8));
}

/// One Q4_0 block: `d = x_max / -8` for the `x` of largest magnitude (the first on ties),
/// `q = min(15, trunc(x / d + 8.5))`, low nibbles the first 16 weights.
fn block_q4_0(x: &[f32], out: &mut Vec<u8>) {
    let mut max = 0f32;
    let mut amax = 0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    out.extend_from_slice(&half::f16::from_f32(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as i8).clamp(0, 15) as u8;
    for j in 0..16 {
        out.push(q(x[j]) | (q(x[j + 16]) << 4));
    }
}

/// Quantize row-major `[rows, cols]` `values` to GGUF `ty` blocks (`Q8_0` or `Q4_0`; other
/// types are dequantize-only here and an [`QuantError::UnsupportedFormat`]).
pub fn quantize_ggml(
    ty: GgmlType,
    values: &[f32],
    rows: usize,
    cols: usize,
) -> Result<QuantTensor, QuantError> {
    let bytes = ty.tensor_bytes(rows, cols)?;
    if rows.checked_mul(cols) != Some(values.len()) {
        return Err(QuantError::SizeMismatch {
            format: format!("GGUF {ty}"),
            rows,
            cols,
            reason: format!("{} values to quantize", values.len()),
        });
    }
    let block: fn(&[f32], &mut Vec<u8>) = match ty {
        GgmlType::Q8_0 => block_q8_0,
        GgmlType::Q4_0 => block_q4_0,
        other => {
            return Err(QuantError::UnsupportedFormat {
                format: format!("GGUF {other}"),
                reason: "only Q8_0 and Q4_0 are produced by the quantizer".into(),
            })
        }
    };
    let mut data = Vec::with_capacity(bytes);
    for chunk in values.chunks_exact(ty.block_size()) {
        block(chunk, &mut data);
    }
    QuantTensor::ggml(ty, rows, cols, data)
}

/// `t` as MLX affine groups of 32 when its blocks are affine already — Q4_0 (`w = d q - 8 d`),
/// Q4_1 (`w = d q + m`) and Q8_0 (`w = d (q + 128) - 128 d`) — else `None` (the K-quants and Q5
/// types have no affine form of the same size). Values are equal up to one `f32` rounding.
pub fn ggml_to_affine(t: &QuantTensor) -> Option<QuantTensor> {
    let QuantFormat::Ggml(ty) = t.format() else {
        return None;
    };
    let (bits, block) = match ty {
        GgmlType::Q4_0 | GgmlType::Q4_1 => (4, ty.block_bytes()),
        GgmlType::Q8_0 => (8, ty.block_bytes()),
        _ => return None,
    };
    let params = AffineParams::new(bits, 32).ok()?;
    let blocks = t.data().len() / block;
    let mut words = Vec::with_capacity(blocks * 32 * bits as usize / 32);
    let mut scales = Vec::with_capacity(blocks);
    let mut biases = Vec::with_capacity(blocks);
    let f16 = |b: &[u8], at: usize| half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
    for b in t.data().chunks_exact(block) {
        let d = f16(b, 0);
        let mut values = [0u32; 32];
        match ty {
            GgmlType::Q4_0 | GgmlType::Q4_1 => {
                let qs = if ty == GgmlType::Q4_0 {
                    &b[2..18]
                } else {
                    &b[4..20]
                };
                for j in 0..16 {
                    values[j] = u32::from(qs[j] & 0x0F);
                    values[j + 16] = u32::from(qs[j] >> 4);
                }
                scales.push(d);
                biases.push(if ty == GgmlType::Q4_0 {
                    -8.0 * d
                } else {
                    f16(b, 2)
                });
            }
            _ => {
                for (v, &q) in values.iter_mut().zip(&b[2..34]) {
                    *v = (i32::from(q as i8) + 128) as u32;
                }
                scales.push(d);
                biases.push(-128.0 * d);
            }
        }
        let per = 32 / bits as usize;
        for chunk in values.chunks_exact(per) {
            let word = chunk
                .iter()
                .enumerate()
                .fold(0u32, |w, (i, &v)| w | (v << (bits as usize * i)));
            words.push(word);
        }
    }
    QuantTensor::affine(params, t.rows(), t.cols(), &words, scales, biases).ok()
}
