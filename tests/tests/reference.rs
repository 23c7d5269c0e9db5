//! The conformance suite on the host reference backend: the sanity check of the suite itself
//! (the backend is compared with itself, so every case must pass, and exactly).

mtp_tests::conformance_suite!(mtp_core::reference::ReferenceBackend::new());

/// On the reference backend the tiny target's logits are bit-identical across two builds.
#[test]
fn reference_logits_are_exact() {
    let backend = mtp_core::reference::ReferenceBackend::new();
    mtp_tests::engine::logits_match_reference_within(&backend, mtp_tests::Tolerance::EXACT)
        .unwrap();
}
