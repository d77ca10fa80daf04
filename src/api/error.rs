//! The one place that turns an error into an HTTP status and a body in the caller's dialect.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::api::Inbound;
use crate::dialect::DecodeError;
use crate::model::{ErrorInfo, ErrorKind};
use crate::provider::ProviderError;

#[derive(Debug)]
pub struct ApiError {
    pub dialect: Inbound,
    pub status: StatusCode,
    pub info: ErrorInfo,
    pub retry_after: Option<Duration>,
    /// A more specific `code` (and the `param` it is about) for OpenAI-shaped bodies, e.g.
    /// `previous_response_not_found`.
    pub code: Option<(&'static str, &'static str)>,
    /// Replaces the body's error `type` (and an OpenAI body's `code`), e.g. `budget_exceeded`,
    /// and tells the client's SDK not to retry (`x-should-retry: false`).
    pub final_type: Option<&'static str>,
}

impl ApiError {
    pub fn new(dialect: Inbound, kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError {
            dialect,
            status: status_of(kind),
            info: ErrorInfo { kind, message: message.into() },
            retry_after: None,
            code: None,
            final_type: None,
        }
    }

    pub fn decode(dialect: Inbound, err: &DecodeError) -> ApiError {
        ApiError::new(dialect, ErrorKind::InvalidRequest, err.to_string())
    }

    pub fn provider(dialect: Inbound, err: &ProviderError) -> ApiError {
        let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::BAD_GATEWAY);
        // A spent budget is not a rate limit an SDK should wait out: its own type, and no retries.
        let final_type = matches!(err, ProviderError::BudgetExceeded { .. }).then_some("budget_exceeded");
        ApiError { dialect, status, info: err.info(), retry_after: err.retry_after(), code: None, final_type }
    }

    /// Sets the `code` and `param` of an OpenAI-shaped error body.
    pub fn with_code(mut self, code: &'static str, param: &'static str) -> ApiError {
        self.code = Some((code, param));
        self
    }

    pub fn kind(&self) -> &'static str {
        self.info.kind.as_str()
    }
}

/// The status for errors Keyhaven itself raises.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
        ErrorKind::Authentication => StatusCode::UNAUTHORIZED,
        ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::RequestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::Upstream => StatusCode::BAD_GATEWAY,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = self.dialect.encode_error(&self.info);
        if let Some((code, param)) = self.code
            && let Some(serde_json::Value::Object(err)) = body.get_mut("error")
            && err.contains_key("code")
        {
            err.insert("code".into(), serde_json::Value::from(code));
            err.insert("param".into(), serde_json::Value::from(param));
        }
        if let Some(t) = self.final_type
            && let Some(serde_json::Value::Object(err)) = body.get_mut("error")
        {
            err.insert("type".into(), serde_json::Value::from(t));
            if err.contains_key("code") {
                err.insert("code".into(), serde_json::Value::from(t));
            }
        }
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.final_type.is_some() {
            resp.headers_mut().insert("x-should-retry", HeaderValue::from_static("false"));
        }
        if let Some(after) = self.retry_after {
            // Passed through so the client's own SDK backs off.
            let secs = after.as_secs_f64().ceil().max(0.0) as u64;
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}
