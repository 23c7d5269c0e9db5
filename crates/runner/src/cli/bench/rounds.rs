//! Per-round records: every round of the adaptive and heuristic schedules as the engine ran it
//! (depth chosen and drafted, accepted, round time, budget-capped), and, for every MTP variant,
//! the round time by drafted depth with where it went ([`RoundPhases`]).

use mtp_core::engine::Response;
use mtp_core::schedule::{RoundPhases, RoundRecord};
use serde::Serialize;

use super::spread::Spread;

/// The rounds of one request.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRounds {
    /// Measured pass (from 0).
    pub pass: usize,
    /// Prompt index.
    pub prompt: usize,
    /// Each round in order.
    pub rounds: Vec<RoundRecord>,
}

/// Round time at one drafted depth, over the rounds that drafted it as chosen (not capped).
#[derive(Debug, Clone, Serialize)]
pub struct DepthRounds {
    /// Drafted depth (0: a plain round).
    pub depth: usize,
    /// Rounds that drafted it as chosen.
    pub rounds: usize,
    /// Their round seconds (up to the verdict, what the schedule learns).
    pub secs: Option<Spread>,
    /// Their mean seconds per round in each part, emission included (`wall`).
    pub mean_phases: RoundPhases,
    /// The cost model's round at this depth from the run's cost curve, k·t_d + t_v(k+1)
    /// (t_d = 0 for a proposer without a drafter), in seconds.
    pub model_secs: Option<f64>,
    /// `mean_phases.wall ÷ model_secs`: what the round costs beyond its draft steps and its
    /// verify forward.
    pub wall_over_model: Option<f64>,
}

/// The mean of each part over `rounds` (zeros for none).
fn mean_phases(rounds: &[RoundRecord]) -> RoundPhases {
    let n = rounds.len().max(1) as f64;
    let mean =
        |part: fn(&RoundPhases) -> f64| rounds.iter().map(|r| part(&r.phases)).sum::<f64>() / n;
    RoundPhases {
        draft: mean(|p| p.draft),
        forward: mean(|p| p.forward),
        unembed: mean(|p| p.unembed),
        host: mean(|p| p.host),
        commit: mean(|p| p.commit),
        emit: mean(|p| p.emit),
        other: mean(|p| p.other),
        wall: mean(|p| p.wall),
    }
}

/// Every round of one variant over the measured passes.
#[derive(Debug, Clone, Default)]
pub struct RoundLog {
    /// Whether the full per-request log is kept (schedules whose depth varies).
    pub keep_requests: bool,
    /// The kept requests.
    pub requests: Vec<RequestRounds>,
    /// Uncapped rounds by drafted depth.
    by_depth: Vec<Vec<RoundRecord>>,
    /// Rounds the engine capped below the chosen depth.
    pub capped: usize,
}

impl RoundLog {
    /// An empty log; `keep_requests` keeps every request's rounds.
    pub fn new(keep_requests: bool) -> Self {
        Self {
            keep_requests,
            ..Self::default()
        }
    }

    /// Add the rounds of `response` (prompt `prompt` of measured pass `pass`).
    pub fn add(&mut self, response: &Response, pass: usize, prompt: usize) {
        let Some(stats) = &response.mtp else {
            return;
        };
        for r in &stats.round_log {
            if r.capped {
                self.capped += 1;
                continue;
            }
            if self.by_depth.len() <= r.drafted {
                self.by_depth.resize(r.drafted + 1, Vec::new());
            }
            self.by_depth[r.drafted].push(*r);
        }
        if self.keep_requests {
            self.requests.push(RequestRounds {
                pass,
                prompt,
                rounds: stats.round_log.clone(),
            });
        }
    }

    /// Round time by drafted depth (depths never drafted left out); the cost model's round
    /// is left for the report to fill.
    pub fn by_depth(&self) -> Vec<DepthRounds> {
        self.by_depth
            .iter()
            .enumerate()
            .filter(|(_, rounds)| !rounds.is_empty())
            .map(|(depth, rounds)| DepthRounds {
                depth,
                rounds: rounds.len(),
                secs: Spread::of(rounds.iter().map(|r| r.secs)),
                mean_phases: mean_phases(rounds),
                model_secs: None,
                wall_over_model: None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mtp_core::engine::{DoneReason, MtpStats};
    use mtp_core::options::DecodeMode;
    use std::time::Duration;

    fn response(rounds: Vec<RoundRecord>) -> Response {
        Response {
            tokens: Vec::new(),
            done_reason: DoneReason::Length,
            mode: DecodeMode::GreedyMtp,
            prompt_eval_count: 1,
            prompt_cached: 0,
            prompt_eval_duration: Duration::ZERO,
            eval_count: 0,
            eval_duration: Duration::ZERO,
            mtp: Some(MtpStats {
                round_log: rounds,
                ..MtpStats::default()
            }),
            speculation_off: None,
            context_full: false,
            logprobs: Vec::new(),
            constraint_complete: None,
        }
    }

    fn round(chosen: usize, drafted: usize, secs: f64) -> RoundRecord {
        RoundRecord {
            chosen,
            drafted,
            accepted: 0,
            secs,
            capped: drafted < chosen,
            phases: RoundPhases {
                draft: secs / 4.0,
                forward: secs / 2.0,
                wall: secs,
                ..RoundPhases::default()
            },
        }
    }

    #[test]
    fn capped_rounds_are_counted_apart_and_depths_summarised() {
        let mut log = RoundLog::new(true);
        log.add(
            &response(vec![
                round(2, 2, 0.02),
                round(2, 2, 0.04),
                round(0, 0, 0.01),
            ]),
            0,
            3,
        );
        log.add(&response(vec![round(2, 1, 0.5), round(2, 2, 0.03)]), 1, 0);
        assert_eq!(log.capped, 1);
        let by = log.by_depth();
        assert_eq!(by.iter().map(|d| d.depth).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(by[1].rounds, 3);
        assert_eq!(by[1].secs.map(|s| s.median), Some(0.03));
        // The mean of 0.02, 0.04 and 0.03 in each part.
        assert!((by[1].mean_phases.wall - 0.03).abs() < 1e-12);
        assert!((by[1].mean_phases.forward - 0.015).abs() < 1e-12);
        assert!((by[1].mean_phases.draft - 0.0075).abs() < 1e-12);
        assert_eq!(by[1].model_secs, None);
        assert_eq!(log.requests.len(), 2);
        assert_eq!((log.requests[0].pass, log.requests[0].prompt), (0, 3));
        let mut summary_only = RoundLog::new(false);
        summary_only.add(&response(vec![round(1, 1, 0.02)]), 0, 0);
        assert!(summary_only.requests.is_empty());
        assert_eq!(summary_only.by_depth().len(), 1);
    }
}
