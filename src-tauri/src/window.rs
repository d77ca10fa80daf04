//! The dashboard window's lifecycle. The window exists only while it is open: "Open dashboard"
//! (or a second instance) builds it from its `tauri.conf.json` entry, which has `"create":
//! false` so nothing is built at start (`--hidden` therefore starts without any WebKit process),
//! and closing it destroys it.
//!
//! On Linux the window lives in its own process ([`launcher`] starts it, [`process`] is its
//! main, [`pipe`] carries its `control` calls to the engine), which ends when the window closes
//! and takes everything WebKitGTK loaded with it. Elsewhere the webview is in the app's process
//! and is destroyed with the window (WebView2 and WKWebView render out of process anyway).
//! Every new webview gets the low-memory WebKit settings of [`lighten`].

#[cfg(target_os = "linux")]
mod launcher;
#[cfg(target_os = "linux")]
pub mod pipe;
#[cfg(target_os = "linux")]
pub mod process;

#[cfg(target_os = "linux")]
pub use launcher::Slot;
use tauri::{AppHandle, Runtime, WebviewWindow, WebviewWindowBuilder};

use crate::MAIN_WINDOW;

/// Shows the dashboard: brings an open window to the front, or opens a new one.
pub fn open<R: Runtime>(app: &AppHandle<R>) {
    #[cfg(target_os = "linux")]
    launcher::open(app);
    #[cfg(not(target_os = "linux"))]
    open_here(app);
}

/// Builds the window in this process. Creation runs on the async runtime, never in the
/// caller's event handler (WebView2 deadlocks there).
#[cfg(not(target_os = "linux"))]
fn open_here<R: Runtime>(app: &AppHandle<R>) {
    use tauri::Manager as _;
    if let Some(w) = app.get_webview_window(MAIN_WINDOW) {
        present(&w);
        return;
    }
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        // Two quick clicks may race here; the loser finds the label taken and shows the winner.
        match build(&app) {
            Ok(w) => present(&w),
            Err(e) => match app.get_webview_window(MAIN_WINDOW) {
                Some(w) => present(&w),
                None => tracing::error!(error = %e, "cannot open the dashboard window"),
            },
        }
    });
}

/// The window as `tauri.conf.json` describes it (hidden until [`present`]).
fn build<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<WebviewWindow<R>> {
    let config = app
        .config()
        .app
        .windows
        .iter()
        .find(|w| w.label == MAIN_WINDOW)
        .cloned()
        .ok_or_else(|| tauri::Error::WindowNotFound)?;
    let window = WebviewWindowBuilder::from_config(app, &config)?.build()?;
    lighten(&window);
    tracing::info!("dashboard window opened");
    Ok(window)
}

fn present<R: Runtime>(w: &WebviewWindow<R>) {
    let _ = w.show();
    let _ = w.unminimize();
    let _ = w.set_focus();
}

/// WebKitGTK settings for a small local dashboard: no back/forward page cache, no WebGL or
/// Web Audio, and the document-viewer cache model, which keeps WebKit's memory caches small and
/// turns its web process cache off, so the web process exits with the last webview instead of
/// being kept for reuse. (No compositing is chosen by the environment at start, see `main.rs`:
/// switching `hardware-acceleration-policy` on a live webview leaves WebKitGTK 2.50 without a
/// web process.)
#[cfg(target_os = "linux")]
fn lighten<R: Runtime>(window: &WebviewWindow<R>) {
    use webkit2gtk::{CacheModel, SettingsExt, WebContextExt, WebViewExt};
    let applied = window.with_webview(|platform| {
        let view = platform.inner();
        if let Some(context) = view.context() {
            context.set_cache_model(CacheModel::DocumentViewer);
        }
        if let Some(settings) = WebViewExt::settings(&view) {
            settings.set_enable_page_cache(false);
            settings.set_enable_webgl(false);
            settings.set_enable_webaudio(false);
        }
    });
    if let Err(e) = applied {
        tracing::warn!(error = %e, "WebKit memory settings not applied");
    }
}

#[cfg(not(target_os = "linux"))]
fn lighten<R: Runtime>(_window: &WebviewWindow<R>) {}
