//! Structured outputs through the pipeline: JSON schemas compiled by llguidance over the
//! model's own tokenizer constrain generation on the committed default pair (its 4096-token
//! byte-fallback BPE) and on the real model (Gemma 3 270M's GGUF-built tokenizer, when fetched).
//!
//! * 60 random schemas (objects, nested objects, arrays, enums, bounded strings, numbers and
//!   integers in ranges), greedy and sampled: every output parses and validates against its schema (a
//!   validator written here for the keywords the generator uses, independent of llguidance);
//!   greedy constrained MTP emits exactly the tokens of greedy constrained plain decoding.
//! * Invalid and unsupported schemas are refused with the keyword named.
//! * A schema still open at the token budget ends with `length` and says so.

mod gguf_support;
mod server_support;

use backend_candle::CandleBackend;
use mtp_core::engine::{CancelToken, DoneReason, GenerateRequest, Response};
use mtp_core::options::DraftOverrides;
use mtp_core::proposer::NgramOptions;
use mtp_core::sampling::SamplerOptions;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use runner::structured::OutputFormat;
use runner::{ModelPaths, Pipeline, PromptFormat};
use serde_json::{json, Map, Value};

const SCHEMAS: u64 = 60;

/// A random schema of bounded strings and arrays: every string has a `maxLength`, every array
/// a `maxItems`, every object `additionalProperties: false` with all its properties required;
/// numbers and integers in ranges, half-open or unbounded (the grammar bounds their digits).
fn random_schema(rng: &mut ChaCha8Rng, depth: usize) -> Value {
    let kinds = if depth >= 2 { 7 } else { 9 };
    match rng.random_range(0..kinds) {
        0 => json!({"type": "string", "maxLength": rng.random_range(1..10)}),
        1 => {
            let lo = rng.random_range(-50..50);
            json!({"type": "integer", "minimum": lo, "maximum": lo + rng.random_range(0..200)})
        }
        2 => json!({"type": "boolean"}),
        3 => {
            let words = ["red", "green", "blue", "light", "dark", "sea", "stone"];
            let n = rng.random_range(1..5);
            let picked: Vec<&str> = words.iter().take(n).copied().collect();
            json!({"enum": picked})
        }
        4 => json!({"type": "integer", "minimum": 0, "maximum": 9}),
        5 => match rng.random_range(0..3) {
            0 => json!({"type": "integer"}),
            1 => json!({"type": "integer", "minimum": rng.random_range(-50..50)}),
            _ => json!({"type": "integer", "maximum": rng.random_range(-50..50)}),
        },
        6 => match rng.random_range(0..3) {
            0 => json!({"type": "number"}),
            1 => json!({"type": "number", "minimum": 0}),
            _ => json!({"type": "number", "minimum": -1, "maximum": 1}),
        },
        7 => json!({
            "type": "array",
            "items": random_schema(rng, depth + 1),
            "maxItems": rng.random_range(1..4),
        }),
        _ => object_schema(rng, depth + 1),
    }
}

fn object_schema(rng: &mut ChaCha8Rng, depth: usize) -> Value {
    let names = ["name", "age", "city", "tags", "ok", "score", "kind", "note"];
    let n = rng.random_range(1..5);
    let mut properties = Map::new();
    for name in names.iter().take(n) {
        properties.insert(name.to_string(), random_schema(rng, depth));
    }
    let required: Vec<&str> = names.iter().take(n).copied().collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// Whether `v` satisfies `schema` (the keywords [`random_schema`] uses); the first violation.
fn validate(v: &Value, schema: &Value, at: &str) -> Result<(), String> {
    let fail = |what: &str| Err(format!("{at}: {what} (value {v}, schema {schema})"));
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        return if options.contains(v) {
            Ok(())
        } else {
            fail("not in the enum")
        };
    }
    let num = |k: &str| schema.get(k).and_then(Value::as_f64);
    match schema["type"].as_str() {
        Some("string") => {
            let Some(s) = v.as_str() else {
                return fail("not a string");
            };
            if let Some(max) = schema["maxLength"].as_u64() {
                if s.chars().count() as u64 > max {
                    return fail("longer than maxLength");
                }
            }
        }
        Some("integer") | Some("number") => {
            let Some(x) = v.as_f64() else {
                return fail("not a number");
            };
            // JSON Schema's integers are numbers without a fraction (`-0` included).
            if schema["type"] == "integer" && x.fract() != 0.0 {
                return fail("not an integer");
            }
            if num("minimum").is_some_and(|m| x < m) || num("maximum").is_some_and(|m| x > m) {
                return fail("out of range");
            }
        }
        Some("boolean") => {
            if !v.is_boolean() {
                return fail("not a boolean");
            }
        }
        Some("array") => {
            let Some(items) = v.as_array() else {
                return fail("not an array");
            };
            if schema["maxItems"]
                .as_u64()
                .is_some_and(|m| items.len() as u64 > m)
            {
                return fail("more than maxItems");
            }
            for (i, item) in items.iter().enumerate() {
                validate(item, &schema["items"], &format!("{at}[{i}]"))?;
            }
        }
        Some("object") => {
            let Some(map) = v.as_object() else {
                return fail("not an object");
            };
            let properties = schema["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            for key in schema["required"].as_array().into_iter().flatten() {
                if !map.contains_key(key.as_str().unwrap_or_default()) {
                    return fail(&format!("missing required {key}"));
                }
            }
            for (key, value) in map {
                match properties.get(key) {
                    Some(s) => validate(value, s, &format!("{at}.{key}"))?,
                    None if schema["additionalProperties"] == false => {
                        return fail(&format!("unexpected property {key}"))
                    }
                    None => {}
                }
            }
        }
        _ => return fail("unknown schema type"),
    }
    Ok(())
}

