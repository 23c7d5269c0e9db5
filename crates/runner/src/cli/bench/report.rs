//! The benchmark report (serialised as the JSON file; schema in BENCHMARKS.md) and the figures
//! derived from the raw measurements: rates, ratios, the ideal speedup and host overhead.

use std::time::Duration;

use mtp_core::engine::EvalOverlap;
use mtp_core::options::DecodeMode;
use mtp_core::sampling::SamplerOptions;
use mtp_core::schedule::{ControllerSnapshot, ScheduleKey, ScheduleKind};
use serde::Serialize;

use super::cost::CostSamples;
use super::host::Machine;
use super::measure::{PassTotals, VariantRecord};
use super::plan::{EosPolicy, Plan};
use super::rounds::{DepthRounds, RequestRounds};
use super::spread::{ratio, Spread};
use super::timed::ClockMode;
use super::variant::{Decode, Variant};

/// Version of the JSON layout; bumped when a field changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The machine.
    pub machine: Machine,
    /// What was run.
    pub setup: Setup,
    /// Prompt tokens per second of the prefill (plain variant, per pass).
    pub prefill_tokens_per_second: Option<Spread>,
    /// The verify-cost curve and the drafter step.
    pub cost: CostReport,
    /// One entry per variant, plain first.
    pub variants: Vec<VariantReport>,
    /// Greedy only: whether every MTP variant produced exactly plain decode's tokens.
    pub greedy_identical: Option<bool>,
    /// The fastest fixed depth (by median decode tokens/s).
    pub best_fixed_depth: Option<usize>,
    /// Peak resident set size of the process in bytes (`null` where unavailable).
    pub peak_rss_bytes: Option<u64>,
    /// The adaptive schedule's learned state at the end of the run, per key (one controller
    /// served every request of the adaptive variant, warm-up passes included).
    pub controllers: Vec<ControllerReport>,
}

/// One adaptive controller's state at the end of the run.
#[derive(Debug, Clone, Serialize)]
pub struct ControllerReport {
    /// Whose state it is (proposer, backend, decode mode, validation, overlap).
    pub key: ScheduleKey,
    /// What it learned.
    pub state: ControllerSnapshot,
}

/// The run's settings.
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    /// Target directory.
    pub target: String,
    /// Drafter directory.
    pub drafter: String,
    /// Backend name (e.g. `candle-cpu`).
    pub backend: String,
    /// Weight dtype.
    pub dtype: String,
    /// The prompt file.
    pub prompts_file: String,
    /// Number of prompts.
    pub prompts: usize,
    /// Prompt lengths in tokens.
    pub prompt_tokens: Option<Spread>,
    /// Each prompt's token ids (peers reuse them, so that every row decodes the same input).
    pub prompt_ids: Vec<Vec<u32>>,
    /// Tokens generated per prompt.
    pub num_predict: usize,
    /// Measured passes.
    pub reps: usize,
    /// Warm-up passes.
    pub warmup: usize,
    /// What EOS does.
    pub eos: EosPolicy,
    /// Sampling options (every variant).
    pub sampling: SamplerOptions,
    /// `--quick` smoke run (numbers mean nothing).
    pub quick: bool,
    /// How model calls were timed.
    pub model_clock: ClockMode,
    /// The structured output of every variant but `plain-free` (`null`: free text).
    pub structured_output: Option<serde_json::Value>,
}

/// The cost curve.
#[derive(Debug, Clone, Serialize)]
pub struct CostReport {
    /// Tokens in the cache while timing.
    pub context_tokens: usize,
    /// Timed calls per point.
    pub reps: usize,
    /// t_v(w) in seconds for w = 1, 2, ...
    pub verify_secs: Vec<WidthCost>,
    /// t_d in seconds.
    pub draft_step_secs: Option<Spread>,
}

