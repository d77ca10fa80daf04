//! `POST /v1/messages/count_tokens`: Anthropic's request shape (no `max_tokens` needed), answered
//! with `{"input_tokens": N}` and `x-keyhaven-token-count: exact|estimate`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::api::{ApiError, ApiState, Inbound};
use crate::model::ErrorKind;
use crate::provider::CallContext;

/// The call rows of token counts carry this dialect.
pub const DIALECT: &str = "anthropic_count_tokens";

pub async fn count_tokens(State(state): State<ApiState>, headers: HeaderMap, body: Body) -> Response {
    let id = format!("kh-{:016x}{:08x}", rand::random::<u64>(), rand::random::<u32>());
    let dialect = Inbound::Anthropic;
    let Ok(body) = axum::body::to_bytes(body, state.max_request_bytes).await else {
        let msg = format!("request body exceeds {} bytes", state.max_request_bytes);
        return with_id(ApiError::new(dialect, ErrorKind::RequestTooLarge, msg).into_response(), &id);
    };
    let req = match dialect.decode(&body) {
        Ok((req, _)) => req,
        Err(e) => return with_id(ApiError::decode(dialect, &e).into_response(), &id),
    };
    let (_, client) = crate::api::clients::identify(state.clients.as_ref(), &headers);
    let ctx = CallContext {
        id: id.clone(),
        dialect: DIALECT,
        client,
        request_body: Some(body),
        cancel: state.shutdown.child_token(),
        conversation_id: None,
        request_id: None,
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
