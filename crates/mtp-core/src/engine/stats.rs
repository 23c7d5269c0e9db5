//! What a generation reports: done reason, counts, durations and MTP statistics.

use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::options::{DecodeMode, SpeculationOff};
use crate::proposer::ProposerKind;
use crate::sampling::TokenLogprobs;
use crate::schedule::{RoundRecord, ScheduleKind};

fn secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DoneReason {
    /// An end-of-sequence token was produced.
    Stop,
    /// `num_predict` (or the context) was reached.
    Length,
    /// The caller cancelled, or the sink asked to stop.
    Cancelled,
}

/// Drafted and accepted counts at one draft position.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PositionCounts {
    /// Rounds that drafted at this position.
    pub drafted: usize,
    /// Of those, rounds whose draft at this position was accepted.
    pub accepted: usize,
}

/// One proposer's share of a generation's rounds (several proposers may be on: each round
/// drafts with one of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProposerCounts {
    /// The proposer (its stable name in JSON).
    pub proposer: ProposerKind,
    /// Rounds it drafted for.
    pub rounds: usize,
    /// Draft tokens it proposed.
    pub drafted: usize,
    /// Of those, draft tokens accepted.
    pub accepted: usize,
}

/// Speculative-decoding statistics of one generation.
///
/// Serialises with the derived figures too (`acceptance`, `mean_draft`, `mean_accepted`,
/// `per_position_acceptance`) and durations in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MtpStats {
    /// What drafted (the proposer's stable name in JSON); with several proposers, the first
    /// one the engine was given (see [`per_proposer`](Self::per_proposer)).
    pub proposer: ProposerKind,
    /// Each proposer that was on, in the engine's order, with the rounds it drafted for
    /// (`proposers` in JSON).
    pub per_proposer: Vec<ProposerCounts>,
    /// The draft schedule used.
    pub schedule: ScheduleKind,
    /// Draft tokens proposed.
    pub drafted: usize,
    /// Draft tokens accepted.
    pub accepted: usize,
    /// Of [`drafted`](Self::drafted), the tokens a constraint forced (drafted without a
    /// proposer call; see [`crate::constraint`]).
    pub forced: usize,
    /// Of [`accepted`](Self::accepted), the forced ones.
    pub forced_accepted: usize,
    /// Drafts a constraint's mask forbade, cut before verification (not in `drafted`).
    pub cut: usize,
    /// Rounds (one verification each, plain rounds at depth 0 included).
    pub iterations: usize,
    /// Rounds verified in one batched target forward.
    pub batched_rounds: usize,
    /// Rounds verified one token at a time.
    pub serial_rounds: usize,
    /// Rounds that drafted nothing: one plain target step (the last token of the budget, or a
    /// schedule at depth 0). `batched_rounds + serial_rounds + undrafted_rounds = iterations`.
    pub undrafted_rounds: usize,
    /// Rounds with drafts where some draft was rejected.
    pub mismatches: usize,
    /// Rounds with drafts where every draft was accepted.
    pub all_accepted: usize,
    /// Largest draft depth used.
    pub max_draft: usize,
    /// Positions compared by compare-serial validation.
    pub compared: usize,
    /// Compare-serial disagreements between batched and serial validation.
    pub batch_serial_mismatches: usize,
    /// Per draft position (0 = first draft) counts.
    pub per_position: Vec<PositionCounts>,
    /// Time in target forwards.
    pub target_duration: Duration,
    /// Time drafting.
    pub draft_duration: Duration,
    /// Time validating (acceptance, host reads, cache commits).
    pub validate_duration: Duration,
    /// Every round in order (depth chosen and drafted, accepted, round time); not serialised
    /// with the statistics (`mtp bench` writes it).
    pub round_log: Vec<RoundRecord>,
}

impl Serialize for MtpStats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("MtpStats", 25)?;
        st.serialize_field("proposer", &self.proposer)?;
        st.serialize_field("proposers", &self.per_proposer)?;
        st.serialize_field("schedule", &self.schedule)?;
        st.serialize_field("drafted", &self.drafted)?;
        st.serialize_field("accepted", &self.accepted)?;
        st.serialize_field("forced", &self.forced)?;
        st.serialize_field("forced_accepted", &self.forced_accepted)?;
        st.serialize_field("cut", &self.cut)?;
        st.serialize_field("acceptance", &self.acceptance())?;
        st.serialize_field("iterations", &self.iterations)?;
        st.serialize_field("mean_draft", &self.mean_draft())?;
        st.serialize_field("mean_accepted", &self.mean_accepted())?;
        st.serialize_field("per_position", &self.per_position)?;
        st.serialize_field("per_position_acceptance", &self.per_position_acceptance())?;
        st.serialize_field("batched_rounds", &self.batched_rounds)?;
        st.serialize_field("serial_rounds", &self.serial_rounds)?;
        st.serialize_field("undrafted_rounds", &self.undrafted_rounds)?;
        st.serialize_field("mismatches", &self.mismatches)?;
        st.serialize_field("all_accepted", &self.all_accepted)?;
        st.serialize_field("max_draft", &self.max_draft)?;
        st.serialize_field("compared", &self.compared)?;
        st.serialize_field("batch_serial_mismatches", &self.batch_serial_mismatches)?;
        st.serialize_field("target_secs", &self.target_duration.as_secs_f64())?;
        st.serialize_field("draft_secs", &self.draft_duration.as_secs_f64())?;
        st.serialize_field("validate_secs", &self.validate_duration.as_secs_f64())?;
        st.end()
    }
}

