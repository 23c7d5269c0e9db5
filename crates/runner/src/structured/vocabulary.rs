//! The model's tokenizer as the grammar engine's vocabulary.

use std::sync::Arc;

use llguidance::ParserFactory;
use toktrie_hf_tokenizers::ByteTokenizer;

use super::json_bounds::JsonTokens;
use super::{GrammarConstraint, OutputFormat, StructuredError};
use crate::Tokenizer;

/// The grammar engine's view of one model's vocabulary: every token's bytes in a trie (built
/// once; about a second for a 262k-token vocabulary) and the parser factory over it. Cheap to
/// clone.
#[derive(Clone)]
pub struct GrammarVocabulary {
    factory: Arc<ParserFactory>,
    /// The tokens as the bounds on JSON values read them.
    json_tokens: Arc<JsonTokens>,
    /// The target's logits width (the masks' size).
    vocab: usize,
}

impl std::fmt::Debug for GrammarVocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarVocabulary")
            .field("vocab", &self.vocab)
            .finish()
    }
}

impl GrammarVocabulary {
    /// The vocabulary of `tokenizer` for a target whose logits are `model_vocab` wide (ids
    /// past the tokenizer's are never allowed). The tokenizer's EOS tokens end a complete
    /// text.
    pub fn new(tokenizer: &Tokenizer, model_vocab: usize) -> Result<Self, StructuredError> {
        let bad = |e: &dyn std::fmt::Display| StructuredError::Vocabulary(e.to_string());
        let json = tokenizer.inner().to_string(false).map_err(|e| bad(&e))?;
        let mut bytes = ByteTokenizer::from_json_bytes(json.as_bytes()).map_err(|e| bad(&e))?;
        let size = bytes.tokrx_info().vocab_size;
        let eos: Vec<u32> = tokenizer
            .eos_ids()
            .iter()
            .copied()
            .filter(|&id| id < size)
            .collect();
        if !eos.is_empty() {
            bytes.set_eos_tokens(&eos);
        }
        let width = model_vocab.max(size as usize);
        let env = bytes.into_tok_env(Some(width)).map_err(|e| bad(&e))?;
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| bad(&e))?;
        factory.quiet();
        let json_tokens = Arc::new(JsonTokens::new(factory.tok_env().clone()));
        Ok(Self {
            factory: Arc::new(factory),
            json_tokens,
            vocab: model_vocab,
        })
    }

    /// `format` compiled for this vocabulary: an error naming the problem when the schema,
    /// regex or grammar is invalid or uses something unsupported. A JSON format (a schema or
    /// any object) also bounds its numbers and whitespace where the schema leaves them open
    /// (see [`MAX_INTEGER_DIGITS`](super::MAX_INTEGER_DIGITS) and the constants beside it).
    pub fn compile(&self, format: &OutputFormat) -> Result<GrammarConstraint, StructuredError> {
        // Compiled once, here: an invalid format is refused before any generation starts.
        let parser = self
            .factory
            .create_parser(format.grammar()?)
            .map_err(|e| StructuredError::InvalidFormat(e.to_string()))?;
        let bounds = match format {
            OutputFormat::JsonObject | OutputFormat::JsonSchema(_) => {
                Some(self.json_tokens.clone())
            }
            OutputFormat::Regex(_) | OutputFormat::Lark(_) => None,
        };
        Ok(GrammarConstraint::new(parser, self.vocab, bounds))
    }
}
