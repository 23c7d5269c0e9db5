//! A [`tokenizers::Tokenizer`] built from the vocabulary a GGUF file embeds, so a single `.gguf`
//! runs without a `tokenizer.json`. Two vocabulary kinds (`tokenizer.ggml.model`) are supported:
//! `"llama"` (SentencePiece-style tokens, scores and token types; below) and `"gemma4"` (Gemma 4's
//! BPE with merges; see [`gguf_bpe`](super::gguf_bpe)). Any other kind is refused when the
//! tokenizer is built, naming these two; its special-token settings are still read (for a
//! `--tokenizer` file used with the GGUF).
//!
//! # The SentencePiece algorithm, and why a BPE reproduces it
//!
//! llama.cpp's `llm_tokenizer_spm` first cuts the text at every control and user-defined token
//! (`tokenizer_st_partition`, longest token first), escapes spaces as `▁` in the remaining
//! fragments (with a leading `▁` when `add_space_prefix`), splits each fragment into characters
//! and repeatedly merges the adjacent pair whose concatenation is a vocabulary token of the
//! **highest score** (ties: the leftmost pair). Characters that are not tokens fall back to their
//! UTF-8 bytes as `<0xXX>` tokens.
//!
//! A BPE whose merge list holds, for every token, each split into two tokens, ranked by the merged
//! token's score (highest first), makes the same choices: at every step BPE applies the
//! lowest-ranked merge present, which is the pair whose merged token scores highest. This is how HF
//! `convert_slow_tokenizer` (`SentencePieceExtractor`, `GemmaConverter`) builds Gemma's
//! `tokenizer.json` from the SentencePiece model. The pieces around it are the converter's too:
//! normalizer `" " → "▁"` (after `Prepend("▁")` with `add_space_prefix`), byte fallback, and the
//! decoder `▁ → " "`, byte fallback, fuse (and strip the prefix space with `add_space_prefix`).
//! Control tokens (type 3) become special added tokens and user-defined ones (type 4) plain added
//! tokens, both matched on the raw text, as llama.cpp partitions them.
//!
//! Token types are llama.cpp's `llama_token_type`: 1 normal, 2 unknown, 3 control,
//! 4 user-defined, 5 unused, 6 byte.
//!
//! # Special-token settings
//!
//! BOS and `add_bos_token` come from the metadata (llama.cpp always adds BOS for `"gemma4"`,
//! whatever the file says, and so does this tokenizer); generation ends at the EOS / EOT / EOM ids
//! and at the tokens llama.cpp ends generation at by their text ([`END_OF_GENERATION`]).

use std::collections::BTreeMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::{AddedToken, DecoderWrapper, NormalizerWrapper};

use super::error::{TokenizerError, TokenizerResult};
use super::special::TokenizerSettings;
use crate::loading::gguf::{GgufError, GgufFile};

/// llama.cpp's token type of the unknown token (`<unk>` in some vocabularies).
pub(super) const TYPE_UNKNOWN: i64 = 2;
/// llama.cpp's token type of a control token (`<bos>`, `<start_of_turn>`, ...).
pub(super) const TYPE_CONTROL: i64 = 3;
/// llama.cpp's token type of a user-defined token (Gemma's whitespace runs, `<table>`, ...).
pub(super) const TYPE_USER_DEFINED: i64 = 4;
/// llama.cpp's token type of a byte-fallback token `<0xXX>`.
const TYPE_BYTE: i64 = 6;

/// The SentencePiece word-boundary mark.
pub(super) const SPACE_MARK: &str = "\u{2581}";

/// The `tokenizer.ggml.model` of SentencePiece vocabularies (Gemma 3, Llama 2, ...).
pub const MODEL_LLAMA: &str = "llama";
/// The `tokenizer.ggml.model` of Gemma 4's BPE vocabulary (see [`gguf_bpe`](super::gguf_bpe)).
pub const MODEL_GEMMA4: &str = "gemma4";

/// The tokens llama.cpp ends generation at by their text, whatever their type
/// (`llama_vocab::impl::load`, which also makes them control tokens): the ones of the Gemma,
/// Llama 3, ChatML and Phi vocabularies.
pub const END_OF_GENERATION: [&str; 7] = [
    "<end_of_turn>",
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
];