impl MtpStats {
    /// Accepted ÷ drafted (0 when nothing was drafted).
    pub fn acceptance(&self) -> f64 {
        ratio(self.accepted, self.drafted)
    }

    /// Drafted tokens per round.
    pub fn mean_draft(&self) -> f64 {
        ratio(self.drafted, self.iterations)
    }

    /// Accepted tokens per round.
    pub fn mean_accepted(&self) -> f64 {
        ratio(self.accepted, self.iterations)
    }

    /// Acceptance rate at each draft position (accepted ÷ drafted there).
    pub fn per_position_acceptance(&self) -> Vec<f64> {
        self.per_position
            .iter()
            .map(|c| ratio(c.accepted, c.drafted))
            .collect()
    }

    /// Record one round's drafted and accepted counts.
    pub(crate) fn record_round(&mut self, drafted: usize, accepted: usize) {
        self.iterations += 1;
        if drafted == 0 {
            self.undrafted_rounds += 1;
        }
        self.drafted += drafted;
        self.accepted += accepted;
        self.max_draft = self.max_draft.max(drafted);
        if drafted > 0 {
            if accepted == drafted {
                self.all_accepted += 1;
            } else {
                self.mismatches += 1;
            }
        }
        if self.per_position.len() < drafted {
            self.per_position.resize(drafted, PositionCounts::default());
        }
        for (i, counts) in self.per_position.iter_mut().take(drafted).enumerate() {
            counts.drafted += 1;
            if i < accepted {
                counts.accepted += 1;
            }
        }
    }

    /// Emit the statistics as one `tracing` event.
    pub(crate) fn trace(&self, generated: usize) {
        tracing::info!(
            target: "mtp",
            generated,
            proposer = %self.proposer,
            schedule = %self.schedule,
            drafted = self.drafted,
            accepted = self.accepted,
            acceptance = self.acceptance(),
            iterations = self.iterations,
            mean_draft = self.mean_draft(),
            mean_accepted = self.mean_accepted(),
            per_position = ?self.per_position_acceptance(),
            batched = self.batched_rounds,
            serial = self.serial_rounds,
            undrafted = self.undrafted_rounds,
            mismatches = self.mismatches,
            all_accepted = self.all_accepted,
            max_draft = self.max_draft,
            compared = self.compared,
            batch_serial_mismatches = self.batch_serial_mismatches,
            target_secs = self.target_duration.as_secs_f64(),
            draft_secs = self.draft_duration.as_secs_f64(),
            validate_secs = self.validate_duration.as_secs_f64(),
            "MTP decode stats"
        );
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The final response of one generation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Response {
    /// Generated token ids in order (EOS excluded).
    pub tokens: Vec<u32>,
    /// Why generation ended.
    pub done_reason: DoneReason,
    /// How the tokens were produced.
    pub mode: DecodeMode,
    /// Prompt tokens evaluated (those after [`prompt_cached`](Self::prompt_cached)).
    pub prompt_eval_count: usize,
    /// Prompt tokens whose keys and values the caches held from an earlier request (prefix
    /// reuse, [`Engine::generate_reusing`](super::Engine::generate_reusing)); 0 otherwise.
    pub prompt_cached: usize,
    /// Time to evaluate the prompt and choose the first token.
    #[serde(serialize_with = "secs")]
    pub prompt_eval_duration: Duration,
    /// Tokens generated (= `tokens.len()`).
    pub eval_count: usize,
    /// Time generating after the first token.
    #[serde(serialize_with = "secs")]
    pub eval_duration: Duration,
    /// Speculative statistics (MTP modes only).
    pub mtp: Option<MtpStats>,
    /// Why the request decoded without speculation (plain mode only; `None` when it was
    /// speculative).
    pub speculation_off: Option<SpeculationOff>,
    /// Whether generation stopped because the model's context was full (`done_reason` is then
    /// `length`, before `num_predict` tokens).
    pub context_full: bool,
    /// The log-probabilities of [`tokens`](Self::tokens), one entry per token, when the request
    /// asked for them ([`GenerateRequest::logprobs`](super::GenerateRequest)); empty otherwise.
    /// Not serialised here: the runner writes them with each token's text.
    #[serde(skip)]
    pub logprobs: Vec<TokenLogprobs>,
    /// With a constraint ([`GenerateRequest::constraint`](super::GenerateRequest)): whether
    /// its text was complete when generation ended (`false` after `length`, a grammar still
    /// open); `None` without one.
    pub constraint_complete: Option<bool>,
}
