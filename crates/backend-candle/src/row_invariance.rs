//! How many rows of one forward the CPU's dense and attention kernels take — the rows whose
//! bits never depend on the rows beside them.
//!
//! The few-row dense kernel (`dense_rows.rs`) and the per-query attention (`small_attention.rs`)
//! compute each row as it would be computed alone, in every float dtype; the quantized kernels
//! (`qmatmul`) do so for any number of rows. candle's packed matmuls, which run above the limit,
//! round a row differently with the number of rows beside it. By default the limit covers every
//! verify forward (`MAX_DRAFT_TOKENS_LIMIT + 1` rows), so greedy speculation is plain greedy bit
//! for bit, and long prefill chunks keep candle's faster packed matmuls. [`RowInvariance::Always`]
//! (`MTP_ROW_INVARIANT=always`) takes every product, so a sequence's bits are also independent of
//! how its prompt was chunked and of a continuous batch's packed rows however many there are —
//! at the price measured in `BENCHMARKS.md` (prefill chunks and large batches run slower).

use std::sync::OnceLock;

use mtp_core::options::MAX_DRAFT_TOKENS_LIMIT;

/// The environment variable that sets [`RowInvariance`]: `verify` (the default) or `always`.
pub const ROW_INVARIANT_ENV: &str = "MTP_ROW_INVARIANT";

/// The rows of the widest verify forward: every draft the engine allows, plus the current token.
pub const VERIFY_ROWS: usize = MAX_DRAFT_TOKENS_LIMIT + 1;

/// Which forwards give each row the bits it gets alone on the CPU (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowInvariance {
    /// Forwards of at most [`VERIFY_ROWS`] rows: every decode step and verify, and continuous
    /// batches up to that many packed rows.
    #[default]
    Verify,
    /// Every forward, prefill chunks and large batches included.
    Always,
}

impl RowInvariance {
    /// The most rows a forward may have for the row-invariant kernels to take it.
    pub fn max_rows(self) -> usize {
        match self {
            Self::Verify => VERIFY_ROWS,
            Self::Always => usize::MAX,
        }
    }

    /// `verify` or `always` (case and surrounding spaces ignored).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "verify" => Some(Self::Verify),
            "always" => Some(Self::Always),
            _ => None,
        }
    }

    /// The setting of [`ROW_INVARIANT_ENV`], read once: unset is [`RowInvariance::Verify`]; a
    /// value that is neither `verify` nor `always` is said once (at `warn`) and read as the
    /// default.
    pub fn from_env() -> Self {
        static SETTING: OnceLock<RowInvariance> = OnceLock::new();
        *SETTING.get_or_init(|| match std::env::var(ROW_INVARIANT_ENV) {
            Err(_) => Self::default(),
            Ok(text) => Self::parse(&text).unwrap_or_else(|| {
                tracing::warn!(
                    "{ROW_INVARIANT_ENV}={text:?} is neither `verify` nor `always`: using `verify`"
                );
                Self::default()
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_bound_the_rows() {
        assert_eq!(
            RowInvariance::parse(" Always "),
            Some(RowInvariance::Always)
        );
        assert_eq!(RowInvariance::parse("verify"), Some(RowInvariance::Verify));
        assert_eq!(RowInvariance::parse("yes"), None);
        assert_eq!(RowInvariance::Verify.max_rows(), MAX_DRAFT_TOKENS_LIMIT + 1);
        assert_eq!(RowInvariance::Always.max_rows(), usize::MAX);
    }
}
