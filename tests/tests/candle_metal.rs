//! The conformance suite on candle's Metal device 0 (`cargo test-candle-metal`, macOS only).

fn metal() -> backend_candle::CandleBackend {
    match backend_candle::CandleBackend::from_spec("metal:0") {
        Ok(backend) => backend,
        Err(e) => panic!("no Metal device for the candle-metal suite: {e}"),
    }
}

mtp_tests::conformance_suite!(metal());
