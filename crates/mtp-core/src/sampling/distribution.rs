//! Probability distributions over the vocabulary, stored sparsely (the ids with positive mass),
//! densely when every id has some, or as a whole row's softmax weights with their blocked
//! total (a softmax nothing truncated: nothing is normalised until a probability is asked for).

use std::sync::Arc;

use super::vector::SoftmaxRow;
use crate::CoreError;

/// Probabilities over a vocabulary of `vocab_size` tokens, summing to 1, stored as the ids with
/// positive probability (ascending) and their probabilities: a top-k distribution over a
/// 262k-token vocabulary costs k entries, not 262k.
///
/// Every operation on listed probabilities visits the support in ascending id order, which is
/// the order a dense `Vec<f64>` over the vocabulary would be visited in with its zeros skipped,
/// so sums, argmax and inverse-CDF sampling give bit-for-bit the values of a dense
/// representation. A distribution whose support is the whole vocabulary (a softmax nothing
/// truncated) keeps no id list: `probs` is then indexed by id.
///
/// A whole row's softmax (temperature and penalties only) is kept as its `f32` weights and
/// their blocked `f64` total (the `vector` module states the rounding): `p(x)` is one
/// weight over the total, and inverse-CDF sampling walks the block sums and then one block, so
/// neither allocates nor sums the vocabulary again (its draws therefore follow the blocked
/// total, not a sequential sum of normalised probabilities).
#[derive(Clone, Debug)]
pub struct Distribution {
    vocab: usize,
    masses: Masses,
}

/// How a [`Distribution`] holds its probabilities.
#[derive(Clone, Debug)]
enum Masses {
    /// These ids (ascending) with these probabilities.
    Listed { ids: Vec<u32>, probs: Vec<f64> },
    /// Every id of the vocabulary, `probs` indexed by id.
    Every(Vec<f64>),
    /// Unnormalised softmax weights indexed by id, shared between clones.
    Softmax(Arc<SoftmaxRow>),
}

