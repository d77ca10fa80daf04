//! The unary Cursor calls answered locally: the model catalog, server time and connectivity.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use http::HeaderMap;

use crate::api::cursor::{CursorState, catalog, now_secs, unary_ok, unary_request};
use crate::cursor::protocol::{agent, aiserver};
use crate::cursor::services::model_catalog;

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
