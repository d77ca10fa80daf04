//! The dashboard window's lifecycle. The window exists only while it is open: closing it
//! destroys the window and its webview (WebKit's web process goes with it), and "Open
//! dashboard" (or a second instance) builds it again from its `tauri.conf.json` entry, which has
//! `"create": false` so nothing is built at start; `--hidden` therefore starts without any
//! WebKit process. On Linux every new webview gets the low-memory WebKit settings of
//! [`lighten`], and once the window is gone the network process WebKit keeps for the app's
//! lifetime is ended ([`network`]).

#[cfg(target_os = "linux")]
mod network;

use tauri::{AppHandle, Manager, Runtime, WebviewWindow, WebviewWindowBuilder};

use crate::MAIN_WINDOW;

/// Shows the dashboard: brings an open window to the front, or builds a new one. Creation runs
/// on the async runtime, never in the caller's event handler (WebView2 deadlocks there).
pub fn open<R: Runtime>(app: &AppHandle<R>) {
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

/// The window was destroyed (closed by the user): end what WebKit keeps without a webview.
pub fn destroyed<R: Runtime>(app: &AppHandle<R>) {
    tracing::info!("dashboard window closed");
    #[cfg(target_os = "linux")]
    network::end_when_idle(app.clone());
    #[cfg(not(target_os = "linux"))]
    let _ = app;
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
