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
    /// The format as JSON, for reports: `{"json_object": true}`, `{"json_schema": ...}`,
    /// `{"regex": ...}` or `{"lark": ...}`.
    pub fn describe(&self) -> Value {
        match self {
            OutputFormat::JsonObject => json!({"json_object": true}),
            OutputFormat::JsonSchema(schema) => json!({"json_schema": schema}),
            OutputFormat::Regex(rx) => json!({"regex": rx}),
            OutputFormat::Lark(lark) => json!({"lark": lark}),
        }
    }

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

/// Every object schema that lists `properties` and says nothing of other keys gets
/// `additionalProperties: false`, recursively (through `properties`, `$defs`, `items`,
/// `anyOf`, ...): the default of llama.cpp's schema converter (and so of ollama) and of
/// XGrammar's strict mode, and what OpenAI's `strict` requires. Without it a schema allows any
/// extra key, and a small model fills an object with invented ones. A schema that wants extra
/// keys says so (`additionalProperties: true` or a schema, or `patternProperties`).
fn close_objects(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    if map.contains_key("properties")
        && !map.contains_key("additionalProperties")
        && !map.contains_key("patternProperties")
        && !map.contains_key("unevaluatedProperties")
    {
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    for key in [
        "properties",
        "$defs",
        "definitions",
        "dependentSchemas",
        "patternProperties",
    ] {
        if let Some(Value::Object(schemas)) = map.get_mut(key) {
            schemas.values_mut().for_each(close_objects);
        }
    }
    for key in [
        "items",
        "additionalProperties",
        "not",
        "if",
        "then",
        "else",
        "contains",
    ] {
        if let Some(sub) = map.get_mut(key) {
            close_objects(sub);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(schemas)) = map.get_mut(key) {
            schemas.iter_mut().for_each(close_objects);
        }
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
    close_objects(&mut schema);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_with_properties_are_closed_unless_they_say_otherwise() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "properties": {"type": "object", "properties": {"a": {"type": "integer"}}},
                "open": {"type": "object", "properties": {}, "additionalProperties": true},
                "list": {"type": "array", "items": {"properties": {"b": {}}}},
            },
            "$defs": {"D": {"properties": {"c": {}}}},
            "anyOf": [{"properties": {"d": {}}}, {"type": "object"}],
        });
        close_objects(&mut schema);
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(
            schema["properties"]["properties"]["additionalProperties"],
            false
        );
        assert!(schema["properties"]["properties"]["properties"]
            .get("additionalProperties")
            .is_none());
        assert_eq!(schema["properties"]["open"]["additionalProperties"], true);
        assert_eq!(
            schema["properties"]["list"]["items"]["additionalProperties"],
            false
        );
        assert_eq!(schema["$defs"]["D"]["additionalProperties"], false);
        assert_eq!(schema["anyOf"][0]["additionalProperties"], false);
        // No `properties`: any object (`format: "json"`).
        assert!(schema["anyOf"][1].get("additionalProperties").is_none());
    }
}
