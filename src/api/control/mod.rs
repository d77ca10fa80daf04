//! The HTTP control API for the browser UI in headless mode: JSON under `/api/…` on the gateway's
//! own loopback listener, one thin handler per [`ControlService`] method, plus the built UI at
//! `/` ([`ui`]).
//!
//! Protection (docs/security-reliability.md §2.2; [`guard`]): exact `Host`, exact `Origin` (only the
//! listener's own origins, e.g. `http://127.0.0.1:4937`), `Authorization: Bearer <control token>`
//! compared in constant time or a dashboard session cookie from the page itself ([`session`]), `Content-Type: application/json` on every method but GET and HEAD,
//! and no CORS headers at all, so a page from another origin can neither read nor change
//! anything. Errors are `{ "kind", "message" }` ([`ControlError::body`]).
//!
//! Routes:
//! ```text
//! GET    /api/status
//! GET    /api/providers                 POST /api/providers
//! PUT    /api/providers/{name}          DELETE /api/providers/{name}
//! POST   /api/providers/{name}/test
//! PUT    /api/providers/{name}/key      DELETE /api/providers/{name}/key
//! GET    /api/models                    POST /api/models
//! PUT    /api/models/{name}             DELETE /api/models/{name}
//! POST   /api/models/{name}/test
//! GET    /api/routing                   PUT /api/routing
//! PUT    /api/routing/models/{name}     PUT /api/routing/tab   (Cursor Tab: official | a FIM model)
//! GET    /api/ca                        POST /api/ca/install | /api/ca/uninstall | /api/ca/rotate
//! GET    /api/usage?days=7&groupBy=model
//! GET    /api/usage/series?days=14&splitBy=model      (per day and model, provider or client)
//! GET    /api/usage/sessions?days=7&limit=   (calls grouped by client session)
//! GET    /api/calls?limit=&offset=&model=&provider=&client=&status=&sinceMs=&conversation=&session=
//! GET    /api/calls/{id}                DELETE /api/calls/{id}
//! GET    /api/calls/export?format=csv|json&since=&until=   (a download: calls without bodies)
//! GET    /api/usage/export?format=csv|json&since=&until=   (a download: usage per day, model,
//!        provider and client)
//! GET    /api/prices                    (the price table's version, each model's effective price)
//! PUT    /api/prices/{model}            DELETE /api/prices/{model}   (a model's price override)
//! GET    /api/retention                 PUT /api/retention
//! GET    /api/clients                   POST /api/clients/{client}/route | /api/clients/{client}/undo
//! POST   /api/clients/{client}/route/preview | /api/clients/{client}/undo/preview   (dry runs)
//! GET    /api/clients/env               POST /api/clients/env/route | /api/clients/env/undo
//!        (the generic client's shell exports; only the POST answer carries its token)
//! GET    /api/logs?n=200 | ?after=SEQ
//! GET    /api/settings                  PUT /api/settings
//! POST   /api/session/nonce             (HTTP only: a one-time dashboard link, see [`session`])
//! GET    /api/web                       PUT /api/web          (web tools: search provider, fetch mode)
//! PUT    /api/web/key                   DELETE /api/web/key   (the Brave Search key, write-only)
//! POST   /api/web/test                  (one test search: hit count or the error)
//! GET    /api/budgets                   POST /api/budgets     (spend per budget, today's spend)
//! PUT    /api/budgets/{name}            DELETE /api/budgets/{name}
//! GET    /api/cursor/versions       (Cursor versions seen, each one's self-test)
//! POST   /api/cursor/versions/{version}/retry   (reruns that version's self-test)
//! GET    /metrics                       (HTTP only: Prometheus text format, same guard)
//! ```

pub mod guard;
pub mod session;
pub mod ui;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::control::token::ControlToken;
use crate::control::{ControlError, ControlService, dto};

/// What the control routes need.
#[derive(Debug, Clone)]
pub struct ControlApi {
    pub service: ControlService,
    pub token: Arc<ControlToken>,
    /// Dashboard nonces and browser sessions (`/api/session/nonce`, `/auth`).
    pub sessions: Arc<session::Sessions>,
    /// The built UI (`ui/dist`); `None` or missing: no UI.
    pub ui_dir: Option<std::path::PathBuf>,
}

