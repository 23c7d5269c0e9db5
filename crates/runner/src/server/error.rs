//! Errors in each API's own shape: ollama's `{"error": "..."}` and OpenAI's
//! `{"error": {"message", "type", "param", "code"}}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::engine::SubmitError;

/// Which API a request belongs to (it decides the error shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/api/*`.
    Ollama,
    /// `/v1/*`.
    OpenAi,
}

impl Api {
    /// The API of a request path.
    pub fn of_path(path: &str) -> Self {
        if path.starts_with("/v1/") || path == "/v1" {
            Api::OpenAi
        } else {
            Api::Ollama
        }
    }
}

/// An HTTP error with its message.
#[derive(Debug, Clone)]
pub struct ApiError {
    api: Api,
    status: StatusCode,
    message: String,
    code: Option<&'static str>,
    /// The request field at fault (OpenAI's `param`).
    param: Option<String>,
    retry_after: Option<u32>,
}

impl ApiError {
    /// An error of `api` with `status`.
    pub fn new(api: Api, status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            api,
            status,
            message: message.into(),
            code: None,
            param: None,
            retry_after: None,
        }
    }

    /// The request field at fault (OpenAI's `param`; ollama's errors name it in the message).
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// 400: the request is malformed or asks for something unsupported.
    pub fn bad_request(api: Api, message: impl Into<String>) -> Self {
        Self::new(api, StatusCode::BAD_REQUEST, message)
    }

    /// 404 for a model name other than the loaded one.
    pub fn model_not_found(api: Api, asked: &str, loaded: &str) -> Self {
        let message = match api {
            Api::Ollama => format!("model '{asked}' not found (this server runs '{loaded}')"),
            Api::OpenAi => format!(
                "The model `{asked}` does not exist or you do not have access to it (this \
                 server runs `{loaded}`)."
            ),
        };
        Self::new(api, StatusCode::NOT_FOUND, message).with_code("model_not_found")
    }

    /// An OpenAI error `code`.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// From a queue submission failure: 503 with `Retry-After` when busy.
    pub fn from_submit(api: Api, e: &SubmitError) -> Self {
        let mut err = Self::new(api, StatusCode::SERVICE_UNAVAILABLE, e.to_string());
        if matches!(e, SubmitError::QueueFull { .. }) {
            err.retry_after = Some(1);
        }
        err
    }

    fn openai_type(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "invalid_request_error",
            StatusCode::NOT_FOUND => "invalid_request_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match self.api {
            Api::Ollama => json!({ "error": self.message }),
            Api::OpenAi => json!({
                "error": {
                    "message": self.message,
                    "type": self.openai_type(),
                    "param": self.param,
                    "code": self.code,
                }
            }),
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
