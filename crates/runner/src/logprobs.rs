//! Log-probabilities of emitted tokens with their text, as `mtp generate --json` and the
//! server's APIs report them.
//!
//! The values come from the engine ([`mtp_core::sampling::TokenLogprobs`]): read from the
//! logits rows it already computes — the plain step's row, or the target's verification rows
//! under speculation, which stays on — under the request's sampling transform: above
//! temperature 0 the sampler's final distribution (penalties, top-k, temperature, top-p,
//! min-p), at temperature 0 `log_softmax` of the penalised logits (the model's own distribution
//! when no penalty is set). The rule: [`mtp_core::sampling::logprobs`].

use mtp_core::sampling::TokenLogprobs;
use serde::Serialize;

use crate::tokenizer::Tokenizer;

/// One token and its log-probability, with its most likely alternatives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenLogprob {
    /// The token's text (its own decode, special tokens included).
    pub token: String,
    /// Its id.
    pub id: u32,
    /// Its natural log-probability.
    pub logprob: f32,
    /// The most likely tokens at this position, best first (as many as asked for, fewer when
    /// the sampling transform keeps fewer); empty for the alternatives themselves.
    #[serde(rename = "top_logprobs", skip_serializing_if = "Vec::is_empty")]
    pub top: Vec<TokenLogprob>,
}

impl TokenLogprob {
    /// The engine's entry for one token, with the texts of its tokens from `tokenizer`.
    pub fn from_engine(lp: &TokenLogprobs, tokenizer: &Tokenizer) -> Self {
        let top = lp
            .top
            .iter()
            .map(|t| TokenLogprob {
                token: tokenizer.token_text(t.id),
                id: t.id,
                logprob: t.logprob,
                top: Vec::new(),
            })
            .collect();
        Self {
            token: tokenizer.token_text(lp.id),
            id: lp.id,
            logprob: lp.logprob,
            top,
        }
    }
}