/// A control error as an HTTP response.
pub struct CtlError(pub ControlError);

impl From<ControlError> for CtlError {
    fn from(e: ControlError) -> CtlError {
        CtlError(e)
    }
}

pub(crate) fn error_response(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = dto::ErrorBody { kind: kind.to_owned(), message: message.to_owned() };
    (status, axum::Json(body)).into_response()
}

impl IntoResponse for CtlError {
    fn into_response(self) -> Response {
        let status = match self.0 {
            ControlError::NotFound(_) => StatusCode::NOT_FOUND,
            ControlError::Invalid(_) => StatusCode::BAD_REQUEST,
            ControlError::Conflict(_) => StatusCode::CONFLICT,
            ControlError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ref e if e.keyring_unavailable().is_some() => StatusCode::SERVICE_UNAVAILABLE,
            ref e if e.is_user_state() => StatusCode::CONFLICT,
            ControlError::Secret(_)
            | ControlError::Store(_)
            | ControlError::Io(_)
            | ControlError::Ca(_)
            | ControlError::Setup(_)
            | ControlError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status == StatusCode::INTERNAL_SERVER_ERROR || self.0.keyring_unavailable().is_some() {
            tracing::warn!(kind = self.0.kind(), error = %self.0, "control call failed");
        }
        error_response(status, self.0.kind(), &self.0.message())
    }
}

type Res<T> = Result<axum::Json<T>, CtlError>;

fn json<T: DeserializeOwned>(body: &Bytes) -> Result<T, CtlError> {
    serde_json::from_slice(body).map_err(|e| CtlError(ControlError::Invalid(format!("bad JSON body: {e}"))))
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, CtlError> {
    q.map(|Query(v)| v).map_err(|e| CtlError(ControlError::Invalid(format!("bad query: {}", e.body_text()))))
}

fn ok<T>(r: Result<T, ControlError>) -> Res<T> {
    r.map(axum::Json).map_err(CtlError)
}

/// The `/api/…` routes, guarded. Merged into the gateway router by `api::router`.
pub fn router<S: Clone + Send + Sync + 'static>(
    api: ControlApi,
    guard: Arc<crate::api::GuardConfig>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
) -> Router<S> {
    let check = guard::ControlGuard::new(&guard, api.token.clone()).with_sessions(api.sessions.clone());
    // HTTP only: the app window needs no browser session.
    let sessions = Router::new().route("/api/session/nonce", post(mint_nonce)).with_state(api.sessions);
    let mut router = routes().with_state(api.service).merge(sessions);
    if let Some(metrics) = metrics {
        // Behind the same guard: a scraper presents the control token as a bearer token.
        router = router.merge(Router::new().route("/metrics", get(scrape)).with_state(metrics));
    }
    router.layer(axum::middleware::from_fn_with_state(Arc::new(check), guard::check))
}

/// `GET /metrics`: the Prometheus text format ([`crate::metrics`]).
async fn scrape(State(metrics): State<Arc<crate::metrics::Metrics>>) -> Response {
    match metrics.render() {
        Ok(text) => ([(axum::http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "metrics not rendered");
            error_response(StatusCode::INTERNAL_SERVER_ERROR, "internal", "metrics could not be rendered")
        }
    }
}

/// `POST /api/session/nonce`: a one-time dashboard link (how `keyhaven dashboard`, which holds the
/// token file, opens the dashboard of an engine in another process). The link's host is the one
/// this request named (it passed the exact Host check).
async fn mint_nonce(State(sessions): State<Arc<session::Sessions>>, req: axum::extract::Request) -> Response {
    let host = req
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or("127.0.0.1")
        .to_owned();
    let nonce = sessions.mint_nonce();
    axum::Json(serde_json::json!({
        "url": format!("http://{host}{}", ui::auth_path(&nonce)),
        "expiresInSecs": session::NONCE_TTL.as_secs(),
    }))
    .into_response()
}

/// The one route table, shared by the HTTP API and [`LocalControl`].
fn routes() -> Router<ControlService> {
    Router::new()
        .route("/api/status", get(status))
        .route("/api/doctor", get(doctor))
        .route("/api/providers", get(providers).post(create_provider))
        .route("/api/providers/{name}", put(update_provider).delete(delete_provider))
        .route("/api/providers/{name}/test", post(test_provider))
        .route("/api/providers/{name}/key", put(set_key).delete(delete_key))
        .route("/api/models", get(models).post(create_model))
        .route("/api/models/{name}", put(update_model).delete(delete_model))
        .route("/api/models/{name}/test", post(test_model))
        .route("/api/budgets", get(budgets).post(create_budget))
        .route("/api/budgets/{name}", put(update_budget).delete(delete_budget))
        .route("/api/cursor/versions", get(cursor_versions))
        .route("/api/cursor/versions/{version}/retry", post(retry_cursor_version))
        .route("/api/routing", get(routing).put(set_routing))
        .route("/api/routing/models/{name}", put(set_model_route))
        .route("/api/routing/tab", put(set_tab))
        .route("/api/ca", get(ca_status))
        .route("/api/ca/install", post(ca_install))
        .route("/api/ca/uninstall", post(ca_uninstall))
        .route("/api/ca/rotate", post(ca_rotate))
        .route("/api/usage", get(usage))
        .route("/api/usage/series", get(usage_series))
        .route("/api/usage/sessions", get(sessions))
        .route("/api/calls", get(calls))
        .route("/api/calls/export", get(export_calls))
        .route("/api/prices", get(prices))
        .route("/api/prices/{model}", put(set_price).delete(unset_price))
        .route("/api/usage/export", get(export_usage))
        .route("/api/calls/{id}", get(call).delete(delete_call))
        .route("/api/retention", get(retention).put(set_retention))
        .route("/api/clients", get(clients))
        .route("/api/clients/{client}/route", post(route_client))
        .route("/api/clients/{client}/undo", post(undo_client))
        .route("/api/clients/{client}/route/preview", post(preview_route))
        .route("/api/clients/{client}/undo/preview", post(preview_undo))
        .route("/api/clients/env", get(env_setup))
        .route("/api/clients/env/route", post(route_env))
        .route("/api/clients/env/undo", post(undo_env))
        .route("/api/logs", get(logs))
        .route("/api/settings", get(settings).put(set_settings))
        .route("/api/web", get(web_settings).put(set_web_settings))
        .route("/api/web/key", put(set_web_key).delete(delete_web_key))
        .route("/api/web/test", post(test_web_search))
}

/// The largest answer [`LocalControl::call`] reads back.
const LOCAL_REPLY_LIMIT: usize = 64 * 1024 * 1024;

/// The control routes without the HTTP guard, for a caller inside the process: the tray app's
/// IPC, which only the app's own window can reach (so there is no Host, Origin or token to
/// check). Same route table, handlers, status codes and JSON bodies as `/api/`.
#[derive(Clone)]
pub struct LocalControl {
    router: Router,
}

impl std::fmt::Debug for LocalControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalControl").finish_non_exhaustive()
    }
}