/// The parts of a GGUF vocabulary the tokenizer is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: [`MODEL_LLAMA`] and [`MODEL_GEMMA4`] build a tokenizer.
    pub model: String,
    /// Token strings, by id.
    pub tokens: Vec<String>,
    /// SentencePiece scores, by id.
    pub scores: Vec<f32>,
    /// llama.cpp token types, by id.
    pub types: Vec<i64>,
    /// `tokenizer.ggml.add_space_prefix` (default true, as llama.cpp; a `"gemma4"` vocabulary
    /// never adds one).
    pub add_space_prefix: bool,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.merges` of a `"gemma4"` vocabulary (`"left right"`, best first); empty
    /// for the others.
    pub merges: Vec<String>,
}

fn bad(file: &GgufFile, reason: impl Into<String>) -> TokenizerError {
    TokenizerError::BadTokenizer {
        path: file.path().to_path_buf(),
        reason: reason.into(),
    }
}

fn from_gguf_error(file: &GgufFile) -> impl Fn(GgufError) -> TokenizerError + '_ {
    move |e| bad(file, e.to_string())
}

/// An optional token id key, checked to be inside the vocabulary.
fn token_id(file: &GgufFile, key: &str, vocab: usize) -> TokenizerResult<Option<u32>> {
    match file.opt_usize(key).map_err(from_gguf_error(file))? {
        None => Ok(None),
        Some(id) if id < vocab => Ok(u32::try_from(id).ok()),
        Some(id) => Err(bad(
            file,
            format!("{key} = {id} is outside the vocabulary of {vocab} tokens"),
        )),
    }
}

impl GgufVocab {
    /// Read the vocabulary of `file`: tokens, scores, token types and, for `"gemma4"`, the merges
    /// (required there, as llama.cpp requires them). Any `tokenizer.ggml.model` is read;
    /// [`build`](Self::build) refuses the unsupported ones.
    pub fn read(file: &GgufFile) -> TokenizerResult<Self> {
        let err = from_gguf_error(file);
        let model = file
            .string("tokenizer.ggml.model")
            .map_err(&err)?
            .to_string();
        let merges = if model == MODEL_GEMMA4 {
            file.strings("tokenizer.ggml.merges")
                .map_err(&err)?
                .into_iter()
                .map(str::to_string)
                .collect()
        } else {
            Vec::new()
        };
        let tokens: Vec<String> = file
            .strings("tokenizer.ggml.tokens")
            .map_err(&err)?
            .into_iter()
            .map(str::to_string)
            .collect();
        let n = tokens.len();
        let scores = if file.has("tokenizer.ggml.scores") {
            file.floats("tokenizer.ggml.scores").map_err(&err)?
        } else {
            vec![0.0; n]
        };
        let types = if file.has("tokenizer.ggml.token_type") {
            file.ints("tokenizer.ggml.token_type").map_err(&err)?
        } else {
            vec![1; n]
        };
        if scores.len() != n || types.len() != n {
            return Err(bad(
                file,
                format!(
                    "{n} tokens but {} scores and {} token types",
                    scores.len(),
                    types.len()
                ),
            ));
        }
        let add_space_prefix = file
            .opt_bool("tokenizer.ggml.add_space_prefix")
            .map_err(&err)?
            .unwrap_or(true);
        let unk = token_id(file, "tokenizer.ggml.unknown_token_id", n)?;
        Ok(Self {
            model,
            tokens,
            scores,
            types,
            add_space_prefix,
            unk,
            merges,
        })
    }

    /// The BPE merges equivalent to SentencePiece's highest-score-first merging: every split of
    /// every token into two tokens, ranked by the merged token's score (highest first; equal
    /// scores by the merged token's id, then the left part's length).
    pub fn merges(&self, ids: &Vocab) -> Vec<(String, String)> {
        let mut ranked: Vec<(f32, u32, usize)> = Vec::new();
        for (id, token) in self.tokens.iter().enumerate() {
            if self.types[id] == TYPE_BYTE {
                continue;
            }
            for (split, _) in token.char_indices().skip(1) {
                let (left, right) = token.split_at(split);
                if ids.contains_key(left) && ids.contains_key(right) {
                    ranked.push((self.scores[id], id as u32, split));
                }
            }
        }
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        ranked
            .into_iter()
            .map(|(_, id, split)| {
                let (left, right) = self.tokens[id as usize].split_at(split);
                (left.to_string(), right.to_string())
            })
            .collect()
    }

    /// Build the tokenizer: SentencePiece for `"llama"` (see the [module docs](self)), Gemma 4's
    /// BPE for `"gemma4"` (see [`gguf_bpe`](super::gguf_bpe)); any other kind is an error that
    /// names the supported ones.
    pub fn build(&self) -> Result<tokenizers::Tokenizer, String> {
        match self.model.as_str() {
            MODEL_LLAMA => self.build_sentencepiece(),
            MODEL_GEMMA4 => super::gguf_bpe::build(self),
            other => Err(format!(
                "tokenizer.ggml.model {other:?} is not supported (only {MODEL_LLAMA:?}, the \
                 SentencePiece vocabulary, and {MODEL_GEMMA4:?}, Gemma 4's BPE); pass \
                 --tokenizer tokenizer.json instead"
            )),
        }
    }

    /// The token ids by text; an error when a text repeats.
    pub(super) fn ids(&self) -> Result<Vocab, String> {
        let vocab: Vocab = self
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        if vocab.len() != self.tokens.len() {
            return Err(format!(
                "the vocabulary repeats tokens ({} distinct of {})",
                vocab.len(),
                self.tokens.len()
            ));
        }
        Ok(vocab)
    }

    /// The SentencePiece vocabulary as a BPE (see the [module docs](self)).
    fn build_sentencepiece(&self) -> Result<tokenizers::Tokenizer, String> {
        let vocab = self.ids()?;
        let merges = self.merges(&vocab);
        let mut builder = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .byte_fallback(true)
            .fuse_unk(true);
        if let Some(unk) = self.unk {
            builder = builder.unk_token(self.tokens[unk as usize].clone());
        }
        let bpe = builder.build().map_err(|e| e.to_string())?;
        let mut tokenizer = tokenizers::Tokenizer::new(bpe);
        let replace = Replace::new(" ", SPACE_MARK).map_err(|e| e.to_string())?;
        let normalizer: NormalizerWrapper = if self.add_space_prefix {
            NormalizerSequence::new(vec![Prepend::new(SPACE_MARK.into()).into(), replace.into()])
                .into()
        } else {
            replace.into()
        };
        tokenizer
            .with_normalizer(Some(normalizer))
            .map_err(|e| e.to_string())?;
        let unescape = Replace::new(SPACE_MARK, " ").map_err(|e| e.to_string())?;
        let mut decoders: Vec<DecoderWrapper> = vec![
            unescape.into(),
            ByteFallback::new().into(),
            Fuse::new().into(),
        ];
        if self.add_space_prefix {
            decoders.push(Strip::new(' ', 1, 0).into());
        }
        tokenizer.with_decoder(Some(DecoderSequence::new(decoders)));
        let added = |kind: i64, special: bool| -> Vec<AddedToken> {
            self.tokens
                .iter()
                .zip(&self.types)
                .filter(|(_, &t)| t == kind)
                .map(|(token, _)| AddedToken::from(token.clone(), special).normalized(false))
                .collect()
        };
        tokenizer
            .add_special_tokens(added(TYPE_CONTROL, true))
            .map_err(|e| e.to_string())?;
        tokenizer
            .add_tokens(added(TYPE_USER_DEFINED, false))
            .map_err(|e| e.to_string())?;
        Ok(tokenizer)
    }
}

/// The special-token settings a GGUF file states: BOS, EOS (plus the [`END_OF_GENERATION`] tokens
/// llama.cpp also stops at), `add_bos_token` (always for `"gemma4"`, as llama.cpp), the chat
/// template, and the named special tokens.
pub(crate) fn gguf_settings(
    file: &GgufFile,
    vocab: &GgufVocab,
) -> TokenizerResult<TokenizerSettings> {
    let n = vocab.tokens.len();
    let err = from_gguf_error(file);
    let bos = token_id(file, "tokenizer.ggml.bos_token_id", n)?;
    let mut eos = Vec::new();
    for key in [
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ] {
        eos.extend(token_id(file, key, n)?);
    }
    // llama.cpp's `llama_vocab::impl::load` also ends generation at these tokens, by text.
    for name in END_OF_GENERATION {
        if let Some(id) = vocab.tokens.iter().position(|t| t == name) {
            eos.push(id as u32);
        }
    }
    eos.sort_unstable();
    eos.dedup();
    let mut special_tokens = BTreeMap::new();
    for (key, name) in [
        ("tokenizer.ggml.bos_token_id", "bos_token"),
        ("tokenizer.ggml.eos_token_id", "eos_token"),
        ("tokenizer.ggml.unknown_token_id", "unk_token"),
        ("tokenizer.ggml.padding_token_id", "pad_token"),
    ] {
        if let Some(id) = token_id(file, key, n)? {
            special_tokens.insert(name.to_string(), vocab.tokens[id as usize].clone());
        }
    }
    let stated_add_bos = file
        .opt_bool("tokenizer.ggml.add_bos_token")
        .map_err(&err)?
        .unwrap_or(true);
    // llama.cpp adds BOS to every Gemma 4 prompt, whatever `add_bos_token` says.
    let add_bos = stated_add_bos || vocab.model == MODEL_GEMMA4;
    Ok(TokenizerSettings {
        bos,
        eos,
        add_bos,
        chat_template: file
            .opt_string("tokenizer.chat_template")
            .map_err(&err)?
            .map(str::to_string),
        chat_template_path: file.path().to_path_buf(),
        tokenizer_config_path: file.path().to_path_buf(),
        special_tokens,
    })
}