/// The longest integer part, fraction and exponent (in digits) of the numbers in JSON `text`,
/// read outside its strings.
fn longest_number_parts(text: &str) -> [usize; 3] {
    let mut longest = [0; 3];
    let (mut in_string, mut escaped) = (false, false);
    let mut part: Option<usize> = None;
    let mut count = 0;
    for c in text.chars() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, part) {
            ('0'..='9', Some(p)) => {
                count += 1;
                longest[p] = longest[p].max(count);
            }
            ('0'..='9', None) => {
                part = Some(0);
                count = 1;
                longest[0] = longest[0].max(1);
            }
            ('-', None) => {
                part = Some(0);
                count = 0;
            }
            ('.', Some(0)) => {
                part = Some(1);
                count = 0;
            }
            ('e' | 'E', Some(0 | 1)) => {
                part = Some(2);
                count = 0;
            }
            ('+' | '-', Some(2)) if count == 0 => {}
            _ => {
                part = None;
                in_string = c == '"';
            }
        }
    }
    longest
}

/// The numbers of `text` keep within the grammar's bounds.
fn assert_numbers_bounded(text: &str) {
    let [integer, fraction, exponent] = longest_number_parts(text);
    assert!(
        integer <= runner::structured::MAX_INTEGER_DIGITS as usize
            && fraction <= runner::structured::MAX_FRACTION_DIGITS as usize
            && exponent <= runner::structured::MAX_EXPONENT_DIGITS as usize,
        "{text:?}: digits {integer}.{fraction}e{exponent}"
    );
}

fn default_pair() -> Pipeline<CandleBackend> {
    Pipeline::load(
        CandleBackend::cpu(),
        &server_support::pair(),
        &Default::default(),
    )
    .expect("the default pair loads")
}

fn generate(p: &Pipeline<CandleBackend>, request: &GenerateRequest) -> (Response, String) {
    let out = p
        .generate_text(
            request,
            &mut |_| mtp_core::engine::SinkFlow::Continue,
            &CancelToken::new(),
        )
        .expect("generation runs");
    (out.response, out.text)
}

fn plain(mut request: GenerateRequest) -> GenerateRequest {
    request.draft = DraftOverrides {
        enabled: Some(false),
        ..DraftOverrides::default()
    };
    request
}

#[test]
fn random_schemas_are_followed_greedy_and_sampled_and_speculation_changes_nothing() {
    let p = default_pair();
    let prompt = p
        .encode("And God said, ", PromptFormat::Raw)
        .expect("prompt");
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let (mut forced, mut mtp_rounds) = (0, 0);
    for i in 0..SCHEMAS {
        let schema = object_schema(&mut rng, 0);
        let constraint = p
            .constraint(&OutputFormat::JsonSchema(schema.clone()))
            .unwrap_or_else(|e| panic!("schema {schema} compiles: {e}"));
        let mut request = GenerateRequest::greedy(prompt.clone(), 400);
        request.eos = p.tokenizer().eos_ids().to_vec();
        request.constraint = Some(constraint);
        request.draft = DraftOverrides {
            schedule: Some(mtp_core::schedule::ScheduleKind::Constant),
            ..DraftOverrides::default()
        };
        if i % 2 == 1 {
            request.sampling = SamplerOptions {
                temperature: 1.0,
                top_k: 40,
                seed: Some(i),
                ..SamplerOptions::default()
            };
        }
        let (response, text) = generate(&p, &request);
        assert_eq!(
            response.done_reason,
            DoneReason::Stop,
            "schema {schema}: {text:?}"
        );
        assert_eq!(response.constraint_complete, Some(true));
        let value: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("schema {schema}: {text:?} does not parse: {e}"));
        validate(&value, &schema, "$").unwrap_or_else(|e| panic!("{e}"));
        assert_numbers_bounded(&text);
        let stats = response.mtp.expect("speculative decoding");
        forced += stats.forced;
        mtp_rounds += stats.batched_rounds;
        if request.sampling.temperature == 0.0 {
            let (reference, plain_text) = generate(&p, &plain(request.clone()));
            assert_eq!(response.tokens, reference.tokens, "schema {schema}");
            assert_eq!(text, plain_text);
        }
    }
    assert!(
        forced > 0 && mtp_rounds > 0,
        "forced {forced}, rounds {mtp_rounds}"
    );
}

