//! The GGUF reader: the converter-made fixture and the real model read as expected, and every kind
//! of bad file is a clear error (never a panic).

mod gguf_support;

use gguf_support::{fixture, gguf_bytes, real_model, write, Meta, Tensor};
use mtp_core::reference::ReferenceBackend;
use runner::loading::gguf::{GgufError, GgufFile};
use runner::loading::gguf_names::gguf_to_hf;
use runner::loading::{LoadError, LoadOptions};
use runner::models::registry::load_target_model;

/// Loading `path` as a target fails: the error.
fn load_err(path: &std::path::Path) -> LoadError {
    let loaded = load_target_model(
        &ReferenceBackend::default(),
        path,
        &LoadOptions::default(),
        &mut |_, _| {},
    );
    match loaded {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e,
    }
}

fn gguf_error(e: LoadError) -> GgufError {
    match e {
        LoadError::Gguf(e) => *e,
        other => panic!("expected a GGUF error, got {other}"),
    }
}

#[test]
fn converter_fixture_reads_with_our_shapes_and_names() {
    let file = GgufFile::open(&fixture("gemma3/tiny/model-f32.gguf")).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.architecture().unwrap(), "gemma3");
    assert_eq!(file.usize("gemma3.block_count").unwrap(), 6);
    assert_eq!(file.tensors().len(), 6 * 13 + 2);
    let shape = |n: &str| file.tensor_info(n).unwrap().shape.clone();
    // GGUF dims are fastest first; ours are [rows, cols] as in safetensors.
    assert_eq!(shape("token_embd.weight"), vec![400, 32]);
    assert_eq!(shape("blk.0.attn_k.weight"), vec![16, 32]);
    assert_eq!(shape("blk.0.ffn_down.weight"), vec![32, 48]);
    assert_eq!(shape("blk.5.attn_q_norm.weight"), vec![16]);
    for (name, info) in file.tensors() {
        assert!(gguf_to_hf(name).is_some(), "{name} has no HF name");
        let raw = file.raw(name).unwrap();
        assert_eq!(raw.ggml_type.name, "F32");
        assert_eq!(raw.bytes.len(), info.shape.iter().product::<usize>() * 4);
    }
    let f16 = GgufFile::open(&fixture("gemma3/tiny/model-f16.gguf")).unwrap();
    let q = f16.raw("blk.0.attn_q.weight").unwrap();
    assert_eq!(
        (q.ggml_type.id, q.ggml_type.name, q.bytes.len()),
        (1, "F16", 32 * 32 * 2)
    );
}

#[test]
fn real_model_tensor_types_and_quantized_error() {
    let Some(path) = real_model("real_model_tensor_types_and_quantized_error") else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.tensors().len(), 236);
    let embd = file.raw("token_embd.weight").unwrap();
    assert_eq!(embd.shape, &[262_144, 640]);
    assert_eq!((embd.ggml_type.id, embd.ggml_type.name), (8, "Q8_0"));
    assert_eq!(embd.bytes.len(), 262_144 * 640 / 32 * 34);
    let mut types: Vec<&str> = file.tensors().values().map(|t| t.ggml_type.name).collect();
    types.sort_unstable();
    types.dedup();
    assert_eq!(types, ["F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"]);
    // The quantized tensors load as quantized weights (no error, no dense copy).
    let loaded = load_target_model(
        &ReferenceBackend::default(),
        &path,
        &LoadOptions::default(),
        &mut |_, _| {},
    );
    let (model, report) = loaded.unwrap_or_else(|e| panic!("{e}"));
    assert!(model.as_gemma3().is_some());
    assert_eq!(report.stats.read_tensors, 236);
}

/// A small valid gemma3-shaped file: metadata and two F32 tensors.
fn small(version: u32, arch: &str, tensors: &[Tensor]) -> Vec<u8> {
    gguf_bytes(
        version,
        &[
            ("general.architecture", Meta::Str(arch.into())),
            ("general.alignment", Meta::U32(32)),
        ],
        tensors,
    )
}

fn two_tensors() -> Vec<Tensor> {
    vec![
        Tensor::f32("a.weight", &[4, 8], &[0.5; 32]),
        Tensor::f32("b.weight", &[8], &[1.0; 8]),
    ]
}

