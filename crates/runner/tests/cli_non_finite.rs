//! A model with NaN weights fails with a clear error in every mode — greedy MTP, greedy plain,
//! penalised greedy and sampling — instead of printing empty text with "100% acceptance".

mod cli_common;

use cli_common::{
    assert_fails_with, copy_dir, mtp, nan_before_a_quantized_product_fails_on, poison, Case,
};

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
    for backend in ["reference", "candle"] {
        nan_before_a_quantized_product_fails_on(backend);
    }
}
