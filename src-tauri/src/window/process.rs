//! Linux, the window process (`keyhaven-app --window`, started by [`super::launcher`]): a Tauri
//! app with the dashboard window and nothing else (no engine, tray, single-instance name or
//! autostart). Its `control` calls go to the tray app over [`super::pipe`]. It exits when the
//! window closes (Tauri ends an app whose last window is gone) or when the tray app does (its
//! stdin ends).

use std::sync::Arc;

use tauri::Manager;

use super::pipe::Link;
use crate::MAIN_WINDOW;

/// Runs the window process until its window closes or the tray app goes.
pub fn run() -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    if std::io::stdin().is_terminal() {
        anyhow::bail!("--window is the dashboard window's process, started by the tray app; run keyhaven-app instead");
    }
    // Started as `/proc/self/exe`, which process lists would show as "exe".
    if let Err(e) = std::fs::write("/proc/self/comm", "keyhaven-app") {
        tracing::debug!(error = %e, "could not name the window process");
    }
    let link = Arc::new(Link::new(tokio::io::stdout()));
    let app = tauri::Builder::default()
        .invoke_handler(tauri::generate_handler![crate::commands::control])
        .setup(move |app| {
            app.manage(link.clone());
            let window = super::build(app.handle())?;
            super::present(&window);
            let handle = app.handle().clone();
            tauri::async_runtime::spawn(async move {
                let presenting = handle.clone();
                link.listen(tokio::io::stdin(), move || {
                    if let Some(w) = presenting.get_webview_window(MAIN_WINDOW) {
                        super::present(&w);
                    }
                })
                .await;
                tracing::info!("the tray app is gone: closing the dashboard window");
                handle.exit(0);
            });
            Ok(())
        })
        .build(crate::context())?;
    app.run(|_, _| {});
    Ok(())
}
