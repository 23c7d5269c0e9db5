//! Top-p and min-p over unnormalised softmax weights, with the row's total weight known exactly
//! or only within bounds.
//!
//! A kept token's weight is `w = exp((l − max) / T)` in `f64` (`max` the largest kept logit,
//! so the largest weight is exactly 1). Nucleus sampling (Holtzman et al. 2020, *The Curious
//! Case of Neural Text Degeneration*) keeps tokens in decreasing weight order, lower id first on
//! ties, while the weight of the tokens *before* one is below `top_p × total`, so at least one
//! survives; min-p then drops weights below `min_p ×` the largest. Comparing unnormalised
//! weights with `top_p × total` decides exactly as comparing probabilities with `top_p`, and
//! leaves the survivors' weights independent of the total: a distribution built from them
//! depends on which tokens survive, not on how the total was summed.
//!
//! When only the largest logits of a row were read (a device-side top-k) and the total is a
//! device sum with bounded rounding ([`Total::Bounded`]), [`survivors`] answers only when every
//! decision is the same for every total inside the bounds and every unread token is certainly
//! dropped — then it names exactly the tokens the whole row would keep; otherwise `None`.

use std::cmp::Ordering;

/// What is known of a row's total weight `Σ_j exp((l_j − max) / T)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Total {
    /// Every token of the row is among the weighed ones; this is their sum.
    Exact(f64),
    /// Only the weighed tokens were read: every unread token's logit is at most the smallest
    /// read one, and the row's total lies in `[low, high]`.
    Bounded {
        /// A lower bound of the total.
        low: f64,
        /// An upper bound of the total.
        high: f64,
    },
}

/// The unnormalised weights `exp((v − max) / T)` of `values` (in their order), `max` their
/// largest value.
pub(super) fn weights(values: &[f64], temperature: f64) -> Vec<f64> {
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    values
        .iter()
        .map(|&v| ((v - max) / temperature).exp())
        .collect()
}

