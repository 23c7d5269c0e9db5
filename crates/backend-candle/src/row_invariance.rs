//! How many rows of one forward the CPU's dense and attention kernels take — the rows whose
//! bits never depend on the rows beside them.
//!
//! The dense kernel (`dense_rows/`) and the per-query attention (`small_attention.rs`)
//! compute each row as it would be computed alone, in every float dtype; the quantized kernels
//! (`qmatmul`) do so for any number of rows. candle's packed matmuls, which run above the limit,
//! round a row differently with the number of rows beside it. By default the limit is
//! [`BOUNDED_ROWS`] (128): every verify forward (at most [`VERIFY_ROWS`]), a continuous batch's
//! prefill chunks (128 tokens by default) and passes of up to 128 packed rows — so greedy
//! speculation is plain greedy bit for bit — while longer `f32` prefill forwards keep candle's
//! packed matmul, which is faster there (measured by `examples/dense_bench.rs`: the kernels are
//! as fast or faster up to 128 rows, the packed `f32` matmul 14–18 % faster at 256–512).
//! [`RowInvariance::Always`] (`MTP_ROW_INVARIANT=always`) takes every product, so a sequence's
//! bits are also independent of how its prompt was chunked and of how many rows a batch packs.

use std::sync::OnceLock;

use mtp_core::options::MAX_DRAFT_TOKENS_LIMIT;

/// The environment variable that sets [`RowInvariance`]: `bounded` (the default) or `always`.
pub const ROW_INVARIANT_ENV: &str = "MTP_ROW_INVARIANT";

/// The rows of the widest verify forward: every draft the engine allows, plus the current token.
pub const VERIFY_ROWS: usize = MAX_DRAFT_TOKENS_LIMIT + 1;

/// The default limit: the widest verify, a continuous batch's default prefill chunk, and the row
/// count up to which the row-invariant kernels are no slower than candle's packed matmul.
pub const BOUNDED_ROWS: usize = 128;

const _: () = assert!(BOUNDED_ROWS >= VERIFY_ROWS);

/// Which forwards give each row the bits it gets alone on the CPU (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowInvariance {
    /// Forwards of at most [`BOUNDED_ROWS`] rows: every decode step and verify, prefill chunks
    /// and continuous-batch passes up to that many rows.
    #[default]
    Bounded,
    /// Every forward, prefill chunks and large batches included.
    Always,
}

impl RowInvariance {
    /// The most rows a forward may have for the row-invariant kernels to take it.
    pub fn max_rows(self) -> usize {
        match self {
            Self::Bounded => BOUNDED_ROWS,
            Self::Always => usize::MAX,
        }
    }

    /// `bounded` or `always` (case and surrounding spaces ignored).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "bounded" => Some(Self::Bounded),
            "always" => Some(Self::Always),
            _ => None,
        }
    }

    /// The setting of [`ROW_INVARIANT_ENV`], read once: unset is [`RowInvariance::Bounded`]; a
    /// value that is neither `bounded` nor `always` is said once (at `warn`) and read as the
    /// default.
    pub fn from_env() -> Self {
        static SETTING: OnceLock<RowInvariance> = OnceLock::new();
        *SETTING.get_or_init(|| match std::env::var(ROW_INVARIANT_ENV) {
            Err(_) => Self::default(),
            Ok(text) => Self::parse(&text).unwrap_or_else(|| {
                tracing::warn!(
                    "{ROW_INVARIANT_ENV}={text:?} is neither `bounded` nor `always`: using `bounded`"
                );
                Self::default()
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use mtp_core::{Backend, DType};

    use super::*;
    use crate::CandleBackend;

    /// With [`RowInvariance::Always`] a forward longer than [`BOUNDED_ROWS`] (a long prefill)
    /// gives each row the bits it gets alone, in every float dtype.
    #[test]
    fn always_covers_forwards_past_the_bound() -> crate::Result<()> {
        let b = CandleBackend::cpu().with_row_invariance(RowInvariance::Always);
        assert_eq!(b.row_invariance(), RowInvariance::Always);
        if !crate::dense_rows::available() {
            // No row-invariant kernel on this CPU: candle's matmul runs every product.
            return Ok(());
        }
        let (rows, cols, out) = (BOUNDED_ROWS + 72, 80, 37);
        let value = |i: usize| ((i * 7919) % 1013) as f32 / 1013.0 - 0.5;
        let xs: Vec<f32> = (0..rows * cols).map(value).collect();
        let ws: Vec<f32> = (0..out * cols).map(|i| value(i + 17)).collect();
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let w = b.from_f32(&ws, &[out, cols], dtype)?;
            let block = b.to_vec_f32(&b.linear(&b.from_f32(&xs, &[1, rows, cols], dtype)?, &w)?)?;
            for (r, row) in xs.chunks_exact(cols).enumerate() {
                let alone =
                    b.to_vec_f32(&b.linear(&b.from_f32(row, &[1, 1, cols], dtype)?, &w)?)?;
                let got: Vec<u32> = block[r * out..][..out]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                let want: Vec<u32> = alone.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{dtype} row {r}");
            }
        }
        Ok(())
    }

    #[test]
    fn settings_parse_and_bound_the_rows() {
        assert_eq!(
            RowInvariance::parse(" Always "),
            Some(RowInvariance::Always)
        );
        assert_eq!(
            RowInvariance::parse("bounded"),
            Some(RowInvariance::Bounded)
        );
        assert_eq!(RowInvariance::parse("yes"), None);
        assert_eq!(RowInvariance::Bounded.max_rows(), 128);
        assert!(RowInvariance::Bounded.max_rows() > MAX_DRAFT_TOKENS_LIMIT);
        assert_eq!(RowInvariance::Always.max_rows(), usize::MAX);
    }
}
