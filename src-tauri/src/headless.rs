//! Without a display: the headless engine with the web dashboard, like `keyhaven serve`, plus
//! the dashboard itself (the UI embedded in this binary is written to `<data dir>/dashboard/`
//! and served at `/` unless `[server] ui_dir` names another) and a one-time dashboard link printed
//! (never the control token), since there is no window to show it in.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use keyhaven::app::host;
use keyhaven::app::supervisor::{Supervisor, SupervisorOptions};
use keyhaven::control::logs::LogRing;

use crate::Args;

pub async fn run(args: &Args, logs: LogRing) -> anyhow::Result<()> {
    let machine = crate::host::host();
    let paths = crate::host::paths(args)?;
    let mut first_run = Vec::new();
    let (mut config, extras) = machine.serve_config(&paths, Some(logs), &mut first_run)?;
    if config.file.server.ui_dir.is_none() {
        config.file.server.ui_dir = Some(write_dashboard(&paths.data)?);
    }
    let models = config.file.models.len();
    let supervisor = Supervisor::new(SupervisorOptions {
        config: Arc::new(move || Ok(config.clone())),
        secrets: crate::host::secrets(),
        extras,
        grace: crate::GRACE,
        autostart: None,
    });
    let handle = supervisor.start().await?;
    let banner = host::banner(&handle, models, true, &paths.data);
    {
        // A closed stdout must not stop the gateway.
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&first_run);
        let _ = writeln!(out, "No display: running headless; open the dashboard in a browser.");
        let _ = out.write_all(banner.as_bytes());
        let _ = out.flush();
    }
    crate::host::shutdown_signal().await;
    tracing::info!("shutting down");
    // The supervisor logs what the stop restored and any notes.
    supervisor.shutdown().await;
    Ok(())
}

/// Writes the dashboard embedded in this binary (the built `ui/dist`) to `<data>/dashboard/`.
fn write_dashboard(data: &Path) -> anyhow::Result<PathBuf> {
    let dir = data.join("dashboard");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    let context = crate::context();
    let assets = context.assets();
    let keys: Vec<String> = assets.iter().map(|(k, _)| k.into_owned()).collect();
    for key in keys {
        let rel = key.trim_start_matches('/');
        if rel.is_empty() || rel.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
            continue;
        }
        let Some(bytes) = assets.get(&key.as_str().into()) else { continue };
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, &bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(dir)
}
