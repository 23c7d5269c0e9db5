//! The stateful sampler: penalty history and a seeded random stream.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{pipeline, Distribution, LogitRow, SamplerOptions, TokenLogprobs};
use crate::CoreError;

/// A sampler for one decode: options, the penalty history and a seeded random stream.
///
/// The speculative calls ([`distribution`](Self::distribution) and
/// [`verification_distributions`](Self::verification_distributions)) take `&self` and never
/// change anything; only [`sample`](Self::sample) and [`uniform`](Self::uniform) advance the
/// random stream, and only [`commit`](Self::commit) changes the history.
#[derive(Clone, Debug)]
pub struct Sampler {
    options: SamplerOptions,
    history: VecDeque<u32>,
    rng: ChaCha8Rng,
}

impl Sampler {
    /// Validates `options` and starts a sampler whose history is the last `repeat_last_n`
    /// tokens of `prompt`. The random stream is ChaCha8 seeded from `options.seed`, or from OS
    /// entropy when there is no seed.
    pub fn new(options: SamplerOptions, prompt: &[u32]) -> Result<Self, CoreError> {
        options.validate()?;
        let rng = match options.seed {
            Some(seed) => ChaCha8Rng::seed_from_u64(seed),
            None => ChaCha8Rng::seed_from_u64(rand::rng().random()),
        };
        let mut sampler = Self {
            options,
            history: VecDeque::new(),
            rng,
        };
        sampler.commit(prompt);
        Ok(sampler)
    }

    /// The options this sampler was built with.
    pub fn options(&self) -> &SamplerOptions {
        &self.options
    }

    /// The penalty history (at most `repeat_last_n` tokens, oldest first).
    pub fn history(&self) -> Vec<u32> {
        self.history.iter().copied().collect()
    }

    /// The distribution of one logit row, with the history followed by `prefix` (its last
    /// `repeat_last_n` tokens) as the penalty context. Never mutates the sampler.
    ///
    /// Errors on a bad logit row (empty, NaN, +∞, or all −∞) and with
    /// [`CoreError::TokenOutOfVocab`] when a prefix id or an id of the penalty window is not
    /// inside the row's vocabulary.
    pub fn distribution(&self, logits: &[f32], prefix: &[u32]) -> Result<Distribution, CoreError> {
        self.distribution_of(LogitRow::Dense(logits), prefix)
    }

    /// [`distribution`](Self::distribution) of a dense row or of the top candidates of one (a
    /// device-side top-k of [`SamplerOptions::top_candidates`] entries, which gives exactly the
    /// dense row's distribution).
    pub fn distribution_of(
        &self,
        row: LogitRow<'_>,
        prefix: &[u32],
    ) -> Result<Distribution, CoreError> {
        let context = self.context(prefix, row.vocab())?;
        pipeline::distribution(row, &context, &self.options)
    }

    /// The log-probabilities reported at temperature 0 for `id` chosen from the dense logits
    /// `logits` after the history and `prefix` (the penalty context of
    /// [`distribution`](Self::distribution)): `log_softmax` of the penalised logits and the
    /// `top` best tokens by it (see [`logprobs`](super::logprobs)). At temperature > 0 the
    /// reported values come from the distribution itself ([`Distribution::logprobs`]).
    /// Never mutates the sampler.
    ///
    /// Errors as [`distribution`](Self::distribution) does, and when `id` is outside the row.
    pub fn greedy_logprobs(
        &self,
        logits: &[f32],
        prefix: &[u32],
        id: u32,
        top: usize,
    ) -> Result<TokenLogprobs, CoreError> {
        let context = self.context(prefix, logits.len())?;
        pipeline::greedy_logprobs(logits, &context, &self.options, id, top)
    }

    /// The penalty context of a row after the history and `prefix`: the last `repeat_last_n`
    /// tokens of both, every id checked against `vocab`.
    fn context(&self, prefix: &[u32], vocab: usize) -> Result<Vec<u32>, CoreError> {
        for &id in prefix {
            pipeline::check_id(id, vocab)?;
        }
        let window = self.options.repeat_last_n;
        let from_history = window.saturating_sub(prefix.len()).min(self.history.len());
        let context: Vec<u32> = self
            .history
            .iter()
            .skip(self.history.len() - from_history)
            .chain(prefix.iter().skip(prefix.len().saturating_sub(window)))
            .copied()
            .collect();
        for &id in &context {
            pipeline::check_id(id, vocab)?;
        }
        Ok(context)
    }

    /// The target distributions of one verification batch: row `i` sees `drafts[..i]` as its
    /// prefix. `rows.len()` must be `drafts.len()` or `drafts.len() + 1` (with the bonus row).
    /// Never mutates the sampler.
    pub fn verification_distributions(
        &self,
        rows: &[&[f32]],
        drafts: &[u32],
    ) -> Result<Vec<Distribution>, CoreError> {
        let rows: Vec<LogitRow<'_>> = rows.iter().map(|r| LogitRow::Dense(r)).collect();
        self.verification_distributions_of(&rows, drafts)
    }