#[test]
fn hand_built_file_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "ok.gguf", &small(2, "gemma3", &two_tensors()));
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.version(), 2);
    let a = file.raw("a.weight").unwrap();
    assert_eq!(a.shape, &[4, 8]);
    assert_eq!(&a.bytes[..4], &0.5f32.to_le_bytes());
    assert_eq!(file.raw("b.weight").unwrap().bytes.len(), 32);
    assert!(file.raw("c.weight").is_none());
}

fn open_err(bytes: &[u8]) -> GgufError {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "bad.gguf", bytes);
    gguf_error(GgufFile::open(&path).unwrap_err())
}

#[test]
fn truncated_files_are_errors() {
    let full = small(3, "gemma3", &two_tensors());
    // Cut inside the data: the header parses, a tensor reaches past the end.
    match open_err(&full[..full.len() - 16]) {
        GgufError::Truncated { name, .. } => assert_eq!(name, "b.weight"),
        other => panic!("{other}"),
    }
    // Cut inside the header.
    for cut in [3, 10, 30, 60] {
        let err = open_err(&full[..cut]);
        assert!(
            matches!(err, GgufError::Malformed { .. }),
            "cut {cut}: {err}"
        );
    }
    let err = open_err(b"not a gguf file at all, just some text");
    assert!(matches!(err, GgufError::Malformed { .. }), "{err}");
}

#[test]
fn unknown_ggml_type_is_an_error() {
    let mut tensors = two_tensors();
    tensors[0].ggml_type = 20; // IQ4_NL: not a type the reader knows
    let err = open_err(&small(3, "gemma3", &tensors));
    assert!(matches!(err, GgufError::UnknownGgmlType { .. }), "{err}");
    assert!(err.to_string().contains("20"), "{err}");
}

#[test]
fn tensor_bytes_that_do_not_match_the_shape_are_errors() {
    // A shape that needs more bytes than lie before the next tensor.
    let mut tensors = two_tensors();
    tensors[1] = Tensor::f32("b.weight", &[64], &[1.0; 64]);
    tensors[0].dims = vec![8, 8];
    let err = open_err(&small(3, "gemma3", &tensors));
    match &err {
        GgufError::BadTensor { name, .. } => assert_eq!(name, "a.weight"),
        other => panic!("{other}"),
    }
    // Rows that are not whole blocks: 8 columns of Q4_K (blocks of 256).
    let mut tensors = two_tensors();
    tensors[0].ggml_type = 12;
    let err = open_err(&small(3, "gemma3", &tensors));
    assert!(matches!(err, GgufError::BadTensor { .. }), "{err}");
    assert!(err.to_string().contains("Q4_K"), "{err}");
}

#[test]
fn gguf_v1_is_unsupported() {
    // v1 lengths are u32; candle parses it, this reader refuses it by version.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(1u32.to_le_bytes());
    bytes.extend(0u32.to_le_bytes());
    bytes.extend(0u32.to_le_bytes());
    let err = open_err(&bytes);
    assert!(
        matches!(err, GgufError::UnsupportedVersion { version: 1, .. }),
        "{err}"
    );
}

#[test]
fn unsupported_architecture_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "llama.gguf", &small(3, "llama", &two_tensors()));
    let err = load_err(&path);
    match gguf_error(err) {
        GgufError::UnsupportedArchitecture {
            found, supported, ..
        } => {
            assert_eq!(found, "llama");
            assert_eq!(supported, ["gemma3", "gemma4"]);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn missing_metadata_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "bare.gguf", &small(3, "gemma3", &two_tensors()));
    let err = load_err(&path);
    match gguf_error(err) {
        GgufError::MissingKey { key, .. } => assert_eq!(key, "gemma3.block_count"),
        other => panic!("{other}"),
    }
}

