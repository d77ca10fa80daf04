//! What the shell learns from the machine (the engine reads no environment): the display, the
//! platform directories, the config for each start, the OS keyring.

use std::path::PathBuf;
use std::sync::Arc;

use keyhaven::app::EngineExtras;
use keyhaven::app::host::{Host, Paths, load_config};
use keyhaven::app::supervisor::ConfigSource;
use keyhaven::config::ProxyConfig;
use keyhaven::control::logs::LogRing;
use keyhaven::secrets::{OsKeyring, Secrets};

use crate::Args;

/// Linux without `DISPLAY` and `WAYLAND_DISPLAY` has no display for a window or a tray.
pub fn has_display() -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    let set = |v: &str| std::env::var_os(v).is_some_and(|s| !s.is_empty());
    set("DISPLAY") || set("WAYLAND_DISPLAY")
}

/// The system's UTC offset in seconds, read once at the start of `main` (`None`: the platform
/// would not say, e.g. when read after other threads started).
static LOCAL_OFFSET: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();

/// Reads the system's UTC offset; call first in `main`, while it is the only thread.
pub fn init_local_offset() {
    LOCAL_OFFSET.get_or_init(|| time::UtcOffset::current_local_offset().ok().map(time::UtcOffset::whole_seconds));
}

/// The machine as this binary finds it (the same lookups as the `keyhaven` binary).
pub fn host() -> Host {
    let dirs = directories::ProjectDirs::from("dev", "keyhaven", "keyhaven");
    Host {
        home: directories::BaseDirs::new().map(|b| b.home_dir().to_path_buf()),
        config_dir: dirs.as_ref().map(|d| d.config_dir().to_path_buf()),
        data_dir: dirs.as_ref().map(|d| d.data_dir().to_path_buf()),
        appdata: std::env::var_os("APPDATA").map(PathBuf::from),
        temp_dir: std::env::temp_dir(),
        cwd: std::env::current_dir().unwrap_or_else(|_| std::env::temp_dir()),
        // The system's zone for budget periods, read by `main` before any other thread started.
        local_offset_s: LOCAL_OFFSET.get().copied().flatten(),
    }
}

/// The XDG autostart folders: the user's (`$XDG_CONFIG_HOME/autostart`) and the system's
/// (`<dir>/autostart` for each of `$XDG_CONFIG_DIRS`, default `/etc/xdg`). Elsewhere none: the
/// plugin's own entry is the whole story there.
pub fn autostart_dirs() -> (PathBuf, Vec<PathBuf>) {
    let home = directories::BaseDirs::new().map(|b| b.config_dir().to_path_buf()).unwrap_or_default();
    if !cfg!(target_os = "linux") {
        return (home.join("autostart"), Vec::new());
    }
    let system = std::env::var("XDG_CONFIG_DIRS").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "/etc/xdg".into());
    (home.join("autostart"), std::env::split_paths(&system).map(|d| d.join("autostart")).collect())
}

pub fn paths(args: &Args) -> anyhow::Result<Paths> {
    Ok(host().paths(args.config.clone(), args.data_dir.clone())?)
}

/// Keys from the OS keyring, or from environment variables named in the config.
pub fn secrets() -> Secrets {
    Secrets::new(Arc::new(OsKeyring), Arc::new(|name: &str| std::env::var(name).ok()))
}

/// The engine's environment parts, and a source that re-reads the config file on every start
/// (edits made while running, and by hand while stopped, apply on the next Start). A broken or
/// unreadable config does not stop the app: the start fails and the tray shows the error.
pub fn config_source(args: &Args, logs: Option<LogRing>) -> anyhow::Result<(ConfigSource, EngineExtras)> {
    let host = host();
    let paths = paths(args)?;
    // Writes the first-run template; the setup environment needs the listen addresses.
    let file = load_config(&paths.config, &mut std::io::sink()).ok();
    let proxy = file.as_ref().map_or_else(|| ProxyConfig::default().listen, |f| f.proxy.listen);
    let extras = EngineExtras {
        local_offset_s: host.local_offset_s,
        trust: host.trust_env(),
        setup: host.setup_env(&paths, file.as_ref(), &format!("http://{proxy}")),
        logs,
    };
    let source: ConfigSource = Arc::new(move || {
        host.serve_config(&paths, None, &mut std::io::sink()).map(|(config, _)| config).map_err(|e| e.to_string())
    });
    Ok((source, extras))
}

pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
