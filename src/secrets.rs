//! Provider keys: resolved from the OS keyring or from an environment variable named in the
//! config, held as [`SecretString`] (redacted `Debug`, zeroised on drop) and cached in memory so
//! the keyring is asked once per key.
//!
//! The keyring crate is built with its real platform stores (Secret Service, Keychain, Credential
//! Manager); a build that would fall back to its in-memory mock store is a bug, caught by
//! `keyring_backend_persists` in the tests. The environment is read through a function the binary
//! passes in, never directly.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use secrecy::{ExposeSecret, SecretString};

use crate::config::KeyRef;

/// The keyring service name under which Keyhaven keeps its entries.
pub const KEYRING_SERVICE: &str = "keyhaven";

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("no key stored in the OS keyring under `{0}`; run `keyhaven key set {0}`")]
    MissingKeyring(String),
    #[error("environment variable `{0}` is not set")]
    MissingEnv(String),
    #[error("the OS keyring is not available: {0}")]
    Unavailable(String),
    #[error("a key must not be empty")]
    Empty,
}

impl SecretError {
    pub fn kind(&self) -> &'static str {
        match self {
            SecretError::MissingKeyring(_) => "key_missing",
            SecretError::MissingEnv(_) => "key_env_missing",
            SecretError::Unavailable(_) => "keyring_unavailable",
            SecretError::Empty => "key_empty",
        }
    }
}

/// Where secrets live. The real one is [`OsKeyring`]; tests use [`MemoryKeyring`].
pub trait Keyring: Send + Sync {
    fn get(&self, name: &str) -> Result<Option<SecretString>, SecretError>;
    fn set(&self, name: &str, value: &SecretString) -> Result<(), SecretError>;
    /// Returns whether an entry existed.
    fn delete(&self, name: &str) -> Result<bool, SecretError>;
}

/// The OS keyring through the `keyring` crate.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsKeyring;

impl OsKeyring {
    fn entry(name: &str) -> Result<keyring::Entry, SecretError> {
        keyring::Entry::new(KEYRING_SERVICE, name).map_err(|e| SecretError::Unavailable(e.to_string()))
    }
}

impl Keyring for OsKeyring {
    fn get(&self, name: &str) -> Result<Option<SecretString>, SecretError> {
        match OsKeyring::entry(name)?.get_password() {
            Ok(v) => Ok(Some(SecretString::from(v))),
            Err(keyring::Error::NoEntry) => Ok(None),
            Err(e) => Err(SecretError::Unavailable(e.to_string())),
        }
    }

    fn set(&self, name: &str, value: &SecretString) -> Result<(), SecretError> {
        if value.expose_secret().is_empty() {
            return Err(SecretError::Empty);
        }
        OsKeyring::entry(name)?.set_password(value.expose_secret()).map_err(|e| SecretError::Unavailable(e.to_string()))
    }

    fn delete(&self, name: &str) -> Result<bool, SecretError> {
        match OsKeyring::entry(name)?.delete_credential() {
            Ok(()) => Ok(true),
            Err(keyring::Error::NoEntry) => Ok(false),
            Err(e) => Err(SecretError::Unavailable(e.to_string())),
        }
    }
}

/// A keyring in process memory, for tests.
#[derive(Debug, Default)]
pub struct MemoryKeyring {
    entries: Mutex<HashMap<String, String>>,
}

impl Keyring for MemoryKeyring {
    fn get(&self, name: &str) -> Result<Option<SecretString>, SecretError> {
        let entries = self.entries.lock().map_err(|_| SecretError::Unavailable("poisoned".into()))?;
        Ok(entries.get(name).map(|v| SecretString::from(v.clone())))
    }

    fn set(&self, name: &str, value: &SecretString) -> Result<(), SecretError> {
        if value.expose_secret().is_empty() {
            return Err(SecretError::Empty);
        }
        let mut entries = self.entries.lock().map_err(|_| SecretError::Unavailable("poisoned".into()))?;
        entries.insert(name.to_owned(), value.expose_secret().to_owned());
        Ok(())
    }

    fn delete(&self, name: &str) -> Result<bool, SecretError> {
        let mut entries = self.entries.lock().map_err(|_| SecretError::Unavailable("poisoned".into()))?;
        Ok(entries.remove(name).is_some())
    }
}

/// Reads an environment variable; supplied by the binary.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Resolves [`KeyRef`]s, caching each answer.
#[derive(Clone)]
pub struct Secrets {
    keyring: Arc<dyn Keyring>,
    env: EnvLookup,
    cache: Arc<Mutex<HashMap<KeyRef, SecretString>>>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets").finish_non_exhaustive()
    }
}

impl Secrets {
    pub fn new(keyring: Arc<dyn Keyring>, env: EnvLookup) -> Secrets {
        Secrets { keyring, env, cache: Arc::default() }
    }

    /// Secrets with no keyring entries and no environment (tests).
    pub fn empty() -> Secrets {
        Secrets::new(Arc::new(MemoryKeyring::default()), Arc::new(|_| None))
    }

    pub fn keyring(&self) -> &Arc<dyn Keyring> {
        &self.keyring
    }

    /// The value if it was resolved before (never blocks).
    pub fn cached(&self, key: &KeyRef) -> Option<SecretString> {
        self.cache.lock().ok().and_then(|c| c.get(key).cloned())
    }

    /// Blocking: may talk to the OS keyring. Call from a blocking context.
    pub fn resolve(&self, key: &KeyRef) -> Result<SecretString, SecretError> {
        if let Some(v) = self.cache.lock().ok().and_then(|c| c.get(key).cloned()) {
            return Ok(v);
        }
        let value = match key {
            KeyRef::Keyring(name) => {
                self.keyring.get(name)?.ok_or_else(|| SecretError::MissingKeyring(name.clone()))?
            }
            KeyRef::Env(var) => {
                SecretString::from((self.env)(var).ok_or_else(|| SecretError::MissingEnv(var.clone()))?)
            }
        };
        if value.expose_secret().is_empty() {
            return Err(SecretError::Empty);
        }
        if let Ok(mut c) = self.cache.lock() {
            c.insert(key.clone(), value.clone());
        }
        Ok(value)
    }

    /// Forgets cached values (after `key set` / `key rm`).
    pub fn clear_cache(&self) {
        if let Ok(mut c) = self.cache.lock() {
            c.clear();
        }
    }
}

/// Replaces every occurrence of each secret in `text` with `[REDACTED]`.
pub fn redact(text: &str, secrets: &[&SecretString]) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        let s = s.expose_secret();
        if s.len() >= 4 && out.contains(s) {
            out = out.replace(s, "[REDACTED]");
        }
    }
    out
}

#[cfg(test)]
mod tests;
