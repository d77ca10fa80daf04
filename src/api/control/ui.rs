//! The built web UI (`ui/dist`), served at `/` when `[server] ui_dir` names an existing
//! directory, byte for byte: no file the UI serves contains a credential (issue 14 §1). The page
//! reaches the control API with a session cookie it gets at `GET /auth?nonce=…` ([`auth_path`],
//! [`super::session`]): a live nonce gives a `303 Location: /` with the cookie, anything else a
//! page saying how to get a new link. Paths without a file fall back to `index.html` (client-side
//! routing); paths with `..` or other odd segments are refused. Every response is `no-store` and
//! may not be framed. This is the router's fallback: with no UI, unknown paths get the gateway's
//! 404.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::api::control::error_response;
use crate::api::control::guard::{ControlGuard, harden};
use crate::api::control::session::Sessions;

#[derive(Debug, Clone)]
pub struct UiState {
    pub dir: Option<PathBuf>,
    /// The control API's sessions; `None`: no control API, `/auth` is not served.
    pub sessions: Option<Arc<Sessions>>,
    pub guard: Arc<ControlGuard>,
}

/// The path and query of a one-time dashboard link.
pub fn auth_path(nonce: &str) -> String {
    format!("/auth?nonce={nonce}")
}

/// `GET /auth?nonce=…`: trades a live nonce for a session cookie and sends the browser to `/`
/// (so the nonce leaves the address bar and the history).
fn auth(sessions: &Sessions, query: Option<&str>) -> Response {
    let nonce =
        query.unwrap_or("").split('&').filter_map(|kv| kv.split_once('=')).find(|(k, _)| *k == "nonce").map(|(_, v)| v);
    match nonce.and_then(|n| sessions.redeem(n)) {
        Some(session) => {
            let mut resp = StatusCode::SEE_OTHER.into_response();
            let h = resp.headers_mut();
            h.insert(header::LOCATION, HeaderValue::from_static("/"));
            if let Ok(v) = HeaderValue::from_str(&sessions.set_cookie(&session)) {
                h.insert(header::SET_COOKIE, v);
            }
            resp
        }
        None => {
            let page = "<!doctype html><meta charset=utf-8><title>Keyhaven</title>\
                <h1>This dashboard link has expired or was already used</h1>\
                <p>Each link opens the dashboard once, within a minute. Run <code>keyhaven dashboard</code> \
                for a new one (or use the app window).</p>";
            let mut resp = (StatusCode::UNAUTHORIZED, page).into_response();
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
            resp
        }
    }
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "wasm" => "application/wasm",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// The file for a request path, if the path is clean.
fn resolve(dir: &Path, path: &str) -> Option<PathBuf> {
    let mut out = dir.to_path_buf();
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        let ok = seg != ".." && seg != "." && !seg.contains(['\\', ':', '\0']) && !seg.starts_with('.');
        if !ok {
            return None;
        }
        out.push(seg);
    }
    Some(out)
}

fn file_response(path: &Path) -> Option<Response> {
    let bytes = std::fs::read(path).ok()?;
    let mut resp = bytes.into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(path)));
    resp.headers_mut().insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("frame-ancestors 'none'"));
    Some(resp)
}

pub async fn serve(State(ui): State<UiState>, req: Request) -> Response {
    if let Err(refusal) = ui.guard.admit(&req) {
        let mut resp = refusal.response();
        harden(&mut resp);
        return resp;
    }
    let path = req.uri().path().to_owned();
    let mut resp = match (&ui.dir, req.method()) {
        _ if path == "/auth" && matches!(*req.method(), Method::GET) && ui.sessions.is_some() => match &ui.sessions {
            Some(sessions) => auth(sessions, req.uri().query()),
            None => crate::api::gateway::not_found(req.uri().clone()).await,
        },
        _ if path.starts_with("/api/") => {
            error_response(StatusCode::NOT_FOUND, "not_found", &format!("no route for {path}"))
        }
        (Some(dir), &Method::GET | &Method::HEAD) if dir.is_dir() => {
            let dir = dir.clone();
            let found = tokio::task::spawn_blocking(move || {
                let file = resolve(&dir, &path)?;
                let file = if file.is_dir() { file.join("index.html") } else { file };
                if file.is_file() {
                    return file_response(&file);
                }
                // Client-side routes (no extension) get the app; missing assets get 404.
                if Path::new(&path).extension().is_none() {
                    return file_response(&dir.join("index.html"));
                }
                None
            })
            .await
            .ok()
            .flatten();
            match found {
                Some(r) => r,
                None => crate::api::gateway::not_found(req.uri().clone()).await,
            }
        }
        // Clients probe the base URL before their first call (Claude Code sends `HEAD /`): a live
        // gateway answers 200 whether or not it serves the dashboard.
        (_, &Method::HEAD) if path == "/" => StatusCode::OK.into_response(),
        _ => crate::api::gateway::not_found(req.uri().clone()).await,
    };
    harden(&mut resp);
    resp
}
