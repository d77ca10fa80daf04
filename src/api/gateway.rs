//! Gateway handlers: `/v1/chat/completions`, `/v1/messages`, `/v1/responses`, `/v1/models`.
//!
//! All three inference routes share [`handle`]. `/v1/responses` also expands
//! `previous_response_id` from the in-memory [`Conversations`] before the call, and keeps each
//! finished answer's conversation there under the response id the client sees.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::time::Instant;

use std::sync::Arc;

use crate::api::inbound::StreamEncoder;
use crate::api::{ApiError, ApiState, Conversations, Inbound};
use crate::dialect::openai_chat::StreamOptions;
use crate::dialect::openai_responses;
use crate::dialect::sse::KEEPALIVE;
use crate::model::{self, Accumulator, ErrorKind, Message, Role, StreamEvent};
use crate::provider::{CallContext, CallStream};

/// How long a stream may be silent before a keep-alive comment goes to the client.
const KEEPALIVE_EVERY: Duration = Duration::from_secs(15);

pub async fn chat_completions(State(state): State<ApiState>, headers: HeaderMap, body: Body) -> Response {
    observed(state, Inbound::OpenaiChat(StreamOptions::default()), headers, body).await
}

pub async fn messages(State(state): State<ApiState>, headers: HeaderMap, body: Body) -> Response {
    observed(state, Inbound::Anthropic, headers, body).await
}

pub async fn responses(State(state): State<ApiState>, headers: HeaderMap, body: Body) -> Response {
    observed(state, Inbound::OpenaiResponses, headers, body).await
}

/// The engine time [`with_headers`] put in the overhead header, for the metrics.
#[derive(Debug, Clone, Copy)]
struct Overhead(Duration);

/// [`handle`], then the overhead into the metrics.
async fn observed(state: ApiState, dialect: Inbound, headers: HeaderMap, body: Body) -> Response {
    let metrics = state.metrics.clone();
    let resp = handle(state, dialect, headers, body).await;
    if let (Some(m), Some(Overhead(d))) = (metrics, resp.extensions().get::<Overhead>()) {
        m.observe_overhead(dialect.name(), *d);
    }
    resp
}

/// A Responses call's conversation, kept under its response id once the answer is complete.
struct Chain {
    store: Arc<Conversations>,
    response_id: String,
    /// What was sent, without this request's `instructions`.
    history: Vec<Message>,
}

impl Chain {
    fn save(mut self, answer: &model::Response) {
        if !answer.content.is_empty() {
            self.history.push(Message { role: Role::Assistant, content: answer.content.clone() });
        }
        self.store.put(self.response_id, self.history);
    }
}

/// Decodes a Responses request and puts the conversation named by `previous_response_id` in
/// front of its input (after its own instructions).
fn decode_responses(state: &ApiState, body: &[u8], id: &str) -> Result<(model::Request, Chain), ApiError> {
    let dialect = Inbound::OpenaiResponses;
    let (mut req, opts) = openai_responses::decode_request(body).map_err(|e| ApiError::decode(dialect, &e))?;
    let mut messages = std::mem::take(&mut req.messages);
    let instructions = if opts.has_instructions && !messages.is_empty() { Some(messages.remove(0)) } else { None };
    let mut history = Vec::new();
    if let Some(prev) = &opts.previous_response_id {
        let Some(prior) = state.conversations.get(prev) else {
            let msg = format!("Previous response with id '{prev}' not found.");
            return Err(ApiError::new(dialect, ErrorKind::InvalidRequest, msg)
                .with_code("previous_response_not_found", "previous_response_id"));
        };
        history.extend(prior.iter().cloned());
    }
    history.extend(messages);
    req.messages = instructions.into_iter().chain(history.iter().cloned()).collect();
    let response_id = format!("resp_{}", id.strip_prefix("kh-").unwrap_or(id));
    Ok((req, Chain { store: state.conversations.clone(), response_id, history }))
}

fn new_request_id() -> String {
    format!("kh-{:016x}{:08x}", rand::random::<u64>(), rand::random::<u32>())
}

