//! Generated text split into content and tool calls as it streams.

use super::{parse_call, parse_cut_call, ToolCall, ToolSyntax};

/// A piece of the split text.
#[derive(Debug, Clone, PartialEq)]
pub enum Split {
    /// Content (outside any call).
    Text(String),
    /// A complete call.
    Call(ToolCall),
    /// A call the text ended inside (the token budget ran out): its name and the arguments
    /// written in full ([`parse_cut_call`]).
    Cut(ToolCall),
}

/// Splits streamed text into content and calls: text before a call's start marker is content
/// (a tail that may be the start of a marker is held back until it is not), the text between
/// the markers is parsed as a call. A call that does not parse is kept as content (with its
/// markers), so nothing the model wrote is lost; a call still open when the text ends is a
/// [`Split::Cut`] once its name is written, else content too.
#[derive(Debug, Clone)]
pub struct ToolCallSplitter {
    syntax: ToolSyntax,
    buffer: String,
    in_call: bool,
}

impl ToolCallSplitter {
    /// A splitter for `syntax`.
    pub fn new(syntax: ToolSyntax) -> Self {
        Self {
            syntax,
            buffer: String::new(),
            in_call: false,
        }
    }

    /// Add a piece of text; what is now certain.
    pub fn push(&mut self, piece: &str) -> Vec<Split> {
        self.buffer.push_str(piece);
        let mut out = Vec::new();
        loop {
            if self.in_call {
                let Some(end) = self.buffer.find(&self.syntax.call_end) else {
                    break;
                };
                let body = self.buffer[..end].to_string();
                let rest = self.buffer[end + self.syntax.call_end.len()..].to_string();
                match parse_call(&body, &self.syntax) {
                    Ok(call) => out.push(Split::Call(call)),
                    Err(reason) => {
                        tracing::warn!(%reason, "a tool call that does not parse is kept as text");
                        out.push(Split::Text(format!(
                            "{}{body}{}",
                            self.syntax.call_start, self.syntax.call_end
                        )));
                    }
                }
                self.buffer = rest;
                self.in_call = false;
            } else if let Some(start) = self.buffer.find(&self.syntax.call_start) {
                if start > 0 {
                    out.push(Split::Text(self.buffer[..start].to_string()));
                }
                self.buffer = self.buffer[start + self.syntax.call_start.len()..].to_string();
                self.in_call = true;
            } else {
                let keep = held_back(&self.buffer, &self.syntax.call_start);
                let ready = self.buffer.len() - keep;
                if ready > 0 {
                    out.push(Split::Text(self.buffer[..ready].to_string()));
                    self.buffer = self.buffer[ready..].to_string();
                }
                break;
            }
        }
        out
    }

    /// The end of the text: whatever is held back, as content.
    pub fn finish(&mut self) -> Vec<Split> {
        let rest = std::mem::take(&mut self.buffer);
        if self.in_call {
            if let Some(call) = parse_cut_call(&rest, &self.syntax) {
                self.in_call = false;
                return vec![Split::Cut(call)];
            }
        }
        let text = if self.in_call {
            format!("{}{rest}", self.syntax.call_start)
        } else {
            rest
        };
        self.in_call = false;
        if text.is_empty() {
            Vec::new()
        } else {
            vec![Split::Text(text)]
        }
    }
}

/// The length of the longest tail of `text` that is a proper prefix of `marker` (on a
/// character boundary): what a streaming splitter holds back until it knows whether a marker
/// starts there.
pub(crate) fn held_back(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n)
                && marker.is_char_boundary(n)
                && text.ends_with(&marker[..n])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pieces: &[&str]) -> Vec<Split> {
        let mut s = ToolCallSplitter::new(ToolSyntax::gemma4());
        let mut out: Vec<Split> = pieces.iter().flat_map(|p| s.push(p)).collect();
        out.extend(s.finish());
        // Merge adjacent text for comparison.
        let mut merged: Vec<Split> = Vec::new();
        for item in out {
            match (merged.last_mut(), item) {
                (Some(Split::Text(a)), Split::Text(b)) => a.push_str(&b),
                (_, item) => merged.push(item),
            }
        }
        merged
    }

    #[test]
    fn calls_split_from_text_whatever_the_pieces() {
        let text = "Sure. <|tool_call>call:f{a:1}<tool_call|>and <|tool_call>call:g{}<tool_call|>";
        let want = vec![
            Split::Text("Sure. ".into()),
            Split::Call(parse_call("call:f{a:1}", &ToolSyntax::gemma4()).unwrap()),
            Split::Text("and ".into()),
            Split::Call(parse_call("call:g{}", &ToolSyntax::gemma4()).unwrap()),
        ];
        for size in 1..text.len() {
            let chars: Vec<char> = text.chars().collect();
            let pieces: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
            let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
            assert_eq!(run(&refs), want, "pieces of {size}");
        }
    }

    #[test]
    fn text_that_only_looks_like_a_marker_and_broken_calls_stay_text_and_cut_calls_are_cut() {
        assert_eq!(
            run(&["a <|tool", " b"]),
            vec![Split::Text("a <|tool b".into())]
        );
        assert_eq!(
            run(&["<|tool_call>call:f{a:}<tool_call|>x"]),
            vec![Split::Text("<|tool_call>call:f{a:}<tool_call|>x".into())]
        );
        assert_eq!(
            run(&["x<|tool_call>call:f"]),
            vec![Split::Text("x<|tool_call>call:f".into())]
        );
        let cut = parse_cut_call("call:f{a:1,", &ToolSyntax::gemma4()).unwrap();
        assert_eq!(cut.arguments.len(), 1);
        assert_eq!(
            run(&["x<|tool_call>call:f{a:1,", "b:2"]),
            vec![Split::Text("x".into()), Split::Cut(cut)]
        );
        assert_eq!(run(&["é<|", "é"]), vec![Split::Text("é<|é".into())]);
    }
}
