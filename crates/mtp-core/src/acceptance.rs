//! The verification rules of speculative decoding, as pure functions.
//!
//! Greedy rounds accept drafts while they match the target's argmax. Sampled rounds use the
//! speculative-sampling rule of Leviathan et al. 2023 ("Fast Inference from Transformers via
//! Speculative Decoding") and Chen et al. 2023 ("Accelerating Large Language Model Decoding
//! with Speculative Sampling"): accept draft `d ~ q` with probability `min(1, p(d)/q(d))`, and
//! on rejection sample from `normalise(max(p − q, 0))`; the emitted tokens are then distributed
//! exactly as the target `p`.
//!
//! The engine takes the rules through [`AcceptanceRules`], so tests can inject deliberately
//! wrong ones and check that the statistical tests catch them.

use crate::sampling::Distribution;
use crate::CoreError;

/// How a verification round ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RoundEnd {
    /// The round ended normally: `next` is the correction or bonus token.
    Continue,
    /// An accepted draft was an end-of-sequence token; there is no `next`.
    AcceptedEos,
}

/// The outcome of verifying one round of drafts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Verdict {
    /// How many drafts were accepted (an accepted EOS draft counts).
    pub accepted: usize,
    /// The correction (at the first rejection) or bonus (all accepted) token; `None` when an
    /// accepted EOS ended the round.
    pub next: Option<u32>,
    /// Why the round ended.
    pub end: RoundEnd,
}

/// Greedy verification (the greedy limit of Leviathan et al. 2023 / Chen et al. 2023).
///
/// `target_argmax` holds `drafts.len() + 1` tokens: row `i` is the target's argmax after
/// `drafts[..i]`. Drafts are accepted in order while `drafts[i] == target_argmax[i]`. An
/// accepted draft in `eos` ends the round (`next` is `None`, and it counts as accepted).
/// Otherwise `next` is `target_argmax[i]` at the first mismatch, or the bonus
/// `target_argmax[k]` when all `k` drafts were accepted. The emitted sequence therefore equals
/// plain greedy decoding of the target.
///
/// Errors with [`CoreError::ShapeMismatch`] when `target_argmax` has the wrong length.
pub fn verify_greedy(
    drafts: &[u32],
    target_argmax: &[u32],
    eos: &[u32],
) -> Result<Verdict, CoreError> {
    if target_argmax.len() != drafts.len() + 1 {
        return Err(CoreError::ShapeMismatch {
            op: "verify_greedy",
            lhs: vec![drafts.len() + 1],
            rhs: vec![target_argmax.len()],
        });
    }
    for (i, (&draft, &target)) in drafts.iter().zip(target_argmax).enumerate() {
        if draft != target {
            return Ok(Verdict {
                accepted: i,
                next: Some(target),
                end: RoundEnd::Continue,
            });
        }
        if eos.contains(&draft) {
            return Ok(Verdict {
                accepted: i + 1,
                next: None,
                end: RoundEnd::AcceptedEos,
            });
        }
    }
    Ok(Verdict {
        accepted: drafts.len(),
        next: Some(target_argmax[drafts.len()]),
        end: RoundEnd::Continue,
    })
}

/// The probability of accepting a draft token with target probability `p` and draft
/// probability `q`: `min(1, p / q)` (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023,
/// Algorithm 2). When `q == 0` (a token the draft could not have proposed) it is 1 if `p > 0`
/// and 0 otherwise.
pub fn acceptance_probability(p: f64, q: f64) -> f64 {
    if q > 0.0 {
        (p / q).min(1.0)
    } else if p > 0.0 {
        1.0
    } else {
        0.0
    }
}

/// Residual mass below which [`residual_distribution`] falls back to `p`.
const RESIDUAL_EPSILON: f64 = 1e-12;

