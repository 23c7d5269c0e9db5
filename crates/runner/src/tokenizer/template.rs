//! The checkpoint's own chat template, rendered with `minijinja` the way HF transformers'
//! `apply_chat_template` renders it.
//!
//! HF compiles a template in a Jinja2 sandbox with `trim_blocks` and `lstrip_blocks`, the
//! `loopcontrols` extension, the globals `raise_exception` and `strftime_now`, and a `tojson`
//! filter that is Python's `json.dumps` (no HTML escaping, `", "`/`": "` separators,
//! non-ASCII kept). It renders with the conversation, `add_generation_prompt`, the special
//! tokens' strings (`bos_token`, `eos_token`, ...) and any extra keyword (`enable_thinking`).
//! Python string and dict methods (`.strip()`, `.split()`, `.get()`, `.items()`, ...) come from
//! `minijinja-contrib`'s pycompat, and values print as Python prints them (`True`, `None`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};
use serde::{Deserialize, Serialize};

use super::error::{TokenizerError, TokenizerResult};
use super::json_text::python_json;

/// The name the template is registered under in its environment.
const TEMPLATE_NAME: &str = "chat_template";

/// One message of a conversation, as chat templates read it (`message['role']`,
/// `message['content']`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant` (templates map it to their own names).
    pub role: String,
    /// The text, or a list of typed parts.
    pub content: ChatContent,
    /// The model's reasoning for an assistant message, passed as HF passes it
    /// (`reasoning_content`, also as `thinking`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// An assistant message's tool calls in HF's shape (`{"type": "function", "function":
    /// {"name", "arguments": {...}}}`), as chat templates read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<serde_json::Value>,
    /// A tool message's tool name (`name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message with plain text content.
    pub fn text(role: &str, content: &str) -> Self {
        Self {
            role: role.to_string(),
            content: ChatContent::Text(content.to_string()),
            reasoning_content: None,
            tool_calls: Vec::new(),
            name: None,
        }
    }
}

/// A message's content: a string, or parts (`{"type": "text", "text": ...}`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ChatContent {
    /// Plain text.
    Text(String),
    /// Typed parts, passed to the template as they are (keys in their order).
    Parts(Vec<Value>),
}

/// How a conversation is rendered.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatOptions {
    /// End with the start of the model's turn (HF's `add_generation_prompt`; default true).
    pub add_generation_prompt: bool,
    /// Extra template variables (`enable_thinking`, `tools`, ...), as HF's keyword arguments.
    pub extra: BTreeMap<String, Value>,
}

impl Default for ChatOptions {
    fn default() -> Self {
        Self {
            add_generation_prompt: true,
            extra: BTreeMap::new(),
        }
    }
}

/// A compiled chat template with the special-token strings it renders with.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    reads_parts: bool,
    tool_syntax: Option<crate::tools::ToolSyntax>,
    thinking_syntax: Option<crate::thinking::ThinkingSyntax>,
    path: PathBuf,
    special_tokens: BTreeMap<String, String>,
}

impl ChatTemplate {
    /// Compile `source` (read from `path`, named in errors); `special_tokens` maps names such as
    /// `bos_token` to their strings.
    pub fn new(
        source: &str,
        path: &Path,
        special_tokens: BTreeMap<String, String>,
    ) -> TokenizerResult<Self> {
        let mut env = hf_environment();
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| template_error(path, &e))?;
        Ok(Self {
            env,
            reads_parts: reads_content_parts(source),
            tool_syntax: crate::tools::ToolSyntax::of_template(source),
            thinking_syntax: crate::thinking::ThinkingSyntax::of_template(source),
            path: path.to_path_buf(),
            special_tokens,
        })
    }

    /// Whether the template handles a message content given as a list of typed parts (it tests
    /// or iterates the content, as Gemma 4's does); otherwise text parts should be joined into
    /// one string before rendering, as vLLM does for such templates.
    pub fn reads_content_parts(&self) -> bool {
        self.reads_parts
    }

    /// The tool-call syntax the template renders, or `None` when it renders no tools.
    pub fn tool_syntax(&self) -> Option<&crate::tools::ToolSyntax> {
        self.tool_syntax.as_ref()
    }

    /// The reasoning channel the template can turn on (`enable_thinking`), if any.
    pub fn thinking_syntax(&self) -> Option<&crate::thinking::ThinkingSyntax> {
        self.thinking_syntax.as_ref()
    }

    /// The file the template came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The text of `messages` rendered with `options`.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        options: &ChatOptions,
    ) -> TokenizerResult<String> {
        if messages.is_empty() {
            return Err(TokenizerError::Template {
                path: self.path.clone(),
                reason: "the conversation has no messages".to_string(),
            });
        }
        let mut context: BTreeMap<String, Value> = self
            .special_tokens
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        context.insert("messages".into(), messages_value(messages));
        context.insert(
            "add_generation_prompt".into(),
            Value::from(options.add_generation_prompt),
        );
        context.insert("tools".into(), Value::from(()));
        context.insert("documents".into(), Value::from(()));
        for (key, value) in &options.extra {
            context.insert(key.clone(), value.clone());
        }
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| template_error(&self.path, &e))?;
        template
            .render(context)
            .map_err(|e| template_error(&self.path, &e))
    }
}

