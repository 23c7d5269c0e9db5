//! The grammar that makes the model call a tool (`tool_choice` required or named).

use serde_json::Value;

use super::ToolSyntax;

/// Which calls a request allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides: text, calls or both (no grammar).
    Auto,
    /// No call: the tools are not shown to the model.
    None,
    /// One call to one of the tools.
    Required,
    /// One call to this tool.
    Named(String),
}

/// A Lark grammar (llguidance's dialect) for exactly one call, in `syntax`, to one of `tools`
/// (name and JSON-schema `parameters`): `START call:NAME{key:value,...} END`, where the keys
/// are the tool's required parameters in their order and each value follows its schema:
/// strings between the quote markers (at most `maxLength` characters, no `<`), `enum`s,
/// integers, numbers, booleans, arrays of their `items` and objects of their required
/// properties; a parameter without a type takes any value of the syntax. `marker` gives a
/// marker's token id when it is one token of the vocabulary (the grammar then asks for that
/// token, as the model writes it), else the marker is text.
pub fn call_grammar(
    syntax: &ToolSyntax,
    tools: &[(String, Value)],
    marker: &dyn Fn(&str) -> Option<u32>,
) -> String {
    let token = |m: &str| match marker(m) {
        Some(id) => format!("<[{id}]>"),
        None => lark_string(m),
    };
    let mut rules = Rules {
        quote: token(&syntax.quote),
        lines: Vec::new(),
        count: 0,
    };
    let calls: Vec<String> = tools
        .iter()
        .map(|(name, parameters)| {
            let args = rules.object(parameters);
            format!("{} {args}", lark_string(name))
        })
        .collect();
    let mut grammar = format!(
        "start: {} \"call:\" ({}) {}\n",
        token(&syntax.call_start),
        calls.join(" | "),
        token(&syntax.call_end)
    );
    grammar.push_str(GENERIC);
    grammar.push_str(&format!("string: {q} TEXT {q}\n", q = rules.quote));
    for line in rules.lines {
        grammar.push_str(&line);
        grammar.push('\n');
    }
    grammar
}

/// Any value of the syntax (for parameters without a schema). Numbers are bounded as the JSON
/// outputs' are (at most 16 digits before the point and 16 after it), and a key to 64
/// characters, so a weak model cannot run on inside a number and never close the call;
/// strings are bounded only by their schema's `maxLength`.
const GENERIC: &str = "\
value: string | NUMBER | \"true\" | \"false\" | \"null\" | object | array
object: \"{\" (pair (\",\" pair)*)? \"}\"
pair: KEY \":\" value
array: \"[\" (value (\",\" value)*)? \"]\"
KEY: /[A-Za-z_][A-Za-z0-9_]{0,63}/
TEXT: /[^<]*/
NUMBER: /-?(0|[1-9][0-9]{0,15})(\\.[0-9]{1,16})?/
INTEGER: /-?(0|[1-9][0-9]{0,15})/
";

/// The rules generated for the tools' schemas.
struct Rules {
    quote: String,
    lines: Vec<String>,
    count: usize,
}

impl Rules {
    fn fresh(&mut self, body: String) -> String {
        let name = format!("r{}", self.count);
        self.count += 1;
        self.lines.push(format!("{name}: {body}"));
        name
    }

    /// `{key:value,...}` of a schema's required properties, in order.
    fn object(&mut self, schema: &Value) -> String {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let properties = schema.get("properties");
        let pairs: Vec<String> = required
            .iter()
            .filter(|k| is_key(k))
            .map(|key| {
                let value =
                    self.value(properties.and_then(|p| p.get(*key)).unwrap_or(&Value::Null));
                format!("\"{key}:\" {value}")
            })
            .collect();
        let body = if pairs.is_empty() {
            "\"{}\"".to_string()
        } else {
            format!("\"{{\" {} \"}}\"", pairs.join(" \",\" "))
        };
        self.fresh(body)
    }

    /// A rule for a value of `schema`.
    fn value(&mut self, schema: &Value) -> String {
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            let literals: Vec<String> = options
                .iter()
                .filter_map(|o| match o {
                    Value::String(s) if !s.contains('<') => {
                        Some(format!("{q} {} {q}", lark_string(s), q = self.quote))
                    }
                    Value::Number(n) => Some(lark_string(&n.to_string())),
                    Value::Bool(b) => Some(lark_string(&b.to_string())),
                    _ => None,
                })
                .collect();
            if !literals.is_empty() {
                return self.fresh(literals.join(" | "));
            }
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("string") => {
                let text = match schema.get("maxLength").and_then(Value::as_u64) {
                    Some(max) => format!("/[^<]{{0,{}}}/", max.min(10_000)),
                    None => "TEXT".to_string(),
                };
                self.fresh(format!("{q} {text} {q}", q = self.quote))
            }
            Some("integer") => "INTEGER".to_string(),
            Some("number") => "NUMBER".to_string(),
            Some("boolean") => self.fresh("\"true\" | \"false\"".to_string()),
            Some("null") => self.fresh("\"null\"".to_string()),
            Some("array") => {
                let item = self.value(schema.get("items").unwrap_or(&Value::Null));
                self.fresh(format!("\"[\" ({item} (\",\" {item})*)? \"]\""))
            }
            Some("object") if schema.get("properties").is_some() => self.object(schema),
            _ => "value".to_string(),
        }
    }
}

fn is_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `s` as a Lark string literal.
fn lark_string(s: &str) -> String {
    let escaped: String = s
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            '\n' => vec!['\\', 'n'],
            c => vec![c],
        })
        .collect();
    format!("\"{escaped}\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn markers_are_tokens_when_the_vocabulary_has_them() {
        let tools = vec![(
            "get_weather".to_string(),
            json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                   "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "days", "unit"]}),
        )];
        let g = call_grammar(&ToolSyntax::gemma4(), &tools, &|m| {
            (m == "<|tool_call>").then_some(48)
        });
        assert!(
            g.starts_with("start: <[48]> \"call:\" (\"get_weather\" r2) \"<tool_call|>\""),
            "{g}"
        );
        assert!(
            g.contains("r2: \"{\" \"city:\" r0 \",\" \"days:\" INTEGER \",\" \"unit:\" r1 \"}\""),
            "{g}"
        );
        assert!(g.contains("/[^<]{0,20}/"), "{g}");
        assert!(g.contains("\"days:\" INTEGER"), "{g}");
        assert!(g.contains("string: \"<|\\\"|>\" TEXT \"<|\\\"|>\""), "{g}");
    }
}
