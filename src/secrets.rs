//! Provider keys: resolved from the OS keyring or from an environment variable named in the
//! config, held as [`SecretString`] (redacted `Debug`, zeroised on drop) and cached in memory so
//! the keyring is asked once per key.
//!
//! **Origin binding.** A key only ever goes to the origin (scheme, host, port) it was stored for.
//! A keyring entry's value is a small versioned envelope, `{"keyhaven_key":1,"origin":…,"key":…}`,
//! written by [`Secrets::store`]: the binding lives with the secret in every platform store (no
//! platform-specific attributes), it is written in one step, and it cannot be moved to another
//! origin without writing the key itself again. An environment variable is bound to the origins the
//! config the engine started with pairs it with ([`Secrets::with_env_origins`]). Resolution gives a
//! [`BoundKey`], and the only way to its secret for a request is [`BoundKey::for_url`], which
//! refuses any other origin; the gateway, `count_tokens` and the Brave search call it where they
//! attach the header.
//!
//! **Migration.** An entry stored by an older Keyhaven (a bare key, no envelope) is bound on its
//! first use to the origin it is used for, and rewritten as an envelope (logged). The control
//! service refuses to pair such an entry with an origin the config file did not already pair it
//! with, so the first use is always one the user configured. Entries Keyhaven keeps for itself
//! ([`RESERVED_ENTRIES`]) are never resolved as a key.
//!
//! The keyring crate is built with its real platform stores (Secret Service, Keychain, Credential
//! Manager); a build that would fall back to its in-memory mock store is a bug, caught by
//! `keyring_backend_persists` in the tests. The environment is read through a function the binary
//! passes in, never directly.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::config::{FileConfig, KeyRef, ProviderKind, WebSearch};

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
    /// The key was stored for another origin.
    #[error(
        "the key {key} was stored for {bound} and is never sent to {target}; enter the key again for this provider"
    )]
    WrongOrigin { key: String, bound: String, target: String },
    /// The environment variable is not paired with this origin in the config Keyhaven started with.
    #[error(
        "the environment variable `{var}` is not sent to {target}: the config Keyhaven started with does not pair \
         it with that origin (edit config.toml and restart, or store the key in the keyring)"
    )]
    EnvNotBound { var: String, target: String },
    /// An entry Keyhaven keeps for itself (e.g. the local CA's key).
    #[error("the keyring entry `{0}` belongs to Keyhaven itself and is never used as a provider key")]
    Reserved(String),
}

impl SecretError {
    pub fn kind(&self) -> &'static str {
        match self {
            SecretError::MissingKeyring(_) => "key_missing",
            SecretError::MissingEnv(_) => "key_env_missing",
            SecretError::Unavailable(_) => "keyring_unavailable",
            SecretError::Empty => "key_empty",
            SecretError::WrongOrigin { .. } | SecretError::EnvNotBound { .. } => "key_origin",
            SecretError::Reserved(_) => "key_reserved",
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

/// Keyring entries Keyhaven keeps for itself; never resolved as a provider key (the local CA's
/// root key, `proxy::ca::KEYRING_ENTRY`; client tokens live under `client-token:…`, a name no key
/// reference can spell).
pub const RESERVED_ENTRIES: &[&str] = &["local-ca-root-key"];

/// The origin of an http(s) URL (`https://api.anthropic.com`, `http://127.0.0.1:8080`): scheme,
/// lower-case host and a non-default port. `None` for anything else.
pub fn origin_of(url: &str) -> Option<String> {
    let u = url::Url::parse(url.trim()).ok()?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none_or(str::is_empty) {
        return None;
    }
    Some(u.origin().ascii_serialization())
}

/// Every (key reference, origin) pair `file` sends a key to: providers with a key and an http(s)
/// base URL, and the Brave Search key with the search URL when `[web] search = "brave"`.
pub fn key_origins(file: &FileConfig) -> std::collections::BTreeSet<(KeyRef, String)> {
    let mut out = std::collections::BTreeSet::new();
    for p in &file.providers {
        if p.kind == ProviderKind::Lingma {
            continue;
        }
        if let (Some(k), Some(o)) = (&p.key, origin_of(p.base_url())) {
            out.insert((k.clone(), o));
        }
    }
    if file.web.search == WebSearch::Brave
        && let Some(o) = file.web.search_base_url().as_deref().and_then(origin_of)
    {
        out.insert((file.web.key_ref(), o));
    }
    out
}

/// The keyring value: the key and the origin it was stored for.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    /// The format version (1).
    keyhaven_key: u32,
    origin: String,
    key: String,
}

const ENVELOPE_VERSION: u32 = 1;

fn open_envelope(raw: &str) -> Option<Envelope> {
    if !raw.trim_start().starts_with('{') {
        return None;
    }
    serde_json::from_str::<Envelope>(raw).ok().filter(|e| e.keyhaven_key == ENVELOPE_VERSION)
}

/// What a keyring entry holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryState {
    Missing,
    /// A key bound to this origin.
    Bound(String),
    /// A bare key from an older Keyhaven (or another tool): no origin yet.
    Unbound,
}