impl LocalControl {
    pub fn new(service: ControlService) -> LocalControl {
        LocalControl { router: routes().with_state(service) }
    }

    /// Serves one request: `path` is `/api/…` with an optional query string, `body` the JSON body.
    pub async fn call(&self, method: &str, path: &str, body: Option<serde_json::Value>) -> dto::IpcReply {
        use tower::ServiceExt;
        let reply = |status: StatusCode, kind: &str, message: String| dto::IpcReply {
            status: status.as_u16(),
            body: serde_json::to_value(dto::ErrorBody { kind: kind.to_owned(), message }).unwrap_or_default(),
        };
        if !path.starts_with("/api/") {
            return reply(StatusCode::NOT_FOUND, "not_found", format!("no route for {path}"));
        }
        let Ok(method) = axum::http::Method::from_bytes(method.as_bytes()) else {
            return reply(StatusCode::METHOD_NOT_ALLOWED, "invalid", format!("bad method `{method}`"));
        };
        let bytes = match &body {
            Some(v) => serde_json::to_vec(v).unwrap_or_default(),
            None => Vec::new(),
        };
        let req = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header(axum::http::header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(bytes));
        let req = match req {
            Ok(r) => r,
            Err(e) => return reply(StatusCode::BAD_REQUEST, "invalid", format!("bad request: {e}")),
        };
        let Ok(resp) = self.router.clone().oneshot(req).await;
        let status = resp.status();
        let bytes = match axum::body::to_bytes(resp.into_body(), LOCAL_REPLY_LIMIT).await {
            Ok(b) => b,
            Err(e) => return reply(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("reading the answer: {e}")),
        };
        let body = if bytes.is_empty() && status.is_success() {
            serde_json::Value::Null
        } else if bytes.is_empty() {
            // The router's own 404 and 405 have no body; every error answer is `{kind, message}`.
            let kind = if status == StatusCode::NOT_FOUND { "not_found" } else { "invalid" };
            serde_json::to_value(dto::ErrorBody { kind: kind.to_owned(), message: format!("no route for {path}") })
                .unwrap_or_default()
        } else {
            match serde_json::from_slice(&bytes) {
                Ok(v) => v,
                // A download (CSV) reaches the app window as one JSON string.
                Err(_) if status.is_success() => {
                    serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned())
                }
                // axum's own rejections (405, a bad path parameter) are plain text.
                Err(_) => {
                    let kind = if status.is_client_error() { "invalid" } else { "internal" };
                    serde_json::to_value(dto::ErrorBody {
                        kind: kind.to_owned(),
                        message: String::from_utf8_lossy(&bytes).into_owned(),
                    })
                    .unwrap_or_default()
                }
            }
        };
        dto::IpcReply { status: status.as_u16(), body }
    }
}

