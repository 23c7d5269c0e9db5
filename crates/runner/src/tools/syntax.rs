//! The markers of a tool-call syntax, read from a chat template.

/// The markers around a call and its strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSyntax {
    /// Opens a call (`<|tool_call>`).
    pub call_start: String,
    /// Closes a call (`<tool_call|>`).
    pub call_end: String,
    /// Opens and closes a string (`<|"|>`).
    pub quote: String,
    /// Opens the tool's response the application sends back: generation stops there.
    pub response_start: String,
}

impl ToolSyntax {
    /// Gemma 4's markers.
    pub fn gemma4() -> Self {
        Self {
            call_start: "<|tool_call>".into(),
            call_end: "<tool_call|>".into(),
            quote: "<|\"|>".into(),
            response_start: "<|tool_response>".into(),
        }
    }

    /// FunctionGemma's (Gemma 3) markers.
    pub fn function_gemma() -> Self {
        Self {
            call_start: "<start_function_call>".into(),
            call_end: "<end_function_call>".into(),
            quote: "<escape>".into(),
            response_start: "<start_function_response>".into(),
        }
    }

    /// The syntax a chat template renders calls in, when it renders any: the template must
    /// render both the call markers and the tools it is given.
    pub fn of_template(source: &str) -> Option<Self> {
        if !source.contains("tools") {
            return None;
        }
        [Self::gemma4(), Self::function_gemma()]
            .into_iter()
            .find(|s| source.contains(&s.call_start) && source.contains(&s.call_end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_syntax_comes_from_the_template() {
        let gemma4 =
            include_str!("../../../../tests/fixtures/chat_templates/gemma4/chat_template.jinja");
        assert_eq!(ToolSyntax::of_template(gemma4), Some(ToolSyntax::gemma4()));
        assert_eq!(ToolSyntax::of_template("{{ messages }}"), None);
        let fg = "{% if tools %}<start_function_declaration>{% endif %}<start_function_call>call:x{}<end_function_call>";
        assert_eq!(
            ToolSyntax::of_template(fg),
            Some(ToolSyntax::function_gemma())
        );
    }
}
