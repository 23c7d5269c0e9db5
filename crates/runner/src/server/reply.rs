//! A reply as it streams, split into its parts: the thinking (Gemma 4's reasoning channel),
//! the content and the tool calls.

use std::sync::Mutex;

use super::tool_calls::{gather, RequestTools};
use crate::thinking::{ThinkingSplitter, ThinkingSyntax, Thought};
use crate::tools::{ToolCall, ToolCallSplitter};

/// The parts of a piece of reply.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ReplyParts {
    /// Reasoning (with thinking on).
    pub thinking: String,
    /// The answer's text.
    pub content: String,
    /// Calls completed in this piece.
    pub calls: Vec<ToolCall>,
    /// The call the reply ended inside (its name and the arguments written in full): only in
    /// the last piece.
    pub cut: Option<ToolCall>,
}

/// Splits a reply's pieces; shared by a stream's frames, which are built one at a time from a
/// `Fn` (hence the lock). Without thinking and tools the text passes through as content.
#[derive(Debug)]
pub struct ReplySplitter(Mutex<(Option<ThinkingSplitter>, Option<ToolCallSplitter>)>);

impl ReplySplitter {
    /// A splitter for a request's `tools` (calls are looked for unless their choice is
    /// `none`) and `thinking` (on when given).
    pub fn new(tools: Option<&RequestTools>, thinking: Option<ThinkingSyntax>) -> Self {
        let calls = tools
            .filter(|t| t.parses_calls())
            .map(|t| ToolCallSplitter::new(t.syntax.clone()));
        Self(Mutex::new((thinking.map(ThinkingSplitter::new), calls)))
    }

    /// The parts certain after `piece` (`last`: the reply ended).
    pub fn push(&self, piece: &str, last: bool) -> ReplyParts {
        let mut guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (thinking, calls) = &mut *guard;
        let mut parts = ReplyParts::default();
        let mut answer = String::new();
        match thinking {
            Some(splitter) => {
                let mut thoughts = splitter.push(piece);
                if last {
                    thoughts.extend(splitter.finish());
                }
                for thought in thoughts {
                    match thought {
                        Thought::Thinking(t) => parts.thinking.push_str(&t),
                        Thought::Answer(a) => answer.push_str(&a),
                    }
                }
            }
            None => answer.push_str(piece),
        }
        match calls {
            Some(splitter) => {
                let mut pieces = splitter.push(&answer);
                if last {
                    pieces.extend(splitter.finish());
                }
                let found = gather(pieces);
                parts.content = found.content;
                parts.calls = found.calls;
                parts.cut = found.cut;
            }
            None => parts.content = answer,
        }
        parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_thinking_or_tools_the_text_passes_through() {
        let s = ReplySplitter::new(None, None);
        assert_eq!(
            s.push("<|channel>thought\nx", false).content,
            "<|channel>thought\nx"
        );
    }

    #[test]
    fn thinking_then_answer() {
        let s = ReplySplitter::new(None, Some(ThinkingSyntax::gemma4()));
        let a = s.push("<|channel>thought\nhm", false);
        let b = s.push("m<channel|>Yes.", true);
        assert_eq!(a.thinking + &b.thinking, "hmm");
        assert_eq!(a.content + &b.content, "Yes.");
    }
}
