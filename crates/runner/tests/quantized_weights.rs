//! Quantized weights through the real models: `--quantize q8|q4` on the dense Gemma 4 fixtures
//! against HF transformers running the same GGUF-rounded weights (drift from the dense logits and
//! greedy agreement reported), and an MLX affine checkpoint (written by `tools/quant_fixtures/mlx_checkpoint.py` with `mlx.core.quantize`,
//! mlx-lm's layout) against its `mlx.core.dequantize`d dense twin.

mod common;

use std::path::{Path, PathBuf};

use common::{max_rel_err, prefill_logits, Reference};
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest};
use mtp_core::model::TargetModel;
use mtp_core::quant::QuantScheme;
use mtp_core::Backend;
use runner::loading::{load_target, LoadError, LoadOptions, StoredQuant};

/// `--quantize` on the exact (reference) backend against HF transformers running the same
/// Q8_0 / Q4_0-rounded weights: the same tolerance as every dense fixture.
const EXACT_TOLERANCE: f32 = common::TOLERANCE;
/// candle's quantized matmul also rounds the activations to 8-bit blocks (as ggml does): about
/// 1 % per matmul (backend-candle's `quantized_tests`), which these tiny random models amplify
/// through their layers (measured up to 1.8e-1 with q4 on `k_eq_v`; the same models drift by
/// 1.2e-1 .. 1.4 from their dense logits under the weight rounding alone, in HF too).
const KERNEL_TOLERANCE: f32 = 2.5e-1;

fn quantized(scheme: QuantScheme) -> LoadOptions {
    LoadOptions {
        quantize: Some(scheme),
        ..LoadOptions::default()
    }
}

/// The HF logits of the quantized weights (`tools/quant_fixtures/hf_quantized_logits.py`).
fn hf_quantized(case: &str) -> Reference {
    Reference::open_file(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hf_quantized")
            .join(format!("{case}.safetensors")),
    )
}

fn quantize_at_load_matches_hf_on_the_quantized_weights<B: Backend>(b: &B) {
    let tolerance = if b.name() == "reference" {
        EXACT_TOLERANCE
    } else {
        KERNEL_TOLERANCE
    };
    for case in ["swa_basic", "e2b_like", "k_eq_v"] {
        let dir = common::fixture_root().join(case);
        let mut hf = hf_quantized(case);
        let prompt = hf.ids("prompt_ids");
        let mut dense = Reference::open(&dir);
        let (dense_logits, shape) = dense.floats("target_logits");
        let greedy = dense.ids("greedy_ids");
        for scheme in [QuantScheme::Q8, QuantScheme::Q4] {
            let (want, _) = hf.floats(&format!("logits_{scheme}"));
            let target = load_target(b, &dir.join("target"), &quantized(scheme)).unwrap();
            let ours = prefill_logits(b, &target, &prompt);
            let err = max_rel_err(&ours, &want, shape[1]);
            let drift = max_rel_err(&ours, &dense_logits, shape[1]);
            let hf_drift = max_rel_err(&want, &dense_logits, shape[1]);
            let request = GenerateRequest::greedy(prompt.clone(), greedy.len());
            let tokens = Engine::new(b, &target)
                .generate(&request, &mut DiscardSink, &CancelToken::new())
                .unwrap()
                .tokens;
            let same = tokens
                .iter()
                .zip(&greedy)
                .take_while(|(x, y)| x == y)
                .count();
            eprintln!(
                "{case} --quantize {scheme} on {}: vs HF on the same weights {err:.2e}; vs dense HF \
                 {drift:.2e} (HF itself {hf_drift:.2e}); greedy {same}/{} tokens as dense",
                b.name(),
                greedy.len()
            );
            assert!(
                err < tolerance,
                "{case} {scheme}: rel err {err} vs HF quantized"
            );
        }
    }
}

fn mlx_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mlx_q4_swa_basic")
}

fn mlx_affine_checkpoint_equals_its_dequantized_twin<B: Backend>(b: &B) {
    let options = LoadOptions::default();
    let quant = load_target(b, &mlx_fixture().join("quantized"), &options).unwrap();
    let dense = load_target(b, &mlx_fixture().join("dequantized"), &options).unwrap();
    let prompt = [2u32, 17, 5, 99, 3, 64, 12, 7];
    let (q, d) = (
        prefill_logits(b, &quant, &prompt),
        prefill_logits(b, &dense, &prompt),
    );
    let err = max_rel_err(&q, &d, quant.vocab_size());
    eprintln!("MLX 4-bit checkpoint vs its dequantized twin: max rel err {err:.2e}");
    // Same weights; only the kernels' summation order (and, on candle, no quantized kernel for
    // affine groups: the same dense product) differ.
    assert!(err < 1e-4, "rel err {err}");
    // `--dequantize` decodes the affine groups at load: the dense twin's logits again.
    let decoded = LoadOptions {
        stored_quant: StoredQuant::Dequantize,
        ..LoadOptions::default()
    };
    let decoded = load_target(b, &mlx_fixture().join("quantized"), &decoded).unwrap();
    let err = max_rel_err(
        &prefill_logits(b, &decoded, &prompt),
        &d,
        quant.vocab_size(),
    );
    assert!(err < 1e-4, "--dequantize: rel err {err}");
}

