//! The interleaved runs: every pass runs every variant over the prompt set (the order rotated
//! per pass), with the models wrapped in timing decorators.

use std::time::Duration;

use anyhow::{bail, Context};
use mtp_core::constraint::ConstraintSource;
use mtp_core::engine::{CancelToken, DiscardSink, Engine, GenerateRequest, Response};
use mtp_core::options::{DecodeMode, LogprobsRequest};
use mtp_core::schedule::{ScheduleKind, ScheduleMemory};
use mtp_core::Backend;

use super::plan::{EosPolicy, Pass, Plan};
use super::rounds::RoundLog;
use super::timed::{ClockReading, ModelClock};
use super::variant::{Decode, Variant};

/// Totals of one variant over the prompt set in one measured pass.
#[derive(Debug, Clone, Default)]
pub struct PassTotals {
    /// Tokens generated after each prompt's first token.
    pub decoded: usize,
    /// Time generating after each prompt's first token.
    pub decode_time: Duration,
    /// Tokens generated, first tokens included.
    pub generated: usize,
    /// Prompt tokens evaluated.
    pub prompt_tokens: usize,
    /// Time evaluating prompts and choosing the first tokens.
    pub prefill_time: Duration,
    /// Decode rounds (plain: one per token after the first; MTP: draft-verify rounds).
    pub rounds: usize,
    /// Time in target calls after the prefill.
    pub target_time: Duration,
    /// Time in drafter steps and their token embeddings.
    pub drafter_time: Duration,
}

impl PassTotals {
    fn add(&mut self, response: &Response, clock: &ClockReading) {
        self.decoded += response.eval_count.saturating_sub(1);
        self.decode_time += response.eval_duration;
        self.generated += response.eval_count;
        self.prompt_tokens += response.prompt_eval_count;
        self.prefill_time += response.prompt_eval_duration;
        self.rounds += match &response.mtp {
            Some(stats) => stats.iterations,
            None => clock.decode_forwards,
        };
        self.target_time += clock.target;
        self.drafter_time += clock.drafter;
    }
}

/// One variant's decode rate per prompt: `rates[p]` holds prompt `p`'s tokens/s after its
/// first token, one entry per measured pass (none when it decoded nothing after the first).
#[derive(Debug, Clone, Default)]
pub struct PerPrompt {
    /// Decode tokens/s of each prompt, per pass.
    pub rates: Vec<Vec<f64>>,
}

impl PerPrompt {
    fn add(&mut self, prompt: usize, response: &Response) {
        if self.rates.len() <= prompt {
            self.rates.resize(prompt + 1, Vec::new());
        }
        let decoded = response.eval_count.saturating_sub(1) as f64;
        let secs = response.eval_duration.as_secs_f64();
        if decoded > 0.0 && secs > 0.0 {
            self.rates[prompt].push(decoded / secs);
        }
    }
}

/// Drafted and accepted counts of one variant over every measured pass.
#[derive(Debug, Clone, Default)]
pub struct Acceptance {
    /// Rounds.
    pub rounds: usize,
    /// Drafted tokens.
    pub drafted: usize,
    /// Accepted tokens.
    pub accepted: usize,
    /// Drafted tokens a grammar forced.
    pub forced: usize,
    /// Forced tokens accepted.
    pub forced_accepted: usize,
    /// `per_position[i]` = (rounds that drafted position i + 1, of those accepted there).
    pub per_position: Vec<(usize, usize)>,
}

impl Acceptance {
    fn add(&mut self, response: &Response) {
        let Some(stats) = &response.mtp else {
            return;
        };
        self.rounds += stats.iterations;
        self.drafted += stats.drafted;
        self.accepted += stats.accepted;
        self.forced += stats.forced;
        self.forced_accepted += stats.forced_accepted;
        if self.per_position.len() < stats.per_position.len() {
            self.per_position.resize(stats.per_position.len(), (0, 0));
        }
        for (sum, counts) in self.per_position.iter_mut().zip(&stats.per_position) {
            sum.0 += counts.drafted;
            sum.1 += counts.accepted;
        }
    }
}

/// Everything measured for one variant.
#[derive(Debug, Clone)]
pub struct VariantRecord {
    /// The variant.
    pub variant: Variant,
    /// The decode mode the engine chose.
    pub mode: DecodeMode,
    /// One entry per measured pass.
    pub passes: Vec<PassTotals>,
    /// Acceptance over every measured pass.
    pub acceptance: Acceptance,
    /// Each prompt's tokens from the first measured pass.
    pub tokens: Vec<Vec<u32>>,
    /// Whether every pass produced the same tokens for every prompt.
    pub repeatable: bool,
    /// Each prompt's decode time and tokens, per measured pass.
    pub per_prompt: PerPrompt,
    /// Every round of the measured passes (kept per request for varying schedules).
    pub rounds: RoundLog,
}

/// The inputs shared by every generation of a run.
pub struct Workload<'a> {
    /// The plan.
    pub plan: &'a Plan,
    /// Each prompt's token ids.
    pub prompt_ids: &'a [Vec<u32>],
    /// Token ids that end a generation (empty when EOS is ignored).
    pub eos: Vec<u32>,
    /// The structured-output constraint of every variant but `plain-free`.
    pub constraint: Option<ConstraintSource>,
}

