//! A load-time layout for the 32-weight block types (Q8_0, Q5_0): the weights of [`GROUP`]
//! consecutive rows, block by block, interleaved in 4-byte runs and widened to 8 bits, so one
//! 512-bit load holds the same four weights of each of the group's rows and one byte dot product
//! (`vpdpbusd`) advances all of their sums against a broadcast run of activations (with AVX2,
//! one 256-bit load and dot product per half of the group). The per-row
//! layout needs one dot product, one conversion and one scaled add per row and block, and a
//! horizontal sum per row; here those are shared by the group's rows and no horizontal sum is
//! left (llama.cpp repacks its weights at load for the same reason).
//!
//! The rearrangement is exact: every weight keeps its 8-bit value (Q5_0's `q - 16` widened) and
//! its block's `f16` scale, so a row decodes to the bits the GGUF block gives and the GGUF bytes
//! can be rebuilt. Q5_0 grows from 22 to 34 bytes per block, which its decode cost repays (the
//! per-row Q5_0 kernel runs at about a third of the memory bandwidth); Q4_0 would double, so it
//! keeps the per-row layout.
//!
//! Bytes, per group `g` (rows `16 g .. 16 g + 16`, the last group padded with zero rows) and
//! per block `b` of the row, [`GROUP_BLOCK_BYTES`] in all:
//! * the 16 rows' scales, `f16` little-endian (32 bytes);
//! * for each run `k` of 4 weights (`4 k .. 4 k + 4`, 8 runs), each row's 4 weights as `w + 128`
//!   (unsigned: the operand `vpdpbusd` takes unsigned), row after row (64 bytes per run).
//!
//! 16 rows, not 8: with 8 a group run fills a 256-bit register, and AVX-512's 512-bit dot
//! product then has no use; `qmatmul_bench`, the Q8_0 head (640 → 262 144) at 16 activation
//! rows: 36–41 ms with groups of 8 and 256-bit VNNI, 27 ms with groups of 16 and 512-bit (a
//! 2-core Sapphire Rapids VM; at 1–5 rows the head is bound by memory either way).

use mtp_core::quant::{GgmlType, QuantError, QuantTensor};

use super::block32::Block32;
use super::q5_0::Q5_0;
use super::q8_0::Q8_0;

/// Weight rows interleaved together (the kernels' register layout assumes 16).
pub(super) const GROUP: usize = 16;

/// Bytes of a group's scales for one block.
pub(super) const SCALE_BYTES: usize = 2 * GROUP;

/// Bytes of one block of a group: the scales, then 32 weights of each row.
pub(super) const GROUP_BLOCK_BYTES: usize = SCALE_BYTES + 32 * GROUP;

/// A Q8_0 or Q5_0 weight in the interleaved layout.
#[derive(Debug, Clone)]
pub(super) struct Interleaved {
    data: Vec<u8>,
    ty: GgmlType,
    rows: usize,
    cols: usize,
}

impl Interleaved {
    /// Whether GGUF type `ty` has this layout.
    pub fn supports(ty: GgmlType) -> bool {
        matches!(ty, GgmlType::Q8_0 | GgmlType::Q5_0)
    }

    /// `tensor` (a type [`supports`](Self::supports) accepts) rearranged, or `None` for
    /// another type.
    pub fn new(tensor: &QuantTensor) -> Option<Self> {
        let mtp_core::quant::QuantFormat::Ggml(ty) = tensor.format() else {
            return None;
        };
        let [rows, cols] = tensor.shape();
        let data = match ty {
            GgmlType::Q8_0 => interleave::<Q8_0>(tensor.data(), rows, cols),
            GgmlType::Q5_0 => interleave::<Q5_0>(tensor.data(), rows, cols),
            _ => return None,
        };
        Some(Self {
            data,
            ty,
            rows,
            cols,
        })
    }

    /// The layout's bytes (groups after groups).
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Bytes per group of [`GROUP`] rows.
    pub fn group_bytes(&self) -> usize {
        self.cols / 32 * GROUP_BLOCK_BYTES
    }

    /// Row `r` decoded (`d · q` per weight): the bits the GGUF block decodes to.
    pub fn decode_row(&self, r: usize, out: &mut [f32]) {
        let (g, lane) = (r / GROUP, r % GROUP);
        let group = &self.data[g * self.group_bytes()..][..self.group_bytes()];
        for (block, out) in group
            .chunks_exact(GROUP_BLOCK_BYTES)
            .zip(out.chunks_exact_mut(32))
        {
            let d = super::f16_at(block, 2 * lane);
            for (i, o) in out.iter_mut().enumerate() {
                *o = d * f32::from(weight(block, lane, i));
            }
        }
    }

    /// The GGUF tensor it was made from, rebuilt byte for byte.
    pub fn to_tensor(&self) -> Result<QuantTensor, QuantError> {
        let data = match self.ty {
            GgmlType::Q8_0 => self.deinterleave::<Q8_0>(),
            _ => self.deinterleave::<Q5_0>(),
        };
        QuantTensor::ggml(self.ty, self.rows, self.cols, data)
    }

    fn deinterleave<B: Block32>(&self) -> Vec<u8> {
        let blocks = self.cols / 32;
        let mut out = vec![0u8; self.rows * blocks * B::BYTES];
        for (r, row) in out.chunks_exact_mut(blocks * B::BYTES).enumerate() {
            let group = &self.data[r / GROUP * self.group_bytes()..][..self.group_bytes()];
            let lane = r % GROUP;
            for (block, out) in group
                .chunks_exact(GROUP_BLOCK_BYTES)
                .zip(row.chunks_exact_mut(B::BYTES))
            {
                let q: [i8; 32] = std::array::from_fn(|i| weight(block, lane, i));
                let d = u16::from_le_bytes([block[2 * lane], block[2 * lane + 1]]);
                B::encode(d, &q, out);
            }
        }
        out
    }
}

/// Weight `i` (0..32) of row `lane` in one group block.
fn weight(block: &[u8], lane: usize, i: usize) -> i8 {
    (block[SCALE_BYTES + (i / 4) * 4 * GROUP + 4 * lane + i % 4] ^ 0x80) as i8
}

/// `rows × cols` blocks of `B` (row-major GGUF bytes) in the interleaved layout.
fn interleave<B: Block32>(weights: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let blocks = cols / 32;
    let row_bytes = blocks * B::BYTES;
    let groups = rows.div_ceil(GROUP);
    // Padding rows: scale 0, weights 0 (stored as 0x80).
    let mut out = vec![0u8; groups * blocks * GROUP_BLOCK_BYTES];
    for (g, group) in out.chunks_exact_mut(blocks * GROUP_BLOCK_BYTES).enumerate() {
        for (b, dst) in group.chunks_exact_mut(GROUP_BLOCK_BYTES).enumerate() {
            dst[SCALE_BYTES..].fill(0x80);
            for lane in 0..GROUP.min(rows - g * GROUP) {
                let r = g * GROUP + lane;
                let block = &weights[r * row_bytes + b * B::BYTES..][..B::BYTES];
                let (_, q) = B::decode(block);
                dst[2 * lane..2 * lane + 2].copy_from_slice(&B::scale_bits(block).to_le_bytes());
                for (i, &w) in q.iter().enumerate() {
                    dst[SCALE_BYTES + (i / 4) * 4 * GROUP + 4 * lane + i % 4] = (w as u8) ^ 0x80;
                }
            }
        }
    }
    out
}
