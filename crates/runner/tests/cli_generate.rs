//! `mtp generate` end to end on the Gemma 4 fixtures: HF greedy parity on both backends, MTP vs
//! plain, JSON, streaming text, lengths and EOS.

mod cli_common;

use cli_common::{cases, copy_dir, generate_json, ids, mtp, Case};
use runner::Tokenizer;

/// `mtp generate`'s acceptance command for every case: `--temperature 0 --json` with the
/// drafter prints HF's greedy continuation; without the drafter the tokens are the same.
fn greedy_matches_hf(backend: &str) {
    for case in cases() {
        let n = case.greedy_ids.len().to_string();
        let args = [
            "--temperature",
            "0",
            "--backend",
            backend,
            "--num-predict",
            &n,
        ];
        let mtp = generate_json(&case, true, &args);
        assert_eq!(
            ids(&mtp["tokens"]),
            case.greedy_ids,
            "{} MTP on {backend}",
            case.name
        );
        assert_eq!(mtp["mode"], "greedy-mtp", "{}", case.name);
        assert_eq!(mtp["done_reason"], "length");
        let plain = generate_json(&case, false, &args);
        assert_eq!(
            ids(&plain["tokens"]),
            case.greedy_ids,
            "{} plain on {backend}",
            case.name
        );
        assert_eq!(plain["mode"], "plain");
        assert!(plain["mtp"].is_null());
        let no_draft = generate_json(&case, true, &[&args[..], &["--no-draft"]].concat());
        assert_eq!(ids(&no_draft["tokens"]), case.greedy_ids);
        assert_eq!(no_draft["mode"], "plain");
        let backend_name = mtp["backend"].as_str().unwrap_or_default();
        assert!(backend_name.starts_with(backend), "{backend_name}");
    }
}

#[test]
fn greedy_matches_hf_on_reference() {
    greedy_matches_hf("reference");
}

#[cfg(feature = "candle")]
#[test]
fn greedy_matches_hf_on_candle() {
    greedy_matches_hf("candle");
}

#[test]
fn draft_options_never_change_greedy_output() {
    let case = Case::named("copy_drafter");
    let n = case.greedy_ids.len().to_string();
    for extra in [
        &["--draft-tokens", "2", "--max-draft-tokens", "3"][..],
        &["--draft-schedule", "heuristic"],
        &["--draft-schedule", "adaptive"],
        &["--serial-validate"],
        &["--compare-serial-validate"],
    ] {
        let json = generate_json(&case, true, &[&["-n", &n][..], extra].concat());
        assert_eq!(ids(&json["tokens"]), case.greedy_ids, "{extra:?}");
        let stats = &json["mtp"];
        assert!(
            stats["accepted"].as_u64().unwrap_or(0) > 0,
            "{extra:?}: {stats}"
        );
        if extra == ["--serial-validate"] {
            assert!(stats["serial_rounds"].as_u64().unwrap_or(0) > 0, "{stats}");
        }
        if extra == ["--compare-serial-validate"] {
            assert!(stats["compared"].as_u64().unwrap_or(0) > 0, "{stats}");
            assert_eq!(stats["batch_serial_mismatches"], 0);
        }
    }
}

#[test]
fn json_carries_counts_durations_and_every_stats_field() {
    let case = Case::named("copy_drafter");
    let json = generate_json(&case, true, &["-n", "20"]);
    for key in [
        "text",
        "prompt_tokens",
        "backend",
        "tokens",
        "done_reason",
        "mode",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
        "prompt_tokens_per_second",
        "tokens_per_second",
        "mtp",
    ] {
        assert!(json.get(key).is_some(), "no {key} in {json}");
    }
    assert_eq!(json["eval_count"], 20);
    assert_eq!(json["prompt_eval_count"].as_u64(), Some(20));
    let stats = json["mtp"].as_object().expect("MTP stats");
    for key in [
        "schedule",
        "drafted",
        "accepted",
        "acceptance",
        "iterations",
        "mean_draft",
        "mean_accepted",
        "per_position",
        "per_position_acceptance",
        "batched_rounds",
        "serial_rounds",
        "mismatches",
        "all_accepted",
        "max_draft",
        "compared",
        "batch_serial_mismatches",
        "target_secs",
        "draft_secs",
        "validate_secs",
    ] {
        assert!(stats.contains_key(key), "no mtp.{key} in {stats:?}");
    }
    assert!(stats["accepted"].as_u64().unwrap_or(0) > 0);
}

