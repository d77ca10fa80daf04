//! The engine's files on disk are the user's only (Unix): at every start the data directory is
//! made 0700 (created so when missing) and the files that hold bodies, transcripts, tokens or keys
//! 0600 — the database with its `-wal`/`-shm`/`-journal` files and its call journal
//! (`-calls-a`/`-calls-b`), the control token, the CA key fallback file (its folder 0700) and
//! the config file. Anything looser is restricted and logged with its path and old mode
//! ([`crate::perms`]). The config folder is `app::host`'s business (it knows whether it is
//! Keyhaven's own folder or one the user pointed at).

use crate::app::EngineError;
use crate::config::EngineConfig;
use crate::control::token::ControlToken;
use crate::perms::{DIR_MODE, FILE_MODE, restrict};
use crate::proxy::ca::CaPaths;
use crate::store::StoreError;

/// Creates the data directory and restricts everything listed above. Blocking (a few syscalls).
pub(crate) fn secure(config: &EngineConfig) -> Result<(), EngineError> {
    let data_dir = config.database_path.parent().filter(|p| !p.as_os_str().is_empty());
    let open_err = |message: String| {
        EngineError::Store(StoreError::Open { path: config.database_path.display().to_string(), message })
    };
    if let Some(dir) = data_dir {
        crate::perms::private_dir(dir).map_err(|e| open_err(format!("cannot create {}: {e}", dir.display())))?;
    }
    crate::store::private_files(&config.database_path).map_err(open_err)?;
    let ca = CaPaths::new(config.ca_dir.clone());
    let mut files = vec![(ca.key_dir(), DIR_MODE), (ca.key_file(), FILE_MODE)];
    if let Some(dir) = data_dir {
        files.push((ControlToken::path(dir), FILE_MODE));
    }
    if let Some(path) = &config.config_path {
        files.push((path.clone(), FILE_MODE));
    }
    for (path, mode) in files {
        if let Err(e) = restrict(&path, mode) {
            tracing::warn!(path = %path.display(), error = %e, "cannot make this private to the owner");
        }
    }
    Ok(())
}
