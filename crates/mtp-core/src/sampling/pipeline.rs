//! The sampling pipeline as pure functions: penalties, then temperature / top-k / softmax /
//! top-p / min-p, over a dense logit row or over the top candidates of one.
//!
//! # Candidates
//!
//! A row is either every logit ([`LogitRow::Dense`]) or the `k'` largest logits of a row read
//! after a device-side top-k ([`LogitRow::Top`]). The top form is exact when top-k is on and
//! `k'` covers it: with no penalties `k' >= top_k`; with penalties that can only lower a logit
//! (repeat ≥ 1, presence ≥ 0, frequency ≥ 0) `k' >= top_k + |distinct ids in the penalty
//! window|`, because a penalised top-k token that is not among the `k'` raw best would have at
//! least `top_k` unpenalised tokens above it ([`SamplerOptions::top_candidates`] gives `k'`).
//! The result is then bit-for-bit the dense row's: the same kept set, summed in the same
//! (ascending id) order.
//!
//! With top-k off, no penalties and top-p or min-p on, a row can also be read as its largest
//! logits plus bounds on its total softmax weight from a device sum ([`LogitRow::Head`]): the
//! survivors are then decided only when the bounds settle every top-p decision and every unread
//! token is certainly dropped ([`nucleus`](super::nucleus)), and they are exactly the dense
//! row's, with the same weights. A dense row takes the same routes: with top-k on, its
//! `k'` largest logits found by [`largest`]; with top-p / min-p and top-k off, its largest
//! logits and its total from one vectorised pass. Only a row nothing truncates is weighed
//! whole, as `f32` weights ([`SoftmaxRow`]; the [`vector`](super::vector) module states their
//! rounding).

use super::logprobs::{self, TokenLogprobs};
use super::nucleus::{self, Total};
use super::spare_rows::{give_row, take_row};
use super::vector::{largest, SoftmaxRow};
use super::{best_k, Distribution, SamplerOptions};
use crate::CoreError;

const OP: &str = "sampling";

/// One logit row as the pipeline reads it.
#[derive(Clone, Copy, Debug)]
pub enum LogitRow<'a> {
    /// Every logit, indexed by token id.
    Dense(&'a [f32]),
    /// The largest logits of a row of `vocab` tokens (from a device-side top-k): `values[i]` is
    /// the logit of `ids[i]`. Exact only with enough candidates (see the module docs).
    Top {
        /// The row's vocabulary size.
        vocab: usize,
        /// Candidate token ids (distinct, any order).
        ids: &'a [u32],
        /// Their logits.
        values: &'a [f32],
    },
    /// The largest logits of a row of `vocab` tokens (from a device-side top-k) with bounds on
    /// the row's total weight `Σ_j exp((l_j − max) / T)` (from a device sum): for top-p and
    /// min-p with top-k off and no penalties, exact when the bounds settle the survivors (see
    /// the module docs), else an error.
    Head {
        /// The row's vocabulary size.
        vocab: usize,
        /// Candidate token ids (distinct, any order; every unread logit is at most theirs).
        ids: &'a [u32],
        /// Their logits.
        values: &'a [f32],
        /// A lower bound of the row's total weight.
        total_low: f64,
        /// An upper bound of the row's total weight.
        total_high: f64,
    },
}

impl LogitRow<'_> {
    /// The vocabulary size of the row.
    pub fn vocab(&self) -> usize {
        match self {
            LogitRow::Dense(row) => row.len(),
            LogitRow::Top { vocab, .. } | LogitRow::Head { vocab, .. } => *vocab,
        }
    }
}

/// A token and its (penalised) logit.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    id: u32,
    value: f64,
}

/// The penalty context as distinct ids (ascending) with their counts.
fn counted(context: &[u32]) -> Vec<(u32, usize)> {
    let mut ids = context.to_vec();
    ids.sort_unstable();
    ids.chunk_by(|a, b| a == b)
        .map(|run| (run[0], run.len()))
        .collect()
}

/// A logit after the penalties for an id seen `count` times.
///
/// Repeat: a positive logit is divided by the penalty, any other is multiplied by it.
/// Presence: subtracted once per distinct id. Frequency: subtracted once per occurrence.
fn penalise(value: f64, count: usize, options: &SamplerOptions) -> f64 {
    let repeat = f64::from(options.repeat_penalty);
    let mut v = value;
    if repeat != 1.0 {
        if v > 0.0 {
            v /= repeat;
        } else {
            v *= repeat;
        }
    }
    v -= f64::from(options.presence_penalty);
    v -= f64::from(options.frequency_penalty) * count as f64;
    v
}

