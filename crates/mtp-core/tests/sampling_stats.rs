//! Statistical checks of speculative sampling (Leviathan et al. 2023; Chen et al. 2023):
//! tokens emitted through draft-then-verify rounds must be distributed exactly as the target's
//! distribution, whatever the draft, for every sampler configuration — and a deliberately
//! wrong acceptance rule must be caught.
//!
//! The "models" are two fixed logit vectors over a 12-token vocabulary, turned into the target
//! `p` and the draft `q` by the same [`Sampler`] pipeline, so context dependence comes only
//! from the penalties. Every test is seeded, so it is deterministic.

use std::collections::HashMap;

use mtp_core::acceptance::{
    acceptance_probability, residual_distribution, verify_sampled, AcceptanceRules, RoundEnd,
    SampledRound, SampledRule, Verdict,
};
use mtp_core::sampling::{Distribution, Sampler, SamplerOptions};
use mtp_core::CoreError;
use statrs::distribution::{ChiSquared, ContinuousCDF};

const VOCAB: usize = 12;
const TARGET_LOGITS: [f32; VOCAB] = [
    1.2, 0.3, 2.0, -0.5, 1.7, 0.0, 0.9, -1.0, 1.5, 0.2, -0.3, 0.6,
];
const DRAFT_LOGITS: [f32; VOCAB] = [0.8, 1.1, 1.6, 0.2, 0.4, 0.5, 1.9, -0.6, 1.0, -0.2, 0.7, 0.1];
const HISTORY: [u32; 6] = [2, 5, 5, 7, 2, 2];
const TRIALS: usize = 100_000;
const DRAFTS: usize = 3;

/// The sampler configurations under test.
fn configs() -> Vec<(&'static str, SamplerOptions)> {
    let base = SamplerOptions {
        temperature: 0.8,
        ..Default::default()
    };
    vec![
        ("temperature", base.clone()),
        (
            "top-k",
            SamplerOptions {
                top_k: 3,
                ..base.clone()
            },
        ),
        (
            "top-p",
            SamplerOptions {
                top_p: 0.7,
                ..base.clone()
            },
        ),
        (
            "min-p",
            SamplerOptions {
                min_p: 0.1,
                ..base.clone()
            },
        ),
        ("penalties", penalties()),
    ]
}

fn penalties() -> SamplerOptions {
    SamplerOptions {
        temperature: 0.8,
        repeat_penalty: 1.3,
        presence_penalty: 0.5,
        frequency_penalty: 0.2,
        ..Default::default()
    }
}

/// Target and draft distributions for any context, memoised (the sampler never mutates).
struct Models {
    sampler: Sampler,
    target: HashMap<Vec<u32>, Distribution>,
    draft: HashMap<Vec<u32>, Distribution>,
}

impl Models {
    fn new(options: SamplerOptions) -> Self {
        let sampler = Sampler::new(options, &HISTORY).expect("valid options");
        Self {
            sampler,
            target: HashMap::new(),
            draft: HashMap::new(),
        }
    }

    fn p(&mut self, prefix: &[u32]) -> Distribution {
        let sampler = &self.sampler;
        self.target
            .entry(prefix.to_vec())
            .or_insert_with(|| {
                sampler
                    .distribution(&TARGET_LOGITS, prefix)
                    .expect("target")
            })
            .clone()
    }

    fn q(&mut self, prefix: &[u32]) -> Distribution {
        let sampler = &self.sampler;
        self.draft
            .entry(prefix.to_vec())
            .or_insert_with(|| sampler.distribution(&DRAFT_LOGITS, prefix).expect("draft"))
            .clone()
    }
}

