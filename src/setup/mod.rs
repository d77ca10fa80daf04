//! One-click client setup: points Cursor, Claude Code and Codex CLI at Keyhaven by editing their
//! own config files, and puts everything back on undo.
//!
//! Every change is planned first ([`plan_route`], [`plan_undo`]) and applied second
//! ([`Plan::apply`]), so `--dry-run` shows the exact diff of the same plan that would be applied.
//! Before its first change to a file, Keyhaven copies it to `<file>.keyhaven-backup-<UTC stamp>`
//! beside it and records, in `<data_dir>/setup-state.json`, the hash of what it wrote and every key
//! it set with the value that was there before. Undo puts the backup back byte for byte when the
//! file is still exactly what Keyhaven wrote; otherwise it removes only Keyhaven's keys (restoring
//! their previous values) and keeps the user's edits.
//!
//! What each client gets:
//! - Cursor (`User/settings.json`): `http.proxy` = the proxy URL, `http.proxySupport: "on"`,
//!   `http.experimental.systemCertificatesV2: true`, and `cursor.general.disableHttp2: true` only
//!   when asked for. No token: Cursor's traffic reaches Keyhaven through the proxy.
//! - Claude Code (`~/.claude/settings.json`): `env.ANTHROPIC_BASE_URL` = the gateway,
//!   `env.ANTHROPIC_AUTH_TOKEN` = the client's token, optional `ANTHROPIC_MODEL` and
//!   `ANTHROPIC_SMALL_FAST_MODEL`, and `ENABLE_TOOL_SEARCH = "true"` when the chosen model is
//!   served by a real Anthropic endpoint ([`serves_on_anthropic`]).
//! - Codex CLI (`~/.codex/config.toml`): `model_provider = "keyhaven"`, optional `model`, and
//!   `[model_providers.keyhaven]` with `base_url` = gateway + `/v1`, `wire_api = "responses"` and
//!   the token as a static `http_headers.Authorization` bearer header, so no environment variable
//!   has to be exported (`env_key` would need one in every shell).
//!
//! Client tokens ([`ClientTokens`]) are issued per client and stored in the keyring; the gateway
//! does not enforce them yet (off by default).
//!
//! Invariants: nothing here reads the environment or global paths ([`SetupEnv`] carries the home
//! directory, platform and endpoints); files are replaced atomically (temp file in the same
//! directory, fsync, rename) after a last check that nobody changed them since they were read;
//! only the named config file of each client is touched (never Cursor's login or account state).

mod doc;
mod fsio;
mod state;
mod tokens;

pub use tokens::{ClientTokens, TOKEN_PREFIX, TokenLocation, generate_token, keyring_entry};

use std::fmt;
use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use crate::secrets::SecretError;
use crate::setup::doc::{Doc, Edit, Format, value_hash};
use crate::setup::fsio::content_hash;
use crate::setup::state::{ClientState, KeyRecord, SetupState};

/// The operating system whose file layout to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Linux,
    MacOs,
    Windows,
}

/// Where the user's files are and where Keyhaven listens. Built by the binary (or a test).
#[derive(Debug, Clone)]
pub struct SetupEnv {
    /// The user's home directory.
    pub home: PathBuf,
    pub platform: Platform,
    /// `%APPDATA%` (roaming) on Windows; unused elsewhere.
    pub appdata: Option<PathBuf>,
    /// Keyhaven's data directory: setup state and the client-token registry live here.
    pub data_dir: PathBuf,
    /// The gateway's base URL without `/v1`, e.g. `http://127.0.0.1:4937`.
    pub gateway_url: String,
    /// Keyhaven's intercepting proxy, e.g. `http://127.0.0.1:4938`.
    pub proxy_url: String,
}

impl SetupEnv {
    fn gateway(&self) -> &str {
        self.gateway_url.trim_end_matches('/')
    }
}

/// A client whose config file Keyhaven can route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    Cursor,
    ClaudeCode,
    Codex,
}

impl Client {
    pub const ALL: [Client; 3] = [Client::Cursor, Client::ClaudeCode, Client::Codex];

