//! The conformance suite on MLX (the CPU on Linux, Metal on macOS). MLX is not thread-safe: run
//! it with `--test-threads=1` (`cargo test-mlx`; on Linux `scripts/cargo-mlx test-mlx`).

mtp_tests::conformance_suite!(backend_mlx::MlxBackend::default());