/// t_v at one width.
#[derive(Debug, Clone, Serialize)]
pub struct WidthCost {
    /// Tokens in the verify forward.
    pub width: usize,
    /// Seconds per call.
    pub secs: Option<Spread>,
}

/// One variant's figures.
#[derive(Debug, Clone, Serialize)]
pub struct VariantReport {
    /// `plain`, `mtp-<schedule>` or `mtp-k<depth>`.
    pub name: String,
    /// The schedule (MTP variants).
    pub schedule: Option<ScheduleKind>,
    /// The fixed depth (fixed-depth variants).
    pub depth: Option<usize>,
    /// The engine's evaluation overlap.
    pub overlap: EvalOverlap,
    /// The decode loop the engine ran.
    pub mode: DecodeMode,
    /// Tokens after each prompt's first ÷ time after the first token, per pass.
    pub decode_tokens_per_second: Option<Spread>,
    /// Generated tokens ÷ (prefill + decode time), per pass (what peers report).
    pub end_to_end_tokens_per_second: Option<Spread>,
    /// Per pass: this variant's decode tokens/s ÷ plain's in the same pass.
    pub speedup_vs_plain: Option<Spread>,
    /// Per pass: this variant's decode tokens/s ÷ its `-sync` twin's (the same decode without
    /// the evaluation overlap) in the same pass; `null` without a twin.
    pub overlap_speedup: Option<Spread>,
    /// E[L]·t₁ ÷ Σ over rounds (k·t_d + t_v(k+1)) per round, from the measured acceptance and
    /// costs (for a fixed depth k: E[L]·t₁ / (k·t_d + t_v(k+1))).
    pub ideal_speedup: Option<f64>,
    /// Median achieved speedup ÷ ideal speedup.
    pub achieved_over_ideal: Option<f64>,
    /// Median decode tokens/s ÷ that of the best fixed depth.
    pub vs_best_fixed_depth: Option<f64>,
    /// Decode rounds over all measured passes.
    pub rounds: usize,
    /// Accepted drafts per round.
    pub mean_accepted: f64,
    /// Tokens emitted per round, E[L] (accepted + 1).
    pub mean_emitted_per_round: f64,
    /// Accepted ÷ drafted.
    pub acceptance: f64,
    /// Of the drafted tokens, those a structured output's grammar forced (no proposer call).
    pub forced: usize,
    /// Of the forced drafts, those accepted.
    pub forced_accepted: usize,
    /// Forced tokens accepted ÷ tokens generated after each prompt's first: the share of the
    /// output the grammar drafted.
    pub forced_share: f64,
    /// Acceptance at draft position 1, 2, ... (accepted ÷ drafted there).
    pub per_position_acceptance: Vec<f64>,
    /// Seconds per round outside model calls (round time − target − drafter time), per pass.
    pub host_overhead_per_round_secs: Option<Spread>,
    /// Seconds per round in target calls, per pass.
    pub target_secs_per_round: Option<Spread>,
    /// Seconds per round in drafter steps (with their token embeddings), per pass.
    pub drafter_secs_per_round: Option<Spread>,
    /// Greedy only: the same tokens as plain decode on every prompt.
    pub greedy_match: Option<bool>,
    /// Every pass produced the same tokens.
    pub repeatable: bool,
    /// Each prompt's decode tokens/s (after its first token), the median over the measured
    /// passes, in prompt order (`null` where a prompt decoded nothing after its first token).
    pub per_prompt_decode_tokens_per_second: Vec<Option<f64>>,
    /// Each prompt's generated token ids from the first measured pass.
    pub outputs: Vec<Vec<u32>>,
    /// Round seconds by drafted depth, over the rounds that drafted the depth the schedule
    /// chose (MTP variants; depth 0 = plain rounds).
    pub round_secs_by_depth: Vec<DepthRounds>,
    /// Rounds the engine drafted below the chosen depth (the token budget).
    pub capped_rounds: usize,
    /// Heuristic and adaptive schedules: every round of every measured request (depth chosen,
    /// drafted, accepted, round seconds, capped); `null` for the other variants.
    pub round_log: Option<Vec<RequestRounds>>,
}