/// A resolved key and the origins it may be sent to. `Debug` never shows the secret.
#[derive(Clone)]
pub struct BoundKey {
    secret: SecretString,
    origins: Vec<String>,
    source: KeyRef,
}

impl fmt::Debug for BoundKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundKey").field("source", &self.source).field("origins", &self.origins).finish_non_exhaustive()
    }
}

impl BoundKey {
    /// The secret, to attach to a request for `url`; refused unless `url`'s origin is one the key
    /// is bound to. Every place that puts a key on a request goes through here.
    pub fn for_url(&self, url: &str) -> Result<&SecretString, SecretError> {
        let target = origin_of(url);
        match &target {
            Some(t) if self.origins.iter().any(|o| o == t) => Ok(&self.secret),
            _ => {
                let target = target.unwrap_or_else(|| "a URL that is not http(s)".to_owned());
                Err(match &self.source {
                    KeyRef::Env(var) => SecretError::EnvNotBound { var: var.clone(), target },
                    KeyRef::Keyring(_) => SecretError::WrongOrigin {
                        key: format!("`{}`", self.source),
                        bound: self.origins.join(", "),
                        target,
                    },
                })
            }
        }
    }

    /// The secret, for redacting it from what an upstream echoes back. Never for a request:
    /// that is [`BoundKey::for_url`].
    pub fn redaction(&self) -> &SecretString {
        &self.secret
    }
}

/// Resolves [`KeyRef`]s into [`BoundKey`]s, caching keyring answers.
#[derive(Clone)]
pub struct Secrets {
    keyring: Arc<dyn Keyring>,
    env: EnvLookup,
    cache: Arc<Mutex<HashMap<KeyRef, BoundKey>>>,
    /// Environment variable → the origins the start-up config pairs it with.
    env_origins: Arc<HashMap<String, Vec<String>>>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets").finish_non_exhaustive()
    }
}

impl Secrets {
    pub fn new(keyring: Arc<dyn Keyring>, env: EnvLookup) -> Secrets {
        Secrets { keyring, env, cache: Arc::default(), env_origins: Arc::default() }
    }

    /// Secrets with no keyring entries and no environment (tests).
    pub fn empty() -> Secrets {
        Secrets::new(Arc::new(MemoryKeyring::default()), Arc::new(|_| None))
    }

    /// The same keyring and environment, with each environment variable bound to the origins
    /// `file` (the config an engine starts with) pairs it with, and a fresh cache.
    pub fn with_env_origins(&self, file: &FileConfig) -> Secrets {
        let mut env_origins: HashMap<String, Vec<String>> = HashMap::new();
        for (k, origin) in key_origins(file) {
            if let KeyRef::Env(var) = k {
                env_origins.entry(var).or_default().push(origin);
            }
        }
        Secrets {
            keyring: self.keyring.clone(),
            env: self.env.clone(),
            cache: Arc::default(),
            env_origins: Arc::new(env_origins),
        }
    }

    pub fn keyring(&self) -> &Arc<dyn Keyring> {
        &self.keyring
    }

    /// Whether the environment variable is set (non-empty).
    pub fn env_is_set(&self, var: &str) -> bool {
        (self.env)(var).is_some_and(|v| !v.is_empty())
    }

