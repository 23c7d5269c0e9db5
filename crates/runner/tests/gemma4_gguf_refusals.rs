//! Gemma 4 GGUF files that cannot run are refused with an error naming the file and what is
//! wrong: a truncated file, the drafter schemas of other llama.cpp forks, an assistant without
//! llama.cpp's projections, an assistant of another vocabulary; and a GGUF passed as `--draft`
//! is told apart (assistant, draft model, neither).

mod gemma4_gguf_support;
mod gguf_support;

use gemma4_gguf_support::case_dir;
use gguf_support::{gguf_bytes, write, Meta, Tensor};
use mtp_core::proposer::ProposerKind;
use mtp_core::reference::ReferenceBackend;
use runner::loading::gguf::GgufFile;
use runner::loading::{load_gguf_assistant, load_gguf_target, load_target, LoadOptions};
use runner::models::gemma4_assistant_gguf::{assistant_config, is_gguf_assistant};
use runner::proposers::detect_draft_kind;

/// A file of `arch` with `keys` (besides the architecture) and `tensors`, in `dir` as `name`.
fn file_of(
    dir: &std::path::Path,
    name: &str,
    arch: &str,
    keys: Vec<(&'static str, Meta)>,
    tensors: &[Tensor],
) -> std::path::PathBuf {
    let mut metadata = vec![("general.architecture", Meta::Str(arch.into()))];
    metadata.extend(keys);
    write(dir, name, &gguf_bytes(3, &metadata, tensors))
}

#[test]
fn a_truncated_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(case_dir("e2b_like").join("target-f32.gguf")).unwrap();
    let path = write(dir.path(), "cut.gguf", &bytes[..bytes.len() * 2 / 3]);
    let err = load_gguf_target(&ReferenceBackend::default(), &path, &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cut.gguf") && err.contains("truncated"),
        "{err}"
    );
}

#[test]
fn other_forks_drafter_schemas_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = || vec![Tensor::f32("token_embd.weight", &[4, 2], &[0.0; 8])];
    let cases = [
        (
            file_of(dir.path(), "ik.gguf", "gemma4_mtp", vec![], &tiny()),
            "ik_llama.cpp",
        ),
        (
            file_of(
                dir.path(),
                "turbo.gguf",
                "gemma4",
                vec![("gemma4.assistant.type", Meta::Str("mtp".into()))],
                &tiny(),
            ),
            "turbo-tan",
        ),
        (
            file_of(
                dir.path(),
                "atomic.gguf",
                "gemma4",
                vec![],
                &[Tensor::f32("mtp.pre_proj.weight", &[2, 4], &[0.0; 8])],
            ),
            "AtomicBot",
        ),
    ];
    for (path, fork) in cases {
        let file = GgufFile::open(&path).unwrap();
        assert!(is_gguf_assistant(&file), "{fork}: seen as a drafter");
        // As --draft it is an MTP head, so loading it says why it is refused.
        assert_eq!(
            detect_draft_kind(&path).unwrap(),
            ProposerKind::Mtp,
            "{fork}"
        );
        let err = assistant_config(&file).unwrap_err().to_string();
        assert!(
            err.contains(fork)
                && err.contains(path.file_name().unwrap().to_str().unwrap())
                && err.contains("convert_hf_to_gguf.py"),
            "{fork}: {err}"
        );
    }
}

#[test]
fn an_assistant_without_its_projections_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_of(
        dir.path(),
        "bare.gguf",
        "gemma4-assistant",
        vec![("gemma4-assistant.embedding_length_out", Meta::U32(8))],
        &[Tensor::f32("token_embd.weight", &[4, 2], &[0.0; 8])],
    );
    let err = assistant_config(&GgufFile::open(&path).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bare.gguf") && err.contains("nextn.pre_projection"),
        "{err}"
    );
}

#[test]
fn an_assistant_of_another_vocabulary_is_refused() {
    // An HF target as wide as the GGUF assistant's backbone (48) with 128 tokens, not 320.
    let b = ReferenceBackend::default();
    let options = LoadOptions::default();
    let target_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gemma4/e2b_like/target");
    let target = load_target(&b, &target_dir, &options).unwrap();
    let assistant = case_dir("e2b_like").join("assistant-f32.gguf");
    let err = load_gguf_assistant(&b, &assistant, &target, &options, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("assistant-f32.gguf") && err.contains("vocab_size 320"),
        "{err}"
    );
}

#[test]
fn a_gguf_draft_is_an_assistant_a_draft_model_or_refused() {
    let e2b = case_dir("e2b_like");
    assert_eq!(
        detect_draft_kind(&e2b.join("assistant-f32.gguf")).unwrap(),
        ProposerKind::Mtp
    );
    assert_eq!(
        detect_draft_kind(&e2b.join("target-f32.gguf")).unwrap(),
        ProposerKind::Model
    );
    let dir = tempfile::tempdir().unwrap();
    let path = file_of(
        dir.path(),
        "llama.gguf",
        "llama",
        vec![],
        &[Tensor::f32("token_embd.weight", &[4, 2], &[0.0; 8])],
    );
    let err = detect_draft_kind(&path).unwrap_err().to_string();
    assert!(
        err.contains("llama.gguf") && err.contains("gemma4-assistant") && err.contains("gemma3"),
        "{err}"
    );
}
