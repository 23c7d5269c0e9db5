//! What the command prints: streamed text or one JSON object on stdout, a statistics summary on
//! stderr.

use std::io::Write;

use mtp_core::engine::{MtpStats, Response, SinkFlow};
use mtp_core::sampling::SamplerOptions;
use mtp_core::schedule::{chosen_depths, DraftingOff, ScheduleKind};
use runner::logprobs::TokenLogprob;
use runner::Generation;
use serde::Serialize;

/// Writes text pieces to stdout as they come, flushing each one.
pub struct TextStream {
    out: std::io::Stdout,
    wrote_any: bool,
    ends_with_newline: bool,
    closed: bool,
}

impl TextStream {
    /// A stream on stdout.
    pub fn new() -> Self {
        Self {
            out: std::io::stdout(),
            wrote_any: false,
            ends_with_newline: false,
            closed: false,
        }
    }

    /// Write one piece; a closed stdout (e.g. `| head`) stops generation.
    pub fn piece(&mut self, piece: &str) -> SinkFlow {
        if piece.is_empty() {
            return SinkFlow::Continue;
        }
        let mut lock = self.out.lock();
        match lock.write_all(piece.as_bytes()).and_then(|()| lock.flush()) {
            Ok(()) => {
                self.wrote_any = true;
                self.ends_with_newline = piece.ends_with('\n');
                SinkFlow::Continue
            }
            Err(e) => {
                tracing::debug!(error = %e, "stdout closed; stopping");
                self.closed = super::console::is_closed_pipe(&e);
                SinkFlow::Stop
            }
        }
    }

    /// End the text with a newline (if it did not end with one already); a `BrokenPipe`
    /// error when stdout was closed on the way.
    pub fn finish(&mut self) -> std::io::Result<()> {
        if self.closed {
            return Err(super::console::closed("stdout"));
        }
        if self.wrote_any && !self.ends_with_newline {
            super::console::out("\n")?;
        }
        Ok(())
    }
}

/// The `--json` object: the engine's response plus the text and a few derived figures.
#[derive(Serialize)]
pub struct JsonReport<'a> {
    /// Decoded text of the generated tokens.
    pub text: &'a str,
    /// Prompt token ids.
    pub prompt_tokens: &'a [u32],
    /// Backend name (e.g. `candle-cpu`).
    pub backend: &'a str,
    /// The sampler's seed (given, or drawn at random and printed so the run can be repeated).
    pub seed: Option<u64>,
    /// The response (tokens, done_reason, mode, counts, durations in seconds, mtp).
    #[serde(flatten)]
    pub response: &'a Response,
    /// Prompt tokens per second (`null` when the interval is too short to time).
    pub prompt_tokens_per_second: Option<f64>,
    /// Generated tokens per second after the first token (`null` when too short to time).
    pub tokens_per_second: Option<f64>,
    /// Each generated token's log-probability and alternatives (with `--logprobs N` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<&'a [TokenLogprob]>,
}

/// Print the `--json` object on stdout (`logprobs`: the tokens' log-probabilities, when asked
/// for).
pub fn print_json(
    generation: &Generation,
    prompt: &[u32],
    run: &RunInfo<'_>,
    logprobs: Option<&[TokenLogprob]>,
) -> std::io::Result<()> {
    let r = &generation.response;
    let report = JsonReport {
        text: &generation.text,
        prompt_tokens: prompt,
        backend: run.backend,
        seed: run.seed,
        response: r,
        prompt_tokens_per_second: rate(r.prompt_eval_count, r.prompt_eval_duration.as_secs_f64()),
        tokens_per_second: rate(r.eval_count, r.eval_duration.as_secs_f64()),
        logprobs,
    };
    let text = serde_json::to_string(&report)?;
    super::console::out(&(text + "\n"))
}

/// What the summary says about the run besides the response.
pub struct RunInfo<'a> {
    /// Backend name.
    pub backend: &'a str,
    /// The sampler's seed (sampled runs only).
    pub seed: Option<u64>,
    /// The sampling options of a sampled run (`None` when greedy).
    pub sampled: Option<&'a SamplerOptions>,
}

/// Intervals shorter than this give no rate: a clock read around a sub-millisecond interval
/// says more about the clock than about the model (e.g. "1 tokens in 0.000s, 14700 tokens/s").
pub const MIN_TIMED_SECS: f64 = 1e-3;

/// `count / secs`, or `None` when nothing was counted or the interval is under
/// [`MIN_TIMED_SECS`].
pub fn rate(count: usize, secs: f64) -> Option<f64> {
    (count > 0 && secs >= MIN_TIMED_SECS).then(|| count as f64 / secs)
}