    /// The stable name used on the command line, in the state file and in token entries.
    pub fn as_str(self) -> &'static str {
        match self {
            Client::Cursor => "cursor",
            Client::ClaudeCode => "claude-code",
            Client::Codex => "codex",
        }
    }

    pub fn display_name(self) -> &'static str {
        match self {
            Client::Cursor => "Cursor",
            Client::ClaudeCode => "Claude Code",
            Client::Codex => "Codex CLI",
        }
    }

    /// What the user has to do for a change to take effect.
    pub fn restart_hint(self) -> &'static str {
        match self {
            Client::Cursor => "Restart Cursor for the change to take effect.",
            Client::ClaudeCode => "Start a new Claude Code session; running sessions keep their old settings.",
            Client::Codex => "Start a new Codex session; Codex reads its config only at start-up.",
        }
    }

    fn format(self) -> Format {
        match self {
            Client::Cursor | Client::ClaudeCode => Format::Jsonc,
            Client::Codex => Format::Toml,
        }
    }

    /// Cursor reaches Keyhaven through the proxy and needs no gateway token.
    fn uses_token(self) -> bool {
        !matches!(self, Client::Cursor)
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Choices for routing a client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetupOptions {
    /// The model the client should ask for (Claude Code `ANTHROPIC_MODEL`, Codex `model`).
    pub model: Option<String>,
    /// Claude Code's small, fast model (`ANTHROPIC_SMALL_FAST_MODEL`).
    pub small_model: Option<String>,
    /// Cursor: set `cursor.general.disableHttp2`, for a transport that needs HTTP/1.1.
    pub disable_http2: bool,
    /// Claude Code: set `env.ENABLE_TOOL_SEARCH = "true"`. Claude Code turns its tool search off
    /// behind any base URL that is not Anthropic's, so every request then carries every MCP
    /// tool's schema; Keyhaven asks for it back when the chosen model is served by a real
    /// Anthropic endpoint ([`serves_on_anthropic`]), which runs the search server-side.
    pub tool_search: bool,
}

/// Whether `model` (a model name or alias of `config`, or a group, which counts for its first
/// model) is served by a real Anthropic endpoint: a provider of kind `anthropic` whose base URL's
/// origin is `https://api.anthropic.com`. Anything else (a proxy, another vendor's Anthropic-shaped
/// API, an unknown model) is not.
pub fn serves_on_anthropic(config: &crate::config::FileConfig, model: &str) -> bool {
    let name = config
        .groups
        .iter()
        .find(|g| g.name.get_ref() == model)
        .and_then(|g| g.models.first())
        .map_or(model, String::as_str);
    let Some(m) = config.models.iter().find(|m| m.name.get_ref() == name || m.aliases.iter().any(|a| a == name)) else {
        return false;
    };
    let Some(p) = config.providers.iter().find(|p| p.name.get_ref() == m.provider.get_ref()) else {
        return false;
    };
    if p.kind != crate::config::ProviderKind::Anthropic {
        return false;
    }
    let Some(rest) = p.base_url().strip_prefix("https://") else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default().to_ascii_lowercase();
    matches!(authority.as_str(), "api.anthropic.com" | "api.anthropic.com:443")
}

/// The provider id Keyhaven adds to Codex's `model_providers`.
pub const CODEX_PROVIDER_ID: &str = "keyhaven";
/// The token-registry name of the generic environment-variable client.
pub const ENV_CLIENT: &str = "env";

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot {op} {}: {source}", path.display())]
    Io { path: PathBuf, op: &'static str, source: std::io::Error },
    #[error("{} is read-only; Keyhaven leaves it alone (make it writable to continue)", path.display())]
    ReadOnly { path: PathBuf },
    #[error("{} changed while Keyhaven was editing it; nothing was written, try again", path.display())]
    ConcurrentEdit { path: PathBuf },
    #[error("cannot parse {}: {message}; nothing was changed", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("{}: `{key}` {message}; nothing was changed", path.display())]
    Shape { path: PathBuf, key: String, message: String },
    #[error("the Windows %APPDATA% folder is unknown, so Cursor's settings cannot be found")]
    NoAppData,
    #[error("{client} was not set up by Keyhaven (no record in the setup state); nothing to undo")]
    NotRouted { client: Client },
    #[error("the setup state {} is unreadable: {message}", path.display())]
    State { path: PathBuf, message: String },
    #[error(transparent)]
    Secret(#[from] SecretError),
}

impl SetupError {
    pub fn kind(&self) -> &'static str {
        match self {
            SetupError::Io { .. } => "setup_io",
            SetupError::ReadOnly { .. } => "setup_read_only",
            SetupError::ConcurrentEdit { .. } => "setup_concurrent_edit",
            SetupError::Parse { .. } => "setup_parse",
            SetupError::Shape { .. } => "setup_unexpected_shape",
            SetupError::NoAppData => "setup_no_appdata",
            SetupError::NotRouted { .. } => "setup_not_routed",
            SetupError::State { .. } => "setup_state",
            SetupError::Secret(e) => e.kind(),
        }
    }
}

fn key(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

/// The folder whose existence means the client is installed (the engine does not look at PATH).
fn install_dir(env: &SetupEnv, client: Client) -> Result<PathBuf, SetupError> {
    Ok(match client {
        Client::Cursor => match env.platform {
            Platform::Linux => env.home.join(".config").join("Cursor"),
            Platform::MacOs => env.home.join("Library").join("Application Support").join("Cursor"),
            Platform::Windows => env.appdata.as_ref().ok_or(SetupError::NoAppData)?.join("Cursor"),
        },
        Client::ClaudeCode => env.home.join(".claude"),
        Client::Codex => env.home.join(".codex"),
    })
}

/// The config file Keyhaven edits for `client`.
pub fn config_path(env: &SetupEnv, client: Client) -> Result<PathBuf, SetupError> {
    let dir = install_dir(env, client)?;
    Ok(match client {
        Client::Cursor => dir.join("User").join("settings.json"),
        Client::ClaudeCode => dir.join("settings.json"),
        Client::Codex => dir.join("config.toml"),
    })
}

/// The keys and values that route `client` to Keyhaven, in the order they are added.
fn desired(
    env: &SetupEnv,
    client: Client,
    opts: &SetupOptions,
    token: Option<&SecretString>,
) -> Vec<(Vec<String>, Value)> {
    let token = token.map(|t| t.expose_secret().to_owned()).unwrap_or_default();
    let mut out = Vec::new();
    match client {
        Client::Cursor => {
            out.push((key(&["http.proxy"]), json!(env.proxy_url)));
            out.push((key(&["http.proxySupport"]), json!("on")));
            out.push((key(&["http.experimental.systemCertificatesV2"]), json!(true)));
            if opts.disable_http2 {
                out.push((key(&["cursor.general.disableHttp2"]), json!(true)));
            }
        }
        Client::ClaudeCode => {
            out.push((key(&["env", "ANTHROPIC_BASE_URL"]), json!(env.gateway())));
            out.push((key(&["env", "ANTHROPIC_AUTH_TOKEN"]), json!(token)));
            if let Some(m) = &opts.model {
                out.push((key(&["env", "ANTHROPIC_MODEL"]), json!(m)));
            }
            if let Some(m) = &opts.small_model {
                out.push((key(&["env", "ANTHROPIC_SMALL_FAST_MODEL"]), json!(m)));
            }
            if opts.tool_search {
                out.push((key(&["env", "ENABLE_TOOL_SEARCH"]), json!("true")));
            }
        }
        Client::Codex => {
            if let Some(m) = &opts.model {
                out.push((key(&["model"]), json!(m)));
            }
            out.push((key(&["model_provider"]), json!(CODEX_PROVIDER_ID)));
            // Codex sends `http_headers` verbatim with every request: the token needs no
            // environment variable (`env_key` would make the user export one in every shell).
            out.push((
                key(&["model_providers", CODEX_PROVIDER_ID]),
                json!({
                    "name": "Keyhaven",
                    "base_url": format!("{}/v1", env.gateway()),
                    "wire_api": "responses",
                    "http_headers": { "Authorization": format!("Bearer {token}") },
                }),
            ));
        }
    }
    out
}

/// Whether the file currently carries Keyhaven's routing values (tokens are not compared).
fn routed_in(env: &SetupEnv, client: Client, file: &Path, doc: &Doc) -> Result<bool, SetupError> {
    let is = |path: &[&str], want: &str| -> Result<bool, SetupError> {
        Ok(doc.get(file, &key(path))?.as_ref().and_then(Value::as_str) == Some(want))
    };
    match client {
        Client::Cursor => is(&["http.proxy"], &env.proxy_url),
        Client::ClaudeCode => is(&["env", "ANTHROPIC_BASE_URL"], env.gateway()),
        Client::Codex => Ok(is(&["model_provider"], CODEX_PROVIDER_ID)?
            && is(&["model_providers", CODEX_PROVIDER_ID, "base_url"], &format!("{}/v1", env.gateway()))?),
    }
}

/// What [`detect`] finds for one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    pub client: Client,
    pub config_path: PathBuf,
    /// The client's config folder exists (binaries on PATH are not checked).
    pub installed: bool,
    /// The config file carries Keyhaven's values.
    pub routed: bool,
    /// The setup state has a record for the client, so undo is possible.
    pub recorded: bool,
}

/// Looks at a client's folder and config file without changing anything. A config file that
/// does not parse counts as not routed.
pub fn detect(env: &SetupEnv, client: Client) -> Result<Detection, SetupError> {
    let config_path = config_path(env, client)?;
    let installed = install_dir(env, client)?.is_dir();
    let file = fsio::resolve(&config_path);
    let routed = match fsio::read(&file)? {
        Some(bytes) => {
            match std::str::from_utf8(&bytes).ok().and_then(|t| Doc::parse(client.format(), &file, t).ok()) {
                Some(doc) => routed_in(env, client, &file, &doc).unwrap_or(false),
                None => false,
            }
        }
        None => false,
    };
    let recorded = SetupState::load(&env.data_dir)?.clients.contains_key(client.as_str());
    Ok(Detection { client, config_path, installed, routed, recorded })
}

/// Route or undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Route,
    Undo,
}

