//! `--quantize q8|q4` end to end: `mtp generate` on a quantized fixture pair, greedy MTP == plain
//! on the quantized target (the exact-greedy guarantee holds for any weights), and bad values.

mod cli_common;

use cli_common::{assert_fails_with, generate_json, ids, mtp, Case};

fn greedy_mtp_equals_plain_when_quantized(backend: &str) {
    let case = Case::named("swa_basic");
    for scheme in ["q8", "q4"] {
        let n = case.greedy_ids.len().to_string();
        let args = [
            "--backend",
            backend,
            "--num-predict",
            &n,
            "--quantize",
            scheme,
        ];
        let mtp = generate_json(&case, true, &args);
        let plain = generate_json(&case, false, &args);
        assert_eq!(mtp["mode"], "greedy-mtp");
        assert_eq!(
            ids(&mtp["tokens"]),
            ids(&plain["tokens"]),
            "{backend} {scheme}"
        );
        let same = ids(&plain["tokens"])
            .iter()
            .zip(&case.greedy_ids)
            .take_while(|(a, b)| a == b)
            .count();
        eprintln!(
            "{backend} --quantize {scheme}: {same}/{} greedy tokens as dense HF",
            case.greedy_ids.len()
        );
    }
}

#[test]
fn greedy_mtp_equals_plain_when_quantized_on_reference() {
    greedy_mtp_equals_plain_when_quantized("reference");
}

#[cfg(feature = "candle")]
#[test]
fn greedy_mtp_equals_plain_when_quantized_on_candle() {
    greedy_mtp_equals_plain_when_quantized("candle");
}

#[test]
fn an_unknown_scheme_is_a_clear_error() {
    let case = Case::named("swa_basic");
    let mut cmd = mtp();
    cmd.arg("generate")
        .arg("--model")
        .arg(case.target())
        .args(["--quantize", "q3", "hello"]);
    assert_fails_with(&mut cmd, "invalid value 'q3' for '--quantize");
}
