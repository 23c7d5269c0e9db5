//! Structured outputs in both APIs: ollama's `format` and OpenAI's `response_format` read into
//! an [`OutputFormat`], compiled for the loaded model into the request's constraint.

use mtp_core::constraint::ConstraintSource;
use serde_json::Value;

use super::engine::Finished;
use super::error::{Api, ApiError};
use super::request::AppState;
use crate::structured::OutputFormat;

/// ollama's `format`: `"json"` (any JSON object), a JSON schema (an object), or nothing
/// (`null`, `""`).
pub fn ollama_format(format: Option<&Value>) -> Result<Option<OutputFormat>, ApiError> {
    match format {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(OutputFormat::JsonObject)),
        Some(Value::Object(_)) => Ok(Some(OutputFormat::JsonSchema(
            format.cloned().unwrap_or_default(),
        ))),
        Some(other) => Err(ApiError::bad_request(
            Api::Ollama,
            format!("`format` must be \"json\" or a JSON schema object, got {other}"),
        )),
    }
}

/// OpenAI's `response_format`: `{"type": "text"}`, `{"type": "json_object"}` or
/// `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`.
pub fn openai_response_format(format: Option<&Value>) -> Result<Option<OutputFormat>, ApiError> {
    let bad = |param: &str, message: String| {
        Err(ApiError::bad_request(Api::OpenAi, message).with_param(param))
    };
    let Some(format) = format.filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    let Some(kind) = format.get("type").and_then(Value::as_str) else {
        return bad(
            "response_format.type",
            "response_format needs a `type`: text, json_object or json_schema".into(),
        );
    };
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(OutputFormat::JsonObject)),
        "json_schema" => {
            let Some(spec) = format.get("json_schema").filter(|s| s.is_object()) else {
                return bad(
                    "response_format.json_schema",
                    "response_format of type json_schema needs a `json_schema` object with \
                     `name` and `schema`"
                        .into(),
                );
            };
            if spec
                .get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return bad(
                    "response_format.json_schema.name",
                    "response_format.json_schema needs a `name`".into(),
                );
            }
            match spec.get("schema") {
                // OpenAI accepts a json_schema without a schema: any JSON value.
                None | Some(Value::Null) => Ok(Some(OutputFormat::JsonSchema(Value::Bool(true)))),
                Some(schema @ (Value::Object(_) | Value::Bool(_))) => {
                    Ok(Some(OutputFormat::JsonSchema(schema.clone())))
                }
                Some(other) => bad(
                    "response_format.json_schema.schema",
                    format!("response_format.json_schema.schema must be a JSON schema object, got {other}"),
                ),
            }
        }
        other => bad(
            "response_format.type",
            format!("response_format type `{other}` is not one of text, json_object, json_schema"),
        ),
    }
}

impl AppState {
    /// `format` compiled for the loaded model, off the async threads (the first compile builds
    /// the vocabulary's token trie); a 400 naming `field` when it is invalid or unsupported.
    pub async fn constraint(
        &self,
        api: Api,
        field: &'static str,
        format: Option<OutputFormat>,
    ) -> Result<Option<ConstraintSource>, ApiError> {
        let Some(format) = format else {
            return Ok(None);
        };
        let engine = self.engine.clone();
        let source = self
            .off_runtime(api, move || {
                engine.constraint(&format).map_err(|e| {
                    ApiError::bad_request(api, format!("`{field}`: {e}")).with_param(field)
                })
            })
            .await?;
        Ok(Some(source))
    }
}

/// `Some("incomplete")` when `done` ended a structured output whose grammar was still open
/// (the extension field both APIs add to their last object).
pub fn incomplete(done: &Finished) -> Option<&'static str> {
    (done.structured_complete == Some(false)).then_some("incomplete")
}