/// Inputs of [`Report::build`] that are not measurements.
pub struct Context<'a> {
    /// The plan.
    pub plan: &'a Plan,
    /// What was run.
    pub setup: Setup,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn spread_of(passes: &[PassTotals], f: impl Fn(&PassTotals) -> Option<f64>) -> Option<Spread> {
    let values: Option<Vec<f64>> = passes.iter().map(f).collect();
    Spread::of(values?)
}

fn decode_rate(p: &PassTotals) -> Option<f64> {
    ratio(p.decoded as f64, secs(p.decode_time))
}

fn per_round(p: &PassTotals, time: Duration) -> Option<f64> {
    ratio(secs(time), p.rounds as f64)
}

/// Medians of the cost curve: `t_v[w - 1]` and t_d.
struct Costs {
    t_v: Vec<Option<f64>>,
    t_d: Option<f64>,
}

impl Costs {
    /// The cost model's round at drafted depth `k`: k·t_d + t_v(k+1) (t_d = 0 without a
    /// drafter: prompt lookup drafts on the host, its cost not on the curve).
    fn round_model(&self, k: usize) -> Option<f64> {
        let t_v = (*self.t_v.get(k)?)?;
        Some(k as f64 * self.t_d.unwrap_or(0.0) + t_v)
    }

    /// The ideal speedup of a variant from its depth histogram and emitted tokens.
    fn ideal(&self, record: &VariantRecord) -> Option<f64> {
        if record.variant.is_plain() {
            return Some(1.0);
        }
        let a = &record.acceptance;
        let t_d = self.t_d?;
        let t1 = (*self.t_v.first()?)?;
        // per_position[i].0 = rounds that drafted at least i + 1 tokens.
        let at_least = |k: usize| match k {
            0 => a.rounds,
            _ => a.per_position.get(k - 1).map_or(0, |c| c.0),
        };
        let mut cost = 0.0;
        for k in 0..=a.per_position.len() {
            let rounds = at_least(k).saturating_sub(at_least(k + 1));
            if rounds > 0 {
                let t_v = (*self.t_v.get(k)?)?;
                cost += rounds as f64 * (k as f64 * t_d + t_v);
            }
        }
        let emitted = (a.accepted + a.rounds) as f64;
        ratio(emitted * t1, cost)
    }
}

impl Report {
    /// Derive every figure from the measurements.
    pub fn build(
        ctx: Context<'_>,
        records: &[VariantRecord],
        cost: &CostSamples,
        peak_rss_bytes: Option<u64>,
    ) -> Self {
        let costs = Costs {
            t_v: cost
                .verify
                .iter()
                .map(|s| Spread::of(s.iter().copied().map(secs)).map(|s| s.median))
                .collect(),
            t_d: Spread::of(cost.draft_step.iter().copied().map(secs)).map(|s| s.median),
        };
        let plain = records.iter().find(|r| r.variant == Variant::PLAIN);
        let greedy = ctx.plan.sampling.is_greedy();
        let mut variants: Vec<VariantReport> = records
            .iter()
            .map(|r| {
                let sync = r.variant.without_overlap();
                let twin = records
                    .iter()
                    .find(|t| t.variant == sync && sync != r.variant);
                let mut report = variant_report(r, plain, &costs, greedy);
                report.overlap_speedup = twin.and_then(|t| per_pass_speedup(r, t));
                report
            })
            .collect();
        let best = best_fixed_depth(&variants);
        if let Some((_, best_rate)) = best {
            for v in &mut variants {
                v.vs_best_fixed_depth = v
                    .decode_tokens_per_second
                    .and_then(|s| ratio(s.median, best_rate));
            }
        }
        let greedy_identical = greedy.then(|| {
            variants
                .iter()
                .all(|v| v.greedy_match != Some(false) && v.repeatable)
        });
        Self {
            schema_version: SCHEMA_VERSION,
            machine: Machine::this(),
            setup: ctx.setup,
            prefill_tokens_per_second: plain.and_then(|r| {
                spread_of(&r.passes, |p| {
                    ratio(p.prompt_tokens as f64, secs(p.prefill_time))
                })
            }),
            cost: CostReport {
                context_tokens: cost.context,
                reps: cost.draft_step.len(),
                verify_secs: cost
                    .verify
                    .iter()
                    .enumerate()
                    .map(|(i, s)| WidthCost {
                        width: i + 1,
                        secs: Spread::of(s.iter().copied().map(secs)),
                    })
                    .collect(),
                draft_step_secs: Spread::of(cost.draft_step.iter().copied().map(secs)),
            },
            variants,
            greedy_identical,
            best_fixed_depth: best.map(|(k, _)| k),
            peak_rss_bytes,
            controllers: Vec::new(),
        }
    }
}

