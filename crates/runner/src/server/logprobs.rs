//! Log-probabilities of the emitted tokens, from the target's own distribution, while
//! speculation stays on.
//!
//! The scorer keeps its own caches and feeds the target the prompt and then each emitted token
//! (teacher forcing), so the log-probability of token `i` is `log_softmax(logits)[t_i]` of the
//! target's logits after `prompt + t_0 .. t_{i-1}` — the model's distribution (no sampling
//! transform: the values OpenAI's and ollama's `logprobs` report), whatever proposer and
//! acceptance produced the token. It costs one extra target forward per emitted token and one
//! full-vocabulary host read, only for requests that ask for log-probabilities; reading the
//! verification rows the engine already computes would make it free and is the next step.

use mtp_core::cache::CacheSet;
use mtp_core::model::TargetModel;
use mtp_core::Backend;

use crate::tokenizer::Tokenizer;

/// One token and its log-probability.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The token's text (its own decode).
    pub token: String,
    /// Its id.
    pub id: u32,
    /// `ln p(token)` under the target.
    pub logprob: f32,
    /// The most likely tokens at this position, best first (as many as asked for).
    pub top: Vec<TokenLogprob>,
}

/// Teacher-forced scoring of emitted tokens on the target.
pub struct Scorer<'m, B: Backend> {
    backend: &'m B,
    target: &'m dyn TargetModel<B>,
    tokenizer: &'m Tokenizer,
    caches: CacheSet<B>,
    position: usize,
    logits: Vec<f32>,
    pending: Option<u32>,
    top: usize,
}

impl<'m, B: Backend> Scorer<'m, B> {
    /// Evaluate `prompt` (the distribution of the first token is then known); `top` alternatives
    /// per token are reported.
    pub fn new(
        backend: &'m B,
        target: &'m dyn TargetModel<B>,
        tokenizer: &'m Tokenizer,
        prompt: &[u32],
        top: usize,
    ) -> Result<Self, B::Error> {
        let mut scorer = Self {
            backend,
            target,
            tokenizer,
            caches: target.new_caches(backend)?,
            position: 0,
            logits: Vec::new(),
            pending: None,
            top,
        };
        scorer.feed(prompt)?;
        Ok(scorer)
    }

    fn feed(&mut self, ids: &[u32]) -> Result<(), B::Error> {
        let b = self.backend;
        let array = b.from_u32(ids, &[1, ids.len()])?;
        let out = self
            .target
            .forward(b, &array, self.position, &mut self.caches)?;
        self.position += ids.len();
        let last = b.slice(&out.hidden, 1, ids.len() - 1, 1)?;
        self.logits = b.to_vec_f32(&self.target.unembed(b, &last)?)?;
        Ok(())
    }

    /// The log-probability of `id`, the next emitted token.
    pub fn score(&mut self, id: u32) -> Result<TokenLogprob, B::Error> {
        if let Some(previous) = self.pending.take() {
            self.feed(&[previous])?;
        }
        self.pending = Some(id);
        let logprobs = log_softmax(&self.logits);
        let entry = |id: u32, top: Vec<TokenLogprob>| TokenLogprob {
            token: self.tokenizer.token_text(id),
            id,
            logprob: logprobs
                .get(id as usize)
                .copied()
                .unwrap_or(f32::NEG_INFINITY),
            top,
        };
        let mut order: Vec<u32> = (0..logprobs.len() as u32).collect();
        let k = self.top.min(order.len());
        if k > 0 {
            order.select_nth_unstable_by(k - 1, |a, b| {
                logprobs[*b as usize].total_cmp(&logprobs[*a as usize])
            });
            order.truncate(k);
            order.sort_by(|a, b| logprobs[*b as usize].total_cmp(&logprobs[*a as usize]));
        }
        let top = order
            .into_iter()
            .take(k)
            .map(|t| entry(t, Vec::new()))
            .collect();
        Ok(entry(id, top))
    }
}

/// `x - logsumexp(x)`, in f64 for the sum.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| f64::from(x - max).exp()).sum();
    let log_sum = sum.ln() as f32 + max;
    logits.iter().map(|&x| x - log_sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_normalises() {
        let lp = log_softmax(&[1.0, 2.0, 3.0]);
        let total: f32 = lp.iter().map(|x| x.exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert!((lp[2] - lp[1] - 1.0).abs() < 1e-6);
    }
}
