//! The conformance suite on candle's CUDA device 0 (`cargo test-candle-cuda`).

fn cuda() -> backend_candle::CandleBackend {
    match backend_candle::CandleBackend::from_spec("cuda:0") {
        Ok(backend) => backend,
        Err(e) => panic!("no CUDA device for the candle-cuda suite: {e}"),
    }
}

// candle's CUDA matmuls (cuBLAS) pick their kernel by shape — a one-row product and a
// k+1-row one reduce in different orders — and candle has no row-invariant CUDA kernel: a verify
// row does not get a one-row forward's bits there (bf16 batched verification drifted from plain
// greedy on 5 of 24 default-pair prompts on an H200). Exact greedy MTP on CUDA is
// `--serial-validate`, each draft checked by the one-row forward plain decoding runs.
mtp_tests::conformance_suite!(
    cuda(),
    skip = [
        "invariance::linear_rows",
        "invariance::quant_linear_rows",
        "invariance::attention_rows",
        "engine::greedy_mtp_matches_plain_in_every_format",
    ]
);
