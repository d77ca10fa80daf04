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
}

impl ApiError {
    pub fn new(dialect: Inbound, kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError {
            dialect,
            status: status_of(kind),
            info: ErrorInfo { kind, message: message.into() },
            retry_after: None,
        }
    }

    pub fn decode(dialect: Inbound, err: &DecodeError) -> ApiError {
        ApiError::new(dialect, ErrorKind::InvalidRequest, err.to_string())
    }

    pub fn provider(dialect: Inbound, err: &ProviderError) -> ApiError {
        let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::BAD_GATEWAY);
        ApiError { dialect, status, info: err.info(), retry_after: err.retry_after() }
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
        let body = self.dialect.encode_error(&self.info);
        let mut resp = (self.status, axum::Json(body)).into_response();
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
