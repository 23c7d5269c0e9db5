//! The GGUF (ggml) block formats: type ids, block sizes and bytes per block, as ggml defines them
//! (`ggml.h` `enum ggml_type`, `ggml.c` `type_traits`; the same table as `gguf-py`'s
//! `GGML_QUANT_SIZES`).
//!
//! A row of `cols` weights is `cols / block_size` consecutive blocks; every block stores its own
//! scale(s) (half or single floats) and packed integers. The layouts (`block_q4_0`, `block_q4_K`,
//! ...) are in `ggml-common.h`; [`dequantize`](super::dequantize) decodes each of them.

use super::QuantError;

/// The elements of one K-quant super-block (ggml `QK_K`).
pub const QK_K: usize = 256;

/// A GGML tensor type: the dense float types a GGUF file may hold and the block formats
/// dequantized here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// 32-bit floats (id 0).
    F32,
    /// IEEE half floats (id 1).
    F16,
    /// 32 weights: `f16 d`, 16 bytes of 4-bit `q`; `w = d (q - 8)` (id 2).
    Q4_0,
    /// 32 weights: `f16 d, m`, 16 bytes of 4-bit `q`; `w = d q + m` (id 3).
    Q4_1,
    /// 32 weights: `f16 d`, 32 high bits, 16 bytes of low nibbles; `w = d (q - 16)` (id 6).
    Q5_0,
    /// 32 weights: `f16 d, m`, 32 high bits, 16 bytes of low nibbles; `w = d q + m` (id 7).
    Q5_1,
    /// 32 weights: `f16 d`, 32 `i8 q`; `w = d q` (id 8).
    Q8_0,
    /// 256 weights in 16 groups of 16: 4-bit scales and mins, 2-bit `q`, `f16 d, dmin` (id 10).
    Q2K,
    /// 256 weights in 16 groups of 16: high-bit mask, 2-bit low `q`, 6-bit scales, `f16 d` (id 11).
    Q3K,
    /// 256 weights in 8 groups of 32: `f16 d, dmin`, 6-bit scales and mins, 4-bit `q` (id 12).
    Q4K,
    /// 256 weights in 8 groups of 32: as Q4_K plus a fifth bit per weight (id 13).
    Q5K,
    /// 256 weights in 16 groups of 16: 4 low + 2 high bits, `i8` scales, `f16 d` (id 14).
    Q6K,
    /// 256 weights: `f32 d`, 256 `i8 q`, 16 `i16` group sums; `w = d q` (id 15).
    Q8K,
    /// bfloat16 (id 30).
    BF16,
}

/// Every type, for listing and tests.
pub const ALL_GGML_TYPES: [GgmlType; 14] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Q8K,
    GgmlType::BF16,
];

const KNOWN: &str = "0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0, 10 Q2_K, 11 Q3_K, \
                     12 Q4_K, 13 Q5_K, 14 Q6_K, 15 Q8_K, 30 BF16";

impl GgmlType {
    /// The type with ggml id `id`, or [`QuantError::UnknownGgmlType`].
    pub fn from_id(id: u32) -> Result<Self, QuantError> {
        Ok(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            10 => Self::Q2K,
            11 => Self::Q3K,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            15 => Self::Q8K,
            30 => Self::BF16,
            _ => return Err(QuantError::UnknownGgmlType { id, known: KNOWN }),
        })
    }

    /// The ggml type id (`enum ggml_type`).
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q2K => 10,
            Self::Q3K => 11,
            Self::Q4K => 12,
            Self::Q5K => 13,
            Self::Q6K => 14,
            Self::Q8K => 15,
            Self::BF16 => 30,
        }
    }

    /// ggml's name ("Q4_K", "F16", ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q2K => "Q2_K",
            Self::Q3K => "Q3_K",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
            Self::Q8K => "Q8_K",
            Self::BF16 => "BF16",
        }
    }

    /// Weights per block (1 for the dense float types).
    pub fn block_size(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 => 32,
            Self::Q2K | Self::Q3K | Self::Q4K | Self::Q5K | Self::Q6K | Self::Q8K => QK_K,
        }
    }

    /// Bytes per block (`ggml_type_size`).
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 2 + 16,
            Self::Q4_1 => 2 + 2 + 16,
            Self::Q5_0 => 2 + 4 + 16,
            Self::Q5_1 => 2 + 2 + 4 + 16,
            Self::Q8_0 => 2 + 32,
            Self::Q2K => QK_K / 16 + QK_K / 4 + 2 + 2,
            Self::Q3K => QK_K / 8 + QK_K / 4 + 12 + 2,
            Self::Q4K => 2 + 2 + 12 + QK_K / 2,
            Self::Q5K => 2 + 2 + 12 + QK_K / 8 + QK_K / 2,
            Self::Q6K => QK_K / 2 + QK_K / 4 + QK_K / 16 + 2,
            Self::Q8K => 4 + QK_K + 2 * (QK_K / 16),
        }
    }

    /// Whether this is a block (quantized) format rather than a dense float type.
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// The stored bytes of a `[rows, cols]` tensor of this type, or an error when `cols` is not
    /// a whole number of blocks (or the size overflows).
    pub fn tensor_bytes(self, rows: usize, cols: usize) -> Result<usize, QuantError> {
        let mismatch = |reason: String| QuantError::SizeMismatch {
            format: self.name().to_string(),
            rows,
            cols,
            reason,
        };
        let block = self.block_size();
        if !cols.is_multiple_of(block) {
            return Err(mismatch(format!(
                "a row of {cols} weights is not a whole number of {block}-weight blocks"
            )));
        }
        (cols / block)
            .checked_mul(self.block_bytes())
            .and_then(|row| row.checked_mul(rows))
            .ok_or_else(|| mismatch("the size overflows".to_string()))
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