#[test]
fn open_numbers_end_within_their_bounds_and_a_schema_that_needs_more_digits_gets_them() {
    let p = default_pair();
    let schemas = [
        json!({"type": "object", "properties": {"count": {"type": "integer"}},
               "required": ["count"]}),
        json!({"type": "object", "properties": {"score": {"type": "number"}},
               "required": ["score"]}),
        json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0},
                                               "x": {"type": "number", "maximum": 1}},
               "required": ["n", "x"]}),
        json!({"type": "array", "items": {"type": "number"}, "maxItems": 4}),
        json!({"type": "object", "properties": {"v": {}}, "required": ["v"]}),
    ];
    let prompts = [
        "Count the sheep: ",
        "In the beginning ",
        "And the number was ",
    ];
    for (i, schema) in schemas.iter().enumerate() {
        for (j, prompt) in prompts.iter().enumerate() {
            let mut request =
                GenerateRequest::greedy(p.encode(prompt, PromptFormat::Raw).expect("prompt"), 400);
            request.eos = p.tokenizer().eos_ids().to_vec();
            request.constraint = Some(
                p.constraint(&OutputFormat::JsonSchema(schema.clone()))
                    .expect("schema"),
            );
            if j == 2 {
                request.sampling = SamplerOptions {
                    temperature: 0.8,
                    top_k: 40,
                    top_p: 0.9,
                    seed: Some(i as u64),
                    ..SamplerOptions::default()
                };
            }
            let (response, text) = generate(&p, &request);
            assert_eq!(response.done_reason, DoneReason::Stop, "{schema}: {text:?}");
            let value: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{schema}: {text:?} does not parse: {e}"));
            if schema
                .get("properties")
                .is_some_and(|p| p.get("v").is_none())
            {
                validate(&value, schema, "$").unwrap_or_else(|e| panic!("{e}"));
            }
            assert_numbers_bounded(&text);
            if j < 2 {
                let (reference, _) = generate(&p, &plain(request.clone()));
                assert_eq!(response.tokens, reference.tokens, "{schema}");
            }
        }
    }
    // A schema that needs a longer number than the bound gets it.
    let long = "123456789012345678";
    let needs = |keyword: &str| -> Value {
        let text = format!(
            r#"{{"type": "object", "properties": {{"n": {{"type": "integer", "{keyword}": {long}}}}},
                "required": ["n"]}}"#
        );
        serde_json::from_str(&text).expect("schema")
    };
    for schema in [needs("minimum"), needs("const")] {
        let mut request = GenerateRequest::greedy(
            p.encode("Count the sheep: ", PromptFormat::Raw)
                .expect("prompt"),
            400,
        );
        request.eos = p.tokenizer().eos_ids().to_vec();
        request.constraint = Some(
            p.constraint(&OutputFormat::JsonSchema(schema.clone()))
                .expect("schema"),
        );
        let (response, text) = generate(&p, &request);
        let value: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{schema}: {text:?} does not parse: {e}"));
        assert_eq!(response.done_reason, DoneReason::Stop, "{schema}: {text:?}");
        assert!(value["n"].as_f64().is_some_and(|n| n >= 1e17), "{text:?}");
    }
}