/// The distribution to sample from after a rejection: `normalise(max(p − q, 0))`
/// (Leviathan et al. 2023, §2.3; Chen et al. 2023, Algorithm 2), which is zero outside `p`'s
/// support. When the residual mass is zero (`p == q`, where a rejection has probability 0;
/// in practice below 1e-12, which changes the emitted distribution by at most that much) it
/// returns `p`.
///
/// Errors with [`CoreError::ShapeMismatch`] when the vocabularies differ.
pub fn residual_distribution(
    p: &Distribution,
    q: &Distribution,
) -> Result<Distribution, CoreError> {
    if p.vocab_size() != q.vocab_size() {
        return Err(CoreError::ShapeMismatch {
            op: "residual_distribution",
            lhs: vec![p.vocab_size()],
            rhs: vec![q.vocab_size()],
        });
    }
    if let Some(residual) = p.softmax_residual(q, RESIDUAL_EPSILON) {
        return Ok(residual.unwrap_or_else(|| p.clone()));
    }
    // Outside p's support the residual is max(0 - q, 0) = 0: only p's support is visited (in
    // ascending id order, the order of a dense sum).
    let (ids, residual): (Vec<u32>, Vec<f64>) = p
        .support()
        .map(|(id, pi)| (id, (pi - q.prob(id)).max(0.0)))
        .unzip();
    let mass: f64 = residual.iter().sum();
    if mass <= RESIDUAL_EPSILON {
        return Ok(p.clone());
    }
    Distribution::from_sparse(p.vocab_size(), ids, residual)
}

/// One sampled verification round.
#[derive(Clone, Copy, Debug)]
pub struct SampledRound<'a> {
    /// The drafts, `k` of them, each sampled from its draft distribution.
    pub drafts: &'a [u32],
    /// The draft distributions `q_i`, `k` rows (row `i` proposed `drafts[i]`).
    pub draft_dists: &'a [Distribution],
    /// The target distributions `p_i`, `k + 1` rows (row `i` after `drafts[..i]`; row `k` is
    /// the bonus row).
    pub target_dists: &'a [Distribution],
    /// End-of-sequence token ids.
    pub eos: &'a [u32],
}

/// Sampled verification: speculative sampling of Leviathan et al. 2023 ("Fast Inference from
/// Transformers via Speculative Decoding", Algorithm 1) and Chen et al. 2023 ("Accelerating
/// Large Language Model Decoding with Speculative Sampling", Algorithm 2).
///
/// For each draft `d_i` in order: draw `u = draw()` and accept when
/// `u < min(1, p_i(d_i) / q_i(d_i))` ([`acceptance_probability`]). An accepted EOS ends the
/// round (`next` is `None`). At the first rejection, `next` is sampled (one more `draw()`, by
/// inverse CDF) from [`residual_distribution`]`(p_i, q_i)`; when all `k` drafts are accepted
/// it is sampled from the bonus row `p_k`. With `draw` uniform on [0, 1), every emitted token
/// is distributed exactly as under the target alone.
///
/// Errors with [`CoreError::ShapeMismatch`] on wrong row counts or mismatched vocabularies, and
/// with [`CoreError::TokenOutOfVocab`] for a draft outside the vocabulary.
pub fn verify_sampled(
    round: &SampledRound<'_>,
    draw: &mut dyn FnMut() -> f64,
) -> Result<Verdict, CoreError> {
    check_round(round)?;
    for (i, &draft) in round.drafts.iter().enumerate() {
        let p = &round.target_dists[i];
        let q = &round.draft_dists[i];
        let u = draw();
        if u < acceptance_probability(p.prob(draft), q.prob(draft)) {
            if round.eos.contains(&draft) {
                return Ok(Verdict {
                    accepted: i + 1,
                    next: None,
                    end: RoundEnd::AcceptedEos,
                });
            }
            continue;
        }
        let next = residual_distribution(p, q)?.sample_with(draw());
        return Ok(Verdict {
            accepted: i,
            next: Some(next),
            end: RoundEnd::Continue,
        });
    }
    let k = round.drafts.len();
    let next = round.target_dists[k].sample_with(draw());
    Ok(Verdict {
        accepted: k,
        next: Some(next),
        end: RoundEnd::Continue,
    })
}

/// Checks the shape of a sampled round: `k` draft rows, `k + 1` target rows, one vocabulary,
/// drafts inside it.
fn check_round(round: &SampledRound<'_>) -> Result<(), CoreError> {
    const OP: &str = "verify_sampled";
    let k = round.drafts.len();
    if round.draft_dists.len() != k {
        return Err(CoreError::ShapeMismatch {
            op: OP,
            lhs: vec![k],
            rhs: vec![round.draft_dists.len()],
        });
    }
    if round.target_dists.len() != k + 1 {
        return Err(CoreError::ShapeMismatch {
            op: OP,
            lhs: vec![k + 1],
            rhs: vec![round.target_dists.len()],
        });
    }
    let vocab = round.target_dists[0].vocab_size();
    for d in round.target_dists.iter().chain(round.draft_dists) {
        if d.vocab_size() != vocab {
            return Err(CoreError::ShapeMismatch {
                op: OP,
                lhs: vec![vocab],
                rhs: vec![d.vocab_size()],
            });
        }
    }
    for &id in round.drafts {
        if id as usize >= vocab {
            return Err(CoreError::TokenOutOfVocab { id, vocab });
        }
    }
    Ok(())
}

