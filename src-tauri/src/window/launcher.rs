//! Linux, the tray app's side: the dashboard window runs in its own process, this binary with
//! `--window` ([`super::process`]), started on open and gone when the window closes.
//!
//! Why a process and not only a destroyed webview: WebKitGTK initialises EGL in the process
//! that hosts a webview (when it launches its web process), which loads Mesa's driver and LLVM
//! (about 50 MB under a software renderer) for the life of that process. In the tray app's own
//! process that memory would stay after the window closed; in the window's process it ends with
//! it. It also keeps a WebKit or graphics-driver crash away from the engine.
//!
//! The window's `control` calls reach the engine through [`super::pipe`] over the child's stdin
//! and stdout, and are served here exactly as the in-process command serves them.

use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tauri::{AppHandle, Manager, Runtime};
use tokio::sync::mpsc;

use super::pipe::{self, ToWindow};

/// The channel to the running window process, if any.
#[derive(Default)]
pub struct Slot(Mutex<Option<mpsc::UnboundedSender<ToWindow>>>);

/// Brings the running window to the front, or starts the window process.
pub fn open<R: Runtime>(app: &AppHandle<R>) {
    let Some(slot) = app.try_state::<Slot>() else {
        tracing::error!("cannot open the dashboard window: the window slot is missing");
        return;
    };
    let Ok(mut running) = slot.0.lock() else { return };
    if let Some(sender) = running.as_ref()
        && sender.send(ToWindow::Present).is_ok()
    {
        return;
    }
    // Claimed before the process starts, so a second click presents instead of starting another.
    let (sender, receiver) = mpsc::unbounded_channel();
    *running = Some(sender.clone());
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        run(&app, (sender.clone(), receiver)).await;
        // Forget this process, unless a newer one has taken the slot meanwhile.
        if let Some(slot) = app.try_state::<Slot>()
            && let Ok(mut running) = slot.0.lock()
            && running.as_ref().is_some_and(|s| s.same_channel(&sender))
        {
            *running = None;
        }
    });
}

/// Starts the window process and serves it until it exits.
async fn run<R: Runtime>(
    app: &AppHandle<R>,
    outbox: (mpsc::UnboundedSender<ToWindow>, mpsc::UnboundedReceiver<ToWindow>),
) {
    // This very binary, even when a package upgrade has replaced the file since the app started
    // (the kernel keeps the running image): the window always speaks this app's pipe protocol.
    // It keeps the app's `argv[0]`, and names itself (`window::process`) for process lists.
    let spawned = tokio::process::Command::new("/proc/self/exe")
        .arg0(std::env::args_os().next().unwrap_or_else(|| "keyhaven-app".into()))
        .arg("--window")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return tracing::error!(error = %e, "cannot start the dashboard window's process"),
    };
    let (Some(to_window), Some(from_window)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill().await;
        return tracing::error!("the dashboard window's process has no pipes");
    };
    let pid = child.id();
    tracing::info!(pid, "dashboard window process started");
    let serving = app.clone();
    let loaded = AtomicBool::new(false);
    pipe::serve_window(from_window, to_window, outbox, move |method, path, body| {
        if !loaded.swap(true, Ordering::Relaxed) {
            tracing::info!(pid, "dashboard window loaded: its first control call arrived");
        }
        let app = serving.clone();
        async move { crate::commands::serve(&app, &method, &path, body).await }
    })
    .await;
    match child.wait().await {
        Ok(status) if status.success() => tracing::info!("dashboard window closed"),
        Ok(status) => tracing::warn!(%status, "the dashboard window's process ended abnormally"),
        Err(e) => tracing::warn!(error = %e, "the dashboard window's process could not be waited for"),
    }
}