/// Decodes with speculative rounds of `DRAFTS` drafts until at least `wanted` tokens are
/// emitted. Returns the emitted tokens and the first round's verdict.
fn decode(
    models: &mut Models,
    rng: &mut Sampler,
    rule: SampledRule,
    wanted: usize,
) -> Result<(Vec<u32>, Verdict), CoreError> {
    let mut emitted: Vec<u32> = Vec::new();
    let mut first = None;
    while emitted.len() < wanted {
        let mut context = emitted.clone();
        let mut draft_dists = Vec::with_capacity(DRAFTS);
        for _ in 0..DRAFTS {
            let q = models.q(&context);
            context.push(rng.sample(&q));
            draft_dists.push(q);
        }
        let drafts = context[emitted.len()..].to_vec();
        let target_dists: Vec<Distribution> = (0..=DRAFTS)
            .map(|i| models.p(&context[..emitted.len() + i]))
            .collect();
        let round = SampledRound {
            drafts: &drafts,
            draft_dists: &draft_dists,
            target_dists: &target_dists,
            eos: &[],
        };
        let verdict = rule(&round, &mut || rng.uniform())?;
        emitted.extend_from_slice(&drafts[..verdict.accepted]);
        emitted.extend(verdict.next);
        first.get_or_insert(verdict);
        if verdict.end == RoundEnd::AcceptedEos {
            break;
        }
    }
    let first = first.ok_or_else(|| CoreError::Model("no round ran".into()))?;
    Ok((emitted, first))
}

/// Pearson's χ² p-value of `observed` counts against `expected` probabilities. Bins with an
/// expected count below 5 are merged (smallest first); an observation in a zero-probability
/// bin gives p = 0.
fn chi_square_p_value(observed: &[u64], expected: &[f64]) -> f64 {
    let n: u64 = observed.iter().sum();
    let mut bins: Vec<(f64, f64)> = Vec::new();
    for (&o, &p) in observed.iter().zip(expected) {
        if p <= 0.0 {
            if o > 0 {
                return 0.0;
            }
            continue;
        }
        bins.push((p * n as f64, o as f64));
    }
    bins.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::new();
    let mut pool = (0.0, 0.0);
    for (e, o) in bins {
        pool = (pool.0 + e, pool.1 + o);
        if pool.0 >= 5.0 {
            merged.push(pool);
            pool = (0.0, 0.0);
        }
    }
    if pool.0 > 0.0 {
        match merged.last_mut() {
            Some(last) => *last = (last.0 + pool.0, last.1 + pool.1),
            None => merged.push(pool),
        }
    }
    if merged.len() < 2 {
        return 1.0;
    }
    let stat: f64 = merged.iter().map(|(e, o)| (o - e) * (o - e) / e).sum();
    let dof = (merged.len() - 1) as f64;
    ChiSquared::new(dof).expect("dof > 0").sf(stat)
}

/// Counts of the first emitted token over `TRIALS` single rounds, plus first-position
/// acceptances.
fn first_token_counts(options: &SamplerOptions, rule: SampledRule, seed: u64) -> (Vec<u64>, u64) {
    let mut models = Models::new(options.clone());
    let mut rng = Sampler::new(
        SamplerOptions {
            seed: Some(seed),
            ..options.clone()
        },
        &HISTORY,
    )
    .expect("valid options");
    let mut counts = vec![0u64; VOCAB];
    let mut accepted_first = 0u64;
    for _ in 0..TRIALS {
        let (emitted, verdict) = decode(&mut models, &mut rng, rule, 1).expect("round");
        counts[emitted[0] as usize] += 1;
        if verdict.accepted >= 1 {
            accepted_first += 1;
        }
    }
    (counts, accepted_first)
}

#[test]
fn first_token_matches_target_for_every_config() {
    for (seed, (name, options)) in configs().into_iter().enumerate() {
        let mut models = Models::new(options.clone());
        let p = models.p(&[]);
        let q = models.q(&[]);
        assert_ne!(
            p, q,
            "{name}: the test needs a draft that differs from the target"
        );
        let (counts, accepted) = first_token_counts(&options, verify_sampled, 1000 + seed as u64);
        let pv = chi_square_p_value(&counts, &p.dense());
        assert!(
            pv > 0.01,
            "{name}: χ² p-value {pv}, counts {counts:?}, p {:?}",
            p.dense()
        );

        // First-position acceptance rate = Σ_x min(p(x), q(x)).
        let alpha: f64 = p.dense().iter().zip(q.dense()).map(|(a, b)| a.min(b)).sum();
        let rate = accepted as f64 / TRIALS as f64;
        let se = (alpha * (1.0 - alpha) / TRIALS as f64).sqrt();
        assert!(
            (rate - alpha).abs() < 4.0 * se.max(1e-9),
            "{name}: acceptance {rate} vs expected {alpha} (se {se})"
        );
    }
}

