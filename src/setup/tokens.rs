//! Client tokens: one random token per client (`kh-` + 64 hex digits, 256 bits), kept in the
//! keyring under `client-token:<client>`, plus a registry file (`<data_dir>/client-tokens.json`)
//! that lists which clients have one. The registry holds names only, never a token.
//!
//! Without an OS keyring (a headless server with no Secret Service: the keyring answers
//! `Unavailable`), a token is kept like the local CA's key: in a 0600 file
//! `<data_dir>/client-tokens/<client>` inside a 0700 directory, and the log says so plainly once
//! per token written. Exactly one copy exists: storing in the keyring removes the file. Reads look
//! in the keyring first, then in the file.
//!
//! The gateway maps a presented token to its client with [`ClientTokens::client_for_token`] (for
//! the call record, and for refusal with `require_client_token`).

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::secrets::{Keyring, SecretError};
use crate::setup::{SetupError, fsio};

/// The prefix of every client token, so a leaked one is recognisable.
pub const TOKEN_PREFIX: &str = "kh-";
const REGISTRY_FILE: &str = "client-tokens.json";
/// The fallback directory (0700) of token files (0600) where there is no OS keyring.
pub const FALLBACK_DIR: &str = "client-tokens";

#[derive(Debug, Default, Serialize, Deserialize)]
struct Registry {
    version: u32,
    clients: BTreeSet<String>,
}

/// The keyring entry name of a client's token.
pub fn keyring_entry(client: &str) -> String {
    format!("client-token:{client}")
}

/// A fresh token: `kh-` and 32 random bytes in hex.
pub fn generate_token() -> SecretString {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    SecretString::from(format!("{TOKEN_PREFIX}{}", hex::encode(bytes)))
}

/// Where a client token is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenLocation {
    Keyring,
    /// No OS keyring: a 0600 file in a 0700 directory.
    File(PathBuf),
}

/// The tokens issued to local clients.
#[derive(Clone)]
pub struct ClientTokens {
    keyring: Arc<dyn Keyring>,
    registry: PathBuf,
    fallback: PathBuf,
}

impl fmt::Debug for ClientTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTokens").field("registry", &self.registry).finish_non_exhaustive()
    }
}

impl ClientTokens {
    pub fn new(keyring: Arc<dyn Keyring>, data_dir: &Path) -> ClientTokens {
        ClientTokens { keyring, registry: data_dir.join(REGISTRY_FILE), fallback: data_dir.join(FALLBACK_DIR) }
    }

