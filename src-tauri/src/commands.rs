//! The window's one IPC command. `control(method, path, body)` carries the same calls as the
//! HTTP control API (`/api/…`) and answers `{ status, body }` exactly as `/api/` would; the
//! supervisor serves `/api/app…` and hands everything else to the engine's one route table. No
//! Host, Origin or token check: only this app's own window can invoke it.
//!
//! On Linux the window is its own process: the command hands the call to the tray app over the
//! window's pipe (`window::pipe`), and the tray app runs [`serve`]. Elsewhere the command runs
//! [`serve`] itself.

use keyhaven::app::supervisor::Supervisor;
use keyhaven::control::dto::IpcReply;
use serde_json::Value;
use tauri::{AppHandle, Manager, Runtime};

#[tauri::command]
pub async fn control<R: Runtime>(app: AppHandle<R>, method: String, path: String, body: Option<Value>) -> IpcReply {
    #[cfg(target_os = "linux")]
    {
        match app.try_state::<std::sync::Arc<crate::window::pipe::Link>>() {
            Some(link) => link.request(method, path, body).await,
            None => crate::window::pipe::unavailable(),
        }
    }
    #[cfg(not(target_os = "linux"))]
    serve(&app, &method, &path, body).await
}

/// One control call against the engine, in the process that runs it.
pub async fn serve<R: Runtime>(app: &AppHandle<R>, method: &str, path: &str, body: Option<Value>) -> IpcReply {
    // Managed in the tray app's setup, before any window can exist.
    let supervisor = app.state::<Supervisor>().inner().clone();
    let reply = supervisor.request(method, path, body).await;
    // A change made in the window (routing mode, restore on stop, start/stop) shows in the tray.
    if method != "GET" {
        crate::tray::refresh(app).await;
    }
    reply
}