async fn handle(state: ApiState, dialect: Inbound, headers: HeaderMap, body: Body) -> Response {
    let arrived = Instant::now();
    let id = new_request_id();
    // `api::clients::gate` already refused a call without a required token.
    let (_, client) = crate::api::clients::identify(state.clients.as_ref(), &headers);
    let body = match axum::body::to_bytes(body, state.max_request_bytes).await {
        Ok(b) => b,
        Err(_) => {
            let msg = format!("request body exceeds {} bytes", state.max_request_bytes);
            return with_headers(
                ApiError::new(dialect, ErrorKind::RequestTooLarge, msg).into_response(),
                &id,
                arrived,
                None,
            );
        }
    };
    let decoded = if dialect == Inbound::OpenaiResponses {
        decode_responses(&state, &body, &id).map(|(req, chain)| (req, dialect, Some(chain)))
    } else {
        dialect.decode(&body).map(|(req, d)| (req, d, None)).map_err(|e| ApiError::decode(dialect, &e))
    };
    let (mut req, dialect, chain) = match decoded {
        Ok(r) => r,
        Err(e) => return with_headers(e.into_response(), &id, arrived, None),
    };
    client_betas(&mut req, &headers);
    let stream = req.stream;
    let model = req.model.clone();
    let ctx = CallContext {
        id: id.clone(),
        dialect: dialect.name(),
        client,
        request_body: Some(body),
        cancel: state.shutdown.child_token(),
        conversation_id: None,
        request_id: None,
        session_id: crate::api::clients::session(&headers),
    };
    let call = match state.gateway.call(req, ctx).await {
        Ok(call) => call,
        Err(f) => {
            let mut resp = ApiError::provider(dialect, &f.error).into_response();
            if let Ok(v) = HeaderValue::from_str(&f.attempts.to_string()) {
                resp.headers_mut().insert("x-keyhaven-attempts", v);
            }
            fallback_headers(resp.headers_mut(), &f.fallbacks);
            return with_headers(resp, &id, arrived, Some(f.upstream_wait));
        }
    };
    if stream {
        stream_response(call, dialect, &id, &model, chain)
    } else {
        whole_response(call, dialect, &id, &model, chain).await
    }
}

/// An Anthropic client's `anthropic-beta` flags travel with its passthrough, so an Anthropic
/// upstream gets them (other upstreams never see them).
fn client_betas(req: &mut model::Request, headers: &HeaderMap) {
    if let Some(pt) = req.passthrough.as_deref_mut().filter(|p| p.dialect == model::WireDialect::Anthropic) {
        pt.betas = headers
            .get_all("anthropic-beta")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|b| !b.is_empty())
            .map(str::to_owned)
            .collect();
    }
}

/// Adds the request id and, when the call timings are known, the overhead header. Without
/// timings (errors before any upstream call) all time was the engine's.
fn with_headers(mut resp: Response, id: &str, arrived: Instant, upstream_wait: Option<Duration>) -> Response {
    let engine = arrived.elapsed().saturating_sub(upstream_wait.unwrap_or_default());
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(id) {
        h.insert("x-request-id", v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("{:.3}", engine.as_secs_f64() * 1000.0)) {
        h.insert(crate::api::guard::OVERHEAD, v);
    }
    resp.extensions_mut().insert(Overhead(engine));
    resp
}

fn route_headers(resp: &mut Response, call: &CallStream) {
    let route = call.route();
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&route.provider.name) {
        h.insert("x-keyhaven-provider", v);
    }
    if let Ok(v) = HeaderValue::from_str(&route.model.name) {
        h.insert("x-keyhaven-model", v);
    }
    if let Ok(v) = HeaderValue::from_str(&(call.timings().retries + 1).to_string()) {
        h.insert("x-keyhaven-attempts", v);
    }
    fallback_headers(h, call.fallbacks());
}

/// `x-keyhaven-fallbacks`: the models of a group skipped before the one that served, in order.
fn fallback_headers(h: &mut HeaderMap, fallbacks: &[String]) {
    if !fallbacks.is_empty()
        && let Ok(v) = HeaderValue::from_str(&fallbacks.join(", "))
    {
        h.insert("x-keyhaven-fallbacks", v);
    }
}

async fn whole_response(call: CallStream, dialect: Inbound, id: &str, model: &str, chain: Option<Chain>) -> Response {
    let mut head = Response::new(Body::empty());
    route_headers(&mut head, &call);
    let started = call.timings().started;
    let (result, t) = call.collect().await;
    let mut resp = match result {
        Ok(mut resp) => {
            resp.model = model.to_owned();
            if resp.id.is_empty() {
                resp.id = id.to_owned();
            }
            if let Some(chain) = chain {
                // The client may send this id back as `previous_response_id`.
                resp.id.clone_from(&chain.response_id);
                chain.save(&resp);
            }
            (StatusCode::OK, axum::Json(dialect.encode_response(&resp))).into_response()
        }
        Err(e) => ApiError::provider(dialect, &e).into_response(),
    };
    resp.headers_mut().extend(head.headers().clone());
    // Engine time: preparing the request, plus everything after the last upstream event
    // (assembling the answer) and the wait for the in-flight record. The rest was the upstream's.
    let upstream = t.upstream_wait();
    with_headers(resp, id, started, Some(upstream))
}

