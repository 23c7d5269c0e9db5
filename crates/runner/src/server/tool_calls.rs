//! Tools in both APIs: a request's `tools` and `tool_choice` checked against the model's chat
//! template, the tools rendered by it, a forced call made a grammar, and the generated text
//! split into content and `tool_calls`.

use serde_json::{json, Map, Value};

use super::error::{Api, ApiError};
use super::request::AppState;
use crate::structured::OutputFormat;
use crate::tokenizer::ChatOptions;
use crate::tools::{call_grammar, Split, ToolCall, ToolChoice, ToolSyntax};

pub use super::reply::ReplySplitter;

/// Most tools one request may declare.
pub const MAX_TOOLS: usize = 128;

/// A request's tools, checked.
#[derive(Debug, Clone)]
pub struct RequestTools {
    /// The declarations as the client sent them (`{"type": "function", "function": {...}}`).
    pub list: Vec<Value>,
    /// Their names, in order.
    pub names: Vec<String>,
    /// Which calls are allowed.
    pub choice: ToolChoice,
    /// The model's call syntax (from its chat template).
    pub syntax: ToolSyntax,
}

/// `tools` and `tool_choice` of a request: `None` when it has no tools (a `tool_choice` that
/// needs one is then refused), else the checked tools; refused when the model's chat template
/// renders no tool calls, a declaration has no function name, or the choice names no tool.
pub fn read_tools(
    state: &AppState,
    api: Api,
    tools: Option<&[Value]>,
    tool_choice: Option<&Value>,
) -> Result<Option<RequestTools>, ApiError> {
    let bad = |param: &str, message: String| ApiError::bad_request(api, message).with_param(param);
    let tools = tools.unwrap_or_default();
    let choice = match tool_choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) if s == "auto" => ToolChoice::Auto,
        Some(Value::String(s)) if s == "none" => ToolChoice::None,
        Some(Value::String(s)) if s == "required" => ToolChoice::Required,
        Some(v @ Value::Object(_)) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => ToolChoice::Named(name.to_string()),
            None => {
                return Err(bad(
                    "tool_choice",
                    "tool_choice names a function as {\"type\": \"function\", \"function\": \
                     {\"name\": ...}}"
                        .into(),
                ))
            }
        },
        Some(other) => {
            return Err(bad(
                "tool_choice",
                format!(
                    "tool_choice must be auto, none, required or a named function, got {other}"
                ),
            ))
        }
    };
    if tools.is_empty() {
        return match choice {
            ToolChoice::Auto | ToolChoice::None => Ok(None),
            _ => Err(bad(
                "tool_choice",
                "tool_choice asks for a tool call but the request declares no tools".into(),
            )),
        };
    }
    if tools.len() > MAX_TOOLS {
        return Err(bad(
            "tools",
            format!(
                "at most {MAX_TOOLS} tools are accepted, got {}",
                tools.len()
            ),
        ));
    }
    let template = state
        .engine
        .chat_template()
        .map_err(|e| bad("tools", format!("`tools`: {e}")))?;
    let syntax = template.tool_syntax().cloned().ok_or_else(|| {
        bad(
            "tools",
            format!(
                "`tools`: the model's chat template ({}) renders no tool calls; serve it with a \
                 template that does (--chat-template)",
                template.path().display()
            ),
        )
    })?;
    let mut names = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let kind = tool
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("function");
        if kind != "function" {
            return Err(bad(
                &format!("tools[{i}].type"),
                format!("tools[{i}] is of type {kind:?}; only functions are supported"),
            ));
        }
        let name = tool
            .pointer("/function/name")
            .and_then(Value::as_str)
            .filter(|n| {
                !n.is_empty()
                    && n.len() <= 64
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
            })
            .ok_or_else(|| {
                bad(
                    &format!("tools[{i}].function.name"),
                    format!(
                        "tools[{i}] needs a function name of letters, digits, `_`, `-` or `.` \
                         (at most 64)"
                    ),
                )
            })?;
        names.push(name.to_string());
    }
    if let ToolChoice::Named(name) = &choice {
        if !names.contains(name) {
            return Err(bad(
                "tool_choice",
                format!("tool_choice names {name:?}, which is not among the request's tools"),
            ));
        }
    }
    Ok(Some(RequestTools {
        list: tools.to_vec(),
        names,
        choice,
        syntax,
    }))
}

