//! The layouts Google publishes Gemma 4 in (HF `save_pretrained` fixtures, `mm_*` cases): the
//! text model found inside the multimodal wrapper, towers and the unused k/v projections of
//! KV-shared layers never read, bf16 shards, and the `model_type` registry (targets and drafters,
//! a drafter made for another target refused). (Logits, greedy and
//! MTP parity of these cases run with every other case in `fixture_target.rs` and
//! `fixture_assistant.rs`.)

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{fixture_root, load_pair, Reference, B};
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::model::{MtpDrafter, TargetModel};
use mtp_core::options::DraftOverrides;
use mtp_core::DType;
use runner::loading::{
    auto_dtype, estimate_memory, load_target_with_report, LoadError, LoadOptions, TOWER_MODULES,
};
use runner::models::registry::{self, load_drafter_model, load_target_model, Family, Role};
use runner::proposers::detect_draft_kind;

/// Byte size of every tensor of a safetensors file (from its header alone).
fn tensor_sizes(path: &Path) -> BTreeMap<String, u64> {
    let bytes = std::fs::read(path).expect("weights");
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).expect("header");
    meta.tensors()
        .into_iter()
        .map(|(name, info)| {
            let (start, end) = info.data_offsets;
            (name, (end - start) as u64)
        })
        .collect()
}

fn sizes_of_dir(dir: &Path) -> BTreeMap<String, u64> {
    let mut all = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("target dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            all.extend(tensor_sizes(&path));
        }
    }
    all
}

/// A tower tensor of the multimodal wrapper (`model.vision_tower.…`, …).
fn is_tower(name: &str) -> bool {
    TOWER_MODULES
        .iter()
        .any(|m| name.starts_with(&format!("model.{m}.")))
}

#[test]
fn multimodal_e2b_reads_only_the_text_model() {
    let dir = fixture_root().join("mm_e2b/target");
    let (target, report) =
        load_target_with_report(&B::default(), &dir, &LoadOptions::default()).expect("loads");
    assert_eq!(report.layout.prefix, "model.language_model.");
    assert_eq!(report.layout.wrapper.as_deref(), Some("model."));
    assert_eq!(target.vocab_size(), 128);

    let sizes = sizes_of_dir(&dir);
    // The published E2B files carry k/v projections for the KV-shared layers (2 and 3 here).
    let unused_kv: Vec<&String> = sizes
        .keys()
        .filter(|n| {
            ["layers.2.", "layers.3."].iter().any(|l| n.contains(l))
                && ["k_proj", "v_proj", "k_norm"].iter().any(|p| n.contains(p))
        })
        .collect();
    assert_eq!(
        unused_kv.len(),
        6,
        "the fixture carries them: {unused_kv:?}"
    );
    let towers: u64 = sizes
        .iter()
        .filter(|(n, _)| is_tower(n))
        .map(|(_, s)| s)
        .sum();
    assert!(sizes.keys().any(|n| n.starts_with("model.vision_tower.")));
    assert!(sizes.keys().any(|n| n.starts_with("model.audio_tower.")));
    let unused: u64 = unused_kv.iter().map(|n| sizes[*n]).sum();
    let total: u64 = sizes.values().sum();
    let s = report.stats;
    eprintln!(
        "mm_e2b: read {} tensors ({} bytes), skipped {} ({} bytes: towers {towers}, unused \
         KV-shared projections {unused}) of {total} bytes",
        s.read_tensors, s.read_bytes, s.skipped_tensors, s.skipped_bytes
    );
    assert_eq!(
        s.skipped_bytes,
        towers + unused,
        "exactly towers + unused k/v are skipped"
    );
    assert_eq!(
        s.read_bytes + s.skipped_bytes,
        total,
        "every tensor accounted for"
    );
    assert_eq!(s.read_tensors + s.skipped_tensors, sizes.len());
}

#[test]
fn bf16_shards_load_through_the_index() {
    let dir = fixture_root().join("mm_e2b_bf16_sharded/target");
    let shards = std::fs::read_dir(&dir)
        .expect("dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("model-"))
        })
        .count();
    assert!(shards >= 3, "several shards ({shards})");
    let (_, report) =
        load_target_with_report(&B::default(), &dir, &LoadOptions::default()).expect("loads");
    let sizes = sizes_of_dir(&dir);
    let towers: u64 = sizes
        .iter()
        .filter(|(n, _)| is_tower(n))
        .map(|(_, s)| s)
        .sum();
    assert_eq!(report.stats.skipped_bytes, towers);
}

