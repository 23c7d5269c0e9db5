//! A batched target forward (a ragged batch's rows packed: `TargetModel::forward_batch`) equals
//! each sequence's own forward — hidden states, logits, argmax and the caches it leaves — on
//! Gemma 4 (the default pair's target; the published-layout fixtures with per-layer inputs,
//! KV sharing, sliding windows and the mixture of experts) and Gemma 3 (the real GGUF when
//! fetched), on the reference backend, candle's CPU and (with the `mlx` feature) MLX. Decode
//! steps, verify-width blocks and a prompt ride in one batch. And the continuous batch end to
//! end on each backend (its members run on threads of their own, one at a time).

mod common;
mod gguf_support;

use std::path::{Path, PathBuf};

use backend_candle::CandleBackend;
use mtp_core::cache::CacheSet;
use mtp_core::engine::batch::{serve, BatchOptions, SpeculationPolicy};
use mtp_core::engine::{CancelToken, DiscardSink, GenerateRequest};
use mtp_core::model::{ForwardJob, TargetModel};
use mtp_core::reference::ReferenceBackend;
use mtp_core::Backend;
use runner::loading::LoadOptions;
use runner::models::registry::load_target_model;

fn workspace(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Deterministic ids below `vocab`.
fn ids(seed: u32, n: usize, vocab: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (seed.wrapping_mul(2_654_435_761).wrapping_add(i * 40_503) >> 7) % vocab as u32)
        .collect()
}

fn array<B: Backend>(b: &B, ids: &[u32]) -> B::Array {
    b.from_u32(ids, &[1, ids.len()]).expect("ids")
}

fn host<B: Backend>(b: &B, x: &B::Array) -> Vec<f32> {
    b.to_vec_f32(&b.cast(x, mtp_core::DType::F32).expect("cast"))
        .expect("host")
}

/// Largest |a - b| relative to the largest |b|.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

fn argmax_rows(v: &[f32], vocab: usize) -> Vec<usize> {
    v.chunks(vocab)
        .map(|r| {
            r.iter()
                .enumerate()
                .fold(
                    (0, f32::MIN),
                    |(bi, bv), (i, &x)| if x > bv { (i, x) } else { (bi, bv) },
                )
                .0
        })
        .collect()
}

/// Prefill three sequences of different lengths, then run one batch of a decode step (1 token),
/// a verify block (4 tokens), another (2 tokens) and a fresh prompt (7 tokens at position 0),
/// against the same four forwards one by one; then one more token each on the caches both
/// left.
fn check<B: Backend>(b: &B, model: &dyn TargetModel<B>, label: &str, tolerance: f32) {
    let vocab = model.vocab_size();
    let prompts = [ids(1, 5, vocab), ids(2, 11, vocab), ids(3, 2, vocab)];
    let mut prefilled = Vec::new();
    for p in &prompts {
        let mut caches = model.new_caches(b).expect("caches");
        model
            .forward(b, &array(b, p), 0, &mut caches)
            .expect("prefill");
        prefilled.push(caches);
    }
    prefilled.push(model.new_caches(b).expect("caches"));
    let steps = [
        ids(4, 1, vocab),
        ids(5, 4, vocab),
        ids(6, 2, vocab),
        ids(7, 7, vocab),
    ];
    let starts = [prompts[0].len(), prompts[1].len(), prompts[2].len(), 0];
    let fork = |sets: &[CacheSet<B>]| -> Vec<CacheSet<B>> {
        sets.iter().map(|c| c.fork(b).expect("fork")).collect()
    };
    let mut alone_caches = fork(&prefilled);
    let mut batch_caches = fork(&prefilled);
    let step_ids: Vec<B::Array> = steps.iter().map(|s| array(b, s)).collect();
    let alone: Vec<_> = (0..4)
        .map(|i| {
            model
                .forward(b, &step_ids[i], starts[i], &mut alone_caches[i])
                .expect("forward")
        })
        .collect();
    let mut jobs: Vec<ForwardJob<'_, B>> = batch_caches
        .iter_mut()
        .enumerate()
        .map(|(i, caches)| ForwardJob {
            ids: &step_ids[i],
            start: starts[i],
            caches,
        })
        .collect();
    let batched = model.forward_batch(b, &mut jobs).expect("batched forward");
    drop(jobs);
    assert_eq!(batched.len(), 4, "{label}");
    let hiddens: Vec<&B::Array> = batched.iter().map(|o| &o.hidden).collect();
    let batched_logits = model.unembed_batch(b, &hiddens).expect("batched unembed");
    for i in 0..4 {
        let (a, c) = (&alone[i], &batched[i]);
        let d = rel_diff(&host(b, &c.hidden), &host(b, &a.hidden));
        assert!(
            d <= tolerance,
            "{label}, sequence {i}: hidden differs by {d:e}"
        );
        let d = rel_diff(&host(b, &c.draft_hidden), &host(b, &a.draft_hidden));
        assert!(
            d <= tolerance,
            "{label}, sequence {i}: draft hidden differs by {d:e}"
        );
        let want = host(b, &model.unembed(b, &a.hidden).expect("unembed"));
        let got = host(b, &batched_logits[i]);
        let d = rel_diff(&got, &want);
        assert!(
            d <= tolerance,
            "{label}, sequence {i}: logits differ by {d:e}"
        );
        assert_eq!(
            argmax_rows(&got, vocab),
            argmax_rows(&want, vocab),
            "{label}, sequence {i}"
        );
        assert_eq!(
            batch_caches[i].position(),
            alone_caches[i].position(),
            "{label}, sequence {i}: cache positions"
        );
    }
    // The caches the batch left serve the next token as the solo ones do.
    for i in 0..4 {
        let next = array(b, &ids(8 + i as u32, 1, vocab));
        let at = starts[i] + steps[i].len();
        let a = model
            .forward(b, &next, at, &mut alone_caches[i])
            .expect("next");
        let c = model
            .forward(b, &next, at, &mut batch_caches[i])
            .expect("next");
        let d = rel_diff(&host(b, &c.hidden), &host(b, &a.hidden));
        assert!(
            d <= tolerance,
            "{label}, sequence {i}: the next token differs by {d:e}"
        );
    }
}

