//! Probability distributions over the vocabulary, stored sparsely (the ids with positive mass).

use crate::CoreError;

/// Probabilities over a vocabulary of `vocab_size` tokens, summing to 1, stored as the ids with
/// positive probability (ascending) and their probabilities: a top-k distribution over a
/// 262k-token vocabulary costs k entries, not 262k.
///
/// Every operation visits the support in ascending id order, which is the order a dense
/// `Vec<f64>` over the vocabulary would be visited in with its zeros skipped, so sums, argmax
/// and inverse-CDF sampling give bit-for-bit the values of a dense representation.
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    vocab: usize,
    /// Token ids with positive probability, ascending.
    ids: Vec<u32>,
    /// `probs[i]` is the probability of `ids[i]`.
    probs: Vec<f64>,
}

impl Distribution {
    /// A point mass on `id` over a vocabulary of `vocab` tokens.
    ///
    /// Errors with [`CoreError::TokenOutOfVocab`] when `id >= vocab` (which includes an empty
    /// vocabulary).
    pub fn point(vocab: usize, id: u32) -> Result<Self, CoreError> {
        if id as usize >= vocab {
            return Err(CoreError::TokenOutOfVocab { id, vocab });
        }
        Ok(Self {
            vocab,
            ids: vec![id],
            probs: vec![1.0],
        })
    }