/// The row's logits with penalties applied, read by id.
struct Penalised<'a> {
    row: LogitRow<'a>,
    /// Penalised logits of the context's distinct ids, ascending by id.
    context: Vec<(u32, f64)>,
}

impl<'a> Penalised<'a> {
    fn new(row: LogitRow<'a>, context: &[u32], options: &SamplerOptions) -> Self {
        let mut penalised = Vec::new();
        if options.has_penalties() {
            for (id, count) in counted(context) {
                let raw = match row {
                    LogitRow::Dense(r) => r.get(id as usize).copied(),
                    LogitRow::Top { ids, values, .. } | LogitRow::Head { ids, values, .. } => {
                        ids.iter().position(|&i| i == id).map(|at| values[at])
                    }
                };
                if let Some(raw) = raw {
                    penalised.push((id, penalise(f64::from(raw), count, options)));
                }
            }
        }
        Self {
            row,
            context: penalised,
        }
    }

    fn value(&self, id: u32, raw: f32) -> f64 {
        if self.context.is_empty() {
            return f64::from(raw);
        }
        match self.context.binary_search_by_key(&id, |&(i, _)| i) {
            Ok(at) => self.context[at].1,
            Err(_) => f64::from(raw),
        }
    }

    /// Every candidate of the row.
    fn candidates(&self) -> impl Iterator<Item = Candidate> + '_ {
        let (dense, top): (&[f32], (&[u32], &[f32])) = match self.row {
            LogitRow::Dense(r) => (r, (&[], &[])),
            LogitRow::Top { ids, values, .. } | LogitRow::Head { ids, values, .. } => {
                (&[], (ids, values))
            }
        };
        let dense = dense.iter().enumerate().map(|(i, &raw)| (i as u32, raw));
        let top = top.0.iter().copied().zip(top.1.iter().copied());
        dense.chain(top).map(|(id, raw)| Candidate {
            id,
            value: self.value(id, raw),
        })
    }
}

/// Runs the whole pipeline on one logit row with `context` as the penalty context.
///
/// `context` must already be the penalty window (at most `repeat_last_n` ids) and every id in
/// it must be inside the vocabulary.
pub(crate) fn distribution(
    row: LogitRow<'_>,
    context: &[u32],
    options: &SamplerOptions,
) -> Result<Distribution, CoreError> {
    let max = check_logits(&row)?;
    let vocab = row.vocab();
    let penalised = Penalised::new(row, context, options);
    if options.is_greedy() {
        let best = best_k(penalised.candidates().map(|c| (c.id, c.value)), 1)
            .first()
            .map_or(0, |&(id, _)| id);
        return Distribution::point(vocab, best);
    }
    if keeps_every_token(options, vocab) {
        if let Some(logits) = whole_row(&row) {
            return softmax(&logits, max, &penalised, options.temperature);
        }
    }
    if let LogitRow::Dense(logits) = row {
        if let Some(d) = from_largest(logits, max, context, options)? {
            return Ok(d);
        }
    }
    let kept = top_k(penalised.candidates(), options.top_k, vocab);
    let values: Vec<f64> = kept.iter().map(|c| c.value).collect();
    let weights = nucleus::weights(&values, f64::from(options.temperature));
    let total = match row {
        LogitRow::Head {
            total_low,
            total_high,
            ..
        } if kept.len() < vocab && !(options.top_k > 0 && options.top_k <= kept.len()) => {
            if options.has_penalties() {
                return Err(CoreError::InvalidArgument {
                    op: OP,
                    message: "a head row with bounded total cannot take penalties".into(),
                });
            }
            Total::Bounded {
                low: total_low,
                high: total_high,
            }
        }
        // Ascending ids, as the kept set is ordered.
        _ => Total::Exact(weights.iter().sum()),
    };
    let ids: Vec<u32> = kept.iter().map(|c| c.id).collect();
    let order = nucleus::survivors(&ids, &weights, total, options.top_p, options.min_p)
        .ok_or_else(|| CoreError::InvalidArgument {
            op: OP,
            message: format!(
                "the {} candidates read do not settle top-p / min-p over {vocab} tokens",
                kept.len()
            ),
        })?;
    let mut survivors: Vec<(u32, f64)> = order.iter().map(|&i| (ids[i], weights[i])).collect();
    survivors.sort_unstable_by_key(|&(id, _)| id);
    let (ids, weights) = survivors.into_iter().unzip();
    Distribution::from_sparse(vocab, ids, weights)
}

