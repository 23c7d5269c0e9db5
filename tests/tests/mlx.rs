//! The conformance suite on MLX (the CPU on Linux, Metal on macOS). MLX is not thread-safe: run
//! it with `--test-threads=1` (`cargo test-mlx`; on Linux `scripts/cargo-mlx test-mlx`).
//!
//! The cases sit in a module `mlx` so that their names contain "mlx": `scripts/test-mlx.sh` runs
//! this suite, the fixture tests and the CLI tests in one cargo call filtered on "mlx".

mod mlx {
    mtp_tests::conformance_suite!(backend_mlx::MlxBackend::default());
}