#[test]
fn first_two_tokens_match_target_joint_distribution() {
    let options = penalties();
    let mut models = Models::new(options.clone());
    // The second row must depend on the first token for this test to mean anything.
    assert_ne!(models.p(&[0]), models.p(&[2]));
    // The sampler's verification rows are what `Models` computes.
    let rows: Vec<&[f32]> = vec![&TARGET_LOGITS; DRAFTS + 1];
    let verification = models
        .sampler
        .verification_distributions(&rows, &[4, 2, 2])
        .unwrap();
    for (i, row) in verification.iter().enumerate() {
        assert_eq!(row, &models.p(&[4, 2, 2][..i]));
    }

    let mut rng = Sampler::new(
        SamplerOptions {
            seed: Some(77),
            ..options
        },
        &HISTORY,
    )
    .unwrap();
    let mut counts = vec![0u64; VOCAB * VOCAB];
    for _ in 0..TRIALS {
        let (emitted, _) = decode(&mut models, &mut rng, verify_sampled, 2).expect("rounds");
        counts[emitted[0] as usize * VOCAB + emitted[1] as usize] += 1;
    }
    let p1 = models.p(&[]);
    let mut expected = vec![0.0; VOCAB * VOCAB];
    for t1 in 0..VOCAB as u32 {
        let p2 = models.p(&[t1]);
        for t2 in 0..VOCAB as u32 {
            expected[t1 as usize * VOCAB + t2 as usize] = p1.prob(t1) * p2.prob(t2);
        }
    }
    let pv = chi_square_p_value(&counts, &expected);
    assert!(pv > 0.01, "joint χ² p-value {pv}");
}

/// Wrong: accepts every draft, so the first token follows the draft.
fn always_accept(
    round: &SampledRound<'_>,
    draw: &mut dyn FnMut() -> f64,
) -> Result<Verdict, CoreError> {
    let k = round.drafts.len();
    let next = round.target_dists[k].sample_with(draw());
    Ok(Verdict {
        accepted: k,
        next: Some(next),
        end: RoundEnd::Continue,
    })
}

/// Wrong: accepts with min(1, q/p) instead of min(1, p/q).
fn inverted_ratio(
    round: &SampledRound<'_>,
    draw: &mut dyn FnMut() -> f64,
) -> Result<Verdict, CoreError> {
    for (i, &d) in round.drafts.iter().enumerate() {
        let (p, q) = (&round.target_dists[i], &round.draft_dists[i]);
        if draw() < acceptance_probability(q.prob(d), p.prob(d)) {
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
    Ok(Verdict {
        accepted: k,
        next: Some(round.target_dists[k].sample_with(draw())),
        end: RoundEnd::Continue,
    })
}

#[test]
fn broken_rules_are_rejected() {
    let options = SamplerOptions {
        temperature: 0.8,
        ..Default::default()
    };
    let target = Models::new(options.clone()).p(&[]);
    for (name, wrong) in [
        ("always-accept", always_accept as SampledRule),
        ("q/p", inverted_ratio),
    ] {
        let rules = AcceptanceRules {
            sampled: wrong,
            ..AcceptanceRules::default()
        };
        let (counts, _) = first_token_counts(&options, rules.sampled, 4242);
        let pv = chi_square_p_value(&counts, &target.dense());
        assert!(pv < 1e-6, "{name}: the wrong rule passed with p-value {pv}");
    }
}

#[test]
fn chi_square_helper_sanity() {
    // Exact match → p = 1; an impossible outcome → p = 0; small bins merge.
    assert!(chi_square_p_value(&[250, 250, 500], &[0.25, 0.25, 0.5]) > 0.99);
    assert_eq!(chi_square_p_value(&[10, 0, 1], &[0.5, 0.5, 0.0]), 0.0);
    let p = chi_square_p_value(&[500, 497, 2, 1], &[0.5, 0.497, 0.002, 0.001]);
    assert!(p > 0.99, "{p}");
}