/// Whether sampling at a temperature above 0 keeps every token of a row: top-k, top-p and
/// min-p all off.
fn keeps_every_token(options: &SamplerOptions, vocab: usize) -> bool {
    let top_k_off = options.top_k == 0 || options.top_k >= vocab;
    let top_p_off = options.top_p <= 0.0 || options.top_p >= 1.0;
    top_k_off && top_p_off && options.min_p <= 0.0
}

/// Every logit of `row` indexed by id: a dense row as it is, candidates covering the whole
/// vocabulary scattered into one; `None` for candidates that do not.
fn whole_row<'a>(row: &LogitRow<'a>) -> Option<std::borrow::Cow<'a, [f32]>> {
    match *row {
        LogitRow::Dense(logits) => Some(logits.into()),
        LogitRow::Top {
            vocab, ids, values, ..
        }
        | LogitRow::Head {
            vocab, ids, values, ..
        } => (ids.len() == vocab).then(|| {
            let mut dense = vec![f32::NEG_INFINITY; vocab];
            for (&id, &v) in ids.iter().zip(values) {
                dense[id as usize] = v;
            }
            dense.into()
        }),
    }
}

/// The softmax of a whole row at `temperature` (penalties applied), when nothing truncates
/// it: the row's `f32` weights and blocked total in one vectorised pass ([`SoftmaxRow`], whose
/// rounding the [`vector`](super::vector) module states), a penalised copy of the row first
/// when penalties apply (each penalised logit rounded to `f32`). `max` is the largest of
/// `logits` (before penalties).
fn softmax(
    logits: &[f32],
    max: f32,
    penalised: &Penalised<'_>,
    temperature: f32,
) -> Result<Distribution, CoreError> {
    let inv_temperature = 1.0 / temperature;
    let weights = if penalised.context.is_empty() {
        SoftmaxRow::of_logits_below(logits, max, inv_temperature)
    } else {
        let mut row = take_row(logits.len());
        row.copy_from_slice(logits);
        for &(id, value) in &penalised.context {
            if let Some(slot) = row.get_mut(id as usize) {
                *slot = value as f32;
            }
        }
        let weights = SoftmaxRow::of_logits(&row, inv_temperature);
        give_row(row);
        weights
    };
    Distribution::softmax(weights)
}

/// Relative bound on how far [`SoftmaxRow::total_of_logits_below`] lies from the `f64` total
/// `Σ exp((l − max) / T)`: each term's argument carries at most `3|x|u` (`|x| ≤ 87`,
/// `u = 2⁻²⁴`: the subtraction, the scaling and `1/T`), `exp_neg` about 2 ulp, and the
/// flushed terms weigh under `e^-87` each against a total of at least 1 — about `2·10⁻⁵` in
/// all, taken five times over.
const ROW_TOTAL_TOLERANCE: f64 = 1e-4;

/// How many more candidates each retry of top-p / min-p reads when the previous ones did not
/// settle the survivors.
const NUCLEUS_GROWTH: usize = 16;

/// A dense row's distribution from its largest logits, when the settings allow that exactly:
/// top-k on (the [`SamplerOptions::top_candidates`] largest, as a [`LogitRow::Top`]), or
/// top-p / min-p with top-k off and no penalties (the
/// [`SamplerOptions::nucleus_candidates`] largest with the row's total weight, as a
/// [`LogitRow::Head`], retried with more candidates until they settle it). `None` when
/// neither applies or nothing settled: the caller then weighs every logit.
fn from_largest(
    logits: &[f32],
    max: f32,
    context: &[u32],
    options: &SamplerOptions,
) -> Result<Option<Distribution>, CoreError> {
    let vocab = logits.len();
    let split = |pairs: Vec<(u32, f32)>| -> (Vec<u32>, Vec<f32>) { pairs.into_iter().unzip() };
    if let Some(k) = options.top_candidates(vocab) {
        let (ids, values) = split(largest(logits, k));
        let top = LogitRow::Top {
            vocab,
            ids: &ids,
            values: &values,
        };
        return distribution(top, context, options).map(Some);
    }
    let Some(mut k) = options.nucleus_candidates(vocab) else {
        return Ok(None);
    };
    let total = SoftmaxRow::total_of_logits_below(logits, max, 1.0 / options.temperature);
    let flushed = vocab as f64 * f64::from(f32::MIN_POSITIVE);
    let (total_low, total_high) = (
        total * (1.0 - ROW_TOTAL_TOLERANCE),
        total * (1.0 + ROW_TOTAL_TOLERANCE) + flushed,
    );
    while k < vocab {
        let (ids, values) = split(largest(logits, k));
        let head = LogitRow::Head {
            vocab,
            ids: &ids,
            values: &values,
            total_low,
            total_high,
        };
        if let Ok(d) = distribution(head, context, options) {
            return Ok(Some(d));
        }
        k = k.saturating_mul(NUCLEUS_GROWTH);
    }
    Ok(None)
}