/// A change worked out but not yet made. [`Plan::diff`] shows it; [`Plan::apply`] makes it.
pub struct Plan {
    client: Client,
    action: Action,
    path: PathBuf,
    before: Option<Vec<u8>>,
    after: Option<Vec<u8>>,
    prior: Option<ClientState>,
    next: Option<ClientState>,
    /// A token generated for this plan, stored in the keyring only on apply.
    new_token: Option<SecretString>,
    /// The token that appears in the file, redacted from diffs.
    token: Option<SecretString>,
    /// Undo only: the backup was put back whole, so it can go.
    full_restore: bool,
    notes: Vec<String>,
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("client", &self.client)
            .field("action", &self.action)
            .field("path", &self.path)
            .field("changes_file", &self.changes_file())
            .finish_non_exhaustive()
    }
}

/// What [`Plan::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub client: Client,
    pub action: Action,
    pub path: PathBuf,
    /// Whether the config file was changed.
    pub changed: bool,
    /// The backup made by this route, or kept after a partial undo.
    pub backup: Option<PathBuf>,
    /// Things the user should know (keys left alone, a missing backup, …).
    pub notes: Vec<String>,
}

fn utf8<'a>(path: &Path, bytes: Option<&'a [u8]>) -> Result<&'a str, SetupError> {
    std::str::from_utf8(bytes.unwrap_or_default())
        .map_err(|e| SetupError::Parse { path: path.to_path_buf(), message: format!("not UTF-8: {e}") })
}

