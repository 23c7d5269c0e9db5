//! MLX affine group quantization (`mlx.core.quantize(w, group_size, bits)`, mode `"affine"`, the
//! layout of the `mlx-community` checkpoints mlx-lm writes).
//!
//! A `[rows, cols]` weight is stored as three tensors:
//!
//! * `weight`: `u32` words `[rows, cols * bits / 32]`, each holding `32 / bits` values, the first
//!   value in the lowest bits;
//! * `scales` and `biases`: `[rows, cols / group_size]`, one pair per group of `group_size`
//!   consecutive weights of a row;
//!
//! and `w = scale * q + bias` for the unsigned `bits`-bit `q`.

use super::QuantError;

/// The parameters of an affine quantization: bits per weight and weights per group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AffineParams {
    bits: u32,
    group_size: usize,
}

/// Bits per weight this crate packs and unpacks (each divides 32, so no value straddles a word).
pub const AFFINE_BITS: [u32; 3] = [2, 4, 8];
/// Group sizes MLX's kernels accept.
pub const AFFINE_GROUP_SIZES: [usize; 3] = [32, 64, 128];

impl AffineParams {
    /// `bits` per weight (2, 4 or 8) and `group_size` weights per scale/bias pair (32, 64 or
    /// 128), or [`QuantError::UnsupportedFormat`].
    pub fn new(bits: u32, group_size: usize) -> Result<Self, QuantError> {
        let bad = |reason: String| QuantError::UnsupportedFormat {
            format: format!("affine bits {bits} group_size {group_size}"),
            reason,
        };
        if !AFFINE_BITS.contains(&bits) {
            return Err(bad(format!("bits must be one of {AFFINE_BITS:?}")));
        }
        if !AFFINE_GROUP_SIZES.contains(&group_size) {
            return Err(bad(format!(
                "group_size must be one of {AFFINE_GROUP_SIZES:?}"
            )));
        }
        Ok(Self { bits, group_size })
    }

    /// Bits per weight.
    pub fn bits(self) -> u32 {
        self.bits
    }

    /// Weights per group.
    pub fn group_size(self) -> usize {
        self.group_size
    }

    /// Values packed in one `u32` word.
    pub fn values_per_word(self) -> usize {
        (32 / self.bits) as usize
    }

    /// `(words per row, groups per row)` for rows of `cols` weights, or an error when `cols` is
    /// not a whole number of groups.
    pub fn row_layout(self, rows: usize, cols: usize) -> Result<(usize, usize), QuantError> {
        if cols == 0 || !cols.is_multiple_of(self.group_size) {
            return Err(QuantError::SizeMismatch {
                format: self.to_string(),
                rows,
                cols,
                reason: format!(
                    "a row of {cols} weights is not a whole number of {}-weight groups",
                    self.group_size
                ),
            });
        }
        Ok((cols / self.values_per_word(), cols / self.group_size))
    }
}

impl std::fmt::Display for AffineParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "affine {}-bit group {}", self.bits, self.group_size)
    }
}

/// Value `i` of a row of packed words.
pub(super) fn unpack(words: &[u32], bits: u32, i: usize) -> u32 {
    let per = (32 / bits) as usize;
    let mask = if bits == 32 {
        u32::MAX
    } else {
        (1 << bits) - 1
    };
    (words[i / per] >> (bits as usize * (i % per))) & mask
}

/// Decode one row: `out[i] = scales[i / g] * q_i + biases[i / g]`.
pub(super) fn dequantize_row(
    params: AffineParams,
    words: &[u32],
    scales: &[f32],
    biases: &[f32],
    out: &mut [f32],
) {
    let g = params.group_size;
    for (i, o) in out.iter_mut().enumerate() {
        let q = unpack(words, params.bits, i) as f32;
        *o = scales[i / g] * q + biases[i / g];
    }
}
