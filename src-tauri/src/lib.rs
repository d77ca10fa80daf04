//! Keyhaven's desktop shell, the only package that knows Tauri. It is thin: the engine's
//! lifecycle (start, stop, drain, restore routed clients, error state) is
//! `keyhaven::app::supervisor::Supervisor`; the window's one IPC command hands every control
//! call to it ([`commands`]); the tray ([`tray`]) maps menu items to supervisor and control
//! calls and follows the supervisor's status. The dashboard window exists only while it is open
//! ([`window`]): closing it destroys it and its WebKit processes. On Linux it is a process of its
//! own (this binary with `--window`), so the tray app's process never loads WebKit's graphics
//! stack.
//!
//! Where there is no display (Linux without `DISPLAY` and `WAYLAND_DISPLAY`, or `--headless`)
//! the binary runs the headless engine with the web dashboard instead ([`headless`]).
//!
//! One Tokio runtime: built here and handed to Tauri (`tauri::async_runtime::set`), so the engine
//! and Tauri's async work share it.

mod autostart;
mod commands;
mod desktop;
mod headless;
mod host;
mod tray;
mod window;

#[cfg(test)]
mod tests;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use keyhaven::app::supervisor::{Supervisor, SupervisorOptions};
use keyhaven::control::logs::LogRing;
use tauri::{Manager, RunEvent, WindowEvent};

/// The label of the dashboard window (`tauri.conf.json`).
pub const MAIN_WINDOW: &str = "main";
/// How long a stop or Quit waits for calls to finish.
const GRACE: Duration = Duration::from_secs(10);

#[derive(Parser, Debug)]
#[command(name = "keyhaven-app", version, about = "Keyhaven: the tray app, or the headless engine without a display")]
pub struct Args {
    /// The config file (default: the platform config dir, e.g. ~/.config/keyhaven/config.toml).
    #[arg(long, env = "KEYHAVEN_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Where the call database lives (default: the platform data dir).
    #[arg(long, env = "KEYHAVEN_DATA_DIR")]
    data_dir: Option<std::path::PathBuf>,
    /// Start in the tray without showing the window (used by start on login).
    #[arg(long)]
    hidden: bool,
    /// Run the headless engine and web dashboard even where there is a display.
    #[arg(long)]
    headless: bool,
    /// The dashboard window's own process, started by the tray app (Linux; not for people).
    #[arg(long, hide = true)]
    window: bool,
}

/// The binary's entry point.
pub fn main() -> ExitCode {
    // First, while this is the only thread: on Unix the platform's local offset can be read
    // safely only then (the `time` crate refuses once other threads run), and budgets need it.
    host::init_local_offset();
    let args = Args::parse();
    let logs = init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}")),
    };
    let result = if args.window {
        tauri::async_runtime::set(runtime.handle().clone());
        run_window()
    } else if args.headless || !host::has_display() {
        runtime.block_on(headless::run(&args, logs))
    } else {
        tauri::async_runtime::set(runtime.handle().clone());
        run_app(&args, logs)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&format!("{e:#}")),
    }
}

fn fail(message: &str) -> ExitCode {
    tracing::error!("{message}");
    ExitCode::FAILURE
}

/// Logs to stderr and into the ring the dashboard's Logs page reads.
fn init_tracing() -> LogRing {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let logs = LogRing::default();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(logs.layer())
        .try_init();
    logs
}

/// The dashboard window's own process (Linux: see `window::process`).
fn run_window() -> anyhow::Result<()> {
    #[cfg(target_os = "linux")]
    return window::process::run();
    #[cfg(not(target_os = "linux"))]
    anyhow::bail!("--window is the Linux window process; this platform keeps the window in the app")
}

/// The tray app.
fn run_app(args: &Args, logs: LogRing) -> anyhow::Result<()> {
    let context = context();
    // First, so a second instance hands over (the running one opens its window) before
    // anything else starts.
    let primary = match desktop::claim(&context.config().identifier) {
        desktop::Claim::Primary(primary) => Some(primary),
        desktop::Claim::HandedOver => {
            tracing::info!("Keyhaven is already running: its window was opened");
            return Ok(());
        }
        desktop::Claim::Unanswered(reason) => {
            anyhow::bail!("Keyhaven is already running but did not answer ({reason}); quit it from its tray menu first")
        }
        desktop::Claim::Unavailable(reason) => {
            tracing::warn!(%reason, "cannot look for a running instance; starting anyway");
            None
        }
    };
    let (source, extras) = host::config_source(args, Some(logs))?;
    let hidden = args.hidden;
    let app = desktop::plugins(tauri::Builder::default())
        .plugin(tauri_plugin_autostart::Builder::new().app_name(autostart::ENTRY_NAME).arg("--hidden").build())
        .invoke_handler(tauri::generate_handler![commands::control])
        .setup(move |app| {
            let supervisor = Supervisor::new(SupervisorOptions {
                config: source,
                secrets: host::secrets(),
                extras,
                grace: GRACE,
                autostart: Some(Arc::new(autostart::Xdg {
                    inner: autostart::Login(app.handle().clone()),
                    user_dir: host::autostart_dirs().0,
                    system_dirs: host::autostart_dirs().1,
                })),
            });
            app.manage(supervisor.clone());
            #[cfg(target_os = "linux")]
            app.manage(window::Slot::default());
            tray::install(app.handle())?;
            let handle = app.handle().clone();
            tauri::async_runtime::spawn(async move {
                // A failed start shows in the tray and the window; the app keeps running.
                let _ = supervisor.start().await;
                tray::refresh(&handle).await;
            });
            quit_on_signal(app.handle().clone());
            if let Some(primary) = primary {
                let handle = app.handle().clone();
                primary.serve(move || window::open(&handle));
            }
            // `--hidden` (start on login) builds no window: no WebKit process until it opens.
            if !hidden {
                window::open(app.handle());
            }
            Ok(())
        })
        .on_window_event(|w, event| {
            // Closing the window destroys it (and its webview); the app stays in the tray,
            // and Quit is in the tray menu. (On Linux the window is in its own process, and
            // `window::launcher` logs its end.)
            if let WindowEvent::Destroyed = event
                && w.label() == MAIN_WINDOW
            {
                tracing::info!("dashboard window closed");
            }
        })
        .build(context)?;
    app.run(|_app, event| {
        // Only `quit` ends the app (with a code); no window must end it implicitly.
        if let RunEvent::ExitRequested { code: None, api, .. } = event {
            api.prevent_exit();
        }
    });
    Ok(())
}

/// The app's config and embedded dashboard (`tauri.conf.json` at the repository root).
pub(crate) fn context() -> tauri::Context<tauri::Wry> {
    tauri::generate_context!("../tauri.conf.json")
}

/// Quit: drains the engine (restoring routed clients when that setting is on), then exits 0.
pub(crate) fn quit<R: tauri::Runtime>(app: &tauri::AppHandle<R>) {
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        if let Some(s) = app.try_state::<Supervisor>() {
            let report = s.shutdown().await;
            tracing::info!(drained = report.drained, restored = report.restored.len(), "quitting");
        }
        app.exit(0);
    });
}

/// SIGTERM or Ctrl-C quit like the tray's Quit, so a session logout drains too.
fn quit_on_signal<R: tauri::Runtime>(app: tauri::AppHandle<R>) {
    tauri::async_runtime::spawn(async move {
        host::shutdown_signal().await;
        tracing::info!("signal received");
        quit(&app);
    });
}
