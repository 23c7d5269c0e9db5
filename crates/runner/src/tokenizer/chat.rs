//! Chat prompts: Gemma's turn format, the only chat template supported.

use std::path::Path;

use super::error::{TokenizerError, TokenizerResult};

/// The marker that identifies a Gemma turn-format template.
const GEMMA_TURN_MARKER: &str = "<start_of_turn>";

/// A supported chat format, recognised from a model's `chat_template`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatFormat {
    /// Gemma's turn format:
    /// `<start_of_turn>user\n{prompt}<end_of_turn>\n<start_of_turn>model\n`.
    Gemma {
        /// Whether the template starts with the BOS token (`{{ bos_token }}`).
        bos: BosInTemplate,
    },
}

/// Whether a chat template starts the conversation with BOS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BosInTemplate {
    /// The template emits `{{ bos_token }}`.
    Yes,
    /// It does not.
    No,
}

impl ChatFormat {
    /// Recognise `template` (from `config_path`). Only Gemma's turn format is supported; a
    /// missing template or any other one is an error that says so.
    pub fn detect(template: Option<&str>, config_path: &Path) -> TokenizerResult<Self> {
        let Some(template) = template else {
            return Err(TokenizerError::NoChatTemplate {
                path: config_path.to_path_buf(),
            });
        };
        if !template.contains(GEMMA_TURN_MARKER) {
            return Err(TokenizerError::UnsupportedChatTemplate {
                path: config_path.to_path_buf(),
            });
        }
        let bos = if template.contains("bos_token") {
            BosInTemplate::Yes
        } else {
            BosInTemplate::No
        };
        Ok(ChatFormat::Gemma { bos })
    }

    /// The text of a one-turn conversation asking the model to answer `prompt` (surrounding
    /// whitespace trimmed, as Gemma's template does). BOS is not part of the text.
    pub fn render(&self, prompt: &str) -> String {
        match self {
            ChatFormat::Gemma { .. } => format!(
                "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n",
                prompt.trim()
            ),
        }
    }

    /// Whether the rendered conversation starts with BOS.
    pub fn starts_with_bos(&self) -> bool {
        match self {
            ChatFormat::Gemma { bos } => *bos == BosInTemplate::Yes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma_is_recognised_and_rendered() {
        let path = Path::new("tokenizer_config.json");
        let f = ChatFormat::detect(Some("{{ bos_token }}<start_of_turn>user"), path).unwrap();
        assert!(f.starts_with_bos());
        assert_eq!(
            f.render("  hi\n"),
            "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
        );
        let f = ChatFormat::detect(Some("<start_of_turn>"), path).unwrap();
        assert!(!f.starts_with_bos());
    }

    #[test]
    fn other_templates_are_refused_by_name() {
        let path = Path::new("x/tokenizer_config.json");
        let err = ChatFormat::detect(Some("<|im_start|>user"), path).unwrap_err();
        assert!(
            err.to_string().contains("only Gemma's turn format"),
            "{err}"
        );
        let err = ChatFormat::detect(None, path).unwrap_err();
        assert!(err.to_string().contains("no chat template"), "{err}");
    }
}
