//! Prometheus metrics (`GET /metrics`) through the `metrics` facade and
//! `metrics-exporter-prometheus`. Speculative counters are named after vLLM's
//! (`vllm:spec_decode_*`, here `mtp_spec_decode_*`).

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use mtp_core::engine::Response;

/// Requests by endpoint and status: `mtp_requests_total{endpoint, status}`.
pub const REQUESTS: &str = "mtp_requests_total";
/// Prompt tokens evaluated.
pub const PROMPT_TOKENS: &str = "mtp_prompt_tokens_total";
/// Tokens generated.
pub const GENERATION_TOKENS: &str = "mtp_generation_tokens_total";
/// Seconds from a request's arrival in the queue to its first token.
pub const TIME_TO_FIRST_TOKEN: &str = "mtp_time_to_first_token_seconds";
/// Seconds per generated token after the first.
pub const TIME_PER_OUTPUT_TOKEN: &str = "mtp_time_per_output_token_seconds";
/// Requests waiting for the engine.
pub const QUEUE_DEPTH: &str = "mtp_queue_depth";
/// Verification rounds that had drafts.
pub const SPEC_DRAFTS: &str = "mtp_spec_decode_num_drafts_total";
/// Draft tokens proposed.
pub const SPEC_DRAFT_TOKENS: &str = "mtp_spec_decode_num_draft_tokens_total";
/// Draft tokens accepted.
pub const SPEC_ACCEPTED_TOKENS: &str = "mtp_spec_decode_num_accepted_tokens_total";
/// Of the draft tokens, those a structured output's grammar forced (drafted without a
/// proposer call).
pub const SPEC_FORCED_TOKENS: &str = "mtp_spec_decode_num_forced_tokens_total";
/// Generations with a structured output, by how they ended: `{complete}` (`true`, or `false`
/// when the token budget cut the text before its grammar was complete).
pub const STRUCTURED_OUTPUTS: &str = "mtp_structured_outputs_total";
/// Draft tokens accepted per draft position: `{position}`.
pub const SPEC_ACCEPTED_PER_POS: &str = "mtp_spec_decode_num_accepted_tokens_per_pos_total";

/// The process-wide Prometheus recorder (installed on first use; every server in the process
/// shares it).
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let buckets = [
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        ];
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder is already installed; /metrics may be empty");
        }
        handle
    })
}

/// Count one finished HTTP request.
pub fn request(endpoint: &str, status: u16) {
    counter!(REQUESTS, "endpoint" => endpoint.to_string(), "status" => status.to_string())
        .increment(1);
}

/// Set the queue depth.
pub fn queue_depth(depth: usize) {
    gauge!(QUEUE_DEPTH).set(depth as f64);
}

/// Record the time to first token.
pub fn time_to_first_token(elapsed: Duration) {
    histogram!(TIME_TO_FIRST_TOKEN).record(elapsed.as_secs_f64());
}

/// Record one generation's counts, per-token latency and speculative counters.
pub fn generation(response: &Response, _total: Duration) {
    counter!(PROMPT_TOKENS).increment(response.prompt_eval_count as u64);
    counter!(GENERATION_TOKENS).increment(response.eval_count as u64);
    if response.eval_count > 1 {
        let per_token = response.eval_duration.as_secs_f64() / (response.eval_count - 1) as f64;
        histogram!(TIME_PER_OUTPUT_TOKEN).record(per_token);
    }
    if let Some(complete) = response.constraint_complete {
        counter!(STRUCTURED_OUTPUTS, "complete" => complete.to_string()).increment(1);
    }
    if let Some(mtp) = &response.mtp {
        counter!(SPEC_DRAFTS).increment((mtp.all_accepted + mtp.mismatches) as u64);
        counter!(SPEC_DRAFT_TOKENS).increment(mtp.drafted as u64);
        counter!(SPEC_ACCEPTED_TOKENS).increment(mtp.accepted as u64);
        counter!(SPEC_FORCED_TOKENS).increment(mtp.forced as u64);
        for (position, counts) in mtp.per_position.iter().enumerate() {
            counter!(SPEC_ACCEPTED_PER_POS, "position" => position.to_string())
                .increment(counts.accepted as u64);
        }
    }
}

/// The metrics in Prometheus text format.
pub fn render() -> String {
    handle().render()
}
