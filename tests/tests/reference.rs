//! The cross-backend suite on the host reference backend.

use mtp_core::reference::ReferenceBackend;
use mtp_tests::{greedy_mtp_matches_plain, logits_match_reference};

#[test]
fn reference_greedy_mtp_matches_plain() {
    greedy_mtp_matches_plain(&ReferenceBackend::default()).unwrap();
}

#[test]
fn reference_logits_are_deterministic_across_builds() {
    logits_match_reference(&ReferenceBackend::default(), 0.0).unwrap();
}
