//! The activations, quantized once per call to the weight type's dot-product partner, as ggml
//! does: Q8_0 blocks (32 values, one scale) for Q8_0 / Q5_0 / Q4_0 weights, Q8_K blocks (256
//! values, one `f32` scale and the sums of every 16 quants, which the K-quants' minimums and
//! offsets need) for Q4_K / Q6_K.

use mtp_core::quant::{GgmlType, QuantError, QK_K};

use super::{QMatMulError, ROW_CHUNK};

/// One Q8_0 block of activations, its `f16` scale widened once to `f32`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct BlockQ8_0 {
    /// `x ≈ d q`.
    pub d: f32,
    /// The quants, `|q| ≤ 127`.
    pub qs: [i8; 32],
    /// `q + 128` as unsigned bytes: the unsigned operand of the VNNI byte dot product
    /// (`Σ (q + 128) w − 128 Σ w = Σ q w`).
    pub us: [u8; 32],
    /// `−128 Σ q`: the start of the interleaved kernels' VNNI sums, whose unsigned operand is
    /// the weight `w + 128` (`Σ (w + 128) q − 128 Σ q = Σ w q`).
    pub minus_128_sum: i32,
}

/// One Q8_K block (ggml's `block_q8_K`).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct BlockQ8K {
    /// `x ≈ d q`.
    pub d: f32,
    /// The quants, `-127 ≤ q ≤ 127`.
    pub qs: [i8; QK_K],
    /// `bsums[g]` = the sum of `qs[16 g .. 16 g + 16]`.
    pub bsums: [i16; QK_K / 16],
}

/// `n` rows of activations as blocks, row-major (`blocks_per_row` blocks per row).
#[derive(Debug, Clone)]
pub(super) struct Quantized<B> {
    blocks: Vec<B>,
    blocks_per_row: usize,
}

impl<B> Quantized<B> {
    /// The blocks of activation row `j`.
    pub fn row(&self, j: usize) -> &[B] {
        &self.blocks[j * self.blocks_per_row..][..self.blocks_per_row]
    }

    /// The rows of the first `n` as chunks of [`ROW_CHUNK`] (the last padded with its own last
    /// row, whose results are not stored): what the kernels look up per weight row.
    pub fn row_chunks(&self, n: usize) -> Vec<[&[B]; ROW_CHUNK]> {
        (0..n.div_ceil(ROW_CHUNK))
            .map(|c| std::array::from_fn(|jj| self.row((c * ROW_CHUNK + jj).min(n - 1))))
            .collect()
    }

    /// Every block, row after row.
    #[cfg(test)]
    pub fn blocks(&self) -> &[B] {
        &self.blocks
    }
}

/// `[n, cols]` activations as Q8_0 blocks, bit-identical to mtp-core's quantizer and ggml's
/// `quantize_row_q8_0_ref` (`d = max|x| / 127`, `q = roundf(x · (1 / d))`, halves away from
/// zero), written straight into the kernels' blocks; `cols` must be a multiple of 32.
pub(super) fn quantize_q8_0(
    x: &[f32],
    n: usize,
    cols: usize,
) -> Result<Quantized<BlockQ8_0>, QMatMulError> {
    // The size checks (and their errors) of mtp-core's quantizer.
    GgmlType::Q8_0.tensor_bytes(n, cols)?;
    if n.checked_mul(cols) != Some(x.len()) {
        return Err(QuantError::SizeMismatch {
            format: "GGUF Q8_0".into(),
            rows: n,
            cols,
            reason: format!("{} values to quantize", x.len()),
        }
        .into());
    }
    Ok(Quantized {
        blocks: x.chunks_exact(32).map(block_q8_0).collect(),
        blocks_per_row: cols / 32,
    })
}

/// One Q8_0 block of activations. `roundf` by integers (no libm call, so the loop vectorises):
/// `t = trunc(y)`, `f = y − t` (exact for `|y| < 2²³`; here `|y| ≤ 127`), then one step away
/// from zero when `|f| ≥ ½`. A NaN gives 0, as `roundf(NaN) as i8` does.
fn block_q8_0(x: &[f32]) -> BlockQ8_0 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut qs = [0i8; 32];
    for (q, &v) in qs.iter_mut().zip(x) {
        let y = v * id;
        let t = y as i32;
        let f = y - t as f32;
        *q = (t + i32::from(f >= 0.5) - i32::from(f <= -0.5)) as i8;
    }
    let mut us = [0u8; 32];
    for (u, &q) in us.iter_mut().zip(&qs) {
        *u = (q as u8) ^ 0x80;
    }
    BlockQ8_0 {
        d: half::f16::from_f32(d).to_f32(),
        minus_128_sum: -128 * qs.iter().map(|&q| i32::from(q)).sum::<i32>(),
        qs,
        us,
    }
}

/// `[n, cols]` activations as Q8_K blocks; `cols` must be a multiple of 256 (the caller checks
/// the weight's shape, whose rows have the same length).
pub(super) fn quantize_q8_k(x: &[f32], cols: usize) -> Quantized<BlockQ8K> {
    Quantized {
        blocks: x.chunks_exact(QK_K).map(block_q8_k).collect(),
        blocks_per_row: cols / QK_K,
    }
}

/// 1.5 · 2²³: a float this large has no fraction bits, so `(y + M) − M` is `y` rounded to an
/// integer, half to even, for `|y| < 2²²`.
const ROUNDING_MAGIC: f32 = 12_582_912.0;

/// ggml's `quantize_row_q8_K_ref` for one block: the value of largest magnitude `max` (the first
/// on ties) maps to `-127`, `q = min(127, round_half_even(-127 x / max))`, `d = 1 / (-127 / max)`.
pub(super) fn block_q8_k(x: &[f32]) -> BlockQ8K {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let mut block = BlockQ8K {
        d: 0.0,
        qs: [0; QK_K],
        bsums: [0; QK_K / 16],
    };
    if amax == 0.0 {
        return block;
    }
    let iscale = -127.0 / max;
    for (q, &v) in block.qs.iter_mut().zip(x) {
        // ggml's `nearest_int`: adding and removing 1.5·2²³ rounds half to even (the product
        // is within ±127 + rounding, far inside the trick's range), with no libm call.
        *q = ((((iscale * v) + ROUNDING_MAGIC) - ROUNDING_MAGIC) as i32).min(127) as i8;
    }
    for (sum, group) in block.bsums.iter_mut().zip(block.qs.chunks_exact(16)) {
        *sum = group.iter().map(|&q| i16::from(q)).sum();
    }
    block.d = 1.0 / iscale;
    block
}