impl<'a> Workload<'a> {
    /// The workload of `plan` over the encoded prompts, with the model's `eos` ids.
    pub fn new(plan: &'a Plan, prompt_ids: &'a [Vec<u32>], eos: &[u32]) -> Self {
        let eos = match plan.eos {
            EosPolicy::Ignore => Vec::new(),
            EosPolicy::Stop => eos.to_vec(),
        };
        Self {
            plan,
            prompt_ids,
            eos,
            constraint: None,
        }
    }

    /// The same workload with `constraint` on every variant but `plain-free`.
    pub fn constrained(mut self, constraint: Option<ConstraintSource>) -> Self {
        self.constraint = constraint;
        self
    }

    /// The request for `variant` on prompt `index`.
    pub fn request(&self, variant: Variant, index: usize) -> GenerateRequest {
        GenerateRequest {
            prompt: self.prompt_ids[index].clone(),
            sampling: self.plan.sampling.clone(),
            num_predict: self.plan.num_predict,
            eos: self.eos.clone(),
            draft: variant.overrides(),
            logprobs: LogprobsRequest::None,
            constraint: self.constraint.clone().filter(|_| variant.is_constrained()),
        }
    }
}

/// The deepest draft any variant of the plan can use (from its resolved options).
pub fn deepest_draft<B: Backend>(
    engine: &Engine<'_, B>,
    work: &Workload<'_>,
) -> anyhow::Result<usize> {
    let mut deepest = 0;
    for &variant in &work.plan.variants {
        if !variant.is_plain() {
            let options = engine.mtp_options(&work.request(variant, 0))?;
            let reach = match options.schedule {
                ScheduleKind::Constant => {
                    options.initial_draft_tokens.min(options.max_draft_tokens)
                }
                ScheduleKind::Heuristic | ScheduleKind::Adaptive => options.max_draft_tokens,
            };
            deepest = deepest.max(reach);
        }
    }
    Ok(deepest)
}

/// Run every pass of the plan; returns one record per variant, in plan order.
pub fn run_passes<B: Backend>(
    engine: &Engine<'_, B>,
    clock: &ModelClock,
    work: &Workload<'_>,
) -> anyhow::Result<Vec<VariantRecord>> {
    let plan = work.plan;
    let mut records = plan
        .variants
        .iter()
        .map(|&v| new_record(engine, work, v))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let total = plan.warmup + plan.reps;
    for (index, pass) in plan.passes().enumerate() {
        crate::cli::console::err(&format!("bench: pass {}/{total} ({pass})\n", index + 1))?;
        let mut totals = vec![PassTotals::default(); records.len()];
        // Prompt by prompt, every variant in turn (in an order rotated per prompt and pass):
        // a slow spell of the machine falls on neighbouring runs of every variant alike, so
        // per-prompt ratios compare runs seconds apart.
        for p in plan.prompts_of(pass) {
            for v in plan.order(index + p) {
                let record = &mut records[v];
                let engine = engine.clone().with_overlap(record.variant.overlap);
                let request = work.request(record.variant, p);
                // A new controller per request, as each `mtp generate` process has.
                let engine = match record.variant.fresh_controller() {
                    true => engine.with_schedule_memory(ScheduleMemory::new()),
                    false => engine,
                };
                clock.reset();
                let response = engine
                    .generate(&request, &mut DiscardSink, &CancelToken::new())
                    .with_context(|| format!("{} failed on prompt {}", record.variant.name(), p))?;
                let Pass::Measured(rep) = pass else {
                    continue;
                };
                totals[v].add(&response, &clock.read());
                record.per_prompt.add(p, &response);
                record.acceptance.add(&response);
                record.rounds.add(&response, rep, p);
                if rep == 0 {
                    record.tokens.push(response.tokens);
                } else if record.tokens.get(p) != Some(&response.tokens) {
                    record.repeatable = false;
                }
            }
        }
        if let Pass::Measured(_) = pass {
            for (record, totals) in records.iter_mut().zip(totals) {
                record.passes.push(totals);
            }
        }
    }
    Ok(records)
}

/// An empty record, after checking that the engine decodes `variant` as intended.
fn new_record<B: Backend>(
    engine: &Engine<'_, B>,
    work: &Workload<'_>,
    variant: Variant,
) -> anyhow::Result<VariantRecord> {
    let mode = engine
        .decode_mode(&work.request(variant, 0))
        .with_context(|| format!("invalid options for {}", variant.name()))?;
    let speculative = matches!(mode, DecodeMode::GreedyMtp | DecodeMode::SampledMtp);
    if speculative == variant.is_plain() {
        bail!(
            "{} would decode as {mode:?}; the benchmark needs a drafter for MTP",
            variant.name()
        );
    }
    Ok(VariantRecord {
        variant,
        mode,
        passes: Vec::new(),
        acceptance: Acceptance::default(),
        tokens: Vec::new(),
        repeatable: true,
        per_prompt: PerPrompt::default(),
        rounds: RoundLog::new(matches!(
            variant.decode,
            Decode::Schedule(kind) if kind != ScheduleKind::Constant
        )),
    })
}
