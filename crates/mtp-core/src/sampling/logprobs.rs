//! Log-probabilities of emitted tokens under the request's sampling transform.
//!
//! # Which distribution
//!
//! The log-probability reported for a token is taken from the distribution the sampler draws
//! that position's token from, built from the target's logits row for that position (the plain
//! decode step's row, or the row of the target's batched verification forward) with the
//! penalty context of that position:
//!
//! * **temperature > 0**: the sampler's final distribution — penalties, top-k, softmax of
//!   logits / T, top-p, min-p, renormalisation ([`Distribution`]). A token the transform drops
//!   has probability 0 and never appears among the alternatives.
//! * **temperature 0**: that distribution is a point mass at the argmax, which says nothing,
//!   so the report is `log_softmax` of the *penalised* logits (temperature 1, no truncation):
//!   the scores whose argmax plain greedy decode takes. Without penalties this is the model's
//!   own distribution, what OpenAI's and ollama's `logprobs` show at temperature 0.
//!
//! The alternatives are the `top` tokens with the largest probability under that same
//! distribution, best first, the lower id first on ties, only tokens with a probability above
//! 0 (so fewer than `top` when the transform keeps fewer). The emitted token is reported
//! whether or not it is among them.
//!
//! Plain and speculative decoding run the same functions on the same rows with the same
//! penalty context (row `i` of a verification sees the history and the drafts before it), so
//! they report the same values up to the rounding of a batched versus a one-token forward.

use serde::Serialize;

use super::{best_k, Distribution};

/// The most alternatives a request may ask for (OpenAI's `top_logprobs` limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// One token's log-probability.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TopLogprob {
    /// The token id.
    pub id: u32,
    /// Its natural log-probability.
    pub logprob: f32,
}

/// The log-probability of one emitted token and its most likely alternatives (see the
/// [module docs](self) for the distribution they come from).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TokenLogprobs {
    /// The emitted token.
    pub id: u32,
    /// Its natural log-probability (finite: an emitted token always has a positive
    /// probability).
    pub logprob: f32,
    /// The most likely tokens at this position, best first (at most the number asked for).
    pub top: Vec<TopLogprob>,
}

impl Distribution {
    /// The log-probability of `id` under this distribution and its `top` most likely tokens
    /// (best first, lower id on ties, only positive probabilities).
    pub fn logprobs(&self, id: u32, top: usize) -> TokenLogprobs {
        let top = best_k(self.support(), top)
            .into_iter()
            .map(|(id, p)| TopLogprob {
                id,
                logprob: p.ln() as f32,
            })
            .collect();
        TokenLogprobs {
            id,
            logprob: self.prob(id).ln() as f32,
            top,
        }
    }
}

/// The log-probabilities of `id` and of the `top` best tokens from `scores`, which are every
/// token's score (penalised logits, by id, ascending), as `log_softmax(scores)`: `lse` is the
/// scores' log-sum-exp. Tokens scored `-inf` are never alternatives.
pub(crate) fn from_scores(
    scores: impl Iterator<Item = (u32, f64)>,
    lse: f64,
    id_score: f64,
    id: u32,
    top: usize,
) -> TokenLogprobs {
    let top = best_k(scores.filter(|&(_, s)| s > f64::NEG_INFINITY), top)
        .into_iter()
        .map(|(id, s)| TopLogprob {
            id,
            logprob: (s - lse) as f32,
        })
        .collect();
    TokenLogprobs {
        id,
        logprob: (id_score - lse) as f32,
        top,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribution_logprobs_rank_the_support() {
        let d = Distribution::from_probs(vec![0.1, 0.4, 0.0, 0.4, 0.1]).unwrap();
        let lp = d.logprobs(4, 3);
        assert_eq!(lp.id, 4);
        assert!((lp.logprob - 0.1f32.ln()).abs() < 1e-6);
        let ids: Vec<u32> = lp.top.iter().map(|t| t.id).collect();
        // Ties: lower id first; id 2 has no mass and is never listed.
        assert_eq!(ids, vec![1, 3, 0]);
        assert!((lp.top[0].logprob - 0.4f32.ln()).abs() < 1e-6);
        assert_eq!(d.logprobs(1, 9).top.len(), 4);
        assert!(d.logprobs(1, 0).top.is_empty());
    }

    #[test]
    fn scores_are_log_softmaxed() {
        let scores = [1.0f64, 3.0, f64::NEG_INFINITY, 2.0];
        let lse = scores.iter().map(|s| s.exp()).sum::<f64>().ln();
        let lp = from_scores(
            scores.iter().enumerate().map(|(i, &s)| (i as u32, s)),
            lse,
            scores[0],
            0,
            9,
        );
        let ids: Vec<u32> = lp.top.iter().map(|t| t.id).collect();
        assert_eq!(ids, vec![1, 3, 0]);
        let total: f32 = lp.top.iter().map(|t| t.logprob.exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert!((lp.logprob - (1.0 - lse) as f32).abs() < 1e-6);
    }
}
