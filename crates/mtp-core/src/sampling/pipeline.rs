//! The sampling pipeline as pure functions: penalties, then temperature / top-k / softmax /
//! top-p / min-p.

use std::cmp::Ordering;

use super::{Distribution, SamplerOptions};
use crate::CoreError;

const OP: &str = "sampling";

/// Runs the whole pipeline on one logit row with `context` as the penalty context.
///
/// `context` must already be the penalty window (at most `repeat_last_n` ids) and every id in
/// it must be inside the vocabulary.
pub(crate) fn distribution(
    logits: &[f32],
    context: &[u32],
    options: &SamplerOptions,
) -> Result<Distribution, CoreError> {
    check_logits(logits)?;
    let mut work: Vec<f64> = logits.iter().map(|&l| f64::from(l)).collect();
    if options.has_penalties() {
        apply_penalties(&mut work, context, options);
    }
    if options.is_greedy() {
        return Distribution::point(work.len(), argmax(&work));
    }
    let kept = top_k(&work, options.top_k);
    let probs = softmax(&work, &kept, f64::from(options.temperature));
    let kept = top_p(kept, &probs, options.top_p);
    let kept = min_p(kept, &probs, options.min_p);
    let mut weights = vec![0.0; work.len()];
    for &i in &kept {
        weights[i] = probs[i];
    }
    Distribution::from_probs(weights)
}

/// Checks that `id` is inside a vocabulary of `vocab` tokens.
pub(crate) fn check_id(id: u32, vocab: usize) -> Result<(), CoreError> {
    if (id as usize) < vocab {
        Ok(())
    } else {
        Err(CoreError::TokenOutOfVocab { id, vocab })
    }
}

/// Rejects empty rows, NaN or +∞ logits, and rows with no finite logit (−∞ masks are fine).
fn check_logits(logits: &[f32]) -> Result<(), CoreError> {
    if logits.is_empty() {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: "empty logit row".into(),
        });
    }
    if let Some((i, l)) = logits
        .iter()
        .enumerate()
        .find(|(_, l)| l.is_nan() || **l == f32::INFINITY)
    {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("logit {i} is {l}: logits must be finite or -inf"),
        });
    }
    if !logits.iter().any(|l| l.is_finite()) {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: "every logit is -inf: nothing can be sampled".into(),
        });
    }
    Ok(())
}

/// Repeat, presence and frequency penalties over the distinct ids of `context`.
///
/// Repeat: a positive logit is divided by the penalty, any other is multiplied by it.
/// Presence: subtracted once per distinct id. Frequency: subtracted once per occurrence.
pub(crate) fn apply_penalties(work: &mut [f64], context: &[u32], options: &SamplerOptions) {
    let mut ids = context.to_vec();
    ids.sort_unstable();
    let repeat = f64::from(options.repeat_penalty);
    let presence = f64::from(options.presence_penalty);
    let frequency = f64::from(options.frequency_penalty);
    for run in ids.chunk_by(|a, b| a == b) {
        let Some(slot) = work.get_mut(run[0] as usize) else {
            continue;
        };
        if repeat != 1.0 {
            if *slot > 0.0 {
                *slot /= repeat;
            } else {
                *slot *= repeat;
            }
        }
        *slot -= presence;
        *slot -= frequency * run.len() as f64;
    }
}

/// The index of the largest value (the first on ties).
fn argmax(values: &[f64]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best as u32
}

/// Descending by value, ascending by id on ties.
fn by_value_desc(values: &[f64]) -> impl Fn(&usize, &usize) -> Ordering + '_ {
    move |&a, &b| {
        values[b]
            .partial_cmp(&values[a])
            .unwrap_or(Ordering::Equal)
            .then(a.cmp(&b))
    }
}

/// The ids that survive top-k: the `k` largest logits when 0 < k < vocab (lower id first on
/// ties), otherwise every id.
pub(crate) fn top_k(work: &[f64], k: usize) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..work.len()).collect();
    if k > 0 && k < work.len() {
        ids.select_nth_unstable_by(k - 1, by_value_desc(work));
        ids.truncate(k);
        ids.sort_unstable();
    }
    ids
}

