//! What the generated text must be, and its llguidance grammar.

use llguidance::api::TopLevelGrammar;
use serde_json::{json, Value};

use super::StructuredError;

/// Most bytes of a schema, regex or grammar a request may give (a bigger one is refused
/// before it is compiled).
pub const MAX_GRAMMAR_BYTES: usize = 256 * 1024;

/// What the generated text must be.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputFormat {
    /// Any JSON object (ollama's `format: "json"`, OpenAI's `json_object`).
    JsonObject,
    /// A JSON value that matches a JSON schema (draft 2020-12 keywords that llguidance
    /// supports; an unsupported keyword is refused, not ignored).
    JsonSchema(Value),
    /// Text that matches a regular expression (whole text).
    Regex(String),
    /// Text of a Lark grammar (llguidance's dialect, with `%json` for embedded schemas).
    Lark(String),
}

impl OutputFormat {
    /// The llguidance grammar of this format; an error when it is too big.
    pub fn grammar(&self) -> Result<TopLevelGrammar, StructuredError> {
        let size = match self {
            OutputFormat::JsonObject => 0,
            OutputFormat::JsonSchema(schema) => schema.to_string().len(),
            OutputFormat::Regex(s) | OutputFormat::Lark(s) => s.len(),
        };
        if size > MAX_GRAMMAR_BYTES {
            return Err(StructuredError::InvalidFormat(format!(
                "the format is {size} bytes; at most {MAX_GRAMMAR_BYTES} are accepted"
            )));
        }
        Ok(match self {
            OutputFormat::JsonObject => {
                TopLevelGrammar::from_json_schema(with_layout(json!({"type": "object"})))
            }
            OutputFormat::JsonSchema(schema) => {
                TopLevelGrammar::from_json_schema(with_layout(schema.clone()))
            }
            OutputFormat::Regex(rx) => TopLevelGrammar::from_regex(rx),
            OutputFormat::Lark(lark) => TopLevelGrammar::from_lark(lark.clone()),
        })
    }
}

/// `schema` with the JSON layout of Python's `json.dumps` (`", "`, `": "`, no other
/// whitespace) unless it sets llguidance's `x-guidance` options itself. A boolean schema is
/// wrapped (`true` is any value, `false` none).
fn with_layout(schema: Value) -> Value {
    let mut schema = match schema {
        Value::Bool(true) => json!({}),
        Value::Bool(false) => json!({"not": {}}),
        other => other,
    };
    if let Value::Object(map) = &mut schema {
        map.entry("x-guidance").or_insert_with(|| {
            json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            })
        });
    }
    schema
}
