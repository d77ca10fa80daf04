//! Cursor Tab on the Connect router (docs/cursor-tab.md): while `[cursor_tab] model` names a FIM
//! model, `AiService/StreamCpp` is answered by [`crate::cursor::tab`], and the helper calls that
//! would send code to Cursor's own models get neutral answers (`RefreshTabContext` → `{}`,
//! `GetCppEditClassification` → `{should_noop: false}`, `StreamNextCursorPrediction` → one
//! `is_not_in_range` frame). With Tab left to Cursor (the default) all four are forwarded
//! unchanged, like `CppConfig`, `CppService/AvailableModels`, file sync and telemetry always are.

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use prost::Message;

use crate::api::cursor::{
    CursorState, bad_request, catalog, client_binding, header_str, stream_response, stream_response_error, unary_ok,
};
use crate::cursor::protocol::aiserver;
use crate::cursor::protocol::connect::{self, EndStream, Envelope};
use crate::cursor::tab::{self, TabCall};

/// `AiService/StreamCpp`.
pub async fn stream_cpp(State(state): State<CursorState>, req: Request) -> Response {
    let catalog = catalog(&state);
    let Some(route) = catalog.tab_route() else { return state.upstream.forward(req).await };
    let (parts, body) = req.into_parts();
    let gzip = match connect::is_gzip(header_str(&parts.headers, "connect-content-encoding")) {
        Ok(g) => g,
        Err(e) => return stream_response_error(bad_request(&e.to_string())),
    };
    let Ok(bytes) = axum::body::to_bytes(body, connect::MAX_MESSAGE_BYTES + 1024).await else {
        return stream_response_error(bad_request("StreamCpp request too large or cut off"));
    };
    let message = match connect::decode_envelopes(&bytes, gzip) {
        Ok(envs) => {
            let mut messages = envs.into_iter().filter_map(|e| match e {
                Envelope::Message(m) => Some(m),
                Envelope::EndStream(_) => None,
            });
            match (messages.next(), messages.next()) {
                (Some(m), None) => m,
                _ => return stream_response_error(bad_request("StreamCpp takes exactly one request envelope")),
            }
        }
        Err(e) => return stream_response_error(bad_request(&format!("StreamCpp request: {e}"))),
    };
    let request: aiserver::StreamCppRequest = match connect::decode_message(&message) {
        Ok(r) => r,
        Err(e) => return stream_response_error(bad_request(&format!("StreamCpp request: {e}"))),
    };
    let editor = tab::editor_key(&client_binding(&parts.headers), &request);
    let ticket = state.tab.begin(editor, state.spawner.root_token());
    let request_id = header_str(&parts.headers, "x-request-id").map(str::to_owned);
    let gateway = state.backend.gateway().clone();
    let settings = catalog.cursor_tab().clone();
    // The head goes out now; the frames follow the provider's answer. Dropping the body (the
    // client went away) drops the provider call with it.
    let frames = async move {
        let call = TabCall { gateway: &gateway, route: &route, settings: &settings, request_id };
        let frames = tab::answer(call, &request, ticket.cancel.clone()).await;
        drop(ticket);
        futures::stream::iter(frames.into_iter().map(Ok::<Bytes, Infallible>))
    };
    stream_response("application/connect+proto", Body::from_stream(futures::stream::once(frames).flatten()))
}

/// Reads (and drops) a request body, so the connection can serve the next request.
async fn drain(body: Body) {
    let _ = axum::body::to_bytes(body, connect::MAX_MESSAGE_BYTES + 1024).await;
}

/// `AiService/RefreshTabContext`: `{}` while Keyhaven Tab is on (it would ship code to Cursor's
/// retrieval).
pub async fn refresh_tab_context(State(state): State<CursorState>, req: Request) -> Response {
    if catalog(&state).tab_route().is_none() {
        return state.upstream.forward(req).await;
    }
    let (parts, body) = req.into_parts();
    drain(body).await;
    unary_ok(&parts.headers, &aiserver::RefreshTabContextResponse {})
}

/// `AiService/GetCppEditClassification`: `{should_noop: false}` while Keyhaven Tab is on.
pub async fn edit_classification(State(state): State<CursorState>, req: Request) -> Response {
    if catalog(&state).tab_route().is_none() {
        return state.upstream.forward(req).await;
    }
    let (parts, body) = req.into_parts();
    drain(body).await;
    unary_ok(&parts.headers, &aiserver::GetCppEditClassificationResponse { should_noop: Some(false) })
}

/// `AiService/StreamNextCursorPrediction`: one `is_not_in_range` frame while Keyhaven Tab is on.
pub async fn next_cursor_prediction(State(state): State<CursorState>, req: Request) -> Response {
    if catalog(&state).tab_route().is_none() {
        return state.upstream.forward(req).await;
    }
    drain(req.into_body()).await;
    let msg = aiserver::StreamNextCursorPredictionResponse {
        response: Some(aiserver::stream_next_cursor_prediction_response::Response::IsNotInRange(true)),
    };
    let frames =
        [connect::encode_envelope(&msg.encode_to_vec(), false), connect::encode_end_stream(&EndStream::default())];
    stream_response("application/connect+proto", Body::from(frames.concat()))
}
