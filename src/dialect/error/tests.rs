//! The one error reader against hand-written vendor error bodies (shapes from the vendors' API
//! references), malformed, truncated and oversized ones included.

use crate::dialect::error::{MAX_BODY_CHARS, decode_error, from_value, kind, stream_error};
use crate::model::{ErrorInfo, ErrorKind};

fn info(kind: ErrorKind, message: &str) -> ErrorInfo {
    ErrorInfo { kind, message: message.to_owned() }
}

#[test]
fn openai_error_bodies() {
    let cases: [(u16, &str, ErrorInfo); 6] = [
        (
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-abc***xyz.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
            info(ErrorKind::Authentication, "Incorrect API key provided: sk-abc***xyz."),
        ),
        (
            429,
            r#"{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
            info(ErrorKind::RateLimited, "You exceeded your current quota."),
        ),
        // The code says more than the status.
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            info(ErrorKind::InvalidRequest, "This model's maximum context length is 128000 tokens."),
        ),
        (
            500,
            r#"{"error":{"message":"The server is overloaded","type":"server_error","code":"server_is_overloaded"}}"#,
            info(ErrorKind::Overloaded, "The server is overloaded"),
        ),
        // Ollama's string error.
        (404, r#"{"error":"model 'llama9' not found"}"#, info(ErrorKind::NotFound, "model 'llama9' not found")),
        // vLLM: top-level message, numeric code.
        (
            422,
            r#"{"object":"error","message":"Input validation error","type":"BadRequestError","code":422}"#,
            info(ErrorKind::InvalidRequest, "Input validation error"),
        ),
    ];
    for (status, body, want) in cases {
        assert_eq!(decode_error(status, body.as_bytes()), want, "{status} {body}");
    }
}

#[test]
fn anthropic_error_bodies() {
    let cases: [(u16, &str, ErrorInfo); 5] = [
        (
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            info(ErrorKind::Overloaded, "Overloaded"),
        ),
        (
            413,
            r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#,
            info(ErrorKind::RequestTooLarge, "Request exceeds the maximum allowed number of bytes."),
        ),
        // A status that names nothing specific: the type decides.
        (
            500,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}"#,
            info(ErrorKind::RateLimited, "Number of requests has exceeded your rate limit"),
        ),
        (
            402,
            r#"{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low"}}"#,
            info(ErrorKind::Upstream, "Your credit balance is too low"),
        ),
        // No message: the envelope still says what it is.
        (
            401,
            r#"{"type":"error","error":{"type":"authentication_error"}}"#,
            info(ErrorKind::Authentication, "upstream returned HTTP 401 (authentication_error)"),
        ),
    ];
    for (status, body, want) in cases {
        assert_eq!(decode_error(status, body.as_bytes()), want, "{status} {body}");
    }
}

#[test]
fn every_anthropic_type_and_openai_code_maps_to_its_kind() {
    let cases = [
        ("invalid_request_error", ErrorKind::InvalidRequest),
        ("authentication_error", ErrorKind::Authentication),
        ("permission_error", ErrorKind::PermissionDenied),
        ("not_found_error", ErrorKind::NotFound),
        ("request_too_large", ErrorKind::RequestTooLarge),
        ("rate_limit_error", ErrorKind::RateLimited),
        ("overloaded_error", ErrorKind::Overloaded),
        ("timeout_error", ErrorKind::Timeout),
        ("api_error", ErrorKind::Upstream),
    ];
    for (ty, want) in cases {
        assert_eq!(kind(Some(500), Some(ty), None), want, "type {ty}");
        assert_eq!(kind(None, Some(ty), None), want, "in-stream type {ty}");
    }
    let codes = [
        ("rate_limit_exceeded", ErrorKind::RateLimited),
        ("invalid_api_key", ErrorKind::Authentication),
        ("model_not_found", ErrorKind::NotFound),
        ("previous_response_not_found", ErrorKind::InvalidRequest),
        ("server_is_overloaded", ErrorKind::Overloaded),
    ];
    for (code, want) in codes {
        // A specific code wins over the status and the type.
        assert_eq!(kind(Some(400), Some("server_error"), Some(code)), want, "code {code}");
    }
    // A generic code or type never hides a specific status.
    assert_eq!(kind(Some(503), Some("api_error"), Some("server_error")), ErrorKind::Overloaded);
    assert_eq!(kind(Some(429), Some("requests"), None), ErrorKind::RateLimited);
    assert_eq!(kind(Some(418), Some("teapot"), Some("x")), ErrorKind::Upstream);
    assert_eq!(kind(None, None, None), ErrorKind::Upstream);
}

