//! The adaptive schedule's learned state lives in the `Pipeline`: a later request on the same
//! pair starts at the depth the earlier ones proved out (ollama keeps it on the loaded model).

use mtp_core::engine::{CancelToken, DiscardSink, GenerateRequest};
use mtp_core::options::DraftOverrides;
use mtp_core::reference::ReferenceBackend;
use mtp_core::schedule::ScheduleKind;
use runner::{ModelPaths, Pipeline, PromptFormat};

#[test]
fn a_later_request_starts_where_the_earlier_one_left_off() {
    let case = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gemma4/copy_drafter");
    let paths = ModelPaths {
        target: case.join("target"),
        drafter: Some(case.join("assistant")),
        draft_centroids: None,
        tokenizer: None,
        chat_template: None,
    };
    let pipeline = Pipeline::load(ReferenceBackend::default(), &paths, &Default::default())
        .expect("the fixture pair loads");
    let prompt = pipeline
        .encode("<bos> w45 w109", PromptFormat::Raw)
        .expect("prompt");
    let mut request = GenerateRequest::greedy(prompt, 60);
    request.draft = DraftOverrides {
        max_draft_tokens: Some(4),
        schedule: Some(ScheduleKind::Adaptive),
        ..DraftOverrides::default()
    };
    let run = || {
        pipeline
            .generate(&request, &mut DiscardSink, &CancelToken::new())
            .expect("generates")
    };
    let first = run();
    let first_log = &first.mtp.as_ref().expect("stats").round_log;
    assert_eq!(first_log[0].chosen, 0, "nothing learned yet");
    let snapshot = pipeline.engine().schedule_memory().snapshot();
    assert_eq!(snapshot.len(), 1, "one controller for the pair's assistant");
    let learned = snapshot[0].1.clone();
    let second = run();
    let second_log = &second.mtp.as_ref().expect("stats").round_log;
    assert_eq!(second.tokens, first.tokens);
    assert_eq!(
        second_log[0].chosen,
        learned.planned.min(4),
        "the second request starts at the depth planned after the first"
    );
    // Still one controller, and it kept what the first request taught it.
    let after = pipeline.engine().schedule_memory().snapshot();
    assert_eq!(after.len(), 1);
    let samples = |s: &[u64]| s.iter().sum::<u64>();
    assert!(
        samples(&after[0].1.acceptance_samples) >= samples(&learned.acceptance_samples),
        "{learned:?} then {:?}",
        after[0].1
    );
}