#[test]
fn the_registry_builds_every_published_target_type() {
    for (case, hf_class) in [
        ("mm_e2b", "Gemma4ForConditionalGeneration"),
        ("e2b_like", "Gemma4ForCausalLM"),
    ] {
        let dir = fixture_root().join(case).join("target");
        let (target, _) =
            load_target_model(&B::default(), &dir, &LoadOptions::default(), &mut |_, _| {})
                .expect("loads");
        assert_eq!(target.family(), Family::Gemma4);
        assert!(target.as_gemma4().is_some());
        let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let model_type = json["model_type"].as_str().unwrap();
        let registration = registry::lookup(model_type, Role::Target).expect("registered");
        assert_eq!(registration.hf_class, hf_class);
        assert_eq!(json["architectures"][0], hf_class);
    }
    assert!(registry::lookup("gemma4_assistant", Role::Drafter).is_some());
    assert!(registry::lookup("gemma4_assistant", Role::Target).is_none());
    // A drafter directory is not a target.
    let dir = fixture_root().join("mm_e2b/assistant");
    match load_target_model(&B::default(), &dir, &LoadOptions::default(), &mut |_, _| {}) {
        Err(LoadError::UnknownModelType {
            found, expected, ..
        }) => {
            assert_eq!(found, "gemma4_assistant");
            assert_eq!(expected, registry::model_types(Role::Target));
        }
        other => panic!("expected UnknownModelType, got {other:?}"),
    }
}

#[test]
fn memory_estimate_counts_the_text_weights_and_the_caches() {
    let dir = fixture_root().join("mm_e2b/target");
    let sizes = sizes_of_dir(&dir);
    let text_bytes: u64 = sizes
        .iter()
        .filter(|(n, _)| !is_tower(n))
        .map(|(_, s)| s)
        .sum();
    let f32_estimate =
        estimate_memory(&dir, None, &LoadOptions::with_dtype(DType::F32), 100).expect("estimate");
    // The files are f32: the text weights' bytes, towers excluded.
    assert_eq!(f32_estimate.weights, text_bytes);
    // Layers 0 (sliding, window 8: 9 positions kept, 1 KV head of 16) and 1 (full, 100
    // positions, 1 KV head of 32) own caches; keys and values, 4 bytes each.
    assert_eq!(f32_estimate.kv_cache, 2 * 4 * (9 * 16 + 100 * 32));
    assert_eq!(f32_estimate.context, 100);
    let bf16 = estimate_memory(&dir, None, &LoadOptions::with_dtype(DType::BF16), 1 << 20)
        .expect("estimate");
    assert_eq!(bf16.weights, text_bytes / 2);
    assert_eq!(bf16.context, 256, "capped at max_position_embeddings");
    // --quantize q8: every matrix whose rows are whole 32-blocks becomes 34 bytes per 32
    // weights; the rest stays f32.
    let q8 = LoadOptions {
        quantize: Some(mtp_core::quant::QuantScheme::Q8),
        ..LoadOptions::with_dtype(DType::F32)
    };
    let q8_estimate = estimate_memory(&dir, None, &q8, 100).expect("estimate");
    assert!(
        q8_estimate.weights < f32_estimate.weights
            && q8_estimate.weights * 4 > f32_estimate.weights,
        "q8 {} vs f32 {}",
        q8_estimate.weights,
        f32_estimate.weights
    );
    // The bf16 checkpoint runs in f32 on CPU backends.
    let sharded = fixture_root().join("mm_e2b_bf16_sharded/target");
    assert_eq!(auto_dtype(&B::default(), &sharded).unwrap(), DType::F32);
}

/// The committed Gemma 3 HF fixture (a target family without an MTP drafter).
fn gemma3_target() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma3/tiny/hf")
}

/// Greedy MTP at the fixture's depth with `drafter`: the tokens and (drafted, accepted).
fn greedy_mtp(
    target: &dyn TargetModel<B>,
    drafter: &dyn MtpDrafter<B>,
    reference: &mut Reference,
) -> (Vec<u32>, (usize, usize)) {
    let prompt = reference.ids("prompt_ids");
    let depth = reference.ids("num_assistant_tokens")[0] as usize;
    let mut request = GenerateRequest::greedy(prompt, reference.ids("assisted_ids").len());
    request.draft = DraftOverrides::constant(depth);
    let b = B::default();
    let response = Engine::new(&b, target)
        .with_drafter(drafter)
        .with_env(Arc::new(|_| None))
        .generate(&request, &mut DiscardSink, &CancelToken::new())
        .expect("generates");
    let stats = response.mtp.expect("an MTP run");
    (response.tokens, (stats.drafted, stats.accepted))
}

