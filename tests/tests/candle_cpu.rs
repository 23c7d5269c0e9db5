//! The conformance suite on candle's CPU device.

mtp_tests::conformance_suite!(backend_candle::CandleBackend::cpu());