/// Whether `row` (a [`LogitRow::Head`] with top-k off and no penalties) settles its survivors:
/// [`distribution`] gives the dense row's distribution, not an error.
pub(crate) fn settles(row: LogitRow<'_>, options: &SamplerOptions) -> bool {
    distribution(row, &[], options).is_ok()
}

/// The log-probabilities reported at temperature 0 for `id` chosen from the dense logits `row`
/// with `context` as the penalty context (already the window, inside the vocabulary):
/// `log_softmax` of the penalised logits, and the `top` best of them (see
/// [`logprobs`](super::logprobs)).
pub(crate) fn greedy_logprobs(
    row: &[f32],
    context: &[u32],
    options: &SamplerOptions,
    id: u32,
    top: usize,
) -> Result<TokenLogprobs, CoreError> {
    let logits = LogitRow::Dense(row);
    check_logits(&logits)?;
    check_id(id, row.len())?;
    let penalised = Penalised::new(logits, context, options);
    let max = penalised
        .candidates()
        .map(|c| c.value)
        .fold(f64::NEG_INFINITY, f64::max);
    let sum = penalised
        .candidates()
        .fold(0.0, |acc, c| acc + (c.value - max).exp());
    let lse = max + sum.ln();
    let id_score = penalised.value(id, row[id as usize]);
    Ok(logprobs::from_scores(
        penalised.candidates().map(|c| (c.id, c.value)),
        lse,
        id_score,
        id,
        top,
    ))
}

/// Checks that `id` is inside a vocabulary of `vocab` tokens.
pub(crate) fn check_id(id: u32, vocab: usize) -> Result<(), CoreError> {
    if (id as usize) < vocab {
        Ok(())
    } else {
        Err(CoreError::TokenOutOfVocab { id, vocab })
    }
}

/// Rejects empty rows, NaN or +∞ logits, and rows with no finite logit (−∞ masks are fine);
/// the largest of the row's values otherwise, found by the same pass. A top row holds the
/// row's largest logits, so a row without a finite one has none either.
fn check_logits(row: &LogitRow<'_>) -> Result<f32, CoreError> {
    let (ids, values): (Option<&[u32]>, &[f32]) = match row {
        LogitRow::Dense(r) => (None, r),
        LogitRow::Top { ids, values, vocab }
        | LogitRow::Head {
            ids, values, vocab, ..
        } => {
            if ids.len() != values.len() || ids.iter().any(|&i| i as usize >= *vocab) {
                return Err(CoreError::InvalidArgument {
                    op: OP,
                    message: format!(
                        "{} candidate ids, {} values for a vocabulary of {vocab}",
                        ids.len(),
                        values.len()
                    ),
                });
            }
            (Some(ids), values)
        }
    };
    if values.is_empty() {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: "empty logit row".into(),
        });
    }
    // One vectorised screen; the offending logit is looked for only when there is one.
    let screened = super::vector::screen(values);
    let offending = if screened.bad() {
        values
            .iter()
            .enumerate()
            .find(|(_, l)| l.is_nan() || **l == f32::INFINITY)
    } else {
        None
    };
    if let Some((i, l)) = offending {
        let id = ids.map_or(i, |ids| ids[i] as usize);
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("logit {id} is {l}: logits must be finite or -inf"),
        });
    }
    if !screened.any_finite() {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: "every logit is -inf: nothing can be sampled".into(),
        });
    }
    Ok(screened.max)
}

