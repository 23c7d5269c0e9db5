//! Request bodies parsed into each API's types, with malformed JSON and wrong types answered in
//! that API's error shape (axum's own `Json` rejection would answer in plain text).

use serde::de::DeserializeOwned;

use super::error::{Api, ApiError};

/// `bytes` as JSON of type `T`; an empty body is `{}`.
pub fn parse<T: DeserializeOwned>(api: Api, bytes: &[u8]) -> Result<T, ApiError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(api, format!("invalid request body: {e}")))
}
