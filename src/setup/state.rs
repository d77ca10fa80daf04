//! The setup state file (`<data_dir>/setup-state.json`): per client, which file Keyhaven changed,
//! where the backup is, the hash of what Keyhaven wrote, and every key it set with the value that
//! was there before. Undo works from this file alone, so it survives restarts.
//!
//! Previous values are kept verbatim (they may be a token the user had before), so the file is
//! written owner-only. Values Keyhaven wrote are kept only as hashes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::setup::{SetupError, fsio};

pub(crate) const STATE_FILE: &str = "setup-state.json";
const VERSION: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct SetupState {
    pub version: u32,
    #[serde(default)]
    pub clients: BTreeMap<String, ClientState>,
}

/// What Keyhaven did to one client's config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ClientState {
    /// The file that was changed (symlinks resolved).
    pub file: PathBuf,
    /// A copy of the file as it was before the first change; `None` if the file did not exist.
    pub backup: Option<PathBuf>,
    /// SHA-256 of the file as Keyhaven last wrote it ("absent" if it removed it).
    pub written_sha256: String,
    /// True while the file is exactly "the backup plus Keyhaven's keys": only then does undo put
    /// the backup back whole. A re-route over user edits clears it.
    pub pristine: bool,
    /// Every key Keyhaven set, in order.
    pub keys: Vec<KeyRecord>,
    /// Objects or tables Keyhaven had to create; undo removes them if they end up empty.
    #[serde(default)]
    pub created: Vec<Vec<String>>,
    /// When the file was first routed (RFC 3339, UTC).
    pub routed_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeyRecord {
    pub path: Vec<String>,
    /// The value before Keyhaven's first change; `None`: the key was absent.
    pub previous: Option<Value>,
    /// Hash of the value Keyhaven wrote (see `doc::value_hash`).
    pub written_sha256: String,
}

impl SetupState {
    pub(crate) fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(STATE_FILE)
    }

    pub(crate) fn load(data_dir: &Path) -> Result<SetupState, SetupError> {
        let path = SetupState::path(data_dir);
        let Some(bytes) = fsio::read(&path)? else {
            return Ok(SetupState { version: VERSION, clients: BTreeMap::new() });
        };
        let state: SetupState = serde_json::from_slice(&bytes)
            .map_err(|e| SetupError::State { path: path.clone(), message: e.to_string() })?;
        if state.version > VERSION {
            return Err(SetupError::State {
                path,
                message: format!("written by a newer Keyhaven (version {}, this one knows {VERSION})", state.version),
            });
        }
        Ok(state)
    }

    pub(crate) fn save(&self, data_dir: &Path) -> Result<(), SetupError> {
        let path = SetupState::path(data_dir);
        let mut text = serde_json::to_string_pretty(&SetupState { version: VERSION, clients: self.clients.clone() })
            .map_err(|e| SetupError::State { path: path.clone(), message: e.to_string() })?;
        text.push('\n');
        fsio::write_owned(&path, text.as_bytes())
    }
}