/// The tokens that survive top-p (off when `top_p` ≤ 0 or ≥ 1) then min-p (off at 0), as
/// indices into `ids` / `weights`, in decreasing weight order (lower id first on ties); `None`
/// when `total` is only bounded and the bounds or the unread tokens leave the answer open.
pub(super) fn survivors(
    ids: &[u32],
    weights: &[f64],
    total: Total,
    top_p: f32,
    min_p: f32,
) -> Option<Vec<usize>> {
    let (low, high, unread) = match total {
        Total::Exact(t) => (t, t, false),
        Total::Bounded { low, high } => (low, high, true),
    };
    let top_p_on = top_p > 0.0 && top_p < 1.0;
    let min_p_on = min_p > 0.0;
    if !top_p_on && !min_p_on {
        // Every token survives: the unread ones too.
        return (!unread).then(|| (0..ids.len()).collect());
    }
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        weights[b]
            .partial_cmp(&weights[a])
            .unwrap_or(Ordering::Equal)
            .then(ids[a].cmp(&ids[b]))
    });
    let (&first, &last) = (order.first()?, order.last()?);
    // The first token survives top-p, so min-p's "largest" is the largest weight.
    let threshold = if min_p_on {
        f64::from(min_p) * weights[first]
    } else {
        0.0
    };
    let smallest = weights[last];
    let p = f64::from(top_p);
    let mut cumulative = 0.0;
    let mut kept = 0;
    for &i in &order {
        let w = weights[i];
        if w < threshold {
            // Dropped by min-p, and so is every later token (unread ones included).
            break;
        }
        if top_p_on {
            if cumulative >= p * high {
                // Stops here whatever the total: this and every later token are dropped.
                break;
            }
            if cumulative >= p * low {
                return None;
            }
        }
        if unread && w <= smallest {
            // Tied with the unread tokens, whose lower ids would rank before it.
            return None;
        }
        cumulative += w;
        kept += 1;
    }
    order.truncate(kept);
    Some(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(weights: &[f64]) -> Total {
        Total::Exact(weights.iter().sum())
    }

    #[test]
    fn weights_are_relative_to_the_largest() {
        let w = weights(&[0.0, 2f64.ln(), 1.0], 1.0);
        assert_eq!(w[2], 1.0);
        assert!((w[0] - (-1f64).exp()).abs() < 1e-15);
        let w = weights(&[0.0, 1.0], 0.5);
        assert!((w[0] - (-2f64).exp()).abs() < 1e-15);
    }

    #[test]
    fn top_p_exclusive_cumulative() {
        let ids = [0, 1, 2, 3];
        let w = [0.1, 0.5, 0.3, 0.1];
        let s = |p: f32| survivors(&ids, &w, exact(&w), p, 0.0).unwrap();
        // Before 1: 0 < 0.5 keep; before 2: 0.5 < 0.5? no.
        assert_eq!(s(0.5), vec![1]);
        // 0.6: before 2 is 0.5 < 0.6 keep; before 0 is 0.8 stop.
        assert_eq!(s(0.6), vec![1, 2]);
        // Ties by lower id: 0 comes before 3 once 0.8 < 0.85.
        assert_eq!(s(0.85), vec![1, 2, 0]);
        // Tiny top_p still keeps one.
        assert_eq!(s(1e-6), vec![1]);
        // Off: everything, in id order.
        assert_eq!(s(1.0), vec![0, 1, 2, 3]);
        assert_eq!(s(0.0), vec![0, 1, 2, 3]);
    }

    #[test]
    fn min_p_relative_to_the_largest() {
        let ids = [0, 1, 2, 3];
        let w = [0.2, 1.0, 0.6, 0.2];
        let s = |m: f32| {
            let mut kept = survivors(&ids, &w, exact(&w), 1.0, m).unwrap();
            kept.sort_unstable();
            kept
        };
        assert_eq!(s(0.3), vec![1, 2]);
        assert_eq!(s(0.19), vec![0, 1, 2, 3]);
        assert_eq!(s(1.0), vec![1]);
        assert_eq!(s(0.0), vec![0, 1, 2, 3]);
    }

    #[test]
    fn bounded_totals_answer_only_when_settled() {
        // Read: weights 1, 0.5, 0.25 (ids 7, 3, 9); unread tokens weigh at most 0.25 each.
        let ids = [7, 3, 9];
        let w = [1.0, 0.5, 0.25];
        let bounded = |low, high| Total::Bounded { low, high };
        // Total about 2: top-p 0.45 stops before id 3 (1.0 >= 0.45 × 2.02).
        assert_eq!(
            survivors(&ids, &w, bounded(1.98, 2.02), 0.45, 0.0),
            Some(vec![0])
        );
        // 0.7 keeps id 3 (1.0 < 0.7 × 1.98) and stops before id 9 (1.5 >= 0.7 × 2.02).
        assert_eq!(
            survivors(&ids, &w, bounded(1.98, 2.02), 0.7, 0.0),
            Some(vec![0, 1])
        );
        // Before id 3 sits 1.0 = 0.5 × 2: a total in [1.98, 2.02] leaves it open.
        assert_eq!(survivors(&ids, &w, bounded(1.98, 2.02), 0.5, 0.0), None);
        assert_eq!(survivors(&ids, &w, bounded(1.9, 2.1), 0.52, 0.0), None);
        // Reaching the smallest read weight: it ties with unread tokens.
        assert_eq!(survivors(&ids, &w, bounded(10.0, 10.0), 0.9, 0.0), None);
        // Min-p drops from 0.5 down (threshold 0.6), unread tokens included.
        assert_eq!(
            survivors(&ids, &w, bounded(9.0, 11.0), 1.0, 0.6),
            Some(vec![0])
        );
        // Both off: the unread tokens survive too.
        assert_eq!(survivors(&ids, &w, bounded(2.0, 2.0), 1.0, 0.0), None);
        // Exactly known, nothing unread: always settled.
        assert_eq!(
            survivors(&ids, &w, Total::Exact(1.75), 0.9, 0.0),
            Some(vec![0, 1, 2])
        );
    }
}