#[test]
fn streamed_text_equals_the_decode_of_the_generated_ids() {
    for case in cases() {
        let json = generate_json(&case, true, &["-n", "40"]);
        let tokens = ids(&json["tokens"]);
        let tokenizer = Tokenizer::from_dir(&case.target()).expect("fixture tokenizer");
        let decoded = tokenizer.decode(&tokens).expect("decode");
        assert_eq!(json["text"].as_str(), Some(decoded.as_str()));
        assert!(
            decoded.contains('é') && decoded.contains("日本") && decoded.contains('🙂'),
            "{}: the fixture vocabulary gives the continuation multi-byte words: {decoded}",
            case.name
        );
        let out = mtp()
            .args(["generate", "--temperature", "0", "-n", "40", "--model"])
            .arg(case.target())
            .arg("--draft")
            .arg(case.assistant())
            .arg(&case.prompt_text)
            .output()
            .expect("mtp runs");
        assert!(out.status.success());
        let stdout = String::from_utf8(out.stdout).expect("utf-8");
        assert_eq!(stdout, format!("{decoded}\n"), "{}", case.name);
        let stderr = String::from_utf8_lossy(&out.stderr);
        for needle in [
            "tokens/s",
            "acceptance",
            "mean accepted",
            "per-position",
            "rounds",
        ] {
            assert!(stderr.contains(needle), "summary lacks {needle}: {stderr}");
        }
    }
}

/// A byte-fallback tokenizer over `swa_basic`'s ids (words `▁w<i>`; ids 101 and 79 are the
/// bytes of "é", which the greedy continuation produces in a row, and later 79 alone): the
/// streamed text still equals the full decode.
#[test]
fn characters_split_across_tokens_stream_whole() {
    let case = Case::named("swa_basic");
    let dir = copy_dir(&case.target());
    let vocab_size = 128u32;
    let special = ["<pad>", "<eos>", "<bos>"];
    let mut vocab = serde_json::Map::new();
    let mut added = Vec::new();
    for id in 0..vocab_size {
        let word = match id {
            0..=2 => special[id as usize].to_string(),
            101 => "<0xC3>".to_string(),
            79 => "<0xA9>".to_string(),
            _ => format!("▁w{id}"),
        };
        if id <= 2 {
            added.push(
                serde_json::json!({"id": id, "content": word, "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": false, "special": true}),
            );
        }
        vocab.insert(word, id.into());
    }
    let tokenizer = serde_json::json!({
        "version": "1.0",
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                          "split": true},
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"}
        ]},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<pad>"}
    });
    std::fs::write(dir.path().join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let prompt_ids = [
        2u32, 45, 109, 70, 68, 42, 49, 42, 94, 37, 36, 93, 21, 73, 61, 72, 38, 85, 7, 58,
    ];
    let prompt: String = std::iter::once("<bos>".to_string())
        .chain(prompt_ids[1..].iter().map(|i| format!(" w{i}")))
        .collect();
    let n = case.greedy_ids.len().to_string();
    let run = |json: bool| {
        let mut cmd = mtp();
        cmd.args(["generate", "--temperature", "0", "-n", &n, "--model"])
            .arg(dir.path())
            .arg("--draft")
            .arg(case.assistant())
            .arg(&prompt);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().expect("mtp runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let json: serde_json::Value = serde_json::from_str(run(true).trim()).unwrap();
    assert_eq!(ids(&json["prompt_tokens"]), prompt_ids);
    assert_eq!(ids(&json["tokens"]), case.greedy_ids);
    let tok = Tokenizer::from_dir(dir.path()).unwrap();
    let decoded = tok.decode(&case.greedy_ids).unwrap();
    assert!(
        decoded.contains("é"),
        "the two byte tokens of é in a row: {decoded}"
    );
    assert!(
        decoded.contains('\u{FFFD}'),
        "the lone continuation byte: {decoded}"
    );
    assert_eq!(json["text"].as_str(), Some(decoded.as_str()));
    assert_eq!(run(false), format!("{decoded}\n"));
}

#[test]
fn num_predict_is_respected() {
    let case = Case::named("swa_basic");
    for n in [1usize, 7] {
        let json = generate_json(&case, true, &["--num-predict", &n.to_string()]);
        assert_eq!(ids(&json["tokens"]), case.greedy_ids[..n]);
        assert_eq!(json["eval_count"].as_u64(), Some(n as u64));
        assert_eq!(json["done_reason"], "length");
    }
}

#[test]
fn eos_from_the_flag_or_the_config_stops_generation() {
    let case = Case::named("swa_basic");
    let eos = case.greedy_ids[5];
    let first = case.greedy_ids.iter().position(|&t| t == eos).unwrap();
    let want = &case.greedy_ids[..first];
    let json = generate_json(&case, true, &["--eos", &eos.to_string()]);
    assert_eq!(ids(&json["tokens"]), want);
    assert_eq!(json["done_reason"], "stop");

    // The same EOS in a copy of the target's config.json.
    let dir = copy_dir(&case.target());
    let config_path = dir.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["eos_token_id"] = serde_json::json!([1, eos]);
    std::fs::write(&config_path, config.to_string()).unwrap();
    let copy = Case {
        name: "swa_basic (eos copy)".into(),
        dir: case.dir.clone(),
        prompt_text: case.prompt_text.clone(),
        greedy_ids: case.greedy_ids.clone(),
    };
    let out = mtp()
        .args(["generate", "--temperature", "0", "--json", "--model"])
        .arg(dir.path())
        .arg("--draft")
        .arg(copy.assistant())
        .arg(&copy.prompt_text)
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&json["tokens"]), want);
    assert_eq!(json["done_reason"], "stop");

    // --ignore-eos runs to --num-predict.
    let json = generate_json(&case, true, &["--eos", &eos.to_string(), "-n", "9"]);
    assert_eq!(json["done_reason"], "stop");
    let out = mtp()
        .args([
            "generate",
            "--temperature",
            "0",
            "--json",
            "--ignore-eos",
            "-n",
            "9",
            "--model",
        ])
        .arg(dir.path())
        .arg(&case.prompt_text)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&json["tokens"]), case.greedy_ids[..9]);
}