#[test]
fn bad_schemas_are_refused_with_the_keyword_named() {
    let p = default_pair();
    let cases = [
        (json!({"type": "objectx"}), "objectx"),
        (json!({"type": "object", "if": {"type": "object"}}), "if"),
        (
            json!({"type": "string", "pattern": "(unclosed"}),
            "unclosed",
        ),
    ];
    for (schema, named) in cases {
        let err = p
            .constraint(&OutputFormat::JsonSchema(schema.clone()))
            .expect_err("an invalid schema is refused");
        assert!(err.to_string().contains(named), "{schema}: {err}");
    }
    let big = json!({"type": "string", "description": "x".repeat(300_000)});
    let err = p
        .constraint(&OutputFormat::JsonSchema(big))
        .expect_err("too big");
    assert!(err.to_string().contains("at most"), "{err}");
    assert!(p.constraint(&OutputFormat::Regex("[".into())).is_err());
}

#[test]
fn a_schema_open_at_the_budget_ends_with_length_and_says_so() {
    let p = default_pair();
    let prompt = p
        .encode("And God said, ", PromptFormat::Raw)
        .expect("prompt");
    let schema = json!({"type": "object", "properties": {"text": {"type": "string"}},
                        "required": ["text"]});
    let mut request = GenerateRequest::greedy(prompt, 6);
    request.constraint = Some(
        p.constraint(&OutputFormat::JsonSchema(schema))
            .expect("schema"),
    );
    let (response, text) = generate(&p, &request);
    assert_eq!(response.done_reason, DoneReason::Length);
    assert_eq!(response.constraint_complete, Some(false), "{text:?}");
    assert!(text.starts_with("{\"text\":"), "{text:?}");
}

#[test]
fn regex_and_json_object_formats() {
    let p = default_pair();
    let prompt = p
        .encode("And God said, ", PromptFormat::Raw)
        .expect("prompt");
    let mut request = GenerateRequest::greedy(prompt, 60);
    request.eos = p.tokenizer().eos_ids().to_vec();
    request.constraint = Some(
        p.constraint(&OutputFormat::Regex("(yes|no), [a-z]{1,8}\\.".into()))
            .expect("regex"),
    );
    let (response, text) = generate(&p, &request);
    assert_eq!(response.done_reason, DoneReason::Stop, "{text:?}");
    let (answer, word) = text.split_once(", ").expect("two parts");
    assert!(answer == "yes" || answer == "no", "{text:?}");
    assert!(word.ends_with('.') && word.len() <= 9, "{text:?}");

    request.constraint = Some(p.constraint(&OutputFormat::JsonObject).expect("json"));
    request.num_predict = 300;
    let (response, text) = generate(&p, &request);
    if response.done_reason == DoneReason::Stop {
        let v: Value = serde_json::from_str(&text).expect("parses");
        assert!(v.is_object(), "{text:?}");
    } else {
        assert_eq!(response.constraint_complete, Some(false));
        assert!(text.starts_with('{'), "{text:?}");
    }
}

#[test]
fn real_model_json_schemas_with_lookup_equal_plain() {
    let Some(path) = gguf_support::real_model("real_model_json_schemas_with_lookup_equal_plain")
    else {
        return;
    };
    let paths = ModelPaths {
        target: path,
        drafter: None,
        draft_centroids: None,
        tokenizer: None,
        chat_template: None,
    };
    let p = Pipeline::load(CandleBackend::cpu(), &paths, &Default::default())
        .expect("the real model loads")
        .with_ngram(Some(NgramOptions::default()));
    let schemas = [
        json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
               "city": {"type": "string"}}, "required": ["name", "age", "city"],
               "additionalProperties": false}),
        json!({"type": "object", "properties": {"title": {"type": "string", "maxLength": 40},
               "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
               "rating": {"enum": ["good", "bad"]}}, "required": ["title", "tags", "rating"],
               "additionalProperties": false}),
    ];
    let prompts = ["A person record in JSON: ", "A book review as JSON: "];
    for (schema, text) in schemas.iter().zip(prompts) {
        let prompt = p.encode(text, PromptFormat::Raw).expect("prompt");
        let mut request = GenerateRequest::greedy(prompt, 120);
        request.eos = p.tokenizer().eos_ids().to_vec();
        request.constraint = Some(
            p.constraint(&OutputFormat::JsonSchema(schema.clone()))
                .expect("schema"),
        );
        let (response, out) = generate(&p, &request);
        let (reference, plain_out) = generate(&p, &plain(request.clone()));
        assert_eq!(response.tokens, reference.tokens, "{schema}");
        assert_eq!(out, plain_out);
        if response.done_reason == DoneReason::Stop {
            let value: Value = serde_json::from_str(&out).expect("parses");
            assert!(value.is_object(), "{out:?}");
        }
        let stats = response.mtp.expect("speculative");
        assert!(stats.forced > 0, "{stats:?}");
    }
}