fn variant_report(
    r: &VariantRecord,
    plain: Option<&VariantRecord>,
    costs: &Costs,
    greedy: bool,
) -> VariantReport {
    let speedup = plain.and_then(|plain| per_pass_speedup(r, plain));
    let ideal = costs.ideal(r);
    let a = &r.acceptance;
    let rounds = a.rounds as f64;
    let schedule = match r.variant.decode {
        Decode::Plain | Decode::Unconstrained => None,
        Decode::Schedule(kind) => Some(kind),
        Decode::Depth(_) => Some(ScheduleKind::Constant),
    };
    // Without the constraint the tokens differ by design: no match to report.
    let greedy_match = (greedy && r.variant.is_constrained()).then(|| {
        plain.is_some_and(|plain| plain.repeatable && r.repeatable && plain.tokens == r.tokens)
    });
    VariantReport {
        name: r.variant.name(),
        schedule,
        depth: r.variant.depth(),
        overlap: r.variant.overlap,
        mode: r.mode,
        decode_tokens_per_second: spread_of(&r.passes, decode_rate),
        end_to_end_tokens_per_second: spread_of(&r.passes, |p| {
            ratio(p.generated as f64, secs(p.prefill_time + p.decode_time))
        }),
        speedup_vs_plain: speedup,
        overlap_speedup: None,
        ideal_speedup: ideal,
        achieved_over_ideal: speedup.zip(ideal).and_then(|(s, i)| ratio(s.median, i)),
        vs_best_fixed_depth: None,
        rounds: r.passes.iter().map(|p| p.rounds).sum(),
        mean_accepted: ratio(a.accepted as f64, rounds).unwrap_or(0.0),
        mean_emitted_per_round: ratio((a.accepted + a.rounds) as f64, rounds).unwrap_or(1.0),
        acceptance: ratio(a.accepted as f64, a.drafted as f64).unwrap_or(0.0),
        forced: a.forced,
        forced_accepted: a.forced_accepted,
        forced_share: ratio(
            a.forced_accepted as f64,
            r.passes.iter().map(|p| p.decoded).sum::<usize>() as f64,
        )
        .unwrap_or(0.0),
        per_position_acceptance: a
            .per_position
            .iter()
            .map(|&(drafted, accepted)| ratio(accepted as f64, drafted as f64).unwrap_or(0.0))
            .collect(),
        host_overhead_per_round_secs: spread_of(&r.passes, |p| {
            let model = p.target_time + p.drafter_time;
            per_round(p, p.decode_time.saturating_sub(model))
        }),
        target_secs_per_round: spread_of(&r.passes, |p| per_round(p, p.target_time)),
        drafter_secs_per_round: spread_of(&r.passes, |p| per_round(p, p.drafter_time)),
        greedy_match,
        repeatable: r.repeatable,
        per_prompt_decode_tokens_per_second: r
            .per_prompt
            .rates
            .iter()
            .map(|rates| Spread::of(rates.iter().copied()).map(|s| s.median))
            .collect(),
        outputs: r.tokens.clone(),
        round_secs_by_depth: r
            .rounds
            .by_depth()
            .into_iter()
            .map(|mut d| {
                d.model_secs = costs.round_model(d.depth);
                d.wall_over_model = d.model_secs.and_then(|m| ratio(d.mean_phases.wall, m));
                d
            })
            .collect(),
        capped_rounds: r.rounds.capped,
        round_log: r.rounds.keep_requests.then(|| r.rounds.requests.clone()),
    }
}

