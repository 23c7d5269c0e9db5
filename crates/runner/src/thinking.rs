//! Thinking (Gemma 4's reasoning channel): whether a chat template can turn it on, and the
//! generated text split into the thinking and the answer as it streams.
//!
//! With `enable_thinking`, Gemma 4 writes its reasoning first, as `<|channel>thought\n...`
//! closed by `<channel|>`, then the answer (its chat template strips that channel from earlier
//! turns). The markers are special tokens: the text must be decoded with them written out.

/// The markers of a thinking channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinkingSyntax {
    /// Opens the channel, its name included (`<|channel>thought`).
    pub open: String,
    /// Closes it (`<channel|>`).
    pub close: String,
}

impl ThinkingSyntax {
    /// Gemma 4's channel.
    pub fn gemma4() -> Self {
        Self {
            open: "<|channel>thought".into(),
            close: "<channel|>".into(),
        }
    }

    /// The thinking a chat template can turn on (`enable_thinking`), if any.
    pub fn of_template(source: &str) -> Option<Self> {
        (source.contains("enable_thinking") && source.contains("<|channel>")).then(Self::gemma4)
    }
}

/// A piece of the split text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Thought {
    /// Reasoning, inside the channel.
    Thinking(String),
    /// The answer.
    Answer(String),
}

/// Where the splitter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Nothing decided: the text may still open the channel.
    Start,
    /// Inside the channel.
    Thinking,
    /// After it (or there was none): everything is answer.
    Answer,
}

/// Splits streamed text into thinking and answer: a channel opened at the very start of the
/// text is thinking up to its close (the newline after its name dropped); everything else is
/// answer. A text that only looks like the start of the marker is held back until it is clear.
#[derive(Debug, Clone)]
pub struct ThinkingSplitter {
    syntax: ThinkingSyntax,
    place: Place,
    buffer: String,
}

impl ThinkingSplitter {
    /// A splitter for `syntax`.
    pub fn new(syntax: ThinkingSyntax) -> Self {
        Self {
            syntax,
            place: Place::Start,
            buffer: String::new(),
        }
    }

    /// Add a piece; what is now certain.
    pub fn push(&mut self, piece: &str) -> Vec<Thought> {
        self.buffer.push_str(piece);
        let mut out = Vec::new();
        loop {
            match self.place {
                Place::Start => {
                    let trimmed = self.buffer.trim_start();
                    if self.syntax.open.starts_with(trimmed) {
                        // Undecided, or the marker exactly: wait for what follows it.
                        break;
                    } else if let Some(rest) = trimmed.strip_prefix(&self.syntax.open) {
                        self.buffer = rest.strip_prefix('\n').unwrap_or(rest).to_string();
                        self.place = Place::Thinking;
                    } else {
                        self.place = Place::Answer;
                    }
                }
                Place::Thinking => {
                    if let Some(end) = self.buffer.find(&self.syntax.close) {
                        let thinking = self.buffer[..end].to_string();
                        self.buffer = self.buffer[end + self.syntax.close.len()..].to_string();
                        if !thinking.is_empty() {
                            out.push(Thought::Thinking(thinking));
                        }
                        self.place = Place::Answer;
                    } else {
                        let keep = crate::tools::held_back(&self.buffer, &self.syntax.close);
                        let ready = self.buffer.len() - keep;
                        if ready > 0 {
                            out.push(Thought::Thinking(self.buffer[..ready].to_string()));
                            self.buffer = self.buffer[ready..].to_string();
                        }
                        break;
                    }
                }
                Place::Answer => {
                    if !self.buffer.is_empty() {
                        out.push(Thought::Answer(std::mem::take(&mut self.buffer)));
                    }
                    break;
                }
            }
        }
        out
    }

    /// The end of the text: what is held back.
    pub fn finish(&mut self) -> Vec<Thought> {
        let rest = std::mem::take(&mut self.buffer);
        if rest.is_empty() {
            return Vec::new();
        }
        match self.place {
            Place::Thinking => vec![Thought::Thinking(rest)],
            Place::Start if rest.trim_start() == self.syntax.open => Vec::new(),
            Place::Start | Place::Answer => vec![Thought::Answer(rest)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str, size: usize) -> (String, String) {
        let mut s = ThinkingSplitter::new(ThinkingSyntax::gemma4());
        let chars: Vec<char> = text.chars().collect();
        let mut pieces: Vec<Thought> = chars
            .chunks(size)
            .flat_map(|c| s.push(&c.iter().collect::<String>()))
            .collect();
        pieces.extend(s.finish());
        let (mut thinking, mut answer) = (String::new(), String::new());
        for p in pieces {
            match p {
                Thought::Thinking(t) => thinking.push_str(&t),
                Thought::Answer(a) => answer.push_str(&a),
            }
        }
        (thinking, answer)
    }

    #[test]
    fn the_channel_at_the_start_is_thinking_whatever_the_pieces() {
        let text = "<|channel>thought\nLet me see: 2 + 2.<channel|>It is 4.";
        for size in 1..text.len() {
            assert_eq!(
                split(text, size),
                ("Let me see: 2 + 2.".into(), "It is 4.".into()),
                "pieces of {size}"
            );
        }
        assert_eq!(split("It is 4.", 2), (String::new(), "It is 4.".into()));
        assert_eq!(split("<|chan", 3), (String::new(), "<|chan".into()));
        assert_eq!(
            split("<|channel>thought\nunfinished", 4),
            ("unfinished".into(), String::new())
        );
        assert_eq!(
            split("answer <|channel>thought\nx<channel|>", 5),
            (
                String::new(),
                "answer <|channel>thought\nx<channel|>".into()
            )
        );
    }

    #[test]
    fn templates_that_can_think() {
        let gemma4 =
            include_str!("../../../tests/fixtures/chat_templates/gemma4/chat_template.jinja");
        assert_eq!(
            ThinkingSyntax::of_template(gemma4),
            Some(ThinkingSyntax::gemma4())
        );
        assert_eq!(ThinkingSyntax::of_template("{{ messages }}"), None);
    }
}
