//! The unary Cursor calls answered locally (the model catalog, server time and connectivity),
//! and `GetServerConfig`, the official answer with only its transport knob adjusted.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use http::{HeaderMap, StatusCode, header};

use crate::api::cursor::{CursorState, catalog, now_secs, unary_error, unary_ok, unary_request};
use crate::cursor::protocol::connect::{self, Code, ErrorBody};
use crate::cursor::protocol::{agent, aiserver};
use crate::cursor::services::{model_catalog, server_config};

pub async fn available_models(State(state): State<CursorState>, headers: HeaderMap, body: Body) -> Response {
    if let Err(resp) = unary_request::<aiserver::AvailableModelsRequest>(&headers, body).await {
        return resp;
    }
    unary_ok(&headers, &model_catalog::available_models(&catalog(&state)))
}

pub async fn usable_models(State(state): State<CursorState>, headers: HeaderMap, body: Body) -> Response {
    if let Err(resp) = unary_request::<agent::GetUsableModelsRequest>(&headers, body).await {
        return resp;
    }
    unary_ok(&headers, &model_catalog::usable_models(&catalog(&state)))
}

pub async fn default_model(State(state): State<CursorState>, headers: HeaderMap, body: Body) -> Response {
    if let Err(resp) = unary_request::<aiserver::GetDefaultModelRequest>(&headers, body).await {
        return resp;
    }
    unary_ok(&headers, &model_catalog::default_model(&catalog(&state)))
}

pub async fn default_model_for_cli(State(state): State<CursorState>, headers: HeaderMap, body: Body) -> Response {
    if let Err(resp) = unary_request::<agent::GetDefaultModelForCliRequest>(&headers, body).await {
        return resp;
    }
    unary_ok(&headers, &model_catalog::default_model_for_cli(&catalog(&state)))
}

pub async fn server_time(headers: HeaderMap, body: Body) -> Response {
    let received = now_secs();
    if let Err(resp) = unary_request::<aiserver::ServerTimeRequest>(&headers, body).await {
        return resp;
    }
    unary_ok(&headers, &aiserver::ServerTimeResponse { receive_timestamp: received, transmit_timestamp: now_secs() })
}

pub async fn is_connected(headers: HeaderMap, body: Body) -> Response {
    if let Err(resp) = unary_request::<aiserver::IsConnectedRequest>(&headers, body).await {
        return resp;
    }
    unary_ok(&headers, &aiserver::IsConnectedResponse {})
}

/// `GetServerConfig` (both paths): the official answer; with `[cursor] http2` set, its
/// `http2_config` is replaced and nothing else. An answer that is not a 200 protobuf, or whose
/// body cannot be read, is passed back as the official service sent it.
pub async fn server_config(State(state): State<CursorState>, req: Request) -> Response {
    let Some(value) = server_config::forced(state.options.http2) else {
        return state.upstream.forward(req).await;
    };
    let resp = state.upstream.forward(req).await;
    let is_proto = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim().eq_ignore_ascii_case("application/proto"));
    if resp.status() != StatusCode::OK || !is_proto {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, connect::MAX_MESSAGE_BYTES).await else {
        tracing::warn!("GetServerConfig answer unreadable or too large");
        return unary_error(&ErrorBody::cursor(
            Code::Unavailable,
            aiserver::error_details::Error::NetworkError,
            "Server config unavailable",
            "the official GetServerConfig answer could not be read",
            true,
        ));
    };
    let encoding = parts.headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok());
    let Ok(message) = connect::unary_body(&bytes, encoding) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    parts.headers.remove(header::CONTENT_ENCODING);
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(server_config::adjust(&message, value)))
}