#[test]
fn prompt_from_stdin_and_chat_prompts() {
    let case = Case::named("swa_basic");
    let out = mtp()
        .args([
            "generate",
            "--temperature",
            "0",
            "--json",
            "-n",
            "5",
            "--model",
        ])
        .arg(case.target())
        .write_stdin(format!("{}\n", case.prompt_text))
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&json["tokens"]), case.greedy_ids[..5]);

    // Gemma's turn format: BOS (the template starts with it), <start_of_turn>=4, user=6, the
    // prompt, <end_of_turn>=5, <start_of_turn>, model=7.
    let json = generate_json(
        &Case {
            prompt_text: "  model user \n".into(),
            ..Case::named("swa_basic")
        },
        true,
        &["--chat", "-n", "3"],
    );
    assert_eq!(ids(&json["prompt_tokens"]), [2, 4, 6, 7, 6, 5, 4, 7]);
    assert_eq!(json["eval_count"], 3);
}

#[test]
fn the_default_pair_comes_from_mtp_model_dir() {
    let case = Case::named("swa_basic");
    let out = mtp()
        .env("MTP_MODEL_DIR", &case.dir)
        .args(["generate", "--temperature", "0", "--json", "-n", "6"])
        .arg(&case.prompt_text)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&json["tokens"]), case.greedy_ids[..6]);
    assert_eq!(
        json["mode"], "greedy-mtp",
        "the default pair includes the drafter"
    );
}

#[cfg(feature = "mlx")]
#[test]
fn greedy_matches_hf_on_mlx() {
    greedy_matches_hf("mlx");
}

/// The MTP counts that must not depend on the backend at temperature 0.
#[cfg(all(feature = "mlx", feature = "candle"))]
const BACKEND_FREE_STATS: [&str; 5] = [
    "drafted",
    "accepted",
    "iterations",
    "per_position",
    "all_accepted",
];

/// A NaN planted in a norm weight before quantized projections (`--quantize q8|q4`, MLX's affine
/// groups) stops an MLX run with the non-finite error, in f32 and in half precision, as on
/// candle and the reference backend (`cli_non_finite.rs`).
#[cfg(feature = "mlx")]
#[test]
fn mlx_nan_before_a_quantized_product_fails_clearly() {
    cli_common::nan_before_a_quantized_product_fails_on("mlx");
}

