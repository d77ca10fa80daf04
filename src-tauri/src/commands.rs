//! The window's one IPC command. `control(method, path, body)` carries the same calls as the
//! HTTP control API (`/api/…`) and answers `{ status, body }` exactly as `/api/` would; the
//! supervisor serves `/api/app…` and hands everything else to the engine's one route table. No
//! Host, Origin or token check: only this app's own window can invoke it.

use keyhaven::app::supervisor::Supervisor;
use keyhaven::control::dto::IpcReply;
use serde_json::Value;
use tauri::{AppHandle, Manager, Runtime};

#[tauri::command]
pub async fn control<R: Runtime>(app: AppHandle<R>, method: String, path: String, body: Option<Value>) -> IpcReply {
    let supervisor = app.state::<Supervisor>().inner().clone();
    let reply = supervisor.request(&method, &path, body).await;
    // A change made in the window (routing mode, restore on stop, start/stop) shows in the tray.
    if method != "GET" {
        crate::tray::refresh(&app).await;
    }
    reply
}