fn utc_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

fn stamp(t: time::OffsetDateTime) -> String {
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_else(|_| stamp(t))
}

/// Works out how to route `client` to Keyhaven. Reads the config file, the setup state and the
/// keyring; writes nothing. A client that needs a token and has none gets a fresh one, stored
/// only when the plan is applied.
pub fn plan_route(
    env: &SetupEnv,
    client: Client,
    opts: &SetupOptions,
    tokens: &ClientTokens,
) -> Result<Plan, SetupError> {
    let path = fsio::resolve(&config_path(env, client)?);
    let before = fsio::read(&path)?;
    let text = utf8(&path, before.as_deref())?;
    let mut doc = Doc::parse(client.format(), &path, text)?;
    let state = SetupState::load(&env.data_dir)?;
    let prior = state.clients.get(client.as_str()).cloned();

    let (token, new_token) = if client.uses_token() {
        match tokens.get(client.as_str())? {
            Some(t) => (Some(t), None),
            None => {
                let t = generate_token();
                (Some(t.clone()), Some(t))
            }
        }
    } else {
        (None, None)
    };

    let want = desired(env, client, opts, token.as_ref());
    let mut edits = Vec::new();
    let mut keys = Vec::new();
    for (k, v) in &want {
        // The previous value is the one from before Keyhaven's *first* change.
        let previous = match prior.as_ref().and_then(|p| p.keys.iter().find(|r| &r.path == k)) {
            Some(r) => r.previous.clone(),
            None => doc.get(&path, k)?,
        };
        keys.push(KeyRecord { path: k.clone(), previous, written_sha256: value_hash(v) });
        edits.push(Edit { path: k.clone(), value: Some(v.clone()) });
    }
    // A key Keyhaven set before but no longer wants (`disableHttp2` dropped, no `--model` this
    // time) gets its previous value back, unless the user has changed it since.
    if let Some(p) = &prior {
        for r in p.keys.iter().filter(|r| !want.iter().any(|(k, _)| k == &r.path)) {
            if doc.get(&path, &r.path)?.as_ref().map(value_hash).as_deref() == Some(r.written_sha256.as_str()) {
                edits.push(Edit { path: r.path.clone(), value: r.previous.clone() });
            }
        }
    }
    let created = doc.apply(&path, &edits)?;
    let mut rendered = doc.render();
    if before.is_none() && !rendered.ends_with('\n') {
        rendered.push('\n');
    }
    let after = if before.is_some() && rendered == text { before.clone() } else { Some(rendered.into_bytes()) };

    let before_hash = content_hash(before.as_deref());
    let after_hash = content_hash(after.as_deref());
    let changes = before != after;
    let next = match &prior {
        Some(p) => {
            let mut s = p.clone();
            if changes {
                // Writing over edits the user made since the last route: the backup no longer
                // equals "this file without Keyhaven", so undo must go key by key.
                s.pristine = p.pristine && before_hash == p.written_sha256;
                s.written_sha256 = after_hash;
            }
            s.file = path.clone();
            s.keys = keys;
            for c in created {
                if !s.created.contains(&c) {
                    s.created.push(c);
                }
            }
            s
        }
        None => ClientState {
            file: path.clone(),
            backup: None,
            written_sha256: after_hash,
            pristine: true,
            keys,
            created,
            routed_at: rfc3339(utc_now()),
        },
    };
    Ok(Plan {
        client,
        action: Action::Route,
        path,
        before,
        after,
        prior,
        next: Some(next),
        new_token,
        token,
        full_restore: false,
        notes: Vec::new(),
    })
}