fn gemma4_dirs() -> Vec<(String, PathBuf)> {
    let mut dirs = vec![(
        "default pair".to_string(),
        workspace("models/default/target"),
    )];
    for case in ["e2b_like", "mm_e2b", "mm_26b_moe", "k_eq_v", "swa_basic"] {
        dirs.push((
            case.to_string(),
            workspace(&format!("tests/fixtures/gemma4/{case}/target")),
        ));
    }
    dirs
}

/// f32 on every backend; the host reference is held to 1e-5, the others to 1e-4.
fn tolerance<B: Backend>(b: &B) -> f32 {
    if b.name() == ReferenceBackend::default().name() {
        1e-5
    } else {
        1e-4
    }
}

fn gemma4_batched_forward<B: Backend>(b: &B) {
    for (case, dir) in gemma4_dirs() {
        let (model, _) = load_target_model(b, &dir, &LoadOptions::default(), &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{case} loads: {e}"));
        check(b, &model, &format!("{case} on {}", b.name()), tolerance(b));
    }
}

/// The continuous batch end to end on the default pair: eight greedy requests (different
/// prompts and lengths, speculative or not) served four at a time, on the member threads the
/// batch runs them on, each emitting exactly its tokens alone.
fn batch_serve_equals_alone<B: Backend>(b: &B) {
    let dir = workspace("models/default");
    let paths = runner::ModelPaths {
        target: dir.join("target"),
        drafter: Some(dir.join("assistant")),
        draft_centroids: None,
        tokenizer: None,
        chat_template: None,
    };
    let pipeline = runner::Pipeline::load(b.clone(), &paths, &LoadOptions::default())
        .expect("the default pair loads");
    let engine = pipeline.engine().with_env(std::sync::Arc::new(|_| None));
    let vocab = pipeline.target().vocab_size();
    let requests: Vec<GenerateRequest> = (0..8)
        .map(|i| {
            let mut r =
                GenerateRequest::greedy(ids(20 + i, 1 + 3 * i as usize, vocab), 12 + i as usize);
            r.draft.enabled = Some(i % 3 != 0);
            r
        })
        .collect();
    let alone: Vec<Vec<u32>> = requests
        .iter()
        .map(|r| {
            engine
                .generate(r, &mut DiscardSink, &CancelToken::new())
                .expect("alone")
                .tokens
        })
        .collect();
    let batched = std::sync::Mutex::new(vec![Vec::new(); requests.len()]);
    let mut queue = requests.iter().cloned().enumerate();
    let options = BatchOptions {
        max_batch: 4,
        prefill_chunk: 5,
        policy: SpeculationPolicy::Always,
    };
    let report = serve(
        &engine,
        &options,
        move || queue.next(),
        |engine, (i, r)| {
            let out = engine
                .generate(&r, &mut DiscardSink, &CancelToken::new())
                .expect("batched");
            batched.lock().unwrap()[i] = out.tokens;
        },
    )
    .expect("the batch runs");
    assert_eq!(batched.into_inner().unwrap(), alone, "on {}", b.name());
    assert!(report.counts.widest > 1, "{report:?}");
}

per_backend!(gemma4_batched_forward, batch_serve_equals_alone);

#[test]
fn gemma3_real_model_batched_forward_equals_each_sequence_alone() {
    let Some(path) = gguf_support::real_model("gemma3_real_model_batched_forward") else {
        return;
    };
    let b = CandleBackend::cpu();
    let (model, _) = load_target_model(&b, &path, &LoadOptions::default(), &mut |_, _| {})
        .expect("the real model loads");
    check(&b, &model, "gemma-3-270m Q4_K_M on candle-cpu", 1e-3);
}