/// Softmax of `work / temperature` over the `kept` ids, in `f64`; 0 elsewhere.
pub(crate) fn softmax(work: &[f64], kept: &[usize], temperature: f64) -> Vec<f64> {
    let max = kept
        .iter()
        .map(|&i| work[i])
        .fold(f64::NEG_INFINITY, f64::max);
    let mut probs = vec![0.0; work.len()];
    let mut total = 0.0;
    for &i in kept {
        let e = ((work[i] - max) / temperature).exp();
        probs[i] = e;
        total += e;
    }
    for &i in kept {
        probs[i] /= total;
    }
    probs
}

/// Nucleus filter: in order of decreasing probability (lower id first on ties), keep a token
/// while the cumulative probability of the tokens *before* it is below `top_p`, so at least
/// one token survives. Off when `top_p` ≤ 0 or ≥ 1.
pub(crate) fn top_p(mut kept: Vec<usize>, probs: &[f64], top_p: f32) -> Vec<usize> {
    if top_p <= 0.0 || top_p >= 1.0 {
        return kept;
    }
    let top_p = f64::from(top_p);
    kept.sort_unstable_by(by_value_desc(probs));
    let mut cumulative = 0.0;
    let mut n = 0;
    for &i in &kept {
        if cumulative >= top_p {
            break;
        }
        cumulative += probs[i];
        n += 1;
    }
    kept.truncate(n.max(1));
    kept
}

