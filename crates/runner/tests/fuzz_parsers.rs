//! Fuzzed parsers (proptest, stable Rust): every file a user controls — safetensors headers,
//! `config.json`, `tokenizer.json`, `generation_config.json`, chat templates (and the
//! conversations rendered with them), GGUF files (header, metadata, vocabulary, tensors) — is parsed from random and mutated bytes with 0 panics;
//! every failure is an `Err` that names the file. (Command-line values: `src/cli/args_fuzz.rs`;
//! HTTP bodies: `tests/server_api.rs`.)
//!
//! Cases per test: `PROPTEST_CASES` (default 10_000, what CI runs; printed by each test);
//! `PROPTEST_CASES=1000000 cargo test --release -p runner --test fuzz_parsers -- --nocapture`
//! runs 10^6.

use std::path::Path;

use mtp_core::reference::ReferenceBackend;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use runner::loading::gguf::GgufFile;
use runner::loading::{read_target_config, LoadOptions, TensorStore};
use runner::models::registry::load_target_model;
use runner::sampling_defaults::from_generation_config;
use runner::tokenizer::{ChatMessage, ChatOptions, ChatTemplate};
use runner::Tokenizer;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// Run `check` on `cases()` values of `strategy`; print the count.
fn fuzz<S: Strategy>(name: &str, strategy: S, check: impl Fn(S::Value) -> Result<(), String>)
where
    S::Value: std::fmt::Debug,
{
    let n = cases();
    let mut runner = TestRunner::new(Config {
        cases: n,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |v| check(v).map_err(TestCaseError::fail));
    eprintln!("fuzz {name}: {n} cases, 0 panics");
    if let Err(e) = result {
        panic!("fuzz {name}: {e}");
    }
}

/// A real file of the fixtures, to mutate.
fn fixture(path: &str) -> Vec<u8> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma4/swa_basic");
    std::fs::read(root.join(path)).expect("fixture file")
}

/// Random bytes, or a real file with a few bytes overwritten and maybe truncated.
fn mutated(original: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = original.len();
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..256),
        (
            proptest::collection::vec((0..len.max(1), any::<u8>()), 1..8),
            0..=len
        )
            .prop_map(move |(edits, keep)| {
                let mut bytes = original.clone();
                for (at, b) in edits {
                    if at < bytes.len() {
                        bytes[at] = b;
                    }
                }
                bytes.truncate(keep);
                bytes
            }),
    ]
}

/// A short safetensors file: a little-endian header length, a header, some data.
fn safetensors_like() -> impl Strategy<Value = Vec<u8>> {
    let header = prop_oneof![
        Just(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#.to_string()),
        "[ -~]{0,80}",
        Just(r#"{"a":{"dtype":"F32","shape":[99999999999],"data_offsets":[0,8]}}"#.to_string()),
        Just(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#.to_string()),
    ];
    (
        header,
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..32),
        any::<bool>(),
    )
        .prop_map(|(header, bogus_len, data, honest)| {
            let len = if honest {
                header.len() as u64
            } else {
                bogus_len
            };
            let mut bytes = len.to_le_bytes().to_vec();
            bytes.extend(header.as_bytes());
            bytes.extend(data);
            bytes
        })
}

#[test]
fn safetensors_headers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("model.safetensors");
    fuzz("safetensors header", safetensors_like(), |bytes| {
        std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
        if let Err(e) = TensorStore::open(dir.path()) {
            let message = e.to_string();
            if !message.contains("safetensors") && !message.contains("model.safetensors") {
                return Err(format!("unclear error: {message}"));
            }
        }
        Ok(())
    });
}

#[test]
fn config_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.json");
    fuzz(
        "config.json",
        mutated(fixture("target/config.json")),
        |bytes| {
            std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
            if let Err(e) = read_target_config(&path) {
                if !e.to_string().contains("config.json") {
                    return Err(format!("error does not name the file: {e}"));
                }
            }
            Ok(())
        },
    );
}

/// tokenizers 0.23.2 panics (decoders/mod.rs:90, `expect("Helper")`) while deserializing some
/// mutated `tokenizer.json` files; `Tokenizer::from_dir` fences it (tokenizer/guard.rs) and
/// returns an error, which this suite checks over the mutated files.
#[test]
fn tokenizer_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tokenizer.json");
    fuzz(
        "tokenizer.json",
        mutated(fixture("target/tokenizer.json")),
        |bytes| {
            std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
            if let Ok(tok) = Tokenizer::from_dir(dir.path()) {
                // A tokenizer that loads must also encode and decode without panicking.
                if let Ok(ids) = tok.encode_plain("w5 w6 é 日本") {
                    let _ = tok.decode(&ids);
                }
            }
            Ok(())
        },
    );
}