    /// [`verification_distributions`](Self::verification_distributions) of dense or top rows.
    pub fn verification_distributions_of(
        &self,
        rows: &[LogitRow<'_>],
        drafts: &[u32],
    ) -> Result<Vec<Distribution>, CoreError> {
        if rows.len() != drafts.len() && rows.len() != drafts.len() + 1 {
            return Err(CoreError::ShapeMismatch {
                op: "Sampler::verification_distributions",
                lhs: vec![rows.len()],
                rhs: vec![drafts.len() + 1],
            });
        }
        rows.iter()
            .enumerate()
            .map(|(i, row)| self.distribution_of(*row, &drafts[..i]))
            .collect()
    }

    /// One draw from `dist` on the seeded stream (consumes exactly one uniform). Does not
    /// commit the token to the history.
    pub fn sample(&mut self, dist: &Distribution) -> u32 {
        let u = self.uniform();
        dist.sample_with(u)
    }

    /// One uniform draw in [0, 1) from the same seeded stream as [`sample`](Self::sample).
    pub fn uniform(&mut self) -> f64 {
        self.rng.random::<f64>()
    }

    /// Appends `ids` to the penalty history, keeping the last `repeat_last_n` tokens.
    pub fn commit(&mut self, ids: &[u32]) {
        let window = self.options.repeat_last_n;
        let skip = ids.len().saturating_sub(window);
        self.history.extend(ids.iter().skip(skip).copied());
        while self.history.len() > window {
            self.history.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(seed: Option<u64>) -> SamplerOptions {
        SamplerOptions {
            temperature: 1.0,
            seed,
            ..Default::default()
        }
    }

    #[test]
    fn history_starts_from_prompt_tail_and_commit_truncates() {
        let opts = SamplerOptions {
            repeat_last_n: 3,
            ..Default::default()
        };
        let mut s = Sampler::new(opts, &[1, 2, 3, 4, 5]).unwrap();
        assert_eq!(s.history(), vec![3, 4, 5]);
        s.commit(&[6]);
        assert_eq!(s.history(), vec![4, 5, 6]);
        s.commit(&[7, 8, 9, 10]);
        assert_eq!(s.history(), vec![8, 9, 10]);
        s.commit(&[]);
        assert_eq!(s.history(), vec![8, 9, 10]);
        let mut s = Sampler::new(
            SamplerOptions {
                repeat_last_n: 0,
                ..Default::default()
            },
            &[1],
        )
        .unwrap();
        s.commit(&[2]);
        assert!(s.history().is_empty());
    }

    #[test]
    fn new_validates() {
        let opts = SamplerOptions {
            temperature: -1.0,
            ..Default::default()
        };
        assert!(matches!(
            Sampler::new(opts, &[]),
            Err(CoreError::InvalidOption { .. })
        ));
    }

    #[test]
    fn verification_rows_see_draft_prefixes() {
        let opts = SamplerOptions {
            repeat_penalty: 2.0,
            repeat_last_n: 8,
            ..Default::default()
        };
        let s = Sampler::new(opts, &[0]).unwrap();
        // Greedy with repeat 2: history {0} halves logit 0.
        let logits = [4.0f32, 3.0, 2.5, 1.0];
        let rows: Vec<&[f32]> = vec![&logits; 4];
        let dists = s.verification_distributions(&rows, &[1, 2, 3]).unwrap();
        let picks: Vec<u32> = dists.iter().map(Distribution::argmax).collect();
        // row 0: [2, 3, 2.5, 1] → 1; row 1 (sees 1): [2, 1.5, 2.5, 1] → 2;
        // row 2 (sees 1, 2): [2, 1.5, 1.25, 1] → 0; row 3: same plus 3 → 0.
        assert_eq!(picks, vec![1, 2, 0, 0]);
        assert_eq!(s.history(), vec![0]);
        // k rows without the bonus row are fine too; other lengths are errors.
        assert_eq!(
            s.verification_distributions(&rows[..3], &[1, 2, 3])
                .unwrap()
                .len(),
            3
        );
        assert!(s
            .verification_distributions(&rows[..2], &[1, 2, 3])
            .is_err());
        assert!(s.verification_distributions(&rows, &[1]).is_err());
    }

    #[test]
    fn greedy_logprobs_are_the_penalised_log_softmax() {
        let opts = SamplerOptions {
            repeat_penalty: 2.0,
            repeat_last_n: 8,
            ..Default::default()
        };
        let s = Sampler::new(opts, &[0]).unwrap();
        let logits = [4.0f32, 3.0, 2.5, 1.0];
        let lse = |v: [f64; 4]| v.iter().map(|x| x.exp()).sum::<f64>().ln();
        // History {0} halves logit 0: [2, 3, 2.5, 1].
        let lp = s.greedy_logprobs(&logits, &[], 1, 2).unwrap();
        let z = lse([2.0, 3.0, 2.5, 1.0]);
        assert!((f64::from(lp.logprob) - (3.0 - z)).abs() < 1e-6);
        assert_eq!(lp.top.iter().map(|t| t.id).collect::<Vec<_>>(), vec![1, 2]);
        assert!((f64::from(lp.top[1].logprob) - (2.5 - z)).abs() < 1e-6);
        // A prefix [1] penalises 1 too: [2, 1.5, 2.5, 1]; any id may be asked about.
        let lp = s.greedy_logprobs(&logits, &[1], 3, 4).unwrap();
        let z = lse([2.0, 1.5, 2.5, 1.0]);
        assert!((f64::from(lp.logprob) - (1.0 - z)).abs() < 1e-6);
        assert_eq!(
            lp.top.iter().map(|t| t.id).collect::<Vec<_>>(),
            vec![2, 0, 1, 3]
        );
        // -inf logits are never alternatives; bad rows and ids are errors.
        let masked = [0.0f32, f32::NEG_INFINITY, 1.0];
        let lp = s.greedy_logprobs(&masked, &[], 2, 3).unwrap();
        assert_eq!(lp.top.len(), 2);
        assert!(s.greedy_logprobs(&logits, &[], 4, 1).is_err());
        assert!(s.greedy_logprobs(&[f32::NAN; 4], &[], 0, 1).is_err());
        assert_eq!(s.history(), vec![0]);
    }

    #[test]
    fn penalty_window_covers_history_and_prefix_tail() {
        let opts = SamplerOptions {
            frequency_penalty: 1.0,
            repeat_last_n: 3,
            temperature: 1.0,
            ..Default::default()
        };
        let s = Sampler::new(opts, &[0, 0, 1]).unwrap();
        let logits = [0.0f32; 4];
        // Window of history [0, 0, 1] ++ prefix [2, 2] is [1, 2, 2].
        let d = s.distribution(&logits, &[2, 2]).unwrap();
        let e = [1.0, (-1.0f64).exp(), (-2.0f64).exp(), 1.0];
        let z: f64 = e.iter().sum();
        // A whole-row softmax carries f32 weights (a few ulp of `exp`).
        for (i, w) in e.iter().enumerate() {
            assert!((d.prob(i as u32) - w / z).abs() < 1e-6);
        }
        // A long prefix pushes the history out entirely.
        let d = s.distribution(&logits, &[3, 3, 3, 3]).unwrap();
        assert!(d.prob(0) == d.prob(1) && d.prob(1) == d.prob(2));
    }

    #[test]
    fn out_of_vocab_ids_are_errors() {
        let s = Sampler::new(sampled(Some(1)), &[7]).unwrap();
        assert!(matches!(
            s.distribution(&[0.0; 4], &[]),
            Err(CoreError::TokenOutOfVocab { id: 7, vocab: 4 })
        ));
        let s = Sampler::new(sampled(Some(1)), &[1]).unwrap();
        assert!(matches!(
            s.distribution(&[0.0; 4], &[9]),
            Err(CoreError::TokenOutOfVocab { id: 9, vocab: 4 })
        ));
        let neutral = Sampler::new(sampled(Some(1)), &[]).unwrap();
        assert!(neutral.distribution(&[0.0; 4], &[4]).is_err());
    }

    #[test]
    fn seeded_streams_repeat_and_differ() {
        let logits = [0.1f32, 0.5, -0.2, 1.0, 0.0];
        let run = |seed| {
            let mut s = Sampler::new(sampled(Some(seed)), &[]).unwrap();
            let d = s.distribution(&logits, &[]).unwrap();
            let mut out = Vec::new();
            for _ in 0..50 {
                out.push(f64::from(s.sample(&d)));
                out.push(s.uniform());
            }
            out
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let mut s = Sampler::new(sampled(None), &[]).unwrap();
        let u = s.uniform();
        assert!((0.0..1.0).contains(&u));
    }

    #[test]
    fn distribution_never_mutates() {
        let mut a = Sampler::new(sampled(Some(3)), &[1, 2]).unwrap();
        let mut b = a.clone();
        let logits = [0.1f32, 0.5, -0.2, 1.0];
        for _ in 0..5 {
            let _ = a.distribution(&logits, &[3, 3]).unwrap();
        }
        assert_eq!(a.history(), b.history());
        assert_eq!(a.uniform(), b.uniform());
    }
}
