//! The grammar that makes the model call a tool (`tool_choice` required or named).

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

/// A Lark grammar (llguidance's dialect) for exactly one call, in `syntax`, to one of `names`:
/// `START call:NAME{key:value,...} END` with the values of the syntax (strings between quote
/// markers, numbers, `true`, `false`, `null`, objects, arrays). `marker` gives a marker's
/// token id when it is one token of the vocabulary (then the grammar asks for that token, as
/// the model writes it), else the marker is text. Strings may not contain `<`.
pub fn call_grammar(
    syntax: &ToolSyntax,
    names: &[String],
    marker: &dyn Fn(&str) -> Option<u32>,
) -> String {
    let token = |m: &str| match marker(m) {
        Some(id) => format!("<[{id}]>"),
        None => lark_string(m),
    };
    let names: Vec<String> = names.iter().map(|n| lark_string(n)).collect();
    format!(
        "start: {start} \"call:\" NAME \"{{\" pairs? \"}}\" {end}\n\
         NAME: {names}\n\
         pairs: pair (\",\" pair)*\n\
         pair: KEY \":\" value\n\
         KEY: /[A-Za-z_][A-Za-z0-9_]*/\n\
         value: string | NUMBER | \"true\" | \"false\" | \"null\" | object | array\n\
         object: \"{{\" pairs? \"}}\"\n\
         array: \"[\" (value (\",\" value)*)? \"]\"\n\
         string: {quote} TEXT {quote}\n\
         TEXT: /[^<]*/\n\
         NUMBER: /-?(0|[1-9][0-9]*)(\\.[0-9]+)?/\n",
        start = token(&syntax.call_start),
        end = token(&syntax.call_end),
        quote = token(&syntax.quote),
        names = names.join(" | "),
    )
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

    #[test]
    fn markers_are_tokens_when_the_vocabulary_has_them() {
        let g = call_grammar(&ToolSyntax::gemma4(), &["get_weather".into()], &|m| {
            (m == "<|tool_call>").then_some(48)
        });
        assert!(g.starts_with("start: <[48]> \"call:\" NAME"), "{g}");
        assert!(g.contains("\"<tool_call|>\""), "{g}");
        assert!(g.contains("string: \"<|\\\"|>\" TEXT \"<|\\\"|>\""), "{g}");
        assert!(g.contains("NAME: \"get_weather\""), "{g}");
    }
}