fn percent(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// `N token` / `N tokens`.
fn tokens(n: usize) -> String {
    if n == 1 {
        "1 token".to_string()
    } else {
        format!("{n} tokens")
    }
}

/// `N tokens in S s (R tokens/s)`, the rate left out when it cannot be measured.
fn timed(count: usize, secs: f64) -> String {
    match rate(count, secs) {
        Some(r) => format!("{} in {secs:.3}s ({r:.1} tokens/s)", tokens(count)),
        None if count == 0 => format!("{} in {secs:.3}s", tokens(count)),
        None => format!("{} in {secs:.3}s (too short to time)", tokens(count)),
    }
}

/// The readable statistics summary (for stderr).
pub fn summary(response: &Response, run: &RunInfo<'_>) -> String {
    let mut s = String::new();
    let prompt_secs = response.prompt_eval_duration.as_secs_f64();
    let eval_secs = response.eval_duration.as_secs_f64();
    s.push_str(&format!(
        "prompt: {}\n",
        timed(response.prompt_eval_count, prompt_secs)
    ));
    let done = if response.context_full {
        format!(
            "{} (the model's context is full)",
            serde_plain(&response.done_reason)
        )
    } else {
        serde_plain(&response.done_reason)
    };
    let done = if response.constraint_complete == Some(false) {
        format!("{done} (the structured output is incomplete: its grammar is still open)")
    } else {
        done
    };
    s.push_str(&format!(
        "generated: {}; done: {done}; mode: {}; backend: {}",
        timed(response.eval_count, eval_secs),
        serde_plain(&response.mode),
        run.backend
    ));
    s.push('\n');
    if let Some(o) = run.sampled {
        s.push_str(&format!(
            "sampling: temperature {}, top-k {}, top-p {}",
            o.temperature, o.top_k, o.top_p
        ));
        if let Some(seed) = run.seed {
            s.push_str(&format!(", seed {seed} (--seed {seed} repeats this run)"));
        }
        s.push('\n');
    }
    if let Some(reason) = &response.speculation_off {
        s.push_str(&format!("mtp: off: {reason}\n"));
    }
    if let Some(mtp) = &response.mtp {
        s.push_str(&mtp_summary(mtp));
    }
    s
}

fn mtp_summary(m: &MtpStats) -> String {
    let mut s = format!(
        "mtp: {} rounds ({} batched, {} serial, {} not drafted), proposer {}, schedule {}, max draft {}\n\
         mtp: drafted {}, accepted {} ({}), mean accepted {:.2}/round, mean draft {:.2}/round\n",
        m.iterations,
        m.batched_rounds,
        m.serial_rounds,
        m.undrafted_rounds,
        m.proposer,
        m.schedule,
        m.max_draft,
        m.drafted,
        m.accepted,
        percent(m.acceptance()),
        m.mean_accepted(),
        m.mean_draft(),
    );
    if m.forced > 0 || m.cut > 0 {
        s.push_str(&format!(
            "mtp: grammar: {} of the drafts forced by it (no proposer call), {} accepted; {} \
             drafts cut where it forbade them\n",
            m.forced, m.forced_accepted, m.cut
        ));
    }
    if !m.per_position.is_empty() {
        let positions: Vec<String> = m
            .per_position
            .iter()
            .zip(m.per_position_acceptance())
            .enumerate()
            .map(|(i, (c, a))| format!("{}:{} ({}/{})", i + 1, percent(a), c.accepted, c.drafted))
            .collect();
        s.push_str(&format!(
            "mtp: per-position acceptance {}\n",
            positions.join("  ")
        ));
    }
    if m.per_proposer.len() > 1 {
        let shares: Vec<String> = m
            .per_proposer
            .iter()
            .map(|p| {
                format!(
                    "{} {} rounds, accepted {}/{} ({})",
                    p.proposer,
                    p.rounds,
                    p.accepted,
                    p.drafted,
                    percent(if p.drafted == 0 {
                        0.0
                    } else {
                        p.accepted as f64 / p.drafted as f64
                    })
                )
            })
            .collect();
        s.push_str(&format!("mtp: proposers: {}\n", shares.join("; ")));
    }
    if m.schedule != ScheduleKind::Constant {
        let counts = chosen_depths(&m.round_log);
        let depths: Vec<String> = counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(d, n)| format!("{d}:{n}"))
            .collect();
        if !depths.is_empty() {
            s.push_str(&format!(
                "mtp: depths chosen (depth:rounds) {}\n",
                depths.join(" ")
            ));
        }
        if let Some(off) = DraftingOff::from_rounds(&m.round_log) {
            s.push_str(&format!("mtp: {off}\n"));
        }
    }
    if m.compared > 0 {
        s.push_str(&format!(
            "mtp: compare-serial checked {} positions, {} disagreements\n",
            m.compared, m.batch_serial_mismatches
        ));
    }
    s.push_str(&format!(
        "mtp: time target {:.3}s, draft {:.3}s, validate {:.3}s\n",
        m.target_duration.as_secs_f64(),
        m.draft_duration.as_secs_f64(),
        m.validate_duration.as_secs_f64()
    ));
    s
}

/// A unit enum's serde name (e.g. `greedy-mtp`).
fn serde_plain<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_string(),
    }
}
