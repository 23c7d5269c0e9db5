//! `mtp serve`: the ollama API (`/api/*`, NDJSON streams) and the OpenAI API (`/v1/*`,
//! server-sent events) on one port, over one loaded model pair.
//!
//! * A worker thread ([`WorkerEngine`]) owns the backend and the models and serves requests from
//!   a bounded queue (full → 503 with `Retry-After`), one at a time or, with `--parallel` above
//!   1, as a continuous batch; the handlers
//!   reach it through the async [`EngineHandle`]. Settings (`MTP_*` included) are resolved once
//!   at start.
//! * Text streams back piece by piece. Stop strings are matched on the text, so a stop string
//!   carried by several tokens accepted in one speculative round still ends the text right
//!   before it, and a possible partial match is held back until the next piece settles it.
//! * A client that disconnects cancels its request at the engine's next round; a request
//!   past `--request-timeout` ends with `timeout`; on SIGTERM/Ctrl-C the server stops accepting,
//!   lets in-flight requests finish (cancelling them after the grace period, each still ending
//!   with its final chunk) and returns.
//! * Log-probabilities (OpenAI `logprobs`/`top_logprobs`, ollama `logprobs`/`top_logprobs`)
//!   come from the engine with speculation on: read from the target's own rows (the plain
//!   step's, or the verification forward's), under the request's sampling transform
//!   ([`crate::logprobs`]), no extra forward.
//! * Errors come in each API's own shape; bodies are size-limited; options are validated as
//!   `mtp generate` validates them; `GET /metrics` serves Prometheus text.

mod accept;
mod body;
mod engine;
mod error;
mod metrics;
pub mod model_facts;
mod ollama;
mod ollama_types;
mod openai;
mod openai_types;
mod reply;
mod request;
mod stop;
mod stream;
mod structured;
mod tool_calls;
mod worker;

use std::future::Future;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

pub use engine::{
    EngineHandle, EventReceiver, FinishReason, Finished, GenerationEvent, GenerationJob, ModelInfo,
    SubmitError, TokenLogprob,
};
pub use error::{Api, ApiError};
pub use request::{AppState, ServerConfig};
pub use stop::{Released, StopMatcher};
pub use worker::{StartError, WorkerEngine, WorkerOptions, WorkerSeat};

/// The HTTP routes of both APIs over `state`. Installs the process-wide metrics recorder first,
/// so that `/metrics` counts every request the router serves, not only those after the first
/// scrape.
pub fn router(state: AppState) -> Router {
    metrics::handle();
    let limit = state.config.max_body_bytes;
    let body_timeout = state.config.read_timeout;
    Router::new()
        .route("/", get(root).head(root))
        .route("/api/generate", post(ollama::generate))
        .route("/api/chat", post(ollama::chat))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/ps", get(ollama::ps))
        .route("/api/version", get(ollama::version))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/models", get(openai::models))
        .route("/metrics", get(prometheus))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(limit))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            body_timeout,
        ))
        .with_state(state)
}

/// Serve `router(state)` on `listener` until `shutdown` resolves; then stop accepting, give
/// in-flight requests `config.shutdown_grace` to finish, cancel what is left, and return.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    metrics::handle();
    let grace = state.config.shutdown_grace;
    let limits = accept::ConnectionLimits {
        max_connections: state.config.max_connections,
        header_timeout: state.config.read_timeout,
    };
    let cancel_all = state.shutdown.clone();
    let signal = async move {
        shutdown.await;
        tracing::info!(
            ?grace,
            "shutting down: no new connections; in-flight requests may finish"
        );
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            tracing::info!("grace period over: cancelling in-flight requests");
            cancel_all.cancel();
        });
    };
    accept::serve_connections(listener, router(state), limits, signal).await
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// The API-key check, request metrics and the body-limit answer in the API's error shape.
async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    let api = Api::of_path(&path);
    let started = Instant::now();
    if let Some(key) = &state.config.api_key {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !key_matches(given, key) && path != "/" {
            let response = ApiError::new(
                api,
                StatusCode::UNAUTHORIZED,
                "missing or wrong API key: send `Authorization: Bearer <key>`",
            )
            .with_code("invalid_api_key")
            .into_response();
            metrics::request(&endpoint(&path), response.status().as_u16());
            return response;
        }
    }
    let mut response = next.run(request).await;
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
        response = ApiError::new(
            api,
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is larger than {} bytes",
                state.config.max_body_bytes
            ),
        )
        .into_response();
    }
    metrics::request(&endpoint(&path), response.status().as_u16());
    tracing::debug!(%path, status = response.status().as_u16(), elapsed = ?started.elapsed(), "request");
    response
}

/// A known route's path, else `other` (bounded label values).
fn endpoint(path: &str) -> String {
    const KNOWN: [&str; 11] = [
        "/",
        "/api/generate",
        "/api/chat",
        "/api/tags",
        "/api/show",
        "/api/ps",
        "/api/version",
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/models",
        "/metrics",
    ];
    KNOWN
        .iter()
        .find(|k| **k == path)
        .map_or_else(|| "other".to_string(), |k| k.to_string())
}

async fn root() -> &'static str {
    "Ollama is running (mtp-rs: the ollama and OpenAI APIs)"
}

async fn prometheus() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics::render(),
    )
        .into_response()
}

async fn not_found(request: Request) -> ApiError {
    let path = request.uri().path();
    ApiError::new(
        Api::of_path(path),
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {} {path}", request.method()),
    )
}

async fn method_not_allowed(request: Request) -> ApiError {
    let path = request.uri().path();
    ApiError::new(
        Api::of_path(path),
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} is not allowed on {path}", request.method()),
    )
}

/// Whether the key a request gave is the server's, compared in constant time (the time taken
/// does not depend on how many leading bytes match; only the lengths may show).
fn key_matches(given: Option<&str>, key: &str) -> bool {
    use subtle::ConstantTimeEq;
    given.is_some_and(|given| bool::from(given.as_bytes().ct_eq(key.as_bytes())))
}