/// A streamed answer on its way to the client (see [`stream_response`]).
struct Relay {
    call: CallStream,
    encoder: StreamEncoder,
    /// A Responses stream's conversation link and the answer kept to save it.
    chain: Option<(Chain, Accumulator)>,
    /// A comment line goes out when the upstream is quiet this long.
    keepalive: std::pin::Pin<Box<tokio::time::Sleep>>,
}

fn stream_response(call: CallStream, dialect: Inbound, id: &str, model: &str, chain: Option<Chain>) -> Response {
    let response_id = chain.as_ref().map_or(id, |c| c.response_id.as_str());
    let encoder = dialect.stream_encoder(response_id, model, crate::clock::now_ms());
    // A Responses stream keeps its answer, to save the conversation once it completes.
    let chain = chain.map(|c| (c, Accumulator::new()));
    let mut head = Response::new(Body::empty());
    route_headers(&mut head, &call);
    let t = call.timings();
    // The head goes out now: upstream time ends at its first event; the record commit after it
    // was the engine's.
    let upstream = t.first_event.duration_since(t.started).saturating_sub(t.prepare);
    // One allocation per stream: the state moves in and out of `unfold` on every chunk, so it
    // is boxed (a pointer moves, not the call), and the keepalive timer is reset, not re-armed.
    let relay = Box::new(Relay { call, encoder, chain, keepalive: Box::pin(tokio::time::sleep(KEEPALIVE_EVERY)) });
    let body = futures::stream::unfold(Some(relay), |state| async move {
        let mut relay = state?;
        let mut out = String::new();
        loop {
            tokio::select! {
                ev = relay.call.next() => {
                    relay.keepalive.as_mut().reset(tokio::time::Instant::now() + KEEPALIVE_EVERY);
                    match ev {
                        Some(ev) => {
                            if matches!(ev, StreamEvent::Error { .. }) {
                                relay.chain = None;
                            } else if let Some((_, acc)) = relay.chain.as_mut() {
                                acc.push(&ev);
                            }
                            relay.encoder.encode(&ev, &mut out);
                            if !out.is_empty() {
                                return Some((Ok::<_, Infallible>(Bytes::from(out)), Some(relay)));
                            }
                        }
                        None => {
                            relay.encoder.finish(&mut out);
                            if let Some((chain, acc)) = relay.chain.take() {
                                chain.save(&acc.finish(0));
                            }
                            return Some((Ok(Bytes::from(out)), None));
                        }
                    }
                },
                () = relay.keepalive.as_mut() => {
                    relay.keepalive.as_mut().reset(tokio::time::Instant::now() + KEEPALIVE_EVERY);
                    return Some((Ok(Bytes::from_static(KEEPALIVE.as_bytes())), Some(relay)));
                }
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.extend(head.headers().clone());
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    with_headers(resp, id, t.started, Some(upstream))
}

pub async fn models(State(state): State<ApiState>, headers: HeaderMap) -> Response {
    let catalog = state.gateway.catalog();
    let anthropic = headers.contains_key("anthropic-version");
    let data: Vec<_> = catalog
        .models()
        .iter()
        .map(|m| {
            if anthropic {
                json!({"type": "model", "id": m.name, "display_name": m.name, "created_at": "1970-01-01T00:00:00Z"})
            } else {
                json!({"id": m.name, "object": "model", "created": 0, "owned_by": m.provider})
            }
        })
        .collect();
    let body = if anthropic {
        json!({"data": data, "has_more": false, "first_id": catalog.models().first().map(|m| m.name.clone()), "last_id": catalog.models().last().map(|m| m.name.clone())})
    } else {
        json!({"object": "list", "data": data})
    };
    axum::Json(body).into_response()
}

pub async fn health() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

pub(crate) async fn not_found(uri: axum::http::Uri) -> Response {
    let dialect = Inbound::for_path(uri.path());
    ApiError::new(dialect, ErrorKind::NotFound, format!("no route for {}", uri.path())).into_response()
}