/// The candidates that survive top-k, ascending by id: the `k` best (largest, lower id first
/// on ties) when 0 < k < vocab, otherwise every candidate. A heap of `k` entries: no
/// allocation of the vocabulary for a dense row.
fn top_k(candidates: impl Iterator<Item = Candidate>, k: usize, vocab: usize) -> Vec<Candidate> {
    let mut kept: Vec<Candidate> = if k > 0 && k < vocab {
        best_k(candidates.map(|c| (c.id, c.value)), k)
            .into_iter()
            .map(|(id, value)| Candidate { id, value })
            .collect()
    } else {
        candidates.collect()
    };
    kept.sort_unstable_by_key(|c| c.id);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dense pipeline's penalty stage, for the penalty tests.
    fn apply_penalties(work: &mut [f64], context: &[u32], options: &SamplerOptions) {
        for (id, count) in counted(context) {
            if let Some(slot) = work.get_mut(id as usize) {
                *slot = penalise(*slot, count, options);
            }
        }
    }

    fn cands(w: &[f64]) -> Vec<Candidate> {
        w.iter()
            .enumerate()
            .map(|(i, &value)| Candidate {
                id: i as u32,
                value,
            })
            .collect()
    }

    fn ids(kept: &[Candidate]) -> Vec<u32> {
        kept.iter().map(|c| c.id).collect()
    }

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
        assert_eq!(ids(&top_k(cands(&w).into_iter(), 2, w.len())), vec![1, 3]);
        assert_eq!(
            ids(&top_k(cands(&w).into_iter(), 3, w.len())),
            vec![1, 2, 3]
        );
        assert_eq!(
            ids(&top_k(cands(&w).into_iter(), 0, w.len())),
            vec![0, 1, 2, 3, 4]
        );
        assert_eq!(
            ids(&top_k(cands(&w).into_iter(), 5, w.len())),
            vec![0, 1, 2, 3, 4]
        );
        assert_eq!(
            ids(&top_k(cands(&w).into_iter(), 9, w.len())),
            vec![0, 1, 2, 3, 4]
        );
    }

    #[test]
    fn whole_row_candidates_give_the_dense_softmax_bit_for_bit() {
        let row: Vec<f32> = (0..997)
            .map(|i| match i % 13 {
                0 => f32::NEG_INFINITY,
                r => ((i * 7919) % 101) as f32 * 0.173 - 9.0 + r as f32 * 1e-3,
            })
            .collect();
        let ids: Vec<u32> = (0..row.len() as u32).rev().collect();
        let reversed: Vec<f32> = ids.iter().map(|&i| row[i as usize]).collect();
        let context = [5, 5, 17, 640, 996];
        for options in [
            SamplerOptions {
                temperature: 0.8,
                top_k: 0,
                top_p: 1.0,
                ..Default::default()
            },
            SamplerOptions {
                temperature: 1.7,
                top_k: 5000,
                top_p: 0.0,
                repeat_penalty: 1.3,
                presence_penalty: 0.2,
                frequency_penalty: 0.1,
                repeat_last_n: 64,
                ..Default::default()
            },
        ] {
            let dense = distribution(LogitRow::Dense(&row), &context, &options).unwrap();
            let general = distribution(
                LogitRow::Top {
                    vocab: row.len(),
                    ids: &ids,
                    values: &reversed,
                },
                &context,
                &options,
            )
            .unwrap();
            assert_eq!(dense, general, "{options:?}");
        }
    }

    #[test]
    fn greedy_is_point_mass_at_penalised_argmax() {
        let opts = SamplerOptions {
            repeat_penalty: 4.0,
            ..Default::default()
        };
        let d = distribution(LogitRow::Dense(&[1.0, 3.0, 2.0]), &[1], &opts).unwrap();
        assert_eq!(d.dense(), vec![0.0, 0.0, 1.0]);
        let d = distribution(
            LogitRow::Dense(&[1.0, 3.0, 3.0]),
            &[],
            &SamplerOptions::default(),
        )
        .unwrap();
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
        let d = distribution(LogitRow::Dense(&logits), &[], &opts).unwrap();
        close(&d.dense(), &[0.0, 0.0, 3.0 / 7.0, 4.0 / 7.0, 0.0]);
        // Min-p 0.45 instead of top-p: max 0.4 → drop < 0.18: keep 1, 2, 3 → 2/9, 3/9, 4/9.
        let opts = SamplerOptions {
            top_p: 1.0,
            min_p: 0.45,
            ..opts
        };
        let d = distribution(LogitRow::Dense(&logits), &[], &opts).unwrap();
        close(&d.dense(), &[0.0, 2.0 / 9.0, 3.0 / 9.0, 4.0 / 9.0, 0.0]);
    }

    #[test]
    fn bad_logits_are_errors() {
        let opts = SamplerOptions {
            temperature: 1.0,
            ..Default::default()
        };
        assert!(distribution(LogitRow::Dense(&[]), &[], &opts).is_err());
        assert!(distribution(LogitRow::Dense(&[1.0, f32::NAN]), &[], &opts).is_err());
        assert!(distribution(LogitRow::Dense(&[1.0, f32::INFINITY]), &[], &opts).is_err());
        assert!(distribution(LogitRow::Dense(&[f32::NEG_INFINITY; 3]), &[], &opts).is_err());
        let d = distribution(LogitRow::Dense(&[f32::NEG_INFINITY, 0.0]), &[], &opts).unwrap();
        assert_eq!(d.dense(), vec![0.0, 1.0]);
    }

    /// The candidate path over every logit of `logits` (a top row of the whole vocabulary,
    /// which no dense-row shortcut takes unless nothing truncates it).
    fn general_path(logits: &[f32], context: &[u32], options: &SamplerOptions) -> Distribution {
        let ids: Vec<u32> = (0..logits.len() as u32).collect();
        let row = LogitRow::Top {
            vocab: logits.len(),
            ids: &ids,
            values: logits,
        };
        distribution(row, context, options).unwrap()
    }

    /// Top-p / min-p with top-k off: a dense row, decided from its largest logits and its
    /// vectorised total, gives the candidate path's distribution bit for bit.
    #[test]
    fn dense_nucleus_rows_give_the_general_path_bit_for_bit() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let vocab = 4000;
        let mut settled = 0;
        for case in 0..60 {
            let logits: Vec<f32> = (0..vocab)
                .map(|i| match rng.random_range(0..60) {
                    0 => f32::NEG_INFINITY,
                    // Coarse values (ties) in every third row, continuous ones elsewhere.
                    x if case % 3 == 2 => (x as f32 * 0.25).floor() - 6.0,
                    _ if i % 97 == 0 => rng.random_range(4.0f32..9.0),
                    _ => rng.random_range(-8.0f32..2.0),
                })
                .collect();
            let options = SamplerOptions {
                temperature: rng.random_range(0.3..1.5),
                top_p: rng.random_range(0.2..0.99),
                min_p: if case % 3 == 0 {
                    rng.random_range(0.0..0.2)
                } else {
                    0.0
                },
                ..Default::default()
            };
            let general = general_path(&logits, &[], &options);
            let dense = distribution(LogitRow::Dense(&logits), &[], &options).unwrap();
            assert_eq!(dense, general, "case {case}: {options:?}");
            // The largest logits, not the whole-row fallback, decided it.
            let fast = from_largest(
                &logits,
                super::super::vector::row_max(&logits),
                &[],
                &options,
            )
            .unwrap();
            settled += usize::from(fast.is_some());
            if let Some(fast) = fast {
                assert_eq!(fast, general, "case {case}: {options:?}");
            }
        }
        // The continuous rows (40 of 60) settle; tied bulks mostly leave the answer open.
        assert!(
            settled >= 40,
            "only {settled} of 60 rows settled by their largest logits"
        );
    }

    /// The `k` largest logits (lower id first on ties) with their values, in a scrambled
    /// (reversed) order, as a device top-k may return them.
    fn largest(logits: &[f32], k: usize) -> (Vec<u32>, Vec<f32>) {
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        order.sort_by(|&a, &b| {
            logits[b as usize]
                .partial_cmp(&logits[a as usize])
                .unwrap()
                .then(a.cmp(&b))
        });
        let mut top: Vec<u32> = order[..k].to_vec();
        top.reverse();
        let values = top.iter().map(|&i| logits[i as usize]).collect();
        (top, values)
    }

    #[test]
    fn top_candidates_give_exactly_the_dense_distribution() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        // Wide enough for the chunked selection of a dense row's largest logits.
        let vocab = 3000;
        for case in 0..300 {
            // Coarse logits so that ties occur; a few -inf.
            let logits: Vec<f32> = (0..vocab)
                .map(|_| match rng.random_range(0..40) {
                    0 => f32::NEG_INFINITY,
                    x => (x as f32 * 0.25).floor() - 4.0,
                })
                .collect();
            let penalties = case % 2 == 1;
            let options = SamplerOptions {
                temperature: rng.random_range(0.2..2.0),
                top_k: rng.random_range(1..60),
                top_p: if case % 3 == 0 {
                    1.0
                } else {
                    rng.random_range(0.3..1.0)
                },
                min_p: if case % 5 == 0 {
                    rng.random_range(0.0..0.3)
                } else {
                    0.0
                },
                repeat_penalty: if penalties {
                    rng.random_range(1.0..2.0)
                } else {
                    1.0
                },
                presence_penalty: if penalties {
                    rng.random_range(0.0..1.0)
                } else {
                    0.0
                },
                frequency_penalty: if penalties {
                    rng.random_range(0.0..0.5)
                } else {
                    0.0
                },
                repeat_last_n: 16,
                ..Default::default()
            };
            let context: Vec<u32> = (0..rng.random_range(0..16))
                .map(|_| rng.random_range(0..vocab as u32))
                .collect();
            let k = options.top_candidates(vocab).expect("exact top-k applies");
            let (top, values) = largest(&logits, k);
            let dense = distribution(LogitRow::Dense(&logits), &context, &options).unwrap();
            let row = LogitRow::Top {
                vocab,
                ids: &top,
                values: &values,
            };
            let sparse = distribution(row, &context, &options).unwrap();
            assert_eq!(sparse, dense, "case {case}: {options:?}");
            let general = general_path(&logits, &context, &options);
            assert_eq!(general, dense, "case {case}: {options:?}");
        }
        // Penalties that can raise a logit, or top-k off: only the whole row is exact.
        let raising = SamplerOptions {
            temperature: 1.0,
            top_k: 5,
            presence_penalty: -0.5,
            ..Default::default()
        };
        assert_eq!(raising.top_candidates(vocab), None);
        let off = SamplerOptions {
            temperature: 1.0,
            ..Default::default()
        };
        assert_eq!(off.top_candidates(vocab), None);
    }

    /// A head row (the largest logits plus bounds on the row's total weight) either settles
    /// top-p / min-p — and then gives bit for bit the dense row's distribution — or says so;
    /// with tight bounds it settles most rows.
    #[test]
    fn head_rows_give_exactly_the_dense_distribution_when_settled() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
        let vocab = 2000;
        let (mut settled, cases) = (0, 400);
        for case in 0..cases {
            // A peaked head over a long flat tail, coarse enough for ties.
            let logits: Vec<f32> = (0..vocab)
                .map(|_| match rng.random_range(0..400) {
                    0 => f32::NEG_INFINITY,
                    x if x < 8 => (rng.random_range(0.0f32..40.0)).floor() * 0.25 + 4.0,
                    _ => rng.random_range(-6.0f32..0.0),
                })
                .collect();
            let options = SamplerOptions {
                temperature: rng.random_range(0.3..1.5),
                top_p: if case % 4 == 0 {
                    1.0
                } else {
                    rng.random_range(0.2..0.99)
                },
                min_p: if case % 3 == 0 {
                    rng.random_range(0.05..0.5)
                } else {
                    0.0
                },
                ..Default::default()
            };
            if options.top_p >= 1.0 && options.min_p == 0.0 {
                continue;
            }
            let (top, values) = largest(&logits, 64);
            let all: Vec<f64> = logits.iter().map(|&l| f64::from(l)).collect();
            let total: f64 = nucleus::weights(&all, f64::from(options.temperature))
                .iter()
                .sum();
            let row = LogitRow::Head {
                vocab,
                ids: &top,
                values: &values,
                total_low: total * (1.0 - 1e-4),
                total_high: total * (1.0 + 1e-4),
            };
            let dense = distribution(LogitRow::Dense(&logits), &[], &options).unwrap();
            match distribution(row, &[], &options) {
                Ok(head) => {
                    assert_eq!(head, dense, "case {case}: {options:?}");
                    settled += 1;
                }
                Err(e) => assert!(!settles(row, &options), "{e}"),
            }
        }
        assert!(settled > cases / 2, "only {settled} of {cases} settled");
    }
}
