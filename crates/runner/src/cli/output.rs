//! What the command prints: streamed text or one JSON object on stdout, a statistics summary on
//! stderr.

use std::io::Write;

use mtp_core::engine::{MtpStats, Response, SinkFlow};
use runner::Generation;
use serde::Serialize;

/// Writes text pieces to stdout as they come, flushing each one.
pub struct TextStream {
    out: std::io::Stdout,
    wrote_any: bool,
    ends_with_newline: bool,
}

impl TextStream {
    /// A stream on stdout.
    pub fn new() -> Self {
        Self {
            out: std::io::stdout(),
            wrote_any: false,
            ends_with_newline: false,
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
                SinkFlow::Stop
            }
        }
    }

    /// End the text with a newline (if it did not end with one already).
    pub fn finish(&mut self) {
        if self.wrote_any && !self.ends_with_newline {
            let mut lock = self.out.lock();
            // Nothing to do about a closed stdout at this point.
            let _ = lock.write_all(b"\n").and_then(|()| lock.flush());
        }
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
    /// The response (tokens, done_reason, mode, counts, durations in seconds, mtp).
    #[serde(flatten)]
    pub response: &'a Response,
    /// Prompt tokens per second.
    pub prompt_tokens_per_second: f64,
    /// Generated tokens per second (after the first token).
    pub tokens_per_second: f64,
}

/// Print the `--json` object on stdout.
pub fn print_json(
    generation: &Generation,
    prompt: &[u32],
    backend: &str,
) -> Result<(), serde_json::Error> {
    let r = &generation.response;
    let report = JsonReport {
        text: &generation.text,
        prompt_tokens: prompt,
        backend,
        response: r,
        prompt_tokens_per_second: rate(r.prompt_eval_count, r.prompt_eval_duration.as_secs_f64()),
        tokens_per_second: rate(r.eval_count, r.eval_duration.as_secs_f64()),
    };
    let text = serde_json::to_string(&report)?;
    println!("{text}");
    Ok(())
}

fn rate(count: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}

fn percent(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// The readable statistics summary (for stderr).
pub fn summary(response: &Response, backend: &str) -> String {
    let mut s = String::new();
    let prompt_secs = response.prompt_eval_duration.as_secs_f64();
    let eval_secs = response.eval_duration.as_secs_f64();
    s.push_str(&format!(
        "prompt: {} tokens in {:.3}s ({:.1} tokens/s)\n",
        response.prompt_eval_count,
        prompt_secs,
        rate(response.prompt_eval_count, prompt_secs)
    ));
    s.push_str(&format!(
        "generated: {} tokens in {:.3}s ({:.1} tokens/s); done: {}; mode: {}; backend: {}\n",
        response.eval_count,
        eval_secs,
        rate(response.eval_count, eval_secs),
        serde_plain(&response.done_reason),
        serde_plain(&response.mode),
        backend
    ));
    if let Some(mtp) = &response.mtp {
        s.push_str(&mtp_summary(mtp));
    }
    s
}

fn mtp_summary(m: &MtpStats) -> String {
    let mut s = format!(
        "mtp: {} rounds ({} batched, {} serial), proposer {}, schedule {}, max draft {}\n\
         mtp: drafted {}, accepted {} ({}), mean accepted {:.2}/round, mean draft {:.2}/round\n",
        m.iterations,
        m.batched_rounds,
        m.serial_rounds,
        m.proposer,
        m.schedule,
        m.max_draft,
        m.drafted,
        m.accepted,
        percent(m.acceptance()),
        m.mean_accepted(),
        m.mean_draft(),
    );
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