/// The signature of a greedy verification rule (see [`verify_greedy`]).
pub type GreedyRule = fn(&[u32], &[u32], &[u32]) -> Result<Verdict, CoreError>;

/// The signature of a sampled verification rule (see [`verify_sampled`]).
pub type SampledRule = fn(&SampledRound<'_>, &mut dyn FnMut() -> f64) -> Result<Verdict, CoreError>;

/// The verification rules the engine uses. [`Default`] is [`verify_greedy`] and
/// [`verify_sampled`]; tests inject deliberately wrong rules to check that the statistical
/// tests notice.
#[derive(Clone, Copy, Debug)]
pub struct AcceptanceRules {
    /// The rule for greedy rounds.
    pub greedy: GreedyRule,
    /// The rule for sampled rounds.
    pub sampled: SampledRule,
}

impl Default for AcceptanceRules {
    fn default() -> Self {
        Self {
            greedy: verify_greedy,
            sampled: verify_sampled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(w: &[f64]) -> Distribution {
        Distribution::from_probs(w.to_vec()).unwrap()
    }

    #[test]
    fn greedy_accept_all_with_bonus() {
        let v = verify_greedy(&[1, 2, 3], &[1, 2, 3, 4], &[0]).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 3,
                next: Some(4),
                end: RoundEnd::Continue
            }
        );
        let v = verify_greedy(&[], &[7], &[0]).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 0,
                next: Some(7),
                end: RoundEnd::Continue
            }
        );
    }

    #[test]
    fn greedy_first_and_mid_mismatch() {
        let v = verify_greedy(&[1, 2, 3], &[5, 2, 3, 4], &[0]).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 0,
                next: Some(5),
                end: RoundEnd::Continue
            }
        );
        let v = verify_greedy(&[1, 2, 3], &[1, 2, 6, 4], &[0]).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 2,
                next: Some(6),
                end: RoundEnd::Continue
            }
        );
    }

    #[test]
    fn greedy_accepted_eos_ends_round() {
        let v = verify_greedy(&[1, 9, 3], &[1, 9, 3, 4], &[0, 9]).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 2,
                next: None,
                end: RoundEnd::AcceptedEos
            }
        );
        // A rejected EOS draft does not end the round.
        let v = verify_greedy(&[9, 3], &[1, 3, 4], &[9]).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 0,
                next: Some(1),
                end: RoundEnd::Continue
            }
        );
    }

    #[test]
    fn greedy_wrong_lengths() {
        assert!(verify_greedy(&[1, 2], &[1, 2], &[]).is_err());
        assert!(verify_greedy(&[1, 2], &[1, 2, 3, 4], &[]).is_err());
        assert!(verify_greedy(&[], &[], &[]).is_err());
    }

    #[test]
    fn acceptance_probability_cases() {
        assert_eq!(acceptance_probability(0.2, 0.4), 0.5);
        assert_eq!(acceptance_probability(0.4, 0.2), 1.0);
        assert_eq!(acceptance_probability(0.3, 0.0), 1.0);
        assert_eq!(acceptance_probability(0.0, 0.0), 0.0);
        assert_eq!(acceptance_probability(0.0, 0.5), 0.0);
    }

    #[test]
    fn residual_on_target_support() {
        let p = dist(&[0.5, 0.5, 0.0, 0.0]);
        let q = dist(&[0.1, 0.2, 0.3, 0.4]);
        let r = residual_distribution(&p, &q).unwrap();
        let expect = [0.4 / 0.7, 0.3 / 0.7, 0.0, 0.0];
        for (a, b) in r.dense().iter().zip(expect) {
            assert!((a - b).abs() < 1e-12);
        }
        assert_eq!(residual_distribution(&p, &p).unwrap(), p);
        assert!(residual_distribution(&p, &dist(&[1.0, 1.0])).is_err());
    }

    #[test]
    fn sampled_accepts_rejects_and_bonus() {
        let p = dist(&[0.5, 0.5, 0.0]);
        let q = dist(&[0.25, 0.25, 0.5]);
        let targets = vec![p.clone(), p.clone(), p.clone()];
        let drafts_q = vec![q.clone(), q.clone()];
        let round = SampledRound {
            drafts: &[0, 1],
            draft_dists: &drafts_q,
            target_dists: &targets,
            eos: &[],
        };
        // Both accepted (p/q = 2 → probability 1), bonus drawn at u = 0.75 → id 1.
        let mut us = [0.99, 0.99, 0.75].into_iter();
        let v = verify_sampled(&round, &mut || us.next().unwrap_or(0.0)).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 2,
                next: Some(1),
                end: RoundEnd::Continue
            }
        );
        // Draft 2 has p = 0: always rejected; the residual is p here.
        let round = SampledRound {
            drafts: &[2, 1],
            ..round
        };
        let mut us = [0.0, 0.6].into_iter();
        let v = verify_sampled(&round, &mut || us.next().unwrap_or(0.0)).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 0,
                next: Some(1),
                end: RoundEnd::Continue
            }
        );
    }

    #[test]
    fn sampled_partial_acceptance_and_eos() {
        let p = dist(&[0.2, 0.8]);
        let q = dist(&[0.8, 0.2]);
        let targets = vec![p.clone(), p.clone(), p.clone()];
        let drafts_q = vec![q.clone(), q.clone()];
        let round = SampledRound {
            drafts: &[1, 0],
            draft_dists: &drafts_q,
            target_dists: &targets,
            eos: &[],
        };
        // Draft 1: accepted (ratio 4). Draft 0: ratio 0.25, u = 0.3 rejects; residual = [0, 1].
        let mut us = [0.5, 0.3, 0.1].into_iter();
        let v = verify_sampled(&round, &mut || us.next().unwrap_or(0.0)).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 1,
                next: Some(1),
                end: RoundEnd::Continue
            }
        );
        // u = 0.2 < 0.25 accepts draft 0 too; the bonus at u = 0.1 from p is 0.
        let mut us = [0.5, 0.2, 0.1].into_iter();
        let v = verify_sampled(&round, &mut || us.next().unwrap_or(0.0)).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 2,
                next: Some(0),
                end: RoundEnd::Continue
            }
        );
        // With 1 as EOS the first acceptance ends the round.
        let round = SampledRound { eos: &[1], ..round };
        let mut us = [0.5].into_iter();
        let v = verify_sampled(&round, &mut || us.next().unwrap_or(0.0)).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 1,
                next: None,
                end: RoundEnd::AcceptedEos
            }
        );
    }

    #[test]
    fn sampled_wrong_shapes() {
        let p = dist(&[0.5, 0.5]);
        let mut one = || 0.5;
        let two = vec![p.clone(), p.clone()];
        let one_row = vec![p.clone()];
        let bad_rows = SampledRound {
            drafts: &[0],
            draft_dists: &one_row,
            target_dists: &one_row,
            eos: &[],
        };
        assert!(verify_sampled(&bad_rows, &mut one).is_err());
        let bad_q = SampledRound {
            drafts: &[0],
            draft_dists: &two,
            target_dists: &two,
            eos: &[],
        };
        assert!(verify_sampled(&bad_q, &mut one).is_err());
        let oov = SampledRound {
            drafts: &[5],
            draft_dists: &one_row,
            target_dists: &two,
            eos: &[],
        };
        assert!(matches!(
            verify_sampled(&oov, &mut one),
            Err(CoreError::TokenOutOfVocab { id: 5, vocab: 2 })
        ));
        let other = vec![p.clone(), dist(&[1.0, 1.0, 1.0])];
        let mixed = SampledRound {
            drafts: &[0],
            draft_dists: &one_row,
            target_dists: &other,
            eos: &[],
        };
        assert!(verify_sampled(&mixed, &mut one).is_err());
    }

    #[test]
    fn default_rules_are_the_functions() {
        let rules = AcceptanceRules::default();
        assert_eq!(
            (rules.greedy)(&[1], &[1, 2], &[]).unwrap(),
            verify_greedy(&[1], &[1, 2], &[]).unwrap()
        );
        let p = vec![dist(&[1.0])];
        let round = SampledRound {
            drafts: &[],
            draft_dists: &[],
            target_dists: &p,
            eos: &[],
        };
        assert_eq!((rules.sampled)(&round, &mut || 0.0).unwrap().next, Some(0));
    }
}