per_backend!(
    quantize_at_load_matches_hf_on_the_quantized_weights,
    mlx_affine_checkpoint_equals_its_dequantized_twin
);

/// A copy of the MLX fixture with `edit` applied to its config.json.
fn edited_mlx_fixture(tag: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let src = mlx_fixture().join("quantized");
    let dir = std::env::temp_dir().join(format!("mtp-quant-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in [
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    dir
}

/// An edit of a config.json.
type ConfigEdit = Box<dyn FnOnce(&mut serde_json::Value)>;

#[test]
fn bad_mlx_quantization_configs_are_clear_errors() {
    let b = mtp_core::reference::ReferenceBackend::default();
    let cases: Vec<(&str, ConfigEdit, &str)> = vec![
        (
            "bits",
            Box::new(|c| c["quantization"]["bits"] = 3.into()),
            "bits must be one of",
        ),
        (
            "group",
            Box::new(|c| c["quantization"]["group_size"] = 48.into()),
            "group_size must be one of",
        ),
        (
            "wrong-group",
            Box::new(|c| c["quantization"]["group_size"] = 64.into()),
            "shape",
        ),
        (
            "missing",
            Box::new(|c| {
                c.as_object_mut().unwrap().remove("quantization");
                c.as_object_mut().unwrap().remove("quantization_config");
            }),
            "does not quantize this module",
        ),
        (
            "mode",
            Box::new(|c| c["quantization"]["mode"] = "mxfp4".into()),
            "only \"affine\"",
        ),
    ];
    for (tag, edit, want) in cases {
        let dir = edited_mlx_fixture(tag, edit);
        let e = load_target(&b, &dir, &LoadOptions::default()).unwrap_err();
        let text = e.to_string();
        eprintln!("{tag}: {text}");
        assert!(text.contains(want), "{tag}: {text}");
        assert!(
            !matches!(e, LoadError::Backend { .. }),
            "{tag}: reported by the loader, not the backend"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// `--quantize` widens a matrix a chunk of rows at a time (a full-size Gemma 4 per-layer table
/// would be 9.4 GB in `f32`): chunks of any size give the values of widening it whole, in order,
/// and quantizing chunk by chunk gives the bytes of quantizing it whole.
#[test]
fn quantize_at_load_widens_row_chunks_to_the_whole_matrix_bytes() {
    use runner::loading::TensorStore;
    use safetensors::tensor::TensorView;
    let (rows, cols) = (10usize, 64usize);
    let values: Vec<half::bf16> = (0..rows * cols)
        .map(|i| half::bf16::from_f32(((i * 37 % 101) as f32 - 50.0) / 16.0))
        .collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.safetensors");
    let view = TensorView::new(safetensors::Dtype::BF16, vec![rows, cols], &bytes).expect("view");
    safetensors::serialize_to_file([("m", view)], None, &path).expect("write");
    let open = || TensorStore::from_files(std::slice::from_ref(&path)).expect("store");
    let whole = open().take_f32("m", &[rows, cols]).expect("whole");
    let want = QuantScheme::Q8.quantize(&whole, rows, cols).expect("q8");
    for chunk_rows in [1, 3, 4, 10, 64] {
        let (mut widened, mut blocks, mut calls) = (Vec::new(), Vec::new(), 0);
        open()
            .take_f32_rows("m", [rows, cols], chunk_rows, |chunk| {
                calls += 1;
                assert!(
                    chunk.len() <= chunk_rows * cols,
                    "a chunk of {chunk_rows} rows"
                );
                widened.extend_from_slice(chunk);
                let part = QuantScheme::Q8
                    .quantize(chunk, chunk.len() / cols, cols)
                    .unwrap();
                blocks.extend_from_slice(part.data());
                Ok(())
            })
            .expect("rows");
        assert_eq!(calls, rows.div_ceil(chunk_rows), "chunks of {chunk_rows}");
        assert_eq!(widened, whole, "chunks of {chunk_rows}");
        assert_eq!(blocks, want.data(), "chunks of {chunk_rows}");
    }
}