/// Works out how to undo Keyhaven's change to `client`. Writes nothing.
pub fn plan_undo(env: &SetupEnv, client: Client, tokens: &ClientTokens) -> Result<Plan, SetupError> {
    let state = SetupState::load(&env.data_dir)?;
    let Some(entry) = state.clients.get(client.as_str()).cloned() else {
        return Err(SetupError::NotRouted { client });
    };
    let path = entry.file.clone();
    let before = fsio::read(&path)?;
    let mut notes = Vec::new();
    let mut after = None;
    let mut full_restore = false;
    if entry.pristine && content_hash(before.as_deref()) == entry.written_sha256 {
        match &entry.backup {
            None => full_restore = true,
            Some(b) => match fsio::read(b)? {
                Some(bytes) => {
                    after = Some(bytes);
                    full_restore = true;
                }
                None => notes.push(format!("The backup {} is gone; removing only Keyhaven's keys.", b.display())),
            },
        }
    }
    if !full_restore {
        match &before {
            None => notes.push(format!("{} no longer exists; nothing to restore.", path.display())),
            Some(bytes) => {
                let text = utf8(&path, Some(bytes))?;
                let mut doc = Doc::parse(client.format(), &path, text)?;
                let mut edits = Vec::new();
                for r in entry.keys.iter().rev() {
                    let current = doc.get(&path, &r.path)?;
                    if current.as_ref().map(value_hash).as_deref() == Some(r.written_sha256.as_str()) {
                        edits.push(Edit { path: r.path.clone(), value: r.previous.clone() });
                    } else {
                        notes.push(format!("`{}` was changed after Keyhaven set it; left as it is.", r.path.join(".")));
                    }
                }
                doc.apply(&path, &edits)?;
                for c in entry.created.iter().rev() {
                    doc.remove_if_empty(&path, c)?;
                }
                let rendered = doc.render();
                after = if rendered == text { before.clone() } else { Some(rendered.into_bytes()) };
                if let Some(b) = &entry.backup {
                    notes.push(format!("Your edits were kept; the original file is still at {}.", b.display()));
                }
            }
        }
    }
    let token = if client.uses_token() { tokens.get(client.as_str())? } else { None };
    Ok(Plan {
        client,
        action: Action::Undo,
        path,
        before,
        after,
        prior: Some(entry),
        next: None,
        new_token: None,
        token,
        full_restore,
        notes,
    })
}