    /// The key if it can be had without blocking (a cached keyring entry, or an environment
    /// variable).
    pub fn cached(&self, key: &KeyRef) -> Option<BoundKey> {
        match key {
            KeyRef::Env(_) => self.env_key(key).ok(),
            KeyRef::Keyring(_) => self.cache.lock().ok().and_then(|c| c.get(key).cloned()),
        }
    }

    fn env_key(&self, key: &KeyRef) -> Result<BoundKey, SecretError> {
        let var = key.name();
        let value = (self.env)(var).ok_or_else(|| SecretError::MissingEnv(var.to_owned()))?;
        if value.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(BoundKey {
            secret: SecretString::from(value),
            origins: self.env_origins.get(var).cloned().unwrap_or_default(),
            source: key.clone(),
        })
    }

    /// What the keyring entry `name` holds. Blocking.
    pub fn entry_state(&self, name: &str) -> Result<EntryState, SecretError> {
        Ok(match self.keyring.get(name)? {
            None => EntryState::Missing,
            Some(v) => match open_envelope(v.expose_secret()) {
                Some(e) => EntryState::Bound(e.origin),
                None => EntryState::Unbound,
            },
        })
    }

    /// Stores `value` under `name`, bound to `origin` (any URL; its origin is kept). Blocking.
    pub fn store(&self, name: &str, origin: &str, value: &SecretString) -> Result<(), SecretError> {
        if RESERVED_ENTRIES.contains(&name) {
            return Err(SecretError::Reserved(name.to_owned()));
        }
        if value.expose_secret().is_empty() {
            return Err(SecretError::Empty);
        }
        let origin = origin_of(origin).ok_or_else(|| SecretError::WrongOrigin {
            key: format!("`keyring:{name}`"),
            bound: "nothing yet".to_owned(),
            target: "a URL that is not http(s)".to_owned(),
        })?;
        let envelope = Envelope { keyhaven_key: ENVELOPE_VERSION, origin, key: value.expose_secret().to_owned() };
        let text = serde_json::to_string(&envelope).map_err(|e| SecretError::Unavailable(e.to_string()))?;
        self.keyring.set(name, &SecretString::from(text))?;
        self.clear_cache();
        Ok(())
    }

    /// Blocking: may talk to the OS keyring. `origin` is where the caller means to send the key
    /// (a URL); it binds an entry without an origin on its first use (see the module docs). The
    /// answer still has to pass [`BoundKey::for_url`].
    pub fn resolve(&self, key: &KeyRef, origin: &str) -> Result<BoundKey, SecretError> {
        let name = match key {
            KeyRef::Env(_) => return self.env_key(key),
            KeyRef::Keyring(name) => name,
        };
        if RESERVED_ENTRIES.contains(&name.as_str()) {
            return Err(SecretError::Reserved(name.clone()));
        }
        if let Some(v) = self.cache.lock().ok().and_then(|c| c.get(key).cloned()) {
            return Ok(v);
        }
        let raw = self.keyring.get(name)?.ok_or_else(|| SecretError::MissingKeyring(name.clone()))?;
        let bound = match open_envelope(raw.expose_secret()) {
            Some(e) => BoundKey { secret: SecretString::from(e.key), origins: vec![e.origin], source: key.clone() },
            None => {
                let Some(target) = origin_of(origin) else {
                    return Err(SecretError::WrongOrigin {
                        key: format!("`{key}`"),
                        bound: "nothing yet".to_owned(),
                        target: "a URL that is not http(s)".to_owned(),
                    });
                };
                if raw.expose_secret().is_empty() {
                    return Err(SecretError::Empty);
                }
                match self.store(name, &target, &raw) {
                    Ok(()) => tracing::warn!(
                        entry = %name, origin = %target,
                        "a keyring entry without an origin (stored by an older Keyhaven) is now bound to the origin of its first use"
                    ),
                    Err(e) => tracing::warn!(
                        entry = %name, origin = %target, error = %e,
                        "a keyring entry without an origin could not be rewritten; it is bound to this origin for this run"
                    ),
                }
                BoundKey { secret: raw, origins: vec![target], source: key.clone() }
            }
        };
        if bound.secret.expose_secret().is_empty() {
            return Err(SecretError::Empty);
        }
        if let Ok(mut c) = self.cache.lock() {
            c.insert(key.clone(), bound.clone());
        }
        Ok(bound)
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
