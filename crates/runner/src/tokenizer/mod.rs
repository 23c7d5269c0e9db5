//! The tokenizer of a model directory: `tokenizer.json` through the `tokenizers` crate, special
//! tokens from `config.json` / `generation_config.json` / `tokenizer_config.json`, the
//! checkpoint's own chat template ([`ChatTemplate`], rendered as HF renders it), and streaming
//! detokenization ([`Detokenizer`]). A GGUF file's embedded vocabulary builds the same kind of
//! tokenizer ([`Tokenizer::from_gguf`]: SentencePiece vocabularies, see [`gguf`], and Gemma 4's
//! BPE, see [`gguf_bpe`]).

mod detokenizer;
mod error;
pub mod gguf;
pub mod gguf_bpe;
mod guard;
mod json_text;
mod special;
mod template;

use std::path::Path;

use guard::unpanicked;

use crate::loading::gguf::GgufFile;

pub use detokenizer::Detokenizer;
pub use error::{TokenizerError, TokenizerResult};
pub use special::TokenizerSettings;
pub use template::{ChatContent, ChatMessage, ChatOptions, ChatTemplate};

/// How a prompt's text becomes token ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromptFormat {
    /// The text as is (BOS added when the tokenizer configuration says so).
    #[default]
    Raw,
    /// One user turn rendered with the model's chat template, ending where the model's answer
    /// starts (see [`Tokenizer::encode_chat`] for whole conversations).
    Chat,
}

/// Whether decoding writes out special tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpecialTokens {
    /// Leave them out (the text a user reads).
    #[default]
    Skip,
    /// Write them out (tool-call markers that are special tokens).
    Keep,
}

/// A model's tokenizer and its special tokens.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    settings: TokenizerSettings,
}

/// The largest chat template file read (`--chat-template`): real ones are a few KB.
pub const MAX_CHAT_TEMPLATE_BYTES: u64 = 1 << 20;

impl Tokenizer {
    /// Load the tokenizer of the model directory `dir`: `tokenizer.json` (required) and the
    /// optional side files (see [`TokenizerSettings`]). Special tokens named only by string in
    /// `tokenizer_config.json` are looked up in the vocabulary.
    pub fn from_dir(dir: &Path) -> TokenizerResult<Self> {
        Self::from_file_with_dir(&dir.join("tokenizer.json"), dir)
    }

    /// The tokenizer a GGUF file embeds (see [`gguf`]): its vocabulary as a `tokenizers` BPE,
    /// and BOS / EOS / `add_bos_token` / the chat template from its metadata.
    pub fn from_gguf(file: &GgufFile) -> TokenizerResult<Self> {
        let vocab = gguf::GgufVocab::read(file)?;
        let settings = gguf::gguf_settings(file, &vocab)?;
        let bad = |reason: String| TokenizerError::BadTokenizer {
            path: file.path().to_path_buf(),
            reason,
        };
        let inner = unpanicked(|| vocab.build().map_err(bad), bad)?;
        Ok(Self { inner, settings })
    }

    /// The special-token settings a GGUF file states (for a `--tokenizer` file used with it).
    pub fn gguf_settings(file: &GgufFile) -> TokenizerResult<TokenizerSettings> {
        gguf::gguf_settings(file, &gguf::GgufVocab::read(file)?)
    }

    /// The settings of the model directory `dir`'s side files (for a `--tokenizer` file used
    /// with it), special tokens named by string looked up in `inner`'s vocabulary.
    fn dir_settings(
        dir: &Path,
        inner: &tokenizers::Tokenizer,
    ) -> TokenizerResult<TokenizerSettings> {
        let (mut settings, names) = special::read_settings(dir)?;
        if settings.bos.is_none() {
            settings.bos = names.bos.as_deref().and_then(|n| inner.token_to_id(n));
        }
        if settings.eos.is_empty() {
            settings
                .eos
                .extend(names.eos.as_deref().and_then(|n| inner.token_to_id(n)));
        }
        Ok(settings)
    }

    /// A `tokenizer.json` file with the settings of the model directory `dir` (`--tokenizer FILE`
    /// for a model directory).
    pub fn from_file_with_dir(path: &Path, dir: &Path) -> TokenizerResult<Self> {
        let inner = read_tokenizer_json(path)?;
        let settings = Self::dir_settings(dir, &inner)?;
        Ok(Self { inner, settings })
    }

    /// A `tokenizer.json` file with explicit settings (`--tokenizer FILE` for a GGUF model, with
    /// [`gguf_settings`](Self::gguf_settings)).
    pub fn from_file(path: &Path, settings: TokenizerSettings) -> TokenizerResult<Self> {
        Ok(Self {
            inner: read_tokenizer_json(path)?,
            settings,
        })
    }

    /// A tokenizer from the text of a `tokenizer.json` and explicit settings (tests, embedding).
    pub fn from_json(json: &str, settings: TokenizerSettings) -> TokenizerResult<Self> {
        let inner = parse_tokenizer_json(json.as_bytes(), Path::new("<tokenizer.json text>"))?;
        Ok(Self { inner, settings })
    }

    /// Use the Jinja chat template in the file `path` instead of the model's own (for a model
    /// that has none, such as a base model's GGUF, or to try another one). Special tokens still
    /// come from the model.
    ///
    /// Errors when the file cannot be read, is larger than [`MAX_CHAT_TEMPLATE_BYTES`] or is
    /// not UTF-8; a template that does not compile fails when it is first used.
    pub fn with_chat_template_file(mut self, path: &Path) -> TokenizerResult<Self> {
        let missing = |reason: String| TokenizerError::MissingFile {
            path: path.to_path_buf(),
            reason,
        };
        let size = std::fs::metadata(path)
            .map_err(|e| missing(e.to_string()))?
            .len();
        if size > MAX_CHAT_TEMPLATE_BYTES {
            return Err(missing(format!(
                "{size} bytes; a chat template may have at most {MAX_CHAT_TEMPLATE_BYTES}"
            )));
        }
        let source = std::fs::read_to_string(path).map_err(|e| missing(e.to_string()))?;
        self.settings.chat_template = Some(source);
        self.settings.chat_template_path = path.to_path_buf();
        Ok(self)
    }