    /// The fallback file of a client's token (client names are Keyhaven's own: `cursor`,
    /// `claude-code`, `codex`, `env`; anything else is refused as a path).
    fn fallback_file(&self, client: &str) -> Result<PathBuf, SetupError> {
        let ok = !client.is_empty() && client.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(SetupError::State {
                path: self.fallback.clone(),
                message: format!("bad client name `{client}`"),
            });
        }
        Ok(self.fallback.join(client))
    }

    fn read_fallback(&self, client: &str) -> Result<Option<SecretString>, SetupError> {
        let path = self.fallback_file(client)?;
        Ok(fsio::read(&path)?
            .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
            .filter(|t| t.starts_with(TOKEN_PREFIX))
            .map(SecretString::from))
    }

    fn write_fallback(&self, client: &str, token: &SecretString) -> Result<PathBuf, SetupError> {
        let path = self.fallback_file(client)?;
        std::fs::create_dir_all(&self.fallback).map_err(|e| SetupError::Io {
            path: self.fallback.clone(),
            op: "create directory",
            source: e,
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&self.fallback, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| SetupError::Io { path: self.fallback.clone(), op: "restrict", source: e })?;
        }
        fsio::write_owned(&path, token.expose_secret().as_bytes())?;
        Ok(path)
    }

    /// Where a client's token is kept: `None` (none issued), the keyring, or a fallback file.
    pub fn location(&self, client: &str) -> Result<Option<TokenLocation>, SetupError> {
        match self.keyring.get(&keyring_entry(client)) {
            Ok(Some(_)) => return Ok(Some(TokenLocation::Keyring)),
            Ok(None) | Err(SecretError::Unavailable(_)) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(self.read_fallback(client)?.map(|_| TokenLocation::File(self.fallback_file(client).unwrap_or_default())))
    }

    fn load(&self) -> Result<Registry, SetupError> {
        let Some(bytes) = fsio::read(&self.registry)? else {
            return Ok(Registry { version: 1, ..Registry::default() });
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| SetupError::State { path: self.registry.clone(), message: e.to_string() })
    }

    fn save(&self, reg: &Registry) -> Result<(), SetupError> {
        let mut text = serde_json::to_string_pretty(reg)
            .map_err(|e| SetupError::State { path: self.registry.clone(), message: e.to_string() })?;
        text.push('\n');
        fsio::write_owned(&self.registry, text.as_bytes())
    }

    /// The clients that have a token, by name.
    pub fn clients(&self) -> Result<Vec<String>, SetupError> {
        Ok(self.load()?.clients.into_iter().collect())
    }

    /// The client's token, if one was issued: from the keyring, else the fallback file.
    pub fn get(&self, client: &str) -> Result<Option<SecretString>, SetupError> {
        match self.keyring.get(&keyring_entry(client)) {
            Ok(Some(t)) => return Ok(Some(t)),
            Ok(None) | Err(SecretError::Unavailable(_)) => {}
            Err(e) => return Err(e.into()),
        }
        self.read_fallback(client)
    }

    /// Stores `token` as the client's token and lists the client in the registry. Without an OS
    /// keyring the token goes to its 0600 fallback file (logged).
    pub fn store(&self, client: &str, token: &SecretString) -> Result<(), SetupError> {
        match self.keyring.set(&keyring_entry(client), token) {
            Ok(()) => {
                if let Ok(path) = self.fallback_file(client) {
                    fsio::remove_quietly(&path);
                }
            }
            Err(SecretError::Unavailable(e)) => {
                let path = self.write_fallback(client, token)?;
                tracing::warn!(
                    client,
                    path = %path.display(),
                    reason = %e,
                    "no OS keyring: this client token is kept in a file readable only by you (mode 0600), like the local CA key"
                );
            }
            Err(e) => return Err(e.into()),
        }
        let mut reg = self.load()?;
        if reg.clients.insert(client.to_owned()) {
            reg.version = 1;
            self.save(&reg)?;
        }
        Ok(())
    }

    /// The client's token, issuing and storing a new one if it has none.
    pub fn issue(&self, client: &str) -> Result<SecretString, SetupError> {
        if let Some(t) = self.get(client)? {
            return Ok(t);
        }
        let token = generate_token();
        self.store(client, &token)?;
        Ok(token)
    }

    /// Deletes the client's token. Returns whether it had one.
    pub fn revoke(&self, client: &str) -> Result<bool, SetupError> {
        let in_keyring = match self.keyring.delete(&keyring_entry(client)) {
            Ok(existed) => existed,
            Err(SecretError::Unavailable(_)) => false,
            Err(e) => return Err(e.into()),
        };
        let path = self.fallback_file(client)?;
        let in_file = fsio::read(&path)?.is_some();
        fsio::remove_quietly(&path);
        let existed = in_keyring || in_file;
        let mut reg = self.load()?;
        if reg.clients.remove(client) {
            self.save(&reg)?;
        }
        Ok(existed)
    }

    /// The client a presented token belongs to. Compares in constant time; a keyring that cannot
    /// be read answers `None`. Blocking (it may ask the OS keyring): call from a blocking context.
    pub fn client_for_token(&self, token: &str) -> Option<String> {
        if !token.starts_with(TOKEN_PREFIX) {
            return None;
        }
        let reg = self.load().ok()?;
        reg.clients.into_iter().find(|client| {
            matches!(self.get(client), Ok(Some(t)) if bool::from(t.expose_secret().as_bytes().ct_eq(token.as_bytes())))
        })
    }
}
