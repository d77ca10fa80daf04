//! `POST /v1/messages/count_tokens`: Anthropic's request shape (no `max_tokens` needed), answered
//! with `{"input_tokens": N}` and `x-keyhaven-token-count: exact|estimate`.
//!
//! The body only has to be a JSON object with a `model`: an Anthropic provider counts it as the
//! client sent it (whatever fields Claude Code adds), and a body the request decoder rejects is
//! still estimated (from its JSON text) rather than refused.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::api::{ApiError, ApiState, Inbound};
use crate::model::ErrorKind;
use crate::provider::{CallContext, CountRequest};

/// The call rows of token counts carry this dialect.
pub const DIALECT: &str = "anthropic_count_tokens";

pub async fn count_tokens(State(state): State<ApiState>, headers: HeaderMap, body: Body) -> Response {
    let id = format!("kh-{:016x}{:08x}", rand::random::<u64>(), rand::random::<u32>());
    let dialect = Inbound::Anthropic;
    let Ok(body) = axum::body::to_bytes(body, state.max_request_bytes).await else {
        let msg = format!("request body exceeds {} bytes", state.max_request_bytes);
        return with_id(ApiError::new(dialect, ErrorKind::RequestTooLarge, msg).into_response(), &id);
    };
    let decoded = dialect.decode(&body);
    let raw = serde_json::from_slice::<serde_json::Value>(&body).ok().filter(serde_json::Value::is_object);
    let model = raw.as_ref().and_then(|v| v.get("model")).and_then(serde_json::Value::as_str).map(str::to_owned);
    let (Some(raw), Some(model)) = (raw, model) else {
        // Not an object with a model: the decoder's error names what is wrong.
        let e = match decoded {
            Err(e) => e,
            Ok(_) => {
                crate::dialect::DecodeError::Field { path: "model".into(), message: "missing field `model`".into() }
            }
        };
        return with_id(ApiError::decode(dialect, &e).into_response(), &id);
    };
    let (_, client) = crate::api::clients::identify(state.clients.as_ref(), &headers);
    let beta = headers.get("anthropic-beta").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let req = CountRequest { model, body: raw, decoded: decoded.ok().map(|(r, _)| r), beta };
    let ctx = CallContext {
        id: id.clone(),
        dialect: DIALECT,
        client,
        request_body: Some(body),
        cancel: state.shutdown.child_token(),
        conversation_id: None,
        request_id: None,
        session_id: crate::api::clients::session(&headers),
    };
    match state.gateway.count_tokens(req, ctx).await {
        Ok(count) => {
            let mut resp = axum::Json(json!({"input_tokens": count.input_tokens})).into_response();
            resp.headers_mut().insert("x-keyhaven-token-count", HeaderValue::from_static(count.label()));
            with_id(resp, &id)
        }
        Err(e) => with_id(ApiError::provider(dialect, &e).into_response(), &id),
    }
}

fn with_id(mut resp: Response, id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}
