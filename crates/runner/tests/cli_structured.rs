//! `mtp generate` with a structured output, end to end on the default pair: `--json-schema`
//! (inline and from a file) and `--regex` constrain the text, with speculation on and the
//! grammar's forced drafts counted; bad schemas, unreadable files and two formats at once are
//! clear errors.

mod cli_common;

use cli_common::{assert_fails_with, mtp};
use serde_json::Value;

const SCHEMA: &str = r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["name", "age"]}"#;

fn generate(extra: &[&str]) -> Value {
    let out = mtp()
        .args(["generate", "--json", "--temperature", "0", "-n", "200"])
        .args(extra)
        .arg("And God said, ")
        .output()
        .expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mtp failed: {stderr}");
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn a_schema_inline_or_from_a_file_constrains_the_text() {
    let inline = generate(&["--json-schema", SCHEMA]);
    let text = inline["text"].as_str().expect("text");
    let value: Value = serde_json::from_str(text).expect("the text is JSON");
    assert!(
        value["name"]
            .as_str()
            .is_some_and(|s| s.chars().count() <= 12),
        "{value}"
    );
    assert!(
        value["age"].as_i64().is_some_and(|a| (0..=99).contains(&a)),
        "{value}"
    );
    // Objects with properties are closed: no other keys.
    assert_eq!(value.as_object().map(|m| m.len()), Some(2), "{value}");
    assert_eq!(inline["done_reason"], "stop");
    assert_eq!(inline["mode"], "greedy-mtp");
    assert!(
        inline["mtp"]["forced"].as_u64().expect("forced") > 0,
        "{inline}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("schema.json");
    std::fs::write(&file, SCHEMA).expect("write the schema");
    let from_file = generate(&["--json-schema", file.to_str().expect("utf-8 path")]);
    assert_eq!(from_file["text"], inline["text"]);
    let plain = generate(&["--json-schema", SCHEMA, "--no-draft"]);
    assert_eq!(
        plain["tokens"], inline["tokens"],
        "speculation changed the output"
    );
}

#[test]
fn a_regex_constrains_the_whole_text() {
    let out = generate(&["--regex", "(yes|no)\\. [A-Z][a-z]{2,6}\\."]);
    let text = out["text"].as_str().expect("text");
    let (answer, rest) = text.split_once(". ").expect("two sentences");
    assert!(answer == "yes" || answer == "no", "{text:?}");
    assert!(rest.ends_with('.') && rest.len() <= 8, "{text:?}");
}

#[test]
fn bad_formats_are_clear_errors() {
    assert_fails_with(
        mtp().args([
            "generate",
            "--json-schema",
            r#"{"type": "object", "if": {}}"#,
            "x",
        ]),
        "if",
    );
    assert_fails_with(
        mtp().args(["generate", "--json-schema", "{not json", "x"]),
        "is not JSON",
    );
    assert_fails_with(
        mtp().args(["generate", "--json-schema", "/nonexistent/schema.json", "x"]),
        "cannot read the file",
    );
    assert_fails_with(
        mtp().args(["generate", "--format", "json", "--regex", "a", "x"]),
        "cannot be used with",
    );
}
