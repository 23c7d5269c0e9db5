//! `GET /metrics` carries the right values, not only the right names: after two greedy
//! `/api/generate` requests on the default pair (MTP on), every counter equals the sum of what
//! the two final objects report (prompt and generated tokens, drafts, accepted drafts, accepted
//! per position), requests are counted by endpoint and status, and each latency histogram has
//! one sample per request. Its own test binary: the Prometheus recorder is process-wide, so no
//! other test may move the counters while this one reads them.

mod server_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::StatusCode;
use runner::server::{self, AppState, ServerConfig};
use serde_json::{json, Value};
use server_support::{call, worker, NAME};

/// `call` that expects a 200.
async fn ok(router: &axum::Router, method: &str, path: &str, body: Option<Value>) -> String {
    let (status, text) = call(router, method, path, body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    text
}

/// Every sample of the Prometheus text: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn value(samples: &BTreeMap<String, f64>, key: &str) -> f64 {
    *samples
        .get(key)
        .unwrap_or_else(|| panic!("{key} missing in {samples:#?}"))
}

#[test]
fn metrics_equal_the_sums_of_what_the_requests_report() {
    let worker = worker(4);
    let router = server::router(AppState::new(Arc::new(worker), ServerConfig::default()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut finals = Vec::new();
        for (prompt, n) in [("In the beginning God created", 40), ("And God said,", 24)] {
            let body = json!({"model": NAME, "prompt": prompt, "raw": true, "stream": false,
                              "options": {"temperature": 0, "num_predict": n}});
            let text = ok(&router, "POST", "/api/generate", Some(body)).await;
            finals.push(serde_json::from_str::<Value>(&text).unwrap());
        }
        // A structured output: its forced drafts are counted apart.
        let schema = json!({"type": "object", "properties": {"who": {"type": "string", "maxLength": 10}},
                            "required": ["who"]});
        let body = json!({"model": NAME, "prompt": "And God said,", "raw": true, "stream": false,
                          "format": schema, "options": {"temperature": 0, "num_predict": 60}});
        let text = ok(&router, "POST", "/api/generate", Some(body)).await;
        finals.push(serde_json::from_str::<Value>(&text).unwrap());
        let m = samples(&ok(&router, "GET", "/metrics", None).await);
        let sum = |f: &dyn Fn(&Value) -> f64| finals.iter().map(f).sum::<f64>();
        let field = |v: &Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));
        assert_eq!(
            value(&m, "mtp_prompt_tokens_total"),
            sum(&|v| field(v, "prompt_eval_count"))
        );
        assert_eq!(
            value(&m, "mtp_generation_tokens_total"),
            sum(&|v| field(v, "eval_count"))
        );
        let drafted = sum(&|v| field(&v["mtp"], "drafted"));
        let accepted = sum(&|v| field(&v["mtp"], "accepted"));
        assert!(accepted > 0.0, "the default pair accepts drafts");
        assert_eq!(value(&m, "mtp_spec_decode_num_draft_tokens_total"), drafted);
        assert_eq!(
            value(&m, "mtp_spec_decode_num_accepted_tokens_total"),
            accepted
        );
        assert_eq!(
            value(&m, "mtp_spec_decode_num_drafts_total"),
            sum(&|v| field(&v["mtp"], "all_accepted") + field(&v["mtp"], "mismatches"))
        );
        let per_position: f64 = m
            .iter()
            .filter(|(k, _)| k.starts_with("mtp_spec_decode_num_accepted_tokens_per_pos_total{"))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(per_position, accepted, "per-position counts add up");
        let forced = sum(&|v| field(&v["mtp"], "forced"));
        assert!(forced > 0.0, "the schema's keys and quotes are forced");
        assert_eq!(value(&m, "mtp_spec_decode_num_forced_tokens_total"), forced);
        assert_eq!(value(&m, "mtp_structured_outputs_total{complete=\"true\"}"), 1.0);
        assert_eq!(
            value(
                &m,
                "mtp_requests_total{endpoint=\"/api/generate\",status=\"200\"}"
            ),
            3.0
        );
        assert_eq!(value(&m, "mtp_time_to_first_token_seconds_count"), 3.0);
        assert_eq!(value(&m, "mtp_time_per_output_token_seconds_count"), 3.0);
        assert_eq!(value(&m, "mtp_queue_depth"), 0.0);
    });
}
