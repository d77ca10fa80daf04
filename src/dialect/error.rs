//! The one reader of upstream error bodies and the one mapping of a vendor's status, error
//! `type` and `code` to [`ErrorKind`], used by all three dialects (HTTP error bodies and in-stream
//! error events alike).
//!
//! Shapes read (whichever the body has; an upstream's kind does not decide, since OpenAI-compatible
//! vendors and proxies mix them):
//! - OpenAI: `{"error": {"message", "type", "code", "param"}}`, and `{"error": "text"}`;
//! - Anthropic: `{"type": "error", "error": {"type", "message"}}`;
//! - Responses stream: the `error` event `{"type": "error", "code", "message", "param"}` and
//!   `response.failed` (`{"response": {"error": {"code", "message"}}}`);
//! - vLLM-style `{"object": "error", "message", "type", "code": 422}` and plain `{"message"}`.
//!
//! Kind: a specific `code` wins (OpenAI codes say the most); then a status that names a kind
//! ([`ErrorKind::from_status`]); then the `type`; then the status's catch-all. A body that is not
//! JSON (an HTML gateway page, a truncated body) keeps at most [`MAX_BODY_CHARS`] characters of
//! its text as the message; a JSON message at most `4 × MAX_BODY_CHARS`. Never panics.

use serde_json::Value;

use crate::model::{ErrorInfo, ErrorKind};

/// The most characters of a non-JSON error body kept as the message.
pub const MAX_BODY_CHARS: usize = 500;
/// The most characters of a vendor's JSON error message kept.
const MAX_MESSAGE_CHARS: usize = 4 * MAX_BODY_CHARS;

/// An upstream's non-2xx answer (`status`, and the body as read, possibly cut) as an error.
pub fn decode_error(status: u16, body: &[u8]) -> ErrorInfo {
    if let Ok(value) = serde_json::from_slice::<Value>(body)
        && let Some(info) = from_value(&value, Some(status))
    {
        return info;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let message =
        if text.is_empty() { format!("upstream returned HTTP {status}") } else { truncate(text, MAX_BODY_CHARS) };
    ErrorInfo { kind: ErrorKind::from_status(status), message }
}

/// An in-stream error event's JSON `data` (any dialect's shape) as an error; a payload in no
/// known shape keeps its text.
pub fn stream_error(data: &str) -> ErrorInfo {
    serde_json::from_str::<Value>(data).ok().and_then(|v| from_value(&v, None)).unwrap_or_else(|| ErrorInfo {
        kind: ErrorKind::Upstream,
        message: format!("upstream stream error: {}", truncate(data.trim(), MAX_BODY_CHARS)),
    })
}

/// Reads an error out of a JSON value in any of the shapes above; `None` when it has none of
/// them. `status` is the HTTP status when there is one (in-stream errors have none).
pub fn from_value(value: &Value, status: Option<u16>) -> Option<ErrorInfo> {
    let obj = value.as_object()?;
    let failed = obj.get("response").and_then(|r| r.get("error")).filter(|e| e.is_object());
    let (err, envelope) = match (obj.get("error"), failed) {
        (Some(Value::Object(e)), _) => (e, true),
        (Some(Value::String(msg)), _) if !msg.trim().is_empty() => {
            let kind = kind(status, None, None);
            return Some(ErrorInfo { kind, message: truncate(msg.trim(), MAX_MESSAGE_CHARS) });
        }
        (_, Some(Value::Object(e))) => (e, true),
        _ => (obj, obj.get("type").and_then(Value::as_str) == Some("error")),
    };
    let text = |name: &str| err.get(name).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let code = err.get("code").and_then(|c| match c {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    let ty = text("type").filter(|t| *t != "error");
    let kind = kind(status, ty, code.as_deref());
    match text("message") {
        Some(message) => Some(ErrorInfo { kind, message: truncate(message, MAX_MESSAGE_CHARS) }),
        // An error envelope without a message still says what it is.
        None if envelope => {
            let what = ty.or(code.as_deref()).map(|w| format!(" ({})", truncate(w, 100))).unwrap_or_default();
            let message = match status {
                Some(status) => format!("upstream returned HTTP {status}{what}"),
                None => format!("upstream stream error{what}"),
            };
            Some(ErrorInfo { kind, message })
        }
        None => None,
    }
}

/// The one mapping of an upstream error to its kind: a specific `code` wins, then a status that
/// names a kind, then the `type`, then the status's catch-all ([`ErrorKind::Upstream`] without
/// one).
pub fn kind(status: Option<u16>, ty: Option<&str>, code: Option<&str>) -> ErrorKind {
    let base = status.map_or(ErrorKind::Upstream, ErrorKind::from_status);
    let specific = |k: Option<ErrorKind>| k.filter(|k| *k != ErrorKind::Upstream);
    specific(code.and_then(named))
        .or((base != ErrorKind::Upstream).then_some(base))
        .or(specific(ty.and_then(named)))
        .unwrap_or(base)
}

/// The kind a vendor's error `type` or `code` names (Anthropic types, OpenAI types and codes).
fn named(name: &str) -> Option<ErrorKind> {
    Some(match name {
        "invalid_request_error"
        | "context_length_exceeded"
        | "string_above_max_length"
        | "invalid_prompt"
        | "previous_response_not_found" => ErrorKind::InvalidRequest,
        "authentication_error" | "invalid_api_key" | "invalid_authentication" => ErrorKind::Authentication,
        "permission_error" | "permission_denied" => ErrorKind::PermissionDenied,
        "not_found_error" | "model_not_found" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::RequestTooLarge,
        "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => ErrorKind::RateLimited,
        "overloaded_error" | "server_is_overloaded" | "server_overloaded" | "engine_overloaded" | "overloaded" => {
            ErrorKind::Overloaded
        }
        "timeout_error" => ErrorKind::Timeout,
        "api_error" | "server_error" => ErrorKind::Upstream,
        _ => return None,
    })
}

/// At most `max` characters of `text`, with an ellipsis when cut.
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;