/// A Q8_0 matrix stays quantized by default and decodes exactly under `--dequantize`
/// (`StoredQuant::Dequantize`): `quantized` answers `None` and `array` returns the blocks'
/// values, equal to mtp-core's exact decoder.
#[test]
fn stored_quantized_matrix_decodes_exactly_under_dequantize() {
    use mtp_core::quant::{GgmlType, QuantTensor};
    use mtp_core::Backend;
    use runner::loading::{GgufArrays, StoredQuant};

    // Two Q8_0 blocks (f16 scale, then 32 int8): scales 0.5 and -0.25.
    let mut blocks = Vec::new();
    for (scale, offset) in [(0x3800u16, 0i32), (0xb400u16, 7)] {
        blocks.extend(scale.to_le_bytes());
        blocks.extend((0..32).map(|i| ((i * 5 + offset) % 255 - 127) as i8 as u8));
    }
    let q8 = Tensor {
        name: "blk.0.attn_q.weight".into(),
        ggml_type: 8,
        dims: vec![32, 2],
        data: blocks.clone(),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "q8.gguf", &small(3, "gemma3", &[q8]));
    let file = GgufFile::open(&path).unwrap();
    let b = ReferenceBackend::default();
    let want = QuantTensor::ggml(GgmlType::Q8_0, 2, 32, blocks)
        .unwrap()
        .dequantize();
    assert!(want.iter().any(|v| *v != 0.0));

    let mut kept = GgufArrays::new(&b, &file, mtp_core::DType::F32);
    assert!(kept
        .quantized("blk.0.attn_q.weight", 2, 32)
        .unwrap()
        .is_some());
    assert!(kept.array("blk.0.attn_q.weight", &[2, 32]).is_err());

    let mut decoded =
        GgufArrays::new(&b, &file, mtp_core::DType::F32).with_stored_quant(StoredQuant::Dequantize);
    assert!(decoded
        .quantized("blk.0.attn_q.weight", 2, 32)
        .unwrap()
        .is_none());
    let dense = decoded.array("blk.0.attn_q.weight", &[2, 32]).unwrap();
    assert_eq!(b.to_vec_f32(&dense).unwrap(), want);
}

/// The memory estimate of the real GGUF counts its quantized tensors as stored (246.6 MB, the
/// bytes one decode step reads) but Q5_0 at 34 bytes per block (the candle CPU kernel widens it
/// to 8 bits), or in f32 under `--dequantize`, and sizes the KV cache from the file's metadata
/// (sliding layers keep their 512-token window).
#[test]
fn real_model_memory_estimate_counts_blocks_as_stored() {
    use runner::loading::{estimate_memory, StoredQuant};
    let Some(path) = real_model("real_model_memory_estimate_counts_blocks_as_stored") else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let stored: u64 = file.tensors().values().map(|t| t.len as u64).sum();
    assert_eq!(stored, 246_587_904);
    let widened: u64 = file
        .tensors()
        .values()
        .filter(|t| t.ggml_type.name == "Q5_0")
        .map(|t| t.len as u64 / 22 * 12)
        .sum();
    assert!(widened > 0, "the real model holds Q5_0 tensors");
    let kept = estimate_memory(&path, None, &LoadOptions::default(), 4096).unwrap();
    assert_eq!(kept.weights, stored + widened);
    assert_eq!(kept.context, 4096);
    // 18 layers, 1 KV head of 256, f32 keys and values: 3 full layers at 4096 positions, 15
    // sliding ones at 513.
    assert_eq!(kept.kv_cache, 2 * 256 * 4 * (3 * 4096 + 15 * 513));
    let dequantized = LoadOptions {
        stored_quant: StoredQuant::Dequantize,
        ..LoadOptions::default()
    };
    let dense = estimate_memory(&path, None, &dequantized, 4096).unwrap();
    assert_eq!(dense.weights, 268_098_176 * 4, "every element in f32");
}

/// An absurd layer count (a mutated `block_count`, found by the GGUF fuzz test: it aborted on a
/// 120 GB allocation) is a clear error before anything is sized from it.
#[test]
fn an_absurd_block_count_is_an_error_not_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = gguf_bytes(
        3,
        &[
            ("general.architecture", Meta::Str("gemma3".into())),
            ("gemma3.block_count", Meta::U32(3_741_319_168)),
            ("gemma3.embedding_length", Meta::U32(32)),
            ("gemma3.attention.head_count", Meta::U32(2)),
        ],
        &two_tensors(),
    );
    let path = write(dir.path(), "huge.gguf", &bytes);
    let err = load_err(&path).to_string();
    assert!(err.contains("layers"), "{err}");
}