type Svc = State<ControlService>;

async fn export(s: ControlService, what: &str, q: Result<Query<dto::ExportQuery>, QueryRejection>) -> Response {
    let q = match query(q) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    match s.export(what, q).await {
        Ok((body, content_type, file)) => (
            [
                (axum::http::header::CONTENT_TYPE, content_type.to_owned()),
                (axum::http::header::CONTENT_DISPOSITION, format!("attachment; filename=\"{file}\"")),
            ],
            body,
        )
            .into_response(),
        Err(e) => CtlError(e).into_response(),
    }
}

async fn prices(State(s): Svc) -> Res<dto::PriceReport> {
    ok(s.prices().await)
}

async fn set_price(State(s): Svc, Path(model): Path<String>, body: Bytes) -> Res<dto::PriceReport> {
    ok(s.set_price(&model, json(&body)?).await)
}

async fn unset_price(State(s): Svc, Path(model): Path<String>) -> Res<dto::PriceReport> {
    ok(s.unset_price(&model).await)
}

async fn export_calls(State(s): Svc, q: Result<Query<dto::ExportQuery>, QueryRejection>) -> Response {
    export(s, "calls", q).await
}

async fn export_usage(State(s): Svc, q: Result<Query<dto::ExportQuery>, QueryRejection>) -> Response {
    export(s, "usage", q).await
}

async fn status(State(s): Svc) -> Res<dto::EngineStatus> {
    ok(s.status().await)
}

async fn doctor(State(s): Svc) -> Res<dto::DoctorReport> {
    ok(Ok(s.doctor().await))
}

async fn providers(State(s): Svc) -> Res<Vec<dto::Provider>> {
    ok(s.providers().await)
}

async fn create_provider(State(s): Svc, body: Bytes) -> Res<dto::Provider> {
    ok(s.create_provider(json(&body)?).await)
}

async fn update_provider(State(s): Svc, Path(name): Path<String>, body: Bytes) -> Res<dto::Provider> {
    ok(s.update_provider(&name, json(&body)?).await)
}

