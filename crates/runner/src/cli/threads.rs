//! `--threads N`: how many CPU threads candle's kernels use.
//!
//! candle-core 0.11 sizes its CPU parallelism from the environment, read once when each pool
//! starts: its dense matmul (`gemm`) asks `candle_core::utils::get_num_threads()` —
//! `RAYON_NUM_THREADS`, else the physical cores this process may run on — and its quantized
//! matmul runs on a private barrier pool sized by `CANDLE_NUM_THREADS`, else the same rule; a few
//! other kernels (sort, conv) use the rayon global pool. [`apply`] therefore sets both
//! variables and builds the rayon global pool with the same count, before any of them starts
//! (the first thing `main` does), so every pool agrees.

use std::num::NonZeroUsize;

/// The most threads `--threads` accepts.
pub const MAX_THREADS: usize = 256;

/// The `--threads` value parser: a whole number from 1 to [`MAX_THREADS`].
pub fn parse(s: &str) -> Result<usize, String> {
    let n: usize = super::args::whole(s)?;
    if n == 0 {
        return Err("must be at least 1 (the default is the machine's cores)".into());
    }
    if n > MAX_THREADS {
        return Err(format!(
            "{n} threads is more than the {MAX_THREADS} allowed"
        ));
    }
    Ok(n)
}

/// The thread count without `--threads`: `RAYON_NUM_THREADS` when it holds a valid count (what
/// candle and rayon would use), else the cores this process may run on.
pub fn default_count() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| parse(&v).ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(NonZeroUsize::get)
                .unwrap_or(1)
                .min(MAX_THREADS)
        })
}

/// Size candle's pools and the rayon global pool to `threads` (or [`default_count`]). Call it
/// once, before any backend computes; returns the count in use.
pub fn apply(threads: Option<usize>) -> usize {
    let n = threads.unwrap_or_else(default_count);
    // Edition 2021: setting the environment is safe; this runs on the main thread before any
    // other thread exists.
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", n.to_string());
    if let Err(err) = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
    {
        tracing::warn!(
            "the rayon global pool was already started; --threads {n} not applied to it: {err}"
        );
    }
    tracing::debug!(threads = n, "CPU threads");
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_are_bounded() {
        assert_eq!(parse("1"), Ok(1));
        assert_eq!(parse(" 8 "), Ok(8));
        assert_eq!(parse("256"), Ok(MAX_THREADS));
        for bad in ["0", "257", "100000", "-1", "two", "", "1.5"] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse("0").unwrap_err().contains("at least 1"));
        assert!(parse("1000").unwrap_err().contains("256"));
        let d = default_count();
        assert!((1..=MAX_THREADS).contains(&d));
    }
}
