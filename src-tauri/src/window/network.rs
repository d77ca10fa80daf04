//! WebKitGTK's network process outlives the window. Tauri keeps the one `WebContext` (and with
//! it WebKit's website data store and its `WebKitNetworkProcess`, about 60 MB) for the app's
//! lifetime on Linux, because WebKit does not end that process when a context goes away and a
//! new context would start another one (tauri-apps/tauri#14626, tauri-apps/wry#590). The web
//! process does exit with the last webview. So once the window has been gone for a moment, this
//! ends the network process itself (SIGTERM to the app's own child of that name); WebKit starts a
//! new one when the next window needs it.

use std::time::Duration;

use tauri::{AppHandle, Manager, Runtime};

/// How long the window must stay closed first (a reopen right after a close keeps the process).
const IDLE: Duration = Duration::from_secs(5);
/// The process name as `/proc/PID/comm` shows it (cut at 15 bytes).
const COMM: &str = "WebKitNetworkPr";

/// Ends the network process if, after [`IDLE`], the app has no webview left.
pub fn end_when_idle<R: Runtime>(app: AppHandle<R>) {
    tauri::async_runtime::spawn(async move {
        tokio::time::sleep(IDLE).await;
        // On the main thread, where windows are built: none can appear between check and kill.
        let main = app.clone();
        let _ = app.run_on_main_thread(move || {
            if main.webview_windows().is_empty() {
                for pid in children_named(std::process::id(), COMM) {
                    end(pid);
                }
            }
        });
    });
}

/// The live direct children of `parent` whose `comm` is `name`.
fn children_named(parent: u32, name: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // "pid (comm) state ppid …"; comm may hold spaces and parentheses.
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { return false };
            let mut rest = stat[close + 1..].split_whitespace();
            let (state, ppid) = (rest.next(), rest.next());
            &stat[open + 1..close] == name && state != Some("Z") && ppid == Some(&parent.to_string())
        })
        .collect()
}

fn end(pid: u32) {
    // `kill(1)`: signalling through libc would need `unsafe`, which this workspace forbids.
    match std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status() {
        Ok(s) if s.success() => tracing::info!(pid, "ended WebKit's network process (no window open)"),
        Ok(s) => tracing::warn!(pid, status = %s, "could not end WebKit's network process"),
        Err(e) => tracing::warn!(pid, error = %e, "could not end WebKit's network process"),
    }
}
