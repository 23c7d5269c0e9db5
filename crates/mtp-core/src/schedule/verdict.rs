//! What a request's rounds say about drafting: the depths the schedule chose, and, when it
//! settled on plain decoding, why (the measured price of a draft against what it brought).

use std::fmt;

use super::RoundRecord;

/// How many rounds chose each depth: `counts[d]` rounds chose depth `d`.
pub fn chosen_depths(rounds: &[RoundRecord]) -> Vec<usize> {
    let mut counts = Vec::new();
    for r in rounds {
        if counts.len() <= r.chosen {
            counts.resize(r.chosen + 1, 0);
        }
        counts[r.chosen] += 1;
    }
    counts
}

/// The measured reason a schedule stopped drafting: its drafting rounds cost more time per
/// token than plain rounds. Built by [`DraftingOff::from_rounds`] from one request's rounds.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftingOff {
    /// Rounds that chose plain decoding, of [`rounds`](Self::rounds).
    pub plain_rounds: usize,
    /// Every round of the request.
    pub rounds: usize,
    /// The drafting depth played most often (ties: the shallower).
    pub depth: usize,
    /// Median wall time of a round at [`depth`](Self::depth) ÷ that of a plain round.
    pub round_cost: f64,
    /// Tokens a round at [`depth`](Self::depth) committed, on average (accepted drafts + 1).
    pub tokens_per_round: f64,
}

impl DraftingOff {
    /// The verdict of a request whose schedule ended on plain decoding after measuring at
    /// least one full drafting round; `None` when it ended drafting, never drafted, or never
    /// decoded plain. Capped rounds (drafted less than chosen) are not samples of a depth.
    pub fn from_rounds(rounds: &[RoundRecord]) -> Option<Self> {
        if rounds.last()?.chosen != 0 {
            return None;
        }
        let plain: Vec<f64> = rounds
            .iter()
            .filter(|r| r.chosen == 0)
            .map(|r| r.secs)
            .collect();
        let counts = chosen_depths(rounds);
        let depth = (1..counts.len())
            .filter(|&d| rounds.iter().any(|r| r.chosen == d && !r.capped))
            .max_by(|&a, &b| counts[a].cmp(&counts[b]).then(b.cmp(&a)))?;
        let drafting: Vec<&RoundRecord> = rounds
            .iter()
            .filter(|r| r.chosen == depth && !r.capped && r.drafted == depth)
            .collect();
        let secs: Vec<f64> = drafting.iter().map(|r| r.secs).collect();
        let plain_secs = median(plain)?;
        let depth_secs = median(secs)?;
        if plain_secs <= 0.0 {
            return None;
        }
        let tokens =
            drafting.iter().map(|r| r.accepted + 1).sum::<usize>() as f64 / drafting.len() as f64;
        Some(Self {
            plain_rounds: counts[0],
            rounds: rounds.len(),
            depth,
            round_cost: depth_secs / plain_secs,
            tokens_per_round: tokens,
        })
    }

    /// What one draft cost, in target steps: the extra time of a round at the depth over a
    /// plain round, per draft.
    pub fn cost_per_draft(&self) -> f64 {
        (self.round_cost - 1.0) / self.depth as f64
    }

    /// The drafting rounds' rate ÷ plain decoding's (tokens per second).
    pub fn rate_vs_plain(&self) -> f64 {
        self.tokens_per_round / self.round_cost
    }
}

impl fmt::Display for DraftingOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "drafting off: a draft costs {:.2} of a target step here (a round of {} draft{} took \
             {:.2}x a plain step for {:.2} tokens, {:.2}x plain's rate); decoded plain in {} of \
             {} rounds, re-checking now and then",
            self.cost_per_draft(),
            self.depth,
            if self.depth == 1 { "" } else { "s" },
            self.round_cost,
            self.tokens_per_round,
            self.rate_vs_plain(),
            self.plain_rounds,
            self.rounds
        )
    }
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() || xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(chosen: usize, drafted: usize, accepted: usize, secs: f64) -> RoundRecord {
        RoundRecord {
            chosen,
            drafted,
            accepted,
            secs,
            capped: drafted < chosen,
            phases: Default::default(),
        }
    }

    #[test]
    fn chosen_depths_count_every_round() {
        let rounds = [
            round(0, 0, 0, 1.0),
            round(2, 2, 1, 2.0),
            round(0, 0, 0, 1.0),
        ];
        assert_eq!(chosen_depths(&rounds), vec![2, 0, 1]);
        assert!(chosen_depths(&[]).is_empty());
    }

    #[test]
    fn a_schedule_that_settled_on_plain_says_what_a_draft_cost() {
        let mut rounds = vec![round(0, 0, 0, 1.0), round(0, 0, 0, 1.0)];
        rounds.extend([
            round(1, 1, 1, 1.8),
            round(1, 1, 0, 1.8),
            round(2, 2, 1, 2.6),
        ]);
        rounds.extend((0..20).map(|_| round(0, 0, 0, 1.0)));
        let off = DraftingOff::from_rounds(&rounds).expect("settled on plain");
        assert_eq!((off.depth, off.plain_rounds, off.rounds), (1, 22, 25));
        assert!((off.round_cost - 1.8).abs() < 1e-12);
        assert!((off.tokens_per_round - 1.5).abs() < 1e-12);
        assert!((off.cost_per_draft() - 0.8).abs() < 1e-12);
        assert!((off.rate_vs_plain() - 1.5 / 1.8).abs() < 1e-12);
        assert!(off
            .to_string()
            .starts_with("drafting off: a draft costs 0.80"));
    }

    #[test]
    fn no_verdict_while_drafting_or_without_a_measured_depth() {
        let drafting = [round(0, 0, 0, 1.0), round(2, 2, 2, 1.2)];
        assert_eq!(DraftingOff::from_rounds(&drafting), None);
        let never = [round(0, 0, 0, 1.0), round(0, 0, 0, 1.0)];
        assert_eq!(DraftingOff::from_rounds(&never), None);
        // Only capped drafting rounds: no sample of a depth's cost.
        let capped = [round(3, 1, 1, 1.2), round(0, 0, 0, 1.0)];
        assert_eq!(DraftingOff::from_rounds(&capped), None);
        assert_eq!(DraftingOff::from_rounds(&[]), None);
    }
}
