//! A model with NaN weights fails with a clear error in every mode — greedy MTP, greedy plain,
//! penalised greedy and sampling — instead of printing empty text with "100% acceptance".

mod cli_common;

use std::path::Path;

use cli_common::{assert_fails_with, copy_dir, mtp, Case};

/// Overwrite every value of the F32 tensor `name` in `dir/model.safetensors` with NaN.
fn poison(dir: &Path, name: &str) {
    let path = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&path).expect("weights");
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Value =
        serde_json::from_slice(&bytes[8..8 + header_len]).expect("header JSON");
    let info = &header[name];
    assert_eq!(info["dtype"], "F32", "{name}");
    let offsets = &info["data_offsets"];
    let start = 8 + header_len + offsets[0].as_u64().expect("start") as usize;
    let end = 8 + header_len + offsets[1].as_u64().expect("end") as usize;
    for chunk in bytes[start..end].chunks_exact_mut(4) {
        chunk.copy_from_slice(&f32::NAN.to_le_bytes());
    }
    std::fs::write(&path, bytes).expect("write weights");
}

#[test]
fn nan_weights_fail_clearly_in_every_mode() {
    let case = Case::named("copy_drafter");
    let target = copy_dir(&case.target());
    poison(target.path(), "model.layers.0.layer_scalar");
    let modes: [&[&str]; 5] = [
        &["--temperature", "0"],
        &["--temperature", "0", "--no-draft"],
        &["--temperature", "0", "--repeat-penalty", "1.3"],
        &["--temperature", "0", "--serial-validate"],
        &["--temperature", "0.8", "--seed", "3"],
    ];
    for backend in ["reference", "candle"] {
        for mode in modes {
            let mut cmd = mtp();
            cmd.args(["generate", "--backend", backend, "--model"])
                .arg(target.path())
                .arg("--draft")
                .arg(case.assistant())
                .args(mode)
                .arg(&case.prompt_text);
            assert_fails_with(&mut cmd, "logits at position");
            let out = cmd.output().expect("mtp runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("not finite (NaN or +inf)"),
                "{mode:?}: {stderr}"
            );
            assert!(out.stdout.is_empty(), "{mode:?}: no text is printed");
        }
    }
}

/// A NaN that reaches a quantized product (the 8-bit activation quantizer rounds a NaN to 0, as
/// ggml's does) still stops the run: a NaN norm weight, with the projections after it quantized
/// at load, on the quantized kernels (candle) and the exact dequantization (reference), with
/// activations in f32 and in half precision.
#[test]
fn nan_before_a_quantized_product_fails_clearly() {
    let case = Case::named("copy_drafter");
    let target = copy_dir(&case.target());
    poison(target.path(), "model.layers.0.input_layernorm.weight");
    for backend in ["reference", "candle"] {
        for (scheme, dtype) in [("q8", "f32"), ("q4", "f32"), ("q8", "f16"), ("q4", "bf16")] {
            let mut cmd = mtp();
            cmd.args([
                "generate",
                "--backend",
                backend,
                "--quantize",
                scheme,
                "--dtype",
                dtype,
                "--model",
            ])
            .arg(target.path())
            .args(["--no-draft", "--temperature", "0"])
            .arg(&case.prompt_text);
            assert_fails_with(&mut cmd, "logits at position");
        }
    }
}
