//! The built web UI (`ui/dist`), served at `/` when `[server] ui_dir` names an existing
//! directory. `index.html` gets the control token injected: the placeholder
//! `%KEYHAVEN_TOKEN%` (e.g. in `<meta name="keyhaven-token" content="%KEYHAVEN_TOKEN%">`) is
//! replaced at serve time. Paths without a file fall back to `index.html` (client-side routing);
//! paths with `..` or other odd segments are refused. Every response is `no-store` and may not be
//! framed. This is the router's fallback: with no UI, unknown paths get the gateway's 404.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::api::control::error_response;
use crate::api::control::guard::{ControlGuard, harden};
use crate::control::token::ControlToken;

/// The placeholder in `index.html` that becomes the control token.
pub const TOKEN_PLACEHOLDER: &str = "%KEYHAVEN_TOKEN%";

#[derive(Debug, Clone)]
pub struct UiState {
    pub dir: Option<PathBuf>,
    pub token: Option<Arc<ControlToken>>,
    pub guard: Arc<ControlGuard>,
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

fn file_response(path: &Path, token: Option<&ControlToken>) -> Option<Response> {
    let bytes = std::fs::read(path).ok()?;
    let is_index = path.file_name().is_some_and(|n| n == "index.html");
    let body = match (is_index, token) {
        (true, Some(t)) => String::from_utf8_lossy(&bytes).replace(TOKEN_PLACEHOLDER, t.expose()).into_bytes(),
        _ => bytes,
    };
    let mut resp = body.into_response();
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
        _ if path.starts_with("/api/") => {
            error_response(StatusCode::NOT_FOUND, "not_found", &format!("no route for {path}"))
        }
        (Some(dir), &Method::GET | &Method::HEAD) if dir.is_dir() => {
            let dir = dir.clone();
            let token = ui.token.clone();
            let found = tokio::task::spawn_blocking(move || {
                let file = resolve(&dir, &path)?;
                let file = if file.is_dir() { file.join("index.html") } else { file };
                if file.is_file() {
                    return file_response(&file, token.as_deref());
                }
                // Client-side routes (no extension) get the app; missing assets get 404.
                if Path::new(&path).extension().is_none() {
                    return file_response(&dir.join("index.html"), token.as_deref());
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
        _ => crate::api::gateway::not_found(req.uri().clone()).await,
    };
    harden(&mut resp);
    resp
}
