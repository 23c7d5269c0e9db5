//! Dense probability distributions over the vocabulary.

use crate::CoreError;

/// Dense probabilities over the vocabulary: one `f64` per token id, summing to 1.
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    probs: Vec<f64>,
}

impl Distribution {
    /// A point mass on `id` over a vocabulary of `vocab` tokens.
    ///
    /// Errors with [`CoreError::TokenOutOfVocab`] when `id >= vocab` (which includes an empty
    /// vocabulary).
    pub fn point(vocab: usize, id: u32) -> Result<Self, CoreError> {
        let index = id as usize;
        if index >= vocab {
            return Err(CoreError::TokenOutOfVocab { id, vocab });
        }
        let mut probs = vec![0.0; vocab];
        probs[index] = 1.0;
        Ok(Self { probs })
    }

    /// Normalises non-negative weights into a distribution.
    ///
    /// Errors when the weights are empty, contain a negative or non-finite value, or are all
    /// zero.
    pub fn from_probs(mut weights: Vec<f64>) -> Result<Self, CoreError> {
        const OP: &str = "Distribution::from_probs";
        if weights.is_empty() {
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: "no weights".into(),
            });
        }
        if let Some((i, w)) = weights
            .iter()
            .enumerate()
            .find(|(_, w)| !w.is_finite() || **w < 0.0)
        {
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: format!("weight {i} is {w}: weights must be finite and >= 0"),
            });
        }
        let total: f64 = weights.iter().sum();
        if total.is_nan() || total <= 0.0 || !total.is_finite() {
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: format!("the weights sum to {total}: need a finite positive sum"),
            });
        }
        for w in &mut weights {
            *w /= total;
        }
        Ok(Self { probs: weights })
    }

    /// The probability of `id`; 0 when `id` is outside the vocabulary.
    pub fn prob(&self, id: u32) -> f64 {
        self.probs.get(id as usize).copied().unwrap_or(0.0)
    }

    /// All probabilities, indexed by token id.
    pub fn probs(&self) -> &[f64] {
        &self.probs
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.probs.len()
    }

    /// The most likely token id (the first one on ties).
    pub fn argmax(&self) -> u32 {
        let mut best = 0usize;
        for (i, &p) in self.probs.iter().enumerate() {
            if p > self.probs[best] {
                best = i;
            }
        }
        best as u32
    }

    /// Inverse-CDF sampling: the token whose cumulative-probability interval contains `u`, a
    /// uniform draw in [0, 1). Values outside [0, 1) (and NaN) are clamped into it. Only ids
    /// with a positive probability are ever returned, rounding notwithstanding.
    pub fn sample_with(&self, u: f64) -> u32 {
        let u = if u >= 0.0 { u.min(1.0) } else { 0.0 };
        let total: f64 = self.probs.iter().sum();
        let target = u * total;
        let mut cumulative = 0.0;
        let mut last_positive = 0usize;
        for (i, &p) in self.probs.iter().enumerate() {
            if p > 0.0 {
                cumulative += p;
                last_positive = i;
                if target < cumulative {
                    return i as u32;
                }
            }
        }
        last_positive as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_mass() {
        let d = Distribution::point(4, 2).unwrap();
        assert_eq!(d.probs(), &[0.0, 0.0, 1.0, 0.0]);
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
        assert_eq!(d.probs(), &[0.25, 0.75, 0.0]);
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