    /// The special-token settings in use.
    pub fn settings(&self) -> &TokenizerSettings {
        &self.settings
    }

    /// The ids that end generation.
    pub fn eos_ids(&self) -> &[u32] {
        &self.settings.eos
    }

    /// The BOS id, if known.
    pub fn bos_id(&self) -> Option<u32> {
        self.settings.bos
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Token ids of `text` with no special tokens added (special tokens written in the text,
    /// such as `<bos>`, are still recognised).
    pub fn encode_plain(&self, text: &str) -> TokenizerResult<Vec<u32>> {
        let encode_error = |reason: String| TokenizerError::Encode { reason };
        unpanicked(
            || {
                self.inner
                    .encode(text, false)
                    .map(|e| e.get_ids().to_vec())
                    .map_err(|e| encode_error(e.to_string()))
            },
            encode_error,
        )
    }

    /// Token ids of a prompt. [`PromptFormat::Raw`] adds BOS when `add_bos_token` is set (and
    /// the text does not already start with it); [`PromptFormat::Chat`] renders one user turn
    /// with the model's chat template.
    pub fn encode_prompt(&self, text: &str, format: PromptFormat) -> TokenizerResult<Vec<u32>> {
        match format {
            PromptFormat::Raw => Ok(self.with_bos(self.encode_plain(text)?, self.settings.add_bos)),
            PromptFormat::Chat => self.encode_chat(
                &self.chat_template()?,
                &[ChatMessage::text("user", text)],
                &ChatOptions::default(),
            ),
        }
    }

    /// The model's chat template, compiled (see [`TokenizerSettings::chat_template`]).
    pub fn chat_template(&self) -> TokenizerResult<ChatTemplate> {
        let Some(source) = self.settings.chat_template.as_deref() else {
            return Err(TokenizerError::NoChatTemplate {
                path: self.settings.tokenizer_config_path.clone(),
            });
        };
        ChatTemplate::new(
            source,
            &self.settings.chat_template_path,
            self.settings.special_tokens.clone(),
        )
    }

    /// Token ids of a conversation rendered with `template`, as HF's `apply_chat_template`
    /// gives them: the rendered text encoded with no special tokens added (a template that
    /// wants BOS writes `{{ bos_token }}`).
    pub fn encode_chat(
        &self,
        template: &ChatTemplate,
        messages: &[ChatMessage],
        options: &ChatOptions,
    ) -> TokenizerResult<Vec<u32>> {
        self.encode_plain(&template.render(messages, options)?)
    }

    fn with_bos(&self, mut ids: Vec<u32>, wanted: bool) -> Vec<u32> {
        match (wanted, self.settings.bos) {
            (true, Some(bos)) if ids.first() != Some(&bos) => ids.insert(0, bos),
            (true, None) => {
                tracing::warn!("the tokenizer asks for BOS but no BOS id is known; none added")
            }
            _ => {}
        }
        ids
    }

    /// The text of `ids`, special tokens skipped.
    pub fn decode(&self, ids: &[u32]) -> TokenizerResult<String> {
        self.decode_with(ids, SpecialTokens::Skip)
    }

    /// The text of `ids`, special tokens skipped or written out (tool-call markers are special
    /// tokens in Gemma 4's vocabulary).
    pub fn decode_with(&self, ids: &[u32], special: SpecialTokens) -> TokenizerResult<String> {
        let decode_error = |reason: String| TokenizerError::Decode { reason };
        let skip = special == SpecialTokens::Skip;
        unpanicked(
            || {
                self.inner
                    .decode(ids, skip)
                    .map_err(|e| decode_error(e.to_string()))
            },
            decode_error,
        )
    }

    /// The text of one token, special tokens included (log-probability reports name tokens so).
    pub fn token_text(&self, id: u32) -> String {
        unpanicked(|| self.inner.decode(&[id], false).map_err(drop), drop).unwrap_or_default()
    }

    /// A streaming detokenizer over this tokenizer (special tokens skipped).
    pub fn detokenizer(&self) -> Detokenizer<'_> {
        Detokenizer::new(self)
    }
}

/// Read and parse the `tokenizer.json` at `path`.
fn read_tokenizer_json(path: &Path) -> TokenizerResult<tokenizers::Tokenizer> {
    let bytes = std::fs::read(path).map_err(|e| TokenizerError::MissingFile {
        path: path.to_path_buf(),
        reason: match e.kind() {
            std::io::ErrorKind::NotFound => {
                "no such file (the model needs its tokenizer.json)".to_string()
            }
            _ => e.to_string(),
        },
    })?;
    parse_tokenizer_json(&bytes, path)
}

/// Parse the bytes of a `tokenizer.json`: JSON first (most damage is caught there, with the
/// line and column), then the `tokenizers` crate, fenced against its panics.
fn parse_tokenizer_json(bytes: &[u8], path: &Path) -> TokenizerResult<tokenizers::Tokenizer> {
    let bad = |reason: String| TokenizerError::BadTokenizer {
        path: path.to_path_buf(),
        reason,
    };
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
        .map_err(|e| bad(format!("not valid JSON: {e}")))?;
    unpanicked(
        || tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| bad(e.to_string())),
        bad,
    )
}
