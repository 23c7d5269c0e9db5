//! The conformance suite on candle's CUDA device 0 (`cargo test-candle-cuda`).

fn cuda() -> backend_candle::CandleBackend {
    match backend_candle::CandleBackend::from_spec("cuda:0") {
        Ok(backend) => backend,
        Err(e) => panic!("no CUDA device for the candle-cuda suite: {e}"),
    }
}

mtp_tests::conformance_suite!(cuda());
