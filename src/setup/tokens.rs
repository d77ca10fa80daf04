//! Client tokens: one random token per client (`kh-` + 64 hex digits, 256 bits), kept in the
//! keyring under `client-token:<client>`, plus a registry file (`<data_dir>/client-tokens.json`)
//! that lists which clients have one. The registry holds names only, never a token.
//!
//! The gateway does not enforce tokens yet: enforcement is off by default, and a later change in
//! `api` will call [`ClientTokens::client_for_token`] to map a presented bearer token to a client
//! name (for attribution first, for refusal once enabled).

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::secrets::Keyring;
use crate::setup::{SetupError, fsio};

/// The prefix of every client token, so a leaked one is recognisable.
pub const TOKEN_PREFIX: &str = "kh-";
const REGISTRY_FILE: &str = "client-tokens.json";

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

/// The tokens issued to local clients.
#[derive(Clone)]
pub struct ClientTokens {
    keyring: Arc<dyn Keyring>,
    registry: PathBuf,
}

impl fmt::Debug for ClientTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTokens").field("registry", &self.registry).finish_non_exhaustive()
    }
}

impl ClientTokens {
    pub fn new(keyring: Arc<dyn Keyring>, data_dir: &Path) -> ClientTokens {
        ClientTokens { keyring, registry: data_dir.join(REGISTRY_FILE) }
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

    /// The client's token, if one was issued.
    pub fn get(&self, client: &str) -> Result<Option<SecretString>, SetupError> {
        Ok(self.keyring.get(&keyring_entry(client))?)
    }

    /// Stores `token` as the client's token and lists the client in the registry.
    pub fn store(&self, client: &str, token: &SecretString) -> Result<(), SetupError> {
        self.keyring.set(&keyring_entry(client), token)?;
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
        let existed = self.keyring.delete(&keyring_entry(client))?;
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