async fn delete_provider(State(s): Svc, Path(name): Path<String>) -> Result<StatusCode, CtlError> {
    s.delete_provider(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn test_provider(State(s): Svc, Path(name): Path<String>) -> Res<dto::ConnectionTest> {
    ok(s.test_provider(&name).await)
}

async fn set_key(State(s): Svc, Path(name): Path<String>, body: Bytes) -> Res<dto::KeyInfo> {
    // A generic message: serde's could quote the key back.
    let input: dto::KeyInput = serde_json::from_slice(&body)
        .map_err(|_| CtlError(ControlError::Invalid(r#"expected {"value": "<key>"}"#.into())))?;
    ok(s.set_provider_key(&name, input).await)
}

async fn delete_key(State(s): Svc, Path(name): Path<String>) -> Res<dto::KeyInfo> {
    ok(s.delete_provider_key(&name).await)
}

async fn models(State(s): Svc) -> Res<Vec<dto::Model>> {
    ok(s.models().await)
}

async fn create_model(State(s): Svc, body: Bytes) -> Res<dto::Model> {
    ok(s.create_model(json(&body)?).await)
}

async fn update_model(State(s): Svc, Path(name): Path<String>, body: Bytes) -> Res<dto::Model> {
    ok(s.update_model(&name, json(&body)?).await)
}

async fn delete_model(State(s): Svc, Path(name): Path<String>) -> Result<StatusCode, CtlError> {
    s.delete_model(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn cursor_versions(State(s): Svc) -> Res<dto::CursorGuardReport> {
    ok(s.cursor_versions().await)
}

async fn retry_cursor_version(State(s): Svc, Path(version): Path<String>) -> Res<dto::CursorGuardReport> {
    ok(s.retry_cursor_version(&version).await)
}

async fn budgets(State(s): Svc) -> Res<dto::BudgetReport> {
    ok(s.budgets().await)
}

async fn create_budget(State(s): Svc, body: Bytes) -> Res<dto::BudgetReport> {
    ok(s.create_budget(json(&body)?).await)
}

async fn update_budget(State(s): Svc, Path(name): Path<String>, body: Bytes) -> Res<dto::BudgetReport> {
    ok(s.update_budget(&name, json(&body)?).await)
}

async fn delete_budget(State(s): Svc, Path(name): Path<String>) -> Res<dto::BudgetReport> {
    ok(s.delete_budget(&name).await)
}

async fn test_model(State(s): Svc, Path(name): Path<String>) -> Res<dto::ConnectionTest> {
    ok(s.test_model(&name).await)
}

async fn routing(State(s): Svc) -> Res<dto::Routing> {
    ok(s.routing().await)
}

async fn set_routing(State(s): Svc, body: Bytes) -> Res<dto::Routing> {
    ok(s.set_routing(json(&body)?).await)
}

async fn set_model_route(State(s): Svc, Path(name): Path<String>, body: Bytes) -> Res<dto::Routing> {
    ok(s.set_model_route(&name, json(&body)?).await)
}

async fn set_tab(State(s): Svc, body: Bytes) -> Res<dto::Routing> {
    ok(s.set_tab(json(&body)?).await)
}

async fn ca_status(State(s): Svc) -> Res<dto::CaStatus> {
    ok(s.ca_status().await)
}

async fn ca_install(State(s): Svc) -> Res<dto::CaChange> {
    ok(s.ca_install().await)
}

async fn ca_uninstall(State(s): Svc) -> Res<dto::CaChange> {
    ok(s.ca_uninstall().await)
}

async fn ca_rotate(State(s): Svc) -> Res<dto::CaChange> {
    ok(s.ca_rotate().await)
}

async fn usage(State(s): Svc, q: Result<Query<dto::UsageQuery>, QueryRejection>) -> Res<dto::UsageReport> {
    ok(s.usage(query(q)?).await)
}

async fn usage_series(State(s): Svc, q: Result<Query<dto::UsageSeriesQuery>, QueryRejection>) -> Res<dto::UsageSeries> {
    ok(s.usage_series(query(q)?).await)
}

async fn sessions(State(s): Svc, q: Result<Query<dto::SessionQuery>, QueryRejection>) -> Res<dto::SessionList> {
    ok(s.sessions(query(q)?).await)
}

async fn calls(State(s): Svc, q: Result<Query<dto::CallQuery>, QueryRejection>) -> Res<dto::CallPage> {
    ok(s.calls(query(q)?).await)
}

async fn call(State(s): Svc, Path(id): Path<String>) -> Res<dto::CallDetail> {
    ok(s.call(&id).await)
}

async fn delete_call(State(s): Svc, Path(id): Path<String>) -> Res<dto::Deleted> {
    ok(s.delete_call(&id).await)
}

async fn retention(State(s): Svc) -> Res<dto::Retention> {
    ok(s.retention().await)
}

async fn set_retention(State(s): Svc, body: Bytes) -> Res<dto::RetentionApplied> {
    ok(s.set_retention(json(&body)?).await)
}

async fn clients(State(s): Svc) -> Res<Vec<dto::ClientSetup>> {
    ok(s.clients().await)
}

fn client_of(name: &str) -> Result<dto::SetupClient, CtlError> {
    serde_json::from_value(serde_json::Value::String(name.to_owned()))
        .map_err(|_| CtlError(ControlError::NotFound(format!("no client `{name}` (cursor, claudeCode, codex)"))))
}

async fn route_client(State(s): Svc, Path(client): Path<String>, body: Bytes) -> Res<dto::SetupResult> {
    let opts = if body.is_empty() { dto::RouteOptions::default() } else { json(&body)? };
    ok(s.route_client(client_of(&client)?, opts).await)
}

async fn undo_client(State(s): Svc, Path(client): Path<String>) -> Res<dto::SetupResult> {
    ok(s.undo_client(client_of(&client)?).await)
}

async fn preview_route(State(s): Svc, Path(client): Path<String>, body: Bytes) -> Res<dto::SetupPreview> {
    let opts = if body.is_empty() { dto::RouteOptions::default() } else { json(&body)? };
    ok(s.preview_route(client_of(&client)?, opts).await)
}

async fn preview_undo(State(s): Svc, Path(client): Path<String>) -> Res<dto::SetupPreview> {
    ok(s.preview_undo(client_of(&client)?).await)
}

async fn env_setup(State(s): Svc) -> Res<dto::EnvSetup> {
    ok(s.env_setup().await)
}

async fn route_env(State(s): Svc) -> Res<dto::EnvSetup> {
    ok(s.route_env().await)
}

async fn undo_env(State(s): Svc) -> Res<dto::EnvSetup> {
    ok(s.undo_env().await)
}

#[derive(Debug, Deserialize)]
struct LogQuery {
    n: Option<usize>,
    after: Option<u64>,
}

async fn logs(State(s): Svc, q: Result<Query<LogQuery>, QueryRejection>) -> Res<Vec<dto::LogLine>> {
    let q = query(q)?;
    let n = q.n.unwrap_or(200).min(crate::control::logs::DEFAULT_CAPACITY);
    Ok(axum::Json(match q.after {
        Some(seq) => s.logs_after(seq, n),
        None => s.tail(n),
    }))
}

async fn settings(State(s): Svc) -> Res<dto::Settings> {
    ok(s.settings().await)
}

async fn set_settings(State(s): Svc, body: Bytes) -> Res<dto::SettingsApplied> {
    ok(s.set_settings(json(&body)?).await)
}

async fn web_settings(State(s): Svc) -> Res<dto::WebSettings> {
    ok(s.web_settings().await)
}

async fn set_web_settings(State(s): Svc, body: Bytes) -> Res<dto::WebSettings> {
    ok(s.set_web_settings(json(&body)?).await)
}

async fn set_web_key(State(s): Svc, body: Bytes) -> Res<dto::WebSettings> {
    // A generic message: serde's could quote the key back.
    let input: dto::KeyInput = serde_json::from_slice(&body)
        .map_err(|_| CtlError(ControlError::Invalid(r#"expected {"value": "<key>"}"#.into())))?;
    ok(s.set_web_key(input).await)
}

async fn delete_web_key(State(s): Svc) -> Res<dto::WebSettings> {
    ok(s.delete_web_key().await)
}

async fn test_web_search(State(s): Svc, body: Bytes) -> Res<dto::WebTestResult> {
    ok(s.test_web_search(json(&body)?).await)
}