impl RequestTools {
    /// The chat options that render the tools (none for `tool_choice: none`).
    pub fn chat_options(&self) -> ChatOptions {
        let mut options = ChatOptions::default();
        if self.choice != ToolChoice::None {
            options
                .extra
                .insert("tools".into(), minijinja::Value::from_serialize(&self.list));
        }
        options
    }

    /// The grammar of a forced call (`required` or a named tool); `None` otherwise.
    pub fn grammar(&self, state: &AppState) -> Option<OutputFormat> {
        let wanted = |name: &String| match &self.choice {
            ToolChoice::Auto | ToolChoice::None => false,
            ToolChoice::Required => true,
            ToolChoice::Named(n) => n == name,
        };
        let tools: Vec<(String, Value)> = self
            .names
            .iter()
            .zip(&self.list)
            .filter(|(name, _)| wanted(name))
            .map(|(name, tool)| {
                let parameters = tool.pointer("/function/parameters").cloned();
                (name.clone(), parameters.unwrap_or(Value::Null))
            })
            .collect();
        if tools.is_empty() {
            return None;
        }
        let tokenizer = state.engine.tokenizer().inner();
        let marker = |m: &str| tokenizer.token_to_id(m);
        Some(OutputFormat::Lark(call_grammar(
            &self.syntax,
            &tools,
            &marker,
        )))
    }

    /// Whether calls are looked for in the output.
    pub fn parses_calls(&self) -> bool {
        self.choice != ToolChoice::None
    }
}

/// A call in OpenAI's shape: `{"id", "type": "function", "function": {"name", "arguments":
/// "<JSON text>"}}`.
pub fn openai_call(call: &ToolCall, id: String) -> Value {
    openai_shape(call, id, arguments_text(call))
}

/// The JSON text of a call's arguments.
fn arguments_text(call: &ToolCall) -> String {
    Value::Object(call.arguments.clone()).to_string()
}

fn openai_shape(call: &ToolCall, id: String, arguments: String) -> Value {
    json!({
        "id": id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    })
}

/// A call in ollama's shape: `{"function": {"name", "arguments": {...}}}`.
pub fn ollama_call(call: &ToolCall) -> Value {
    json!({"function": {"name": call.name, "arguments": call.arguments}})
}

/// A call of a request's conversation (either API's shape; OpenAI's arguments are JSON text)
/// in the shape chat templates read: `{"type": "function", "function": {"name", "arguments":
/// {...}}}`.
pub fn template_call(api: Api, call: &Value, at: &str) -> Result<Value, ApiError> {
    let bad = |message: String| ApiError::bad_request(api, message).with_param(at);
    let name = call
        .pointer("/function/name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("{at} needs function.name")))?;
    let arguments = match call.pointer("/function/arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(Value::String(text)) => match serde_json::from_str(text) {
            Ok(Value::Object(map)) => map,
            _ => return Err(bad(format!("{at}.function.arguments is not a JSON object"))),
        },
        Some(_) => return Err(bad(format!("{at}.function.arguments is not a JSON object"))),
    };
    Ok(json!({"type": "function", "function": {"name": name, "arguments": arguments}}))
}

/// A call cut short in OpenAI's shape: `arguments` is the JSON text of the arguments written in
/// full, left open (no closing `}`), as OpenAI's own arguments are when `max_tokens` ends a
/// call — it does not parse, and `finish_reason` says `length`.
pub fn openai_cut_call(call: &ToolCall, id: String) -> Value {
    let mut text = arguments_text(call);
    text.pop();
    openai_shape(call, id, text)
}

/// Split pieces gathered: the content, the complete calls and the call cut short, if any.
#[derive(Debug, Default)]
pub(super) struct Gathered {
    pub content: String,
    pub calls: Vec<ToolCall>,
    pub cut: Option<ToolCall>,
}

/// The content and the calls of split pieces.
pub(super) fn gather(pieces: Vec<Split>) -> Gathered {
    let mut out = Gathered::default();
    for piece in pieces {
        match piece {
            Split::Text(t) => out.content.push_str(&t),
            Split::Call(c) => out.calls.push(c),
            Split::Cut(c) => out.cut = Some(c),
        }
    }
    out
}