/// `mtp generate --temperature 0` prints the same text, tokens and MTP acceptance counts on MLX
/// as on candle: for every fixture pair, and for the default pair (`models/default`) when the
/// checkout has it.
#[cfg(all(feature = "mlx", feature = "candle"))]
#[test]
fn mlx_prints_what_candle_prints() {
    let run = |backend: &str, model: &[&str], prompt: &str| {
        let mut cmd = mtp();
        cmd.arg("generate").args(model).arg(prompt);
        cmd.args([
            "--json",
            "--temperature",
            "0",
            "-n",
            "24",
            "--backend",
            backend,
        ]);
        let out = cmd.output().expect("mtp runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{backend}: mtp failed: {stderr}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        json
    };
    let mut pairs: Vec<(String, Vec<String>, String)> = cases()
        .into_iter()
        .map(|case| {
            let model = vec![
                "--model".to_string(),
                case.target().display().to_string(),
                "--draft".to_string(),
                case.assistant().display().to_string(),
            ];
            (case.name.clone(), model, case.prompt_text.clone())
        })
        .collect();
    let default = runner::defaults::workspace_default_dir();
    if default.join("target").is_dir() && default.join("assistant").is_dir() {
        let prompt = "Write a short story about a lighthouse keeper.".to_string();
        pairs.push(("models/default".to_string(), Vec::new(), prompt));
    } else {
        eprintln!("no models/default in this checkout: fixture pairs only");
    }
    for (name, model, prompt) in pairs {
        let model: Vec<&str> = model.iter().map(String::as_str).collect();
        let candle = run("candle", &model, &prompt);
        let mlx = run("mlx", &model, &prompt);
        assert_eq!(mlx["text"], candle["text"], "{name}: text");
        assert_eq!(mlx["tokens"], candle["tokens"], "{name}: tokens");
        for key in BACKEND_FREE_STATS {
            assert_eq!(mlx["mtp"][key], candle["mtp"][key], "{name}: mtp.{key}");
        }
        eprintln!(
            "{name}: same text on mlx and candle; mtp accepted {} of {} drafted",
            mlx["mtp"]["accepted"], mlx["mtp"]["drafted"]
        );
    }
}

/// `--json --logprobs N`: one entry per generated token (its text, id, log-probability and N
/// alternatives), the same with the drafter (speculation on) as without it (plain decode), and
/// at temperature 0 each token is its own best alternative.
#[test]
fn json_logprobs_under_speculation_equal_plain_decodes() {
    let case = Case::named("copy_drafter");
    let args = ["-n", "20", "--logprobs", "3"];
    let mtp_json = generate_json(&case, true, &args);
    let plain_json = generate_json(&case, false, &args);
    assert_eq!(mtp_json["mode"], "greedy-mtp");
    assert!(mtp_json["mtp"]["accepted"].as_u64().unwrap_or(0) > 0);
    assert_eq!(plain_json["mode"], "plain");
    let tokens = ids(&mtp_json["tokens"]);
    let (spec, plain) = (
        mtp_json["logprobs"].as_array().expect("logprobs"),
        plain_json["logprobs"].as_array().expect("logprobs"),
    );
    assert_eq!(spec.len(), tokens.len());
    assert_eq!(plain.len(), tokens.len());
    let tokenizer = Tokenizer::from_dir(&case.target()).expect("fixture tokenizer");
    for (i, (s, p)) in spec.iter().zip(plain).enumerate() {
        assert_eq!(s["id"].as_u64(), Some(u64::from(tokens[i])), "token {i}");
        assert_eq!(s["token"], tokenizer.token_text(tokens[i]), "token {i}");
        let lp = s["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0);
        assert!(
            (lp - p["logprob"].as_f64().unwrap()).abs() < 1e-4,
            "token {i}: {s} vs {p}"
        );
        let (st, pt) = (
            s["top_logprobs"].as_array().unwrap(),
            p["top_logprobs"].as_array().unwrap(),
        );
        assert_eq!(st.len(), 3);
        assert_eq!(st[0]["id"], s["id"], "greedy: the token is the best");
        for (a, b) in st.iter().zip(pt) {
            assert_eq!(a["id"], b["id"], "token {i}");
            let (a, b) = (
                a["logprob"].as_f64().unwrap(),
                b["logprob"].as_f64().unwrap(),
            );
            assert!((a - b).abs() < 1e-4, "token {i}");
        }
    }
    // Without --logprobs there is no such field; it needs --json and at most 20.
    assert!(generate_json(&case, true, &["-n", "2"])
        .get("logprobs")
        .is_none());
    cli_common::assert_fails_with(
        mtp()
            .args(["generate", "--model"])
            .arg(case.target())
            .args(["--logprobs", "2", "x"]),
        "--json",
    );
    cli_common::assert_fails_with(
        mtp()
            .args(["generate", "--model"])
            .arg(case.target())
            .args(["--json", "--logprobs", "21", "x"]),
        "at most 20",
    );
}
