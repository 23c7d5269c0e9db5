//! [`QuantTensor`]: a quantized `[rows, cols]` weight on the host, validated against its shape.

use super::affine::{self, AffineParams};
use super::blocks::dequantize_block;
use super::ggml::GgmlType;
use super::QuantError;

/// How a quantized tensor's bytes are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantFormat {
    /// GGUF blocks of one ggml type along each row.
    Ggml(GgmlType),
    /// MLX affine groups (packed words plus per-group scales and biases).
    Affine(AffineParams),
}

impl std::fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ggml(t) => write!(f, "GGUF {t}"),
            Self::Affine(p) => p.fmt(f),
        }
    }
}

/// A quantized weight of shape `[rows, cols]` (`[out, in]` for a projection, `[vocab, width]` for
/// an embedding table), held on the host.
///
/// Rows are independent: row `r` is `data[r * row_bytes ..]` (and, for affine, its own scales and
/// biases), so a lookup can decode just the rows it needs ([`dequantize_rows`](Self::dequantize_rows)).
/// The constructors check the sizes against the shape, so a tensor that exists is well formed.
#[derive(Clone, PartialEq)]
pub struct QuantTensor {
    format: QuantFormat,
    rows: usize,
    cols: usize,
    /// GGUF: the blocks. Affine: the packed words, little-endian.
    data: Vec<u8>,
    /// Affine only: `[rows, cols / group_size]`.
    scales: Vec<f32>,
    /// Affine only: `[rows, cols / group_size]`.
    biases: Vec<f32>,
}

impl std::fmt::Debug for QuantTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantTensor")
            .field("format", &self.format)
            .field("shape", &[self.rows, self.cols])
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl QuantTensor {
    /// A GGUF tensor of type `ty` holding `data`, the blocks of `rows` rows of `cols` weights.
    /// Errors when `cols` is not a whole number of blocks or `data` has the wrong length.
    pub fn ggml(ty: GgmlType, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self, QuantError> {
        let expected = ty.tensor_bytes(rows, cols)?;
        if data.len() != expected {
            return Err(QuantError::SizeMismatch {
                format: format!("GGUF {ty}"),
                rows,
                cols,
                reason: format!(
                    "{} bytes, but {} blocks of {} bytes need {expected}",
                    data.len(),
                    rows * (cols / ty.block_size()),
                    ty.block_bytes()
                ),
            });
        }
        Ok(Self {
            format: QuantFormat::Ggml(ty),
            rows,
            cols,
            data,
            scales: Vec::new(),
            biases: Vec::new(),
        })
    }

    /// An MLX affine tensor: `words` `[rows, cols * bits / 32]`, `scales` and `biases`
    /// `[rows, cols / group_size]` (as `f32`; half-precision values convert exactly).
    pub fn affine(
        params: AffineParams,
        rows: usize,
        cols: usize,
        words: &[u32],
        scales: Vec<f32>,
        biases: Vec<f32>,
    ) -> Result<Self, QuantError> {
        let (per_row, groups) = params.row_layout(rows, cols)?;
        let mismatch = |what: &str, got: usize, want: Option<usize>| QuantError::SizeMismatch {
            format: params.to_string(),
            rows,
            cols,
            reason: match want {
                Some(w) => format!("{got} {what}, expected {w}"),
                None => format!("{got} {what}: the size overflows"),
            },
        };
        let want_words = rows.checked_mul(per_row);
        if want_words != Some(words.len()) {
            return Err(mismatch("packed words", words.len(), want_words));
        }
        let want_groups = rows.checked_mul(groups);
        if want_groups != Some(scales.len()) {
            return Err(mismatch("scales", scales.len(), want_groups));
        }
        if want_groups != Some(biases.len()) {
            return Err(mismatch("biases", biases.len(), want_groups));
        }
        Ok(Self {
            format: QuantFormat::Affine(params),
            rows,
            cols,
            data: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
            scales,
            biases,
        })
    }

    /// The format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }

    /// Rows (`out` of a projection).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (`in` of a projection: the contracted axis).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `[rows, cols]`.
    pub fn shape(&self) -> [usize; 2] {
        [self.rows, self.cols]
    }

    /// The stored bytes: GGUF blocks, or the affine packed words (little-endian).
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The affine packed words, row-major `[rows, cols * bits / 32]` (empty for GGUF).
    pub fn affine_words(&self) -> Vec<u32> {
        match self.format {
            QuantFormat::Affine(_) => self
                .data
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            QuantFormat::Ggml(_) => Vec::new(),
        }
    }

    /// The affine scales `[rows, groups]` (empty for GGUF).
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }

    /// The affine biases `[rows, groups]` (empty for GGUF).
    pub fn biases(&self) -> &[f32] {
        &self.biases
    }

    /// Bytes of one stored row.
    fn row_bytes(&self) -> usize {
        self.data.len() / self.rows.max(1)
    }

    /// Decode row `r` into `out` (`cols` values).
    fn decode_row(&self, r: usize, out: &mut [f32]) {
        let stride = self.row_bytes();
        let bytes = &self.data[r * stride..(r + 1) * stride];
        match self.format {
            QuantFormat::Ggml(ty) => {
                let (bs, bb) = (ty.block_size(), ty.block_bytes());
                for (block, values) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(bs)) {
                    dequantize_block(ty, block, values);
                }
            }
            QuantFormat::Affine(p) => {
                let words: Vec<u32> = bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                let groups = self.cols / p.group_size();
                let at = r * groups..(r + 1) * groups;
                affine::dequantize_row(p, &words, &self.scales[at.clone()], &self.biases[at], out);
            }
        }
    }

    /// Every weight as `f32`, row-major `[rows, cols]`: the oracle of the quantized kernels.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        if self.cols > 0 {
            for (r, row) in out.chunks_exact_mut(self.cols).enumerate() {
                self.decode_row(r, row);
            }
        }
        out
    }

    /// Rows `ids` only, as `f32` `[ids.len(), cols]` (an embedding lookup that decodes nothing
    /// else); an id past the last row is [`QuantError::RowOutOfRange`].
    pub fn dequantize_rows(&self, ids: &[usize]) -> Result<Vec<f32>, QuantError> {
        let mut out = vec![0f32; ids.len() * self.cols];
        for (&r, row) in ids.iter().zip(out.chunks_exact_mut(self.cols.max(1))) {
            if r >= self.rows {
                return Err(QuantError::RowOutOfRange {
                    row: r,
                    rows: self.rows,
                });
            }
            self.decode_row(r, row);
        }
        Ok(out)
    }
}