#[test]
fn generation_config_json() {
    let fields = prop_oneof![
        Just("true".to_string()),
        Just("false".to_string()),
        Just("null".to_string()),
        any::<f64>().prop_map(|x| format!("{x:?}")),
        any::<i64>().prop_map(|x| x.to_string()),
        "\"[ -~]{0,8}\"",
        Just("[1, 2]".to_string()),
    ];
    let text = (fields.clone(), fields.clone(), fields.clone(), fields).prop_map(|(d, t, k, p)| {
        format!(r#"{{"do_sample": {d}, "temperature": {t}, "top_k": {k}, "top_p": {p}}}"#)
    });
    let text = prop_oneof![text, "[ -~]{0,64}"];
    fuzz(
        "generation_config.json",
        text,
        |text| match from_generation_config(&text) {
            Ok(options) => options.validate().map_err(|e| e.to_string()),
            Err(message) if message.is_empty() => Err("empty error".into()),
            Err(_) => Ok(()),
        },
    );
}

/// The published Gemma 4 chat template (tests/fixtures/chat_templates/gemma4).
fn gemma4_template() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/chat_templates/gemma4/chat_template.jinja");
    std::fs::read(path).expect("committed chat template")
}

/// A conversation of 1-4 messages with any role and any text (template syntax included).
fn conversation() -> impl Strategy<Value = Vec<ChatMessage>> {
    let role = prop_oneof![
        prop::sample::select(vec!["system", "user", "assistant", "developer", "tool"])
            .prop_map(str::to_string),
        "[ -~]{0,8}",
    ];
    let text = prop_oneof!["\\PC{0,24}", "[{}%# a-z<>|]{0,24}"];
    proptest::collection::vec((role, text), 1..5).prop_map(|turns| {
        turns
            .iter()
            .map(|(role, text)| ChatMessage::text(role, text))
            .collect()
    })
}

#[test]
fn chat_templates() {
    let path = Path::new("chat_template.jinja");
    fuzz(
        "chat template",
        (mutated(gemma4_template()), conversation()),
        |(bytes, messages)| {
            let source = String::from_utf8_lossy(&bytes);
            if let Ok(template) = ChatTemplate::new(&source, path, Default::default()) {
                if let Err(e) = template.render(&messages, &ChatOptions::default()) {
                    if !e.to_string().contains("chat_template.jinja") {
                        return Err(format!("error does not name the template: {e}"));
                    }
                }
            }
            Ok(())
        },
    );
}

#[test]
fn conversations_with_the_published_template() {
    let path = Path::new("chat_template.jinja");
    let source = String::from_utf8(gemma4_template()).expect("UTF-8 template");
    let template = ChatTemplate::new(&source, path, Default::default()).expect("it compiles");
    fuzz("conversation", conversation(), |messages| {
        // The template accepts any roles; what it renders must carry every user turn's text.
        let text = template
            .render(&messages, &ChatOptions::default())
            .map_err(|e| format!("refused: {e}"))?;
        for m in messages.iter().filter(|m| m.role == "user") {
            let runner::tokenizer::ChatContent::Text(content) = &m.content else {
                continue;
            };
            if !text.contains(content.trim()) {
                return Err(format!("user text {content:?} missing from {text:?}"));
            }
        }
        Ok(())
    });
}

/// A GGUF file (llama.cpp's converter's output for the tiny Gemma 3 fixture) with a few bytes
/// overwritten — mostly in the header, metadata and tensor table, where the parser looks — and
/// maybe truncated.
fn mutated_gguf() -> impl Strategy<Value = Vec<u8>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gemma3/tiny/model-f16.gguf");
    let original = std::fs::read(path).expect("committed GGUF fixture");
    let len = original.len();
    let head = len.min(16 * 1024);
    let at = prop_oneof![4 => 0..head, 1 => 0..len];
    (
        proptest::collection::vec((at, any::<u8>()), 1..8),
        prop_oneof![4 => Just(len), 1 => 0..=len],
    )
        .prop_map(move |(edits, keep)| {
            let mut bytes = original.clone();
            for (at, b) in edits {
                bytes[at] = b;
            }
            bytes.truncate(keep);
            bytes
        })
}

#[test]
fn gguf_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("model.gguf");
    let opened = std::cell::Cell::new(0u32);
    fuzz("GGUF file", mutated_gguf(), |bytes| {
        std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
        match GgufFile::open(&path) {
            Ok(file) => {
                opened.set(opened.get() + 1);
                // What opens must also give a tokenizer and a model, or clear errors.
                let _ = Tokenizer::from_gguf(&file);
                let _ = load_target_model(
                    &ReferenceBackend::default(),
                    &path,
                    &LoadOptions::default(),
                    &mut |_, _| {},
                );
            }
            Err(e) => {
                if !e.to_string().contains("model.gguf") {
                    return Err(format!("error does not name the file: {e}"));
                }
            }
        }
        Ok(())
    });
    // Both paths ran: files the reader refused and files it opened.
    assert!(
        opened.get() > 0 && opened.get() < cases(),
        "{} opened",
        opened.get()
    );
}