impl PartialEq for Distribution {
    /// Equal vocabularies and supports with bit-for-bit equal probabilities, however stored.
    fn eq(&self, other: &Self) -> bool {
        self.vocab == other.vocab && self.support().eq(other.support())
    }
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
        Ok(Self::listed(vocab, vec![id], vec![1.0]))
    }

    fn listed(vocab: usize, ids: Vec<u32>, probs: Vec<f64>) -> Self {
        Self {
            vocab,
            masses: Masses::Listed { ids, probs },
        }
    }

    /// A whole row's softmax from its weights (see the type's docs).
    pub(crate) fn softmax(row: SoftmaxRow) -> Result<Self, CoreError> {
        if !(row.total.is_finite() && row.total > 0.0) {
            return Err(CoreError::InvalidArgument {
                op: "Distribution::softmax",
                message: format!(
                    "{} weights sum to {}: need a finite positive sum",
                    row.weights.len(),
                    row.total
                ),
            });
        }
        Ok(Self {
            vocab: row.weights.len(),
            masses: Masses::Softmax(Arc::new(row)),
        })
    }

    /// The softmax row, when this distribution is one.
    pub(crate) fn softmax_row(&self) -> Option<&SoftmaxRow> {
        match &self.masses {
            Masses::Softmax(row) => Some(row),
            Masses::Listed { .. } | Masses::Every(_) => None,
        }
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

    /// Normalises non-negative dense weights (one per token id) into a distribution, as
    /// [`from_probs`](Self::from_probs) does bit for bit (the total summed in ascending id
    /// order, ids whose probability is 0 left out) in two passes over the vocabulary.
    ///
    /// Errors as [`from_probs`](Self::from_probs) does.
    pub fn from_dense_weights(weights: Vec<f64>) -> Result<Self, CoreError> {
        const OP: &str = "Distribution::from_dense_weights";
        // Separate passes, each simple enough to vectorise (the sum stays sequential: it must
        // round as `from_probs`'s does).
        let valid = weights
            .iter()
            .fold(true, |ok, &w| ok & (w.is_finite() & (w >= 0.0)));
        if !valid {
            let (id, w) = weights
                .iter()
                .enumerate()
                .find(|(_, w)| !w.is_finite() || **w < 0.0)
                .map_or((0, 0.0), |(id, &w)| (id, w));
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: format!("weight {id} is {w}: weights must be finite and >= 0"),
            });
        }
        let total: f64 = weights.iter().sum();
        let zeros = weights.iter().filter(|&&w| w == 0.0).count();
        Self::from_checked_weights(weights, total, zeros)
    }

    /// [`from_dense_weights`](Self::from_dense_weights) of weights already known finite and
    /// non-negative, with their sum `total` (taken in ascending id order) and the number of
    /// zero weights `zeros`: a caller that computes the weights itself (a softmax) folds those
    /// into the pass that writes them and skips the checking passes. Bit for bit
    /// `from_dense_weights`'s result.
    ///
    /// Errors when the weights are empty or `total` is not finite and positive.
    pub(crate) fn from_checked_weights(
        weights: Vec<f64>,
        total: f64,
        zeros: usize,
    ) -> Result<Self, CoreError> {
        const OP: &str = "Distribution::from_dense_weights";
        if weights.is_empty() || total.is_nan() || total <= 0.0 || !total.is_finite() {
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: format!(
                    "{} weights sum to {total}: need a finite positive sum",
                    weights.len()
                ),
            });
        }
        let vocab = weights.len();
        if zeros == 0 {
            let mut probs = weights;
            let mut all_positive = true;
            for p in &mut probs {
                *p /= total;
                all_positive &= *p > 0.0;
            }
            if all_positive {
                return Ok(Self {
                    vocab,
                    masses: Masses::Every(probs),
                });
            }
            let ids = (0..vocab as u32)
                .filter(|&id| probs[id as usize] > 0.0)
                .collect();
            probs.retain(|&p| p > 0.0);
            return Ok(Self::listed(vocab, ids, probs));
        }
        let mut ids = Vec::with_capacity(vocab - zeros);
        let mut probs = Vec::with_capacity(vocab - zeros);
        for (id, &w) in weights.iter().enumerate() {
            let p = w / total;
            if p > 0.0 {
                ids.push(id as u32);
                probs.push(p);
            }
        }
        Ok(Self::listed(vocab, ids, probs))
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
        Ok(Self::listed(vocab, ids, probs))
    }

    /// The probability of `id`; 0 when `id` is outside the support or the vocabulary.
    pub fn prob(&self, id: u32) -> f64 {
        match &self.masses {
            Masses::Every(probs) => probs.get(id as usize).copied().unwrap_or(0.0),
            Masses::Listed { ids, probs } => match ids.binary_search(&id) {
                Ok(i) => probs[i],
                Err(_) => 0.0,
            },
            Masses::Softmax(row) => row
                .weights
                .get(id as usize)
                .map_or(0.0, |&w| f64::from(w) / row.total),
        }
    }

    /// The support: `(id, probability)` for every id with positive probability, ascending.
    pub fn support(&self) -> impl Iterator<Item = (u32, f64)> + '_ {
        let (every, listed, softmax) = match &self.masses {
            Masses::Every(probs) => (Some(probs.as_slice()), None, None),
            Masses::Listed { ids, probs } => (None, Some((ids.as_slice(), probs.as_slice())), None),
            Masses::Softmax(row) => (None, None, Some(row.as_ref())),
        };
        let every = every
            .into_iter()
            .flat_map(|probs| probs.iter().enumerate().map(|(i, &p)| (i as u32, p)));
        let listed = listed
            .into_iter()
            .flat_map(|(ids, probs)| ids.iter().copied().zip(probs.iter().copied()));
        let softmax = softmax.into_iter().flat_map(|row| {
            row.weights
                .iter()
                .enumerate()
                .filter(|&(_, &w)| w > 0.0)
                .map(|(i, &w)| (i as u32, f64::from(w) / row.total))
        });
        every.chain(listed).chain(softmax)
    }

    /// Number of ids with positive probability.
    pub fn support_len(&self) -> usize {
        match &self.masses {
            Masses::Every(probs) | Masses::Listed { probs, .. } => probs.len(),
            Masses::Softmax(row) => row.positive,
        }
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
        let first_best = |probs: &[f64]| {
            let mut best = 0usize;
            for (i, &p) in probs.iter().enumerate() {
                if p > probs[best] {
                    best = i;
                }
            }
            best
        };
        match &self.masses {
            Masses::Every(probs) => first_best(probs) as u32,
            Masses::Listed { ids, probs } => ids.get(first_best(probs)).copied().unwrap_or(0),
            Masses::Softmax(row) => row.argmax(),
        }
    }

    /// Inverse-CDF sampling: the token whose cumulative-probability interval contains `u`, a
    /// uniform draw in [0, 1). Values outside [0, 1) (and NaN) are clamped into it. Only ids
    /// with a positive probability are ever returned, rounding notwithstanding.
    pub fn sample_with(&self, u: f64) -> u32 {
        let u = if u >= 0.0 { u.min(1.0) } else { 0.0 };
        let (ids, probs) = match &self.masses {
            Masses::Every(probs) => (None, probs.as_slice()),
            Masses::Listed { ids, probs } => (Some(ids.as_slice()), probs.as_slice()),
            Masses::Softmax(row) => return row.sample_at(u * row.total),
        };
        let id_at = |i: usize| ids.map_or(i as u32, |ids| ids[i]);
        let total: f64 = probs.iter().sum();
        let target = u * total;
        let mut cumulative = 0.0;
        for (i, &p) in probs.iter().enumerate() {
            cumulative += p;
            if target < cumulative {
                return id_at(i);
            }
        }
        probs.len().checked_sub(1).map_or(0, id_at)
    }

    /// `max(self − q, 0)` renormalised, for a whole-row softmax `self` (see
    /// [`residual_distribution`](crate::acceptance::residual_distribution)), without visiting
    /// the vocabulary twice: against another softmax row one vectorised pass, against a
    /// sparse `q` a copy of the weights with `q`'s support lowered. `None` when `self` is not
    /// a softmax row; `Some(None)` when the residual's mass is at most `epsilon`.
    pub(crate) fn softmax_residual(&self, q: &Distribution, epsilon: f64) -> Option<Option<Self>> {
        let p = self.softmax_row()?;
        let residual = match q.softmax_row() {
            Some(q) => p.residual(q),
            None => {
                let lowered: Vec<(u32, f32)> = q
                    .support()
                    .filter_map(|(id, qi)| {
                        let w = f64::from(*p.weights.get(id as usize)?);
                        Some((id, (w - qi * p.total).max(0.0) as f32))
                    })
                    .collect();
                p.clone().with_overrides(&lowered)
            }
        };
        if residual.total <= epsilon * p.total {
            return Some(None);
        }
        // The total is positive (above) and finite (weights in [0, 1]): `softmax` accepts it.
        Some(Self::softmax(residual).ok())
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
    fn dense_weights_match_from_probs() {
        for weights in [
            vec![1.0, 3.0, 0.5, 2.0],
            vec![0.0, 3.0, 0.5, 0.0, 1e-300],
            vec![1e-320, 1.0],
        ] {
            let dense = Distribution::from_dense_weights(weights.clone()).unwrap();
            let sparse = Distribution::from_probs(weights.clone()).unwrap();
            assert_eq!(dense, sparse, "{weights:?}");
            assert_eq!(dense.support_len(), sparse.support_len());
            assert_eq!(dense.argmax(), sparse.argmax());
            for id in 0..weights.len() as u32 + 1 {
                assert_eq!(dense.prob(id), sparse.prob(id));
            }
            for u in [0.0, 0.2, 0.5, 0.9, 0.999_999, 1.0] {
                assert_eq!(dense.sample_with(u), sparse.sample_with(u));
            }
        }
        for bad in [
            vec![],
            vec![0.0],
            vec![1.0, -1.0],
            vec![f64::NAN],
            vec![f64::INFINITY],
        ] {
            assert!(Distribution::from_dense_weights(bad).is_err());
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