/// Whether `source` looks at `content` as something other than a string: a type test on it or a
/// loop over it.
fn reads_content_parts(source: &str) -> bool {
    let compact: String = source.chars().filter(|c| !c.is_whitespace()).collect();
    ["['content']", "[\"content\"]", ".content"]
        .iter()
        .any(|access| {
            [
                "issequence",
                "isiterable",
                "isstring",
                "isnotstring",
                "ismapping",
            ]
            .iter()
            .any(|test| compact.contains(&format!("{access}{test}")))
                || compact.contains(&format!("inmessage{access}"))
        })
}

/// HF aliases a message's reasoning under `reasoning_content` and `thinking`.
fn messages_value(messages: &[ChatMessage]) -> Value {
    let items: Vec<Value> = messages
        .iter()
        .map(|m| {
            let mut map: Vec<(&str, Value)> = Vec::with_capacity(4);
            if let Some(reasoning) = &m.reasoning_content {
                map.push(("thinking", Value::from(reasoning.as_str())));
            }
            map.push(("role", Value::from(m.role.as_str())));
            map.push((
                "content",
                match &m.content {
                    ChatContent::Text(t) => Value::from(t.as_str()),
                    ChatContent::Parts(parts) => Value::from(parts.clone()),
                },
            ));
            if let Some(reasoning) = &m.reasoning_content {
                map.push(("reasoning_content", Value::from(reasoning.as_str())));
            }
            if !m.tool_calls.is_empty() {
                map.push(("tool_calls", Value::from_serialize(&m.tool_calls)));
            }
            if let Some(name) = &m.name {
                map.push(("name", Value::from(name.as_str())));
            }
            Value::from_iter(map)
        })
        .collect();
    Value::from(items)
}

fn template_error(path: &Path, e: &Error) -> TokenizerError {
    let mut reason = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        reason.push_str(": ");
        reason.push_str(&s.to_string());
        source = s.source();
    }
    TokenizerError::Template {
        path: path.to_path_buf(),
        reason,
    }
}

/// A minijinja environment configured as HF's Jinja2 sandbox.
fn hf_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(python_formatter);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    env
}

/// Values print as Python's `str()` prints them: `True`/`False`, `None`.
fn python_formatter(
    out: &mut minijinja::Output,
    state: &State,
    value: &Value,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Bool => out.write_str(if value.is_true() { "True" } else { "False" })?,
        ValueKind::None => out.write_str("None")?,
        _ => minijinja::escape_formatter(out, state, value)?,
    }
    Ok(())
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

fn strftime_now(format: String) -> Result<Value, Error> {
    use std::fmt::Write;
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(&format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {format:?}"),
        )
    })?;
    Ok(Value::from(out))
}

/// `tojson(indent=None, separators=None, sort_keys=False, ensure_ascii=False)` as HF defines it.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let separators = match separators.as_deref() {
        None => None,
        Some([item, key]) => Some((item.clone(), key.clone())),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be (item_separator, key_separator)",
            ))
        }
    };
    let options = super::json_text::JsonTextOptions {
        indent,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
        separators,
    };
    Ok(Value::from_safe_string(python_json(value, &options)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, messages: &[ChatMessage]) -> TokenizerResult<String> {
        let specials = BTreeMap::from([("bos_token".to_string(), "<bos>".to_string())]);
        ChatTemplate::new(source, Path::new("t.jinja"), specials)?
            .render(messages, &ChatOptions::default())
    }

    #[test]
    fn python_printing_and_methods() {
        let out = render(
            "{{ bos_token }}{{ messages[0].content.startswith('h') }} {{ none }} \
             {{ messages[0].get('missing') }} {{ messages[0].content.upper() }}",
            &[ChatMessage::text("user", "hi")],
        )
        .unwrap();
        assert_eq!(out, "<bos>True None None HI");
    }

    #[test]
    fn content_parts_are_recognised() {
        let t = |src: &str| {
            ChatTemplate::new(src, Path::new("t"), BTreeMap::new())
                .unwrap()
                .reads_content_parts()
        };
        assert!(t("{% if message['content'] is string %}{% endif %}"));
        assert!(t("{% for p in message.content %}{% endfor %}"));
        assert!(!t("{{ message['content'] | trim }}"));
    }

    #[test]
    fn errors_name_the_file() {
        let err = render("{% if %}", &[ChatMessage::text("user", "x")]).unwrap_err();
        assert!(err.to_string().contains("t.jinja"), "{err}");
        let err = render(
            "{{ raise_exception('roles must alternate') }}",
            &[ChatMessage::text("user", "x")],
        )
        .unwrap_err();
        assert!(err.to_string().contains("roles must alternate"), "{err}");
        let err = render("x", &[]).unwrap_err();
        assert!(err.to_string().contains("no messages"), "{err}");
    }
}