#[test]
fn responses_stream_error_events() {
    // `error` event.
    let ev = r#"{"type":"error","code":"rate_limit_exceeded","message":"Rate limit reached for gpt-5","param":null,"sequence_number":3}"#;
    assert_eq!(stream_error(ev), info(ErrorKind::RateLimited, "Rate limit reached for gpt-5"));
    // `response.failed`.
    let ev = r#"{"type":"response.failed","sequence_number":9,"response":{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"The model failed to generate a response."},"output":[]}}"#;
    assert_eq!(stream_error(ev), info(ErrorKind::Upstream, "The model failed to generate a response."));
    // Anthropic's in-stream error and an OpenAI Chat chunk carrying an error.
    let ev = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert_eq!(stream_error(ev), info(ErrorKind::Overloaded, "Overloaded"));
    let ev =
        r#"{"error":{"message":"context too long","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
    assert_eq!(stream_error(ev), info(ErrorKind::InvalidRequest, "context too long"));
    // A bare `{"message"}` (some proxies' `event: error`).
    assert_eq!(stream_error(r#"{"message":"upstream reset"}"#), info(ErrorKind::Upstream, "upstream reset"));
    // A failed response without its error, and a payload in no known shape.
    let ev = r#"{"type":"error","code":"server_error"}"#;
    assert_eq!(stream_error(ev), info(ErrorKind::Upstream, "upstream stream error (server_error)"));
    assert_eq!(stream_error("boom"), info(ErrorKind::Upstream, "upstream stream error: boom"));
    assert_eq!(stream_error(r#"{"foo":1}"#), info(ErrorKind::Upstream, r#"upstream stream error: {"foo":1}"#));
    assert_eq!(from_value(&serde_json::json!([1, 2]), None), None);
}

#[test]
fn malformed_truncated_and_oversized_bodies() {
    // Not JSON: the text, trimmed; an empty body names the status.
    let html = "<html><body><h1>502 Bad Gateway</h1></body></html>\n";
    assert_eq!(decode_error(502, html.as_bytes()), info(ErrorKind::Upstream, html.trim()));
    assert_eq!(decode_error(503, b""), info(ErrorKind::Overloaded, "upstream returned HTTP 503"));
    assert_eq!(decode_error(504, b"  \n"), info(ErrorKind::Timeout, "upstream returned HTTP 504"));
    // Truncated JSON (a body cut by the read cap) is text.
    let cut = r#"{"type":"error","error":{"type":"rate_limit_er"#;
    assert_eq!(decode_error(429, cut.as_bytes()), info(ErrorKind::RateLimited, cut));
    // Invalid UTF-8 is replaced, never a panic.
    assert_eq!(decode_error(500, &[0xff, 0xfe, b'o', b'k']), info(ErrorKind::Upstream, "\u{fffd}\u{fffd}ok"));
    // An empty message in an envelope: the status and type, not the raw JSON.
    let body = r#"{"error":{"message":"","type":"server_error"}}"#;
    assert_eq!(
        decode_error(500, body.as_bytes()),
        info(ErrorKind::Upstream, "upstream returned HTTP 500 (server_error)")
    );
    // Oversized: a text body keeps MAX_BODY_CHARS characters (multi-byte safe) and an ellipsis.
    let long = "é".repeat(10_000);
    let got = decode_error(413, long.as_bytes());
    assert_eq!(got.kind, ErrorKind::RequestTooLarge);
    assert_eq!(got.message, format!("{}…", "é".repeat(MAX_BODY_CHARS)));
    // A JSON message keeps 4 × MAX_BODY_CHARS.
    let body = serde_json::json!({"error": {"message": "m".repeat(5000), "type": "invalid_request_error"}});
    let got = decode_error(400, body.to_string().as_bytes());
    assert_eq!(got.message, format!("{}…", "m".repeat(4 * MAX_BODY_CHARS)));
    // Wrong types where strings belong are ignored, not fatal.
    let body = r#"{"error":{"message":7,"type":["x"],"code":{"a":1}}}"#;
    assert_eq!(decode_error(403, body.as_bytes()), info(ErrorKind::PermissionDenied, "upstream returned HTTP 403"));
}