impl Plan {
    pub fn client(&self) -> Client {
        self.client
    }

    pub fn action(&self) -> Action {
        self.action
    }

    /// The config file the plan changes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Whether applying would change the config file.
    pub fn changes_file(&self) -> bool {
        self.before != self.after
    }

    /// Whether applying would change nothing at all (file, state or keyring).
    pub fn is_noop(&self) -> bool {
        !self.changes_file() && self.prior == self.next && self.new_token.is_none()
    }

    /// The change to the config file as a unified diff, with the client token redacted. Empty
    /// when the file stays as it is.
    pub fn diff(&self) -> String {
        if !self.changes_file() {
            return String::new();
        }
        let old = self.before.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
        let new = self.after.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
        let name = self.path.display().to_string();
        let a = if self.before.is_some() { name.clone() } else { "/dev/null".to_owned() };
        let b = if self.after.is_some() { name } else { "/dev/null".to_owned() };
        let diff = similar::TextDiff::from_lines(old.as_ref(), new.as_ref()).unified_diff().header(&a, &b).to_string();
        match &self.token {
            Some(t) => crate::secrets::redact(&diff, &[t]),
            None => diff,
        }
    }

    /// Makes the change: stores a new token, writes the backup and the state, then replaces the
    /// config file if nobody changed it since the plan read it. On failure the file is as it
    /// was and the state is rolled back.
    pub fn apply(self, env: &SetupEnv, tokens: &ClientTokens) -> Result<Outcome, SetupError> {
        match self.action {
            Action::Route => self.apply_route(env, tokens),
            Action::Undo => self.apply_undo(env, tokens),
        }
    }

    fn outcome(&self, changed: bool, backup: Option<PathBuf>) -> Outcome {
        Outcome {
            client: self.client,
            action: self.action,
            path: self.path.clone(),
            changed,
            backup,
            notes: self.notes.clone(),
        }
    }

    fn apply_route(self, env: &SetupEnv, tokens: &ClientTokens) -> Result<Outcome, SetupError> {
        let backup = self.prior.as_ref().and_then(|p| p.backup.clone());
        if self.is_noop() {
            return Ok(self.outcome(false, backup));
        }
        let changes = self.changes_file();
        if changes {
            fsio::check_writable(&self.path)?;
        }
        if let Some(t) = &self.new_token {
            tokens.store(self.client.as_str(), t)?;
        }
        let Some(mut next) = self.next.clone() else { return Ok(self.outcome(false, backup)) };
        let mut made_backup = None;
        if self.prior.is_none()
            && changes
            && let Some(bytes) = &self.before
        {
            let b = fsio::backup(&self.path, bytes, &stamp(utc_now()))?;
            next.backup = Some(b.clone());
            made_backup = Some(b);
        }
        let backup = next.backup.clone();
        let mut state = SetupState::load(&env.data_dir)?;
        let old = state.clients.insert(self.client.as_str().to_owned(), next);
        let rollback = |state: &mut SetupState| {
            match &old {
                Some(o) => state.clients.insert(self.client.as_str().to_owned(), o.clone()),
                None => state.clients.remove(self.client.as_str()),
            };
            if let Some(b) = &made_backup {
                fsio::remove_quietly(b);
            }
        };
        if let Err(e) = state.save(&env.data_dir) {
            rollback(&mut state);
            return Err(e);
        }
        if changes
            && let Err(e) = fsio::commit(&self.path, &content_hash(self.before.as_deref()), self.after.as_deref())
        {
            rollback(&mut state);
            let _ = state.save(&env.data_dir);
            return Err(e);
        }
        Ok(self.outcome(changes, backup))
    }