/// Min-p filter: drop tokens whose probability is below `min_p` × the largest kept
/// probability. Off when `min_p` is 0.
pub(crate) fn min_p(mut kept: Vec<usize>, probs: &[f64], min_p: f32) -> Vec<usize> {
    if min_p <= 0.0 {
        return kept;
    }
    let max = kept.iter().map(|&i| probs[i]).fold(0.0, f64::max);
    let threshold = f64::from(min_p) * max;
    kept.retain(|&i| probs[i] >= threshold);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-6, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn repeat_penalty_divides_positive_multiplies_negative() {
        let opts = SamplerOptions {
            repeat_penalty: 2.0,
            ..Default::default()
        };
        let mut w = vec![4.0, -4.0, 0.0, 3.0];
        apply_penalties(&mut w, &[0, 1, 2, 1, 1], &opts);
        close(&w, &[2.0, -8.0, 0.0, 3.0]);
    }

    #[test]
    fn presence_once_frequency_per_count() {
        let opts = SamplerOptions {
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            ..Default::default()
        };
        let mut w = vec![1.0, 1.0, 1.0];
        apply_penalties(&mut w, &[2, 0, 2, 2], &opts);
        // id 0: once → 1 − 0.5 − 0.25; id 2: thrice → 1 − 0.5 − 0.75.
        close(&w, &[0.25, 1.0, -0.25]);
    }

    #[test]
    fn all_penalties_compose_in_order() {
        let opts = SamplerOptions {
            repeat_penalty: 1.5,
            presence_penalty: 0.1,
            frequency_penalty: 0.2,
            ..Default::default()
        };
        let mut w = vec![3.0, -1.0];
        apply_penalties(&mut w, &[0, 1, 1], &opts);
        close(&w, &[3.0 / 1.5 - 0.1 - 0.2, -1.5 - 0.1 - 0.4]);
    }

    #[test]
    fn top_k_ties_lower_id_first() {
        let w = vec![1.0, 3.0, 2.0, 3.0, 2.0];
        assert_eq!(top_k(&w, 2), vec![1, 3]);
        assert_eq!(top_k(&w, 3), vec![1, 2, 3]);
        assert_eq!(top_k(&w, 0), vec![0, 1, 2, 3, 4]);
        assert_eq!(top_k(&w, 5), vec![0, 1, 2, 3, 4]);
        assert_eq!(top_k(&w, 9), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn softmax_with_temperature() {
        let w = vec![0.0, 2f64.ln(), 9.0];
        let p = softmax(&w, &[0, 1], 1.0);
        close(&p, &[1.0 / 3.0, 2.0 / 3.0, 0.0]);
        let p = softmax(&w, &[0, 1], 0.5);
        close(&p, &[1.0 / 5.0, 4.0 / 5.0, 0.0]);
    }

    #[test]
    fn top_p_exclusive_cumulative() {
        let probs = vec![0.1, 0.5, 0.3, 0.1];
        // Before 1: 0 < 0.5 keep; before 2: 0.5 < 0.5? no.
        assert_eq!(top_p(vec![0, 1, 2, 3], &probs, 0.5), vec![1]);
        // 0.6: before 2 is 0.5 < 0.6 keep; before 0 is 0.8 stop.
        assert_eq!(top_p(vec![0, 1, 2, 3], &probs, 0.6), vec![1, 2]);
        // Ties by lower id: 0 comes before 3 once 0.8 < 0.85.
        assert_eq!(top_p(vec![0, 1, 2, 3], &probs, 0.85), vec![1, 2, 0]);
        // Tiny top_p still keeps one.
        assert_eq!(top_p(vec![0, 1, 2, 3], &probs, 1e-6), vec![1]);
        // Off.
        assert_eq!(top_p(vec![0, 1, 2, 3], &probs, 1.0), vec![0, 1, 2, 3]);
        assert_eq!(top_p(vec![0, 1, 2, 3], &probs, 0.0), vec![0, 1, 2, 3]);
    }

    #[test]
    fn min_p_relative_to_max() {
        let probs = vec![0.1, 0.5, 0.3, 0.1];
        assert_eq!(min_p(vec![0, 1, 2, 3], &probs, 0.3), vec![1, 2]);
        assert_eq!(min_p(vec![0, 1, 2, 3], &probs, 0.19), vec![0, 1, 2, 3]);
        assert_eq!(min_p(vec![0, 1, 2, 3], &probs, 1.0), vec![1]);
        assert_eq!(min_p(vec![0, 1, 2, 3], &probs, 0.0), vec![0, 1, 2, 3]);
    }

    #[test]
    fn greedy_is_point_mass_at_penalised_argmax() {
        let opts = SamplerOptions {
            repeat_penalty: 4.0,
            ..Default::default()
        };
        let d = distribution(&[1.0, 3.0, 2.0], &[1], &opts).unwrap();
        assert_eq!(d.probs(), &[0.0, 0.0, 1.0]);
        let d = distribution(&[1.0, 3.0, 3.0], &[], &SamplerOptions::default()).unwrap();
        assert_eq!(d.argmax(), 1);
        assert_eq!(d.prob(1), 1.0);
    }

    #[test]
    fn full_pipeline_hand_computed() {
        // logits ln(1), ln(2), ln(3), ln(4), ln(0.5) at T = 1, top-k 4 drops id 4 (smallest),
        // softmax → 0.1, 0.2, 0.3, 0.4; top-p 0.65 keeps 3 (0 < .65), 2 (.4 < .65), stops at
        // 1 (.7); renormalise over {2, 3} → 3/7, 4/7.
        let logits: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0, 0.5]
            .iter()
            .map(|x| x.ln())
            .collect();
        let opts = SamplerOptions {
            temperature: 1.0,
            top_k: 4,
            top_p: 0.65,
            ..Default::default()
        };
        let d = distribution(&logits, &[], &opts).unwrap();
        close(d.probs(), &[0.0, 0.0, 3.0 / 7.0, 4.0 / 7.0, 0.0]);
        // Min-p 0.45 instead of top-p: max 0.4 → drop < 0.18: keep 1, 2, 3 → 2/9, 3/9, 4/9.
        let opts = SamplerOptions {
            top_p: 1.0,
            min_p: 0.45,
            ..opts
        };
        let d = distribution(&logits, &[], &opts).unwrap();
        close(d.probs(), &[0.0, 2.0 / 9.0, 3.0 / 9.0, 4.0 / 9.0, 0.0]);
    }

    #[test]
    fn bad_logits_are_errors() {
        let opts = SamplerOptions {
            temperature: 1.0,
            ..Default::default()
        };
        assert!(distribution(&[], &[], &opts).is_err());
        assert!(distribution(&[1.0, f32::NAN], &[], &opts).is_err());
        assert!(distribution(&[1.0, f32::INFINITY], &[], &opts).is_err());
        assert!(distribution(&[f32::NEG_INFINITY; 3], &[], &opts).is_err());
        let d = distribution(&[f32::NEG_INFINITY, 0.0], &[], &opts).unwrap();
        assert_eq!(d.probs(), &[0.0, 1.0]);
    }
}
