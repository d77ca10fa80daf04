//! macOS and Windows: the Tauri plugins (configured, not built or tested here).

use tauri::{AppHandle, Runtime};
use tauri_plugin_clipboard_manager::ClipboardExt as _;
use tauri_plugin_notification::NotificationExt as _;

/// Adds the single-instance (first, so a second start hands over before anything else runs),
/// clipboard and notification plugins.
pub fn plugins<R: Runtime>(builder: tauri::Builder<R>) -> tauri::Builder<R> {
    builder
        .plugin(tauri_plugin_single_instance::init(|app, _argv, _cwd| crate::window::open(app)))
        .plugin(tauri_plugin_clipboard_manager::init())
        .plugin(tauri_plugin_notification::init())
}

/// Shows a desktop notification; a failure is logged.
pub fn notify<R: Runtime>(app: &AppHandle<R>, title: &str, body: &str) {
    if let Err(e) = app.notification().builder().title(title).body(body).show() {
        tracing::warn!(error = %e, "desktop notification not shown");
    }
}

/// Puts `text` on the clipboard; a failure is logged.
pub fn copy_text<R: Runtime>(app: &AppHandle<R>, text: String) {
    if let Err(e) = app.clipboard().write_text(text) {
        tracing::warn!(error = %e, "could not copy to the clipboard");
    }
}

/// The outcome of [`claim`]: here the single-instance plugin does the work, so always first.
#[expect(dead_code, reason = "the other outcomes come from the Linux claim only")]
pub enum Claim {
    Primary(Primary),
    HandedOver,
    Unanswered(String),
    Unavailable(String),
}

/// Nothing to hold: the plugin owns the instance lock.
pub struct Primary;

pub fn claim(_identifier: &str) -> Claim {
    Claim::Primary(Primary)
}

impl Primary {
    /// The plugin calls the window's `open` itself.
    pub fn serve(self, _on_handover: impl Fn() + Send + 'static) {}
}