    /// Normalises non-negative dense weights (one per token id) into a distribution.
    ///
    /// Errors when the weights are empty, contain a negative or non-finite value, or are all
    /// zero.
    pub fn from_probs(weights: Vec<f64>) -> Result<Self, CoreError> {
        const OP: &str = "Distribution::from_probs";
        if weights.is_empty() {
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: "no weights".into(),
            });
        }
        let vocab = weights.len();
        let (ids, probs): (Vec<u32>, Vec<f64>) = weights
            .into_iter()
            .enumerate()
            .filter(|&(_, w)| w != 0.0)
            .map(|(i, w)| (i as u32, w))
            .unzip();
        Self::from_sparse(vocab, ids, probs)
    }

    /// Normalises non-negative weights of the ids `ids` (strictly ascending, each below `vocab`)
    /// into a distribution over `vocab` tokens; other ids get 0.
    ///
    /// Errors when `ids` and `weights` differ in length, `ids` is not strictly ascending or
    /// leaves the vocabulary, a weight is negative or non-finite, or the weights sum to zero.
    pub fn from_sparse(vocab: usize, ids: Vec<u32>, weights: Vec<f64>) -> Result<Self, CoreError> {
        const OP: &str = "Distribution::from_probs";
        if vocab == 0 || ids.len() != weights.len() {
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: format!(
                    "{} ids, {} weights over {vocab} tokens",
                    ids.len(),
                    weights.len()
                ),
            });
        }
        if let Some((i, w)) = weights
            .iter()
            .enumerate()
            .find(|(_, w)| !w.is_finite() || **w < 0.0)
        {
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: format!("weight {} is {w}: weights must be finite and >= 0", ids[i]),
            });
        }
        let ascending = ids.windows(2).all(|p| p[0] < p[1]);
        if !ascending || ids.last().is_some_and(|&id| id as usize >= vocab) {
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: "ids must ascend inside the vocabulary".into(),
            });
        }
        let total: f64 = weights.iter().sum();
        if total.is_nan() || total <= 0.0 || !total.is_finite() {
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: format!("the weights sum to {total}: need a finite positive sum"),
            });
        }
        let (ids, probs) = ids
            .into_iter()
            .zip(weights)
            .map(|(id, w)| (id, w / total))
            .filter(|&(_, p)| p > 0.0)
            .unzip();
        Ok(Self { vocab, ids, probs })
    }

    /// The probability of `id`; 0 when `id` is outside the support or the vocabulary.
    pub fn prob(&self, id: u32) -> f64 {
        match self.ids.binary_search(&id) {
            Ok(i) => self.probs[i],
            Err(_) => 0.0,
        }
    }

    /// The support: `(id, probability)` for every id with positive probability, ascending.
    pub fn support(&self) -> impl Iterator<Item = (u32, f64)> + '_ {
        self.ids.iter().copied().zip(self.probs.iter().copied())
    }

    /// Number of ids with positive probability.
    pub fn support_len(&self) -> usize {
        self.ids.len()
    }

    /// All probabilities as a dense vector indexed by token id (allocates the vocabulary).
    pub fn dense(&self) -> Vec<f64> {
        let mut out = vec![0.0; self.vocab];
        for (id, p) in self.support() {
            out[id as usize] = p;
        }
        out
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// The most likely token id (the first one on ties).
    pub fn argmax(&self) -> u32 {
        let mut best = 0usize;
        for (i, &p) in self.probs.iter().enumerate() {
            if p > self.probs[best] {
                best = i;
            }
        }
        self.ids.get(best).copied().unwrap_or(0)
    }

    /// Inverse-CDF sampling: the token whose cumulative-probability interval contains `u`, a
    /// uniform draw in [0, 1). Values outside [0, 1) (and NaN) are clamped into it. Only ids
    /// with a positive probability are ever returned, rounding notwithstanding.
    pub fn sample_with(&self, u: f64) -> u32 {
        let u = if u >= 0.0 { u.min(1.0) } else { 0.0 };
        let total: f64 = self.probs.iter().sum();
        let target = u * total;
        let mut cumulative = 0.0;
        for (&id, &p) in self.ids.iter().zip(&self.probs) {
            cumulative += p;
            if target < cumulative {
                return id;
            }
        }
        self.ids.last().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_mass() {
        let d = Distribution::point(4, 2).unwrap();
        assert_eq!(d.dense(), vec![0.0, 0.0, 1.0, 0.0]);
        assert_eq!(d.argmax(), 2);
        assert_eq!(d.vocab_size(), 4);
        for u in [0.0, 0.3, 0.999_999] {
            assert_eq!(d.sample_with(u), 2);
        }
        assert!(matches!(
            Distribution::point(4, 4),
            Err(CoreError::TokenOutOfVocab { id: 4, vocab: 4 })
        ));
        assert!(Distribution::point(0, 0).is_err());
    }

    #[test]
    fn from_probs_normalises_and_rejects() {
        let d = Distribution::from_probs(vec![1.0, 3.0, 0.0]).unwrap();
        assert_eq!(d.dense(), vec![0.25, 0.75, 0.0]);
        assert_eq!(d.support().collect::<Vec<_>>(), vec![(0, 0.25), (1, 0.75)]);
        assert_eq!(d.prob(1), 0.75);
        assert_eq!(d.prob(9), 0.0);
        for bad in [
            vec![],
            vec![0.0, 0.0],
            vec![1.0, -0.1],
            vec![f64::NAN],
            vec![f64::INFINITY],
        ] {
            assert!(Distribution::from_probs(bad).is_err());
        }
    }

    #[test]
    fn argmax_first_on_ties() {
        let d = Distribution::from_probs(vec![0.1, 0.4, 0.4, 0.1]).unwrap();
        assert_eq!(d.argmax(), 1);
    }

    #[test]
    fn inverse_cdf_skips_zero_mass() {
        let d = Distribution::from_probs(vec![0.0, 0.5, 0.0, 0.5, 0.0]).unwrap();
        assert_eq!(d.sample_with(0.0), 1);
        assert_eq!(d.sample_with(0.499), 1);
        assert_eq!(d.sample_with(0.5), 3);
        assert_eq!(d.sample_with(0.999_999_999), 3);
        assert_eq!(d.sample_with(1.0), 3);
        assert_eq!(d.sample_with(f64::NAN), 1);
        assert_eq!(d.sample_with(-2.0), 1);
    }
}