    fn apply_undo(self, env: &SetupEnv, tokens: &ClientTokens) -> Result<Outcome, SetupError> {
        let changes = self.changes_file();
        if changes {
            fsio::commit(&self.path, &content_hash(self.before.as_deref()), self.after.as_deref())?;
        }
        let mut state = SetupState::load(&env.data_dir)?;
        state.clients.remove(self.client.as_str());
        state.save(&env.data_dir)?;
        let backup = self.prior.as_ref().and_then(|p| p.backup.clone());
        let kept = if self.full_restore {
            if let Some(b) = &backup {
                fsio::remove_quietly(b);
            }
            None
        } else {
            backup
        };
        if self.client.uses_token() {
            tokens.revoke(self.client.as_str())?;
        }
        Ok(self.outcome(changes, kept))
    }
}

/// Routes `client`: [`plan_route`] then [`Plan::apply`].
pub fn route(
    env: &SetupEnv,
    client: Client,
    opts: &SetupOptions,
    tokens: &ClientTokens,
) -> Result<Outcome, SetupError> {
    plan_route(env, client, opts, tokens)?.apply(env, tokens)
}

/// Undoes Keyhaven's change to `client`: [`plan_undo`] then [`Plan::apply`].
pub fn undo(env: &SetupEnv, client: Client, tokens: &ClientTokens) -> Result<Outcome, SetupError> {
    plan_undo(env, client, tokens)?.apply(env, tokens)
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn ps_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The environment variables that point OpenAI- and Anthropic-compatible tools at the gateway.
pub fn env_vars(env: &SetupEnv, token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", format!("{}/v1", env.gateway())),
        ("OPENAI_API_KEY", token.to_owned()),
        ("ANTHROPIC_BASE_URL", env.gateway().to_owned()),
        ("ANTHROPIC_AUTH_TOKEN", token.to_owned()),
    ]
}

/// Shell lines that set [`env_vars`]: POSIX `export` on Linux and macOS, PowerShell on Windows.
pub fn env_exports(env: &SetupEnv, token: &str) -> String {
    env_vars(env, token)
        .into_iter()
        .map(|(k, v)| match env.platform {
            Platform::Windows => format!("$env:{k} = {}\n", ps_quote(&v)),
            Platform::Linux | Platform::MacOs => format!("export {k}={}\n", sh_quote(&v)),
        })
        .collect()
}

/// Shell lines that clear [`env_vars`].
pub fn env_unsets(env: &SetupEnv) -> String {
    let names: Vec<&str> = env_vars(env, "").into_iter().map(|(k, _)| k).collect();
    match env.platform {
        Platform::Windows => {
            names.iter().map(|k| format!("Remove-Item Env:{k} -ErrorAction SilentlyContinue\n")).collect()
        }
        Platform::Linux | Platform::MacOs => format!("unset {}\n", names.join(" ")),
    }
}

#[cfg(test)]
mod tests;

/// Cursor's `cursor.general.disableHttp2` setting: `None` when Cursor has no settings file (or it
/// does not parse), else whether it is `true`. Read-only, for `keyhaven doctor`.
pub fn cursor_http2_disabled(env: &SetupEnv) -> Result<Option<bool>, SetupError> {
    let file = fsio::resolve(&config_path(env, Client::Cursor)?);
    let Some(bytes) = fsio::read(&file)? else { return Ok(None) };
    let Some(doc) = std::str::from_utf8(&bytes).ok().and_then(|t| Doc::parse(Client::Cursor.format(), &file, t).ok())
    else {
        return Ok(None);
    };
    let value = doc.get(&file, &["cursor.general.disableHttp2".to_owned()])?;
    Ok(Some(matches!(value, Some(serde_json::Value::Bool(true)))))
}