/// `r`'s decode tokens/s ÷ `base`'s, pass by pass.
fn per_pass_speedup(r: &VariantRecord, base: &VariantRecord) -> Option<Spread> {
    let values: Option<Vec<f64>> = r
        .passes
        .iter()
        .zip(&base.passes)
        .map(|(p, q)| ratio(decode_rate(p)?, decode_rate(q)?))
        .collect();
    Spread::of(values?)
}

/// The fixed depth with the highest median decode tokens/s (with the engine's default
/// overlap), and that rate.
fn best_fixed_depth(variants: &[VariantReport]) -> Option<(usize, f64)> {
    variants
        .iter()
        .filter(|v| v.overlap != EvalOverlap::Never)
        .filter_map(|v| Some((v.depth?, v.decode_tokens_per_second?.median)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::bench::measure::Acceptance;

    fn record(variant: Variant, acceptance: Acceptance) -> VariantRecord {
        VariantRecord {
            variant,
            mode: DecodeMode::GreedyMtp,
            passes: Vec::new(),
            acceptance,
            tokens: Vec::new(),
            repeatable: true,
            per_prompt: Default::default(),
            rounds: Default::default(),
        }
    }

    #[test]
    fn ideal_speedup_of_a_fixed_depth_is_the_issue_formula() {
        // 10 rounds at depth 2, 15 drafts accepted: E[L] = 2.5.
        let acceptance = Acceptance {
            rounds: 10,
            drafted: 20,
            accepted: 15,
            per_position: vec![(10, 9), (10, 6)],
            ..Acceptance::default()
        };
        let costs = Costs {
            t_v: vec![Some(1.0), Some(1.1), Some(1.2)],
            t_d: Some(0.1),
        };
        let ideal = costs.ideal(&record(Variant::new(Decode::Depth(2)), acceptance));
        let expected = 2.5 * 1.0 / (2.0 * 0.1 + 1.2);
        assert!((ideal.expect("ideal") - expected).abs() < 1e-12);
    }

    #[test]
    fn ideal_speedup_weighs_mixed_depths_and_plain_rounds() {
        // 4 rounds: depth 0, 1, 2, 2; accepted 0 + 1 + 2 + 1 = 4 → 8 tokens emitted.
        let acceptance = Acceptance {
            rounds: 4,
            drafted: 5,
            accepted: 4,
            per_position: vec![(3, 3), (2, 1)],
            ..Acceptance::default()
        };
        let costs = Costs {
            t_v: vec![Some(1.0), Some(1.5), Some(2.0)],
            t_d: Some(0.5),
        };
        let adaptive = Variant::new(Decode::Schedule(ScheduleKind::Adaptive));
        let ideal = costs.ideal(&record(adaptive, acceptance));
        let cost = 1.0 + (0.5 + 1.5) + 2.0 * (1.0 + 2.0);
        assert!((ideal.expect("ideal") - 8.0 / cost).abs() < 1e-12);
        let missing = Costs {
            t_v: vec![Some(1.0)],
            t_d: Some(0.5),
        };
        let acceptance = Acceptance {
            rounds: 1,
            drafted: 1,
            accepted: 1,
            per_position: vec![(1, 1)],
            ..Acceptance::default()
        };
        assert_eq!(
            missing.ideal(&record(Variant::new(Decode::Depth(1)), acceptance)),
            None
        );
    }
}
