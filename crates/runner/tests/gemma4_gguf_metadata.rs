//! A Gemma 4 GGUF's metadata read back into a configuration: a small file written here resolves,
//! and each inconsistency a broken or hostile file can carry is a clear error, never a panic.

mod gguf_support;

use gguf_support::{gguf_bytes, write, Meta, Tensor};
use runner::loading::gguf::GgufFile;
use runner::models::gemma4_gguf::resolve_gguf;

/// The metadata of a two-layer `[sliding, full]` Gemma 4 text model, 8 wide.
fn metadata() -> Vec<(&'static str, Meta)> {
    vec![
        ("general.architecture", Meta::Str("gemma4".into())),
        ("gemma4.block_count", Meta::U32(2)),
        ("gemma4.embedding_length", Meta::U32(8)),
        ("gemma4.feed_forward_length", Meta::I32s(vec![16, 16])),
        ("gemma4.attention.head_count", Meta::U32(2)),
        ("gemma4.attention.head_count_kv", Meta::U32(1)),
        ("gemma4.attention.key_length", Meta::U32(8)),
        ("gemma4.attention.key_length_swa", Meta::U32(4)),
        ("gemma4.attention.sliding_window", Meta::U32(4)),
        (
            "gemma4.attention.sliding_window_pattern",
            Meta::Bools(vec![true, false]),
        ),
        ("gemma4.rope.freq_base", Meta::F32(1e6)),
        ("gemma4.rope.freq_base_swa", Meta::F32(1e4)),
    ]
}

fn tensors(rope_freqs: &[f32]) -> Vec<Tensor> {
    vec![
        Tensor::f32("token_embd.weight", &[10, 8], &[0.0; 80]),
        Tensor::f32("rope_freqs.weight", &[rope_freqs.len()], rope_freqs),
        // Values of their own on both layers (no keys-as-values).
        Tensor::f32("blk.0.attn_v.weight", &[4, 8], &[0.0; 32]),
        Tensor::f32("blk.1.attn_v.weight", &[8, 8], &[0.0; 64]),
    ]
}

/// Resolve a file of `metadata` and `tensors`: the error text, or `None` when it resolves.
fn resolve(metadata: &[(&str, Meta)], tensors: &[Tensor]) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "m.gguf", &gguf_bytes(3, metadata, tensors));
    let file = GgufFile::open(&path).unwrap();
    resolve_gguf(&file).err().map(|e| e.to_string())
}

fn with(key: &str, value: Meta) -> Vec<(&'static str, Meta)> {
    let mut m = metadata();
    for entry in &mut m {
        if entry.0 == key {
            entry.1 = value.clone();
        }
    }
    m
}

const QUARTER: [f32; 4] = [1.0, 1e30, 1e30, 1e30];

/// A broken file: what its error must name, its metadata and its `rope_freqs` factors.
type Broken = (&'static str, Vec<(&'static str, Meta)>, Vec<f32>);

#[test]
fn a_consistent_file_resolves_with_its_partial_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "m.gguf",
        &gguf_bytes(3, &metadata(), &tensors(&QUARTER)),
    );
    let file = GgufFile::open(&path).unwrap();
    let resolved = resolve_gguf(&file).unwrap();
    assert_eq!(resolved.config.vocab_size, 10);
    assert_eq!(resolved.layers.len(), 2);
    let full = &resolved.layers[1];
    assert_eq!(full.head_dim, 8);
    let rotating = full.inv_freq.iter().filter(|&&f| f > 0.0).count();
    assert_eq!(rotating, 1, "one pair of four rotates: {:?}", full.inv_freq);
    assert!(resolved.config.tie_word_embeddings);
}

#[test]
fn inconsistent_metadata_is_an_error_not_a_panic() {
    let cases: Vec<Broken> = vec![
        (
            "flags",
            with(
                "gemma4.attention.sliding_window_pattern",
                Meta::Bools(vec![true]),
            ),
            QUARTER.to_vec(),
        ),
        (
            "MLP",
            with("gemma4.feed_forward_length", Meta::I32s(vec![16, 24])),
            QUARTER.to_vec(),
        ),
        (
            "values",
            with("gemma4.feed_forward_length", Meta::I32s(vec![16])),
            QUARTER.to_vec(),
        ),
        ("rope_freqs", metadata(), vec![1.0, 2.0, 1e30, 1e30]),
        ("rope_freqs", metadata(), vec![1.0, 1e30]),
        (
            "layers",
            with("gemma4.block_count", Meta::U32(4_000_000_000)),
            QUARTER.to_vec(),
        ),
        (
            "rope_freqs",
            with("gemma4.attention.key_length", Meta::U32(u32::MAX)),
            QUARTER.to_vec(),
        ),
        (
            "KV heads",
            with("gemma4.attention.head_count_kv", Meta::I32s(vec![1, 2])),
            QUARTER.to_vec(),
        ),
        (
            "negative",
            with("gemma4.feed_forward_length", Meta::I32s(vec![16, -1])),
            QUARTER.to_vec(),
        ),
    ];
    for (what, metadata, rope) in cases {
        let err = resolve(&metadata, &tensors(&rope));
        let err = err.unwrap_or_else(|| panic!("{what}: resolved"));
        assert!(err.contains(what), "{what}: {err}");
    }
    let not_gemma4 = with("general.architecture", Meta::Str("gemma3".into()));
    let err = resolve(&not_gemma4, &tensors(&QUARTER)).unwrap();
    assert!(err.contains("gemma3") && err.contains("gemma4"), "{err}");
}

#[test]
fn a_missing_key_is_named_with_the_file() {
    for key in [
        "gemma4.block_count",
        "gemma4.embedding_length",
        "gemma4.attention.head_count",
        "gemma4.attention.key_length",
    ] {
        let metadata: Vec<_> = metadata().into_iter().filter(|(k, _)| *k != key).collect();
        let err =
            resolve(&metadata, &tensors(&QUARTER)).unwrap_or_else(|| panic!("{key}: resolved"));
        assert!(err.contains(key) && err.contains("m.gguf"), "{key}: {err}");
    }
}

#[test]
fn a_missing_tensor_is_named_with_the_file() {
    // The metadata resolves; the file holds only the embedding, rope factors and values.
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "m.gguf",
        &gguf_bytes(3, &metadata(), &tensors(&QUARTER)),
    );
    let err = runner::loading::load_gguf_target(
        &mtp_core::reference::ReferenceBackend::default(),
        &path,
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("m.gguf"), "{err}");
    assert!(
        err.contains("blk.0.") || err.contains("model."),
        "names the tensor: {err}"
    );
}