#[test]
fn drafters_load_through_the_registry_and_draft_as_before() {
    let b = B::default();
    let options = LoadOptions::default();
    for case in ["mm_e2b", "swa_basic"] {
        let dir = fixture_root().join(case);
        let (target, _) =
            load_target_model(&b, &dir.join("target"), &options, &mut |_, _| {}).expect("loads");
        let drafter =
            load_drafter_model(&b, &dir.join("assistant"), &target, &options).expect("loads");
        assert_eq!(drafter.family(), Family::Gemma4);
        assert!(drafter.as_gemma4().is_some());
        // The registry's drafter drafts exactly what the assistant loaded directly drafts, and
        // what HF's assisted generation produced.
        let mut reference = Reference::open(&dir);
        let (direct_target, assistant) = load_pair(&b, &dir);
        let via_registry = greedy_mtp(&target, &drafter, &mut reference);
        let direct = greedy_mtp(&direct_target, &assistant, &mut reference);
        assert_eq!(via_registry, direct, "{case}");
        assert_eq!(via_registry.0, reference.ids("assisted_ids"), "{case}");
    }
}

#[test]
fn a_drafter_for_another_target_or_no_drafter_is_refused() {
    let b = B::default();
    let options = LoadOptions::default();
    let assistant = fixture_root().join("mm_e2b/assistant");
    // A Gemma 4 assistant drafts for Gemma 3 targets too, but only one made for that target:
    // an E2B-like assistant for the tiny Gemma 3 is refused, naming the target and the misfit.
    let (gemma3, _) =
        load_target_model(&b, &gemma3_target(), &options, &mut |_, _| {}).expect("loads");
    assert_eq!(gemma3.family(), Family::Gemma3);
    match load_drafter_model(&b, &assistant, &gemma3, &options) {
        Err(LoadError::DrafterMismatch { reason }) => {
            for part in ["backbone_hidden_size", "Gemma 3 target's hidden_size is 32"] {
                assert!(reason.contains(part), "{part:?} missing: {reason}");
            }
        }
        other => panic!("expected DrafterMismatch, got {other:?}"),
    }
    // A target directory given as the drafter: not a registered drafter type.
    let (gemma4, _) = load_target_model(
        &b,
        &fixture_root().join("mm_e2b/target"),
        &options,
        &mut |_, _| {},
    )
    .expect("loads");
    match load_drafter_model(
        &b,
        &fixture_root().join("e2b_like/target"),
        &gemma4,
        &options,
    ) {
        Err(LoadError::UnknownModelType {
            found, expected, ..
        }) => {
            assert_eq!(found, "gemma4_text");
            assert_eq!(expected, registry::model_types(Role::Drafter));
        }
        other => panic!("expected UnknownModelType, got {other:?}"),
    }
}

#[test]
fn draft_kinds_and_config_readers_follow_the_registry() {
    use mtp_core::proposer::ProposerKind;
    // Every registered target type is a draft model, every drafter type an MTP head.
    assert_eq!(
        detect_draft_kind(&fixture_root().join("mm_e2b/assistant")).unwrap(),
        ProposerKind::Mtp
    );
    for dir in [fixture_root().join("mm_e2b/target"), gemma3_target()] {
        assert_eq!(
            detect_draft_kind(&dir).unwrap(),
            ProposerKind::Model,
            "{}",
            dir.display()
        );
    }
    // Gemma 4's config readers accept exactly the registry's Gemma 4 rows.
    assert_eq!(
        registry::family_model_types(Family::Gemma4, Role::Target),
        ["gemma4", "gemma4_text"]
    );
    assert_eq!(
        registry::family_model_types(Family::Gemma4, Role::Drafter),
        ["gemma4_assistant"]
    );
    assert!(registry::family_model_types(Family::Gemma3, Role::Drafter).is_empty());
    match runner::loading::read_target_config(&gemma3_target().join("config.json")) {
        Err(LoadError::UnknownModelType {
            found, expected, ..
        }) => {
            assert_eq!(found, "gemma3_text");
            assert_eq!(
                expected,
                registry::family_model_types(Family::Gemma4, Role::Target)
            );
        }
        other => panic!("expected UnknownModelType, got {other:?}"),
    }
}
