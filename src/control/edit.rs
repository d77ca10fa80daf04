//! The config file, owned by the control service: edits on the file's text with `toml_edit`
//! (comments and the formatting of untouched entries survive), validated like a start-up load,
//! written atomically (a temporary file in the same directory, fsync, rename) under one lock.
//!
//! A value is rewritten only when it changes, and a changed value keeps the comment that followed
//! the old one on its line.

use std::io::Write;
use std::path::{Path, PathBuf};

use toml_edit::{Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table, Value};

use crate::config::{FileConfig, KeyRef, ProviderKind, WebFetch, WebSearch, load_str};
use crate::control::{ControlError, ControlService, blocking, dto};
use crate::pricing::PriceTable;
use crate::provider::Catalog;
use crate::secrets::{EntryState, RESERVED_ENTRIES, Secrets, key_origins};

pub(crate) struct ConfigFile {
    path: Option<PathBuf>,
    /// Held across read, validate, write and the caller's apply, so edits never interleave.
    pub(crate) lock: tokio::sync::Mutex<()>,
}

impl ConfigFile {
    pub(crate) fn new(path: Option<PathBuf>) -> ConfigFile {
        ConfigFile { path, lock: tokio::sync::Mutex::new(()) }
    }

    pub(crate) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Reads the file, lets `f` change the document, validates the result (config and catalog),
    /// writes it and returns the new config and catalog. Nothing is written when any step fails.
    /// The caller holds [`ConfigFile::lock`].
    pub(crate) async fn edit(
        &self,
        current: FileConfig,
        prices: PriceTable,
        secrets: Secrets,
        f: impl FnOnce(&mut DocumentMut, &FileConfig) -> Result<(), ControlError> + Send + 'static,
    ) -> Result<(FileConfig, Catalog), ControlError> {
        let Some(path) = self.path.clone() else {
            return Err(ControlError::Unavailable(
                "this engine has no config file, so its configuration cannot be changed here".into(),
            ));
        };
        blocking(move || {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(ControlError::Io(format!("cannot read {}: {e}", path.display()))),
            };
            let mut doc: DocumentMut =
                text.parse().map_err(|e| ControlError::Invalid(format!("{} does not parse: {e}", path.display())))?;
            // The file on disk is the truth; `current` is only a fallback for an unreadable one.
            let on_disk = load_str(&path.display().to_string(), &text).unwrap_or(current);
            f(&mut doc, &on_disk)?;
            let new_text = doc.to_string();
            let file = load_str(&path.display().to_string(), &new_text)
                .map_err(|e| ControlError::Invalid(format!("the change was refused: {e}")))?;
            let catalog = Catalog::new(&file, &prices)
                .map_err(|e| ControlError::Invalid(format!("the change was refused: {e}")))?;
            check_key_origins(&on_disk, &file, &secrets)?;
            write_atomic(&path, new_text.as_bytes())?;
            Ok((file, catalog))
        })
        .await
    }
}

/// Refuses a change that would send a key to an origin the file did not send it to before, when
/// the binding cannot stop it at the request: an environment variable (bound by the config itself,
/// so the control API may only reuse a pair config.toml already has), an entry Keyhaven keeps for
/// itself, or a keyring entry from an older Keyhaven that has no origin yet (its first use would
/// bind it). A keyring entry with an origin may be named anywhere: it still goes only to its own
/// origin. Blocking (keyring).
pub(crate) fn check_key_origins(
    before: &FileConfig,
    after: &FileConfig,
    secrets: &Secrets,
) -> Result<(), ControlError> {
    let old = key_origins(before);
    for (key, origin) in key_origins(after).difference(&old) {
        match key {
            KeyRef::Env(var) => {
                return Err(ControlError::Invalid(format!(
                    "`env:{var}` cannot be used for {origin}: through the control API an environment variable can \
                     only be used for an origin config.toml already uses it for, so no variable travels to a server \
                     it was not meant for. Store the key in the keyring instead, or edit config.toml and restart"
                )));
            }
            KeyRef::Keyring(name) if RESERVED_ENTRIES.contains(&name.as_str()) => {
                return Err(ControlError::Invalid(format!(
                    "the keyring entry `{name}` belongs to Keyhaven itself and cannot be a provider key"
                )));
            }
            KeyRef::Keyring(name) => {
                if let Ok(EntryState::Unbound) = secrets.entry_state(name) {
                    return Err(ControlError::Invalid(format!(
                        "the keyring entry `{name}` was stored by an older Keyhaven, without the origin it is for; \
                         enter its key again before using it for {origin}"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Writes `bytes` to a new owner-only temporary file next to `path`, syncs it, then renames it
/// over `path`.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ControlError> {
    let io = |e: std::io::Error| ControlError::Io(format!("cannot write {}: {e}", path.display()));
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "config.toml".into());
    let tmp = dir.join(format!(".{name}.{:08x}.tmp", rand::random::<u32>()));
    let result = (|| {
        // Owner-only (0600 on Unix) from its first byte: the config names keys and providers.
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, crate::perms::FILE_MODE);
        let mut f = opts.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}

pub(crate) fn kind_to_dto(kind: ProviderKind) -> dto::ProviderKind {
    match kind {
        ProviderKind::Openai => dto::ProviderKind::Openai,
        ProviderKind::Anthropic => dto::ProviderKind::Anthropic,
        ProviderKind::OpenaiResponses => dto::ProviderKind::OpenaiResponses,
        ProviderKind::Lingma => dto::ProviderKind::Lingma,
    }
}

fn kind_str(kind: dto::ProviderKind) -> &'static str {
    match kind {
        dto::ProviderKind::Openai => ProviderKind::Openai.as_str(),
        dto::ProviderKind::Anthropic => ProviderKind::Anthropic.as_str(),
        dto::ProviderKind::OpenaiResponses => ProviderKind::OpenaiResponses.as_str(),
        dto::ProviderKind::Lingma => ProviderKind::Lingma.as_str(),
    }
}

fn plain_name(what: &str, name: &str) -> Result<(), ControlError> {
    if name.trim().is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        return Err(ControlError::Invalid(format!("{what}: 1 to 200 printable characters")));
    }
    Ok(())
}

pub(crate) fn check_provider(p: &dto::ProviderInput) -> Result<(), ControlError> {
    plain_name("provider name", &p.name)?;
    if let Some(k) = &p.key {
        let ok = !k.name.is_empty() && k.name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
        if !ok {
            return Err(ControlError::Invalid("key name: letters, digits, `_`, `-` and `.` only".into()));
        }
    }
    Ok(())
}

pub(crate) fn check_model(m: &dto::ModelInput) -> Result<(), ControlError> {
    plain_name("model name", &m.name)?;
    plain_name("upstream model", &m.upstream)?;
    for a in &m.aliases {
        plain_name("alias", a)?;
    }
    Ok(())
}

/// Renders a value the way it would be written, without its decoration (for comparisons).
fn bare(v: &Value) -> String {
    let mut v = v.clone();
    v.decor_mut().clear();
    v.to_string()
}

/// Sets `key` to `v` unless it already has that value; a replaced value keeps its decoration
/// (e.g. the comment after it).
fn set(t: &mut Table, key: &str, mut v: Value) {
    if let Some(old) = t.get(key).and_then(Item::as_value) {
        if bare(old) == bare(&v) {
            return;
        }
        *v.decor_mut() = old.decor().clone();
    }
    t[key] = Item::Value(v);
}

fn set_opt(t: &mut Table, key: &str, v: Option<Value>) {
    match v {
        Some(v) => set(t, key, v),
        None => {
            t.remove(key);
        }
    }
}

fn strings(items: &[String]) -> Value {
    Value::Array(items.iter().map(String::as_str).collect::<Array>())
}

fn int(n: u64) -> Value {
    Value::from(i64::try_from(n).unwrap_or(i64::MAX))
}

/// `[name]`, created (explicit) when missing.
fn table_mut<'a>(doc: &'a mut DocumentMut, name: &str) -> Result<&'a mut Table, ControlError> {
    let item = doc.entry(name).or_insert_with(|| Item::Table(Table::new()));
    item.as_table_mut().ok_or_else(|| ControlError::Invalid(format!("`{name}` in the config file is not a table")))
}

pub(crate) fn set_in_table(doc: &mut DocumentMut, table: &str, key: &str, v: Value) {
    if let Ok(t) = table_mut(doc, table) {
        set(t, key, v);
    }
}

/// Writes the given `[web]` fields (`searchUrl: ""` removes the URL).
pub(crate) fn set_web(doc: &mut DocumentMut, w: &dto::WebSettingsInput) -> Result<(), ControlError> {
    let t = table_mut(doc, "web")?;
    if let Some(k) = w.search {
        let v = match k {
            dto::WebSearchKind::None => WebSearch::None,
            dto::WebSearchKind::Brave => WebSearch::Brave,
            dto::WebSearchKind::Searxng => WebSearch::Searxng,
        };
        set(t, "search", Value::from(v.as_str()));
    }
    if let Some(url) = &w.search_url {
        let url = url.trim();
        set_opt(t, "search_url", (!url.is_empty()).then(|| Value::from(url)));
    }
    if let Some(f) = w.fetch {
        let v = match f {
            dto::WebFetchMode::Keyhaven => WebFetch::Keyhaven,
            dto::WebFetchMode::Editor => WebFetch::Editor,
        };
        set(t, "fetch", Value::from(v.as_str()));
    }
    if let Some(n) = w.fetch_max_bytes {
        set(t, "fetch_max_bytes", int(n));
    }
    if let Some(n) = w.timeout_ms {
        set(t, "timeout", int(n));
    }
    Ok(())
}

fn array_mut<'a>(doc: &'a mut DocumentMut, name: &str) -> Result<&'a mut ArrayOfTables, ControlError> {
    let item = doc.entry(name).or_insert_with(|| Item::ArrayOfTables(ArrayOfTables::new()));
    item.as_array_of_tables_mut()
        .ok_or_else(|| ControlError::Invalid(format!("`{name}` in the config file is not an array of tables")))
}

fn named_mut<'a>(doc: &'a mut DocumentMut, array: &str, name: &str) -> Result<&'a mut Table, ControlError> {
    array_mut(doc, array)?
        .iter_mut()
        .find(|t| t.get("name").and_then(Item::as_str) == Some(name))
        .ok_or_else(|| ControlError::NotFound(format!("no entry named `{name}` in [[{array}]]")))
}

pub(crate) fn remove_named(doc: &mut DocumentMut, array: &str, name: &str) -> Result<(), ControlError> {
    let arr = array_mut(doc, array)?;
    let idx = arr
        .iter()
        .position(|t| t.get("name").and_then(Item::as_str) == Some(name))
        .ok_or_else(|| ControlError::NotFound(format!("no entry named `{name}` in [[{array}]]")))?;
    arr.remove(idx);
    Ok(())
}

fn write_provider(t: &mut Table, p: &dto::ProviderInput) {
    set(t, "name", Value::from(p.name.as_str()));
    set(t, "kind", Value::from(kind_str(p.kind)));
    // A Lingma provider talks IPC to a local process: its base URL is optional.
    let local_ipc = p.kind == dto::ProviderKind::Lingma && (p.base_url.is_empty() || p.base_url.starts_with("lingma:"));
    if !local_ipc {
        set(t, "base_url", Value::from(p.base_url.as_str()));
    }
    let key = p.key.as_ref().map(|k| {
        let scheme = match k.source {
            dto::KeySource::Keyring => "keyring",
            dto::KeySource::Env => "env",
        };
        Value::from(format!("{scheme}:{}", k.name))
    });
    set_opt(t, "key", key);
    set_opt(t, "reasoning_content", p.reasoning_content.map(Value::from));
    set_opt(t, "max_completion_tokens", p.max_completion_tokens.map(Value::from));
}

pub(crate) fn add_provider(doc: &mut DocumentMut, p: &dto::ProviderInput) {
    let mut t = Table::new();
    write_provider(&mut t, p);
    if let Ok(arr) = array_mut(doc, "providers") {
        arr.push(t);
    }
}

/// Edits provider `old` in place; a rename also renames the models' `provider` references.
pub(crate) fn update_provider(doc: &mut DocumentMut, old: &str, p: &dto::ProviderInput) -> Result<(), ControlError> {
    write_provider(named_mut(doc, "providers", old)?, p);
    if old != p.name
        && let Some(models) = doc.get_mut("models").and_then(Item::as_array_of_tables_mut)
    {
        for m in models.iter_mut().filter(|m| m.get("provider").and_then(Item::as_str) == Some(old)) {
            set(m, "provider", Value::from(p.name.as_str()));
        }
    }
    Ok(())
}

pub(crate) fn set_provider_key_ref(doc: &mut DocumentMut, provider: &str, key: &str) -> Result<(), ControlError> {
    set(named_mut(doc, "providers", provider)?, "key", Value::from(key));
    Ok(())
}

fn write_model(t: &mut Table, m: &dto::ModelInput) {
    set(t, "name", Value::from(m.name.as_str()));
    if m.aliases.is_empty() {
        t.remove("aliases");
    } else {
        set(t, "aliases", strings(&m.aliases));
    }
    set(t, "provider", Value::from(m.provider.as_str()));
    set(t, "upstream", Value::from(m.upstream.as_str()));
    set_opt(t, "context_window", m.context_window.map(int));
    set_opt(t, "max_output_tokens", m.max_output_tokens.map(|n| int(u64::from(n))));
    let caps = m.capabilities.map(|c| {
        let mut it = InlineTable::new();
        it.insert("tools", Value::from(c.tools));
        it.insert("vision", Value::from(c.vision));
        it.insert("thinking", Value::from(c.thinking));
        Value::InlineTable(it)
    });
    set_opt(t, "capabilities", caps);
    let tools = m.tools.map(|mode| {
        Value::from(match mode {
            dto::ToolsMode::Native => "native",
            dto::ToolsMode::Emulated => "emulated",
            dto::ToolsMode::Auto => "auto",
        })
    });
    set_opt(t, "tools", tools);
    let price = m.price.as_ref().filter(|p| **p != dto::PriceInput::default()).map(|p| {
        let mut it = InlineTable::new();
        for (k, v) in
            [("input", &p.input), ("output", &p.output), ("cache_read", &p.cache_read), ("cache_write", &p.cache_write)]
        {
            if let Some(v) = v {
                it.insert(k, Value::from(v.as_str()));
            }
        }
        Value::InlineTable(it)
    });
    set_opt(t, "price", price);
}

pub(crate) fn add_model(doc: &mut DocumentMut, m: &dto::ModelInput) {
    let mut t = Table::new();
    write_model(&mut t, m);
    if let Ok(arr) = array_mut(doc, "models") {
        arr.push(t);
    }
}

/// Sets a model's `cursor` route (`local` or `upstream`).
pub(crate) fn set_model_route(doc: &mut DocumentMut, model: &str, route: &str) -> Result<(), ControlError> {
    set(named_mut(doc, "models", model)?, "cursor", Value::from(route));
    Ok(())
}

pub(crate) fn update_model(doc: &mut DocumentMut, old: &str, m: &dto::ModelInput) -> Result<(), ControlError> {
    write_model(named_mut(doc, "models", old)?, m);
    Ok(())
}

fn loopback(what: &str, addr: &str) -> Result<std::net::SocketAddr, ControlError> {
    let a: std::net::SocketAddr = addr
        .parse()
        .map_err(|_| ControlError::Invalid(format!("{what}: `{addr}` is not an address such as 127.0.0.1:4937")))?;
    if !a.ip().is_loopback() {
        return Err(ControlError::Invalid(format!(
            "{what}: only loopback addresses can be set from the control API; edit the config file to listen elsewhere"
        )));
    }
    Ok(a)
}

impl ControlService {
    pub async fn settings(&self) -> Result<dto::Settings, ControlError> {
        let f = self.current();
        Ok(dto::Settings {
            listen: f.server.listen.to_string(),
            proxy_listen: f.proxy.listen.to_string(),
            proxy_enabled: f.proxy.enabled,
            data_dir: self.inner.data_dir.display().to_string(),
            capture_bodies: f.server.capture_bodies,
            body_capture_limit: u64::try_from(f.server.body_capture_limit).unwrap_or(u64::MAX),
            retention_days: self.retention_days(),
            ui_dir: f.server.ui_dir.as_ref().map(|p| p.display().to_string()),
            restore_on_stop: f.setup.restore_on_stop,
        })
    }

    /// Writes the given settings to the config file. Retention applies at once; the answer lists
    /// the changed settings that need a restart.
    pub async fn set_settings(&self, input: dto::SettingsInput) -> Result<dto::SettingsApplied, ControlError> {
        let listen = input.listen.as_deref().map(|a| loopback("listen", a)).transpose()?;
        let proxy_listen = input.proxy_listen.as_deref().map(|a| loopback("proxyListen", a)).transpose()?;
        if input.body_capture_limit.is_some_and(|n| n > 64 * 1024 * 1024) {
            return Err(ControlError::Invalid("bodyCaptureLimit: at most 64 MiB".into()));
        }
        let before = self.settings().await?;
        let i = input.clone();
        self.change(move |doc, _| {
            let server_changes = listen.is_some()
                || i.capture_bodies.is_some()
                || i.body_capture_limit.is_some()
                || i.retention_days.is_some();
            if server_changes {
                let server = table_mut(doc, "server")?;
                if let Some(a) = listen {
                    set(server, "listen", Value::from(a.to_string()));
                }
                if let Some(b) = i.capture_bodies {
                    set(server, "capture_bodies", Value::from(b));
                }
                if let Some(n) = i.body_capture_limit {
                    set(server, "body_capture_limit", int(n));
                }
                if let Some(d) = i.retention_days {
                    set(server, "retention_days", int(u64::from(d)));
                }
            }
            if let Some(b) = i.restore_on_stop {
                set(table_mut(doc, "setup")?, "restore_on_stop", Value::from(b));
            }
            if proxy_listen.is_some() || i.proxy_enabled.is_some() {
                let proxy = table_mut(doc, "proxy")?;
                if let Some(a) = proxy_listen {
                    set(proxy, "listen", Value::from(a.to_string()));
                }
                if let Some(b) = i.proxy_enabled {
                    set(proxy, "enabled", Value::from(b));
                }
            }
            Ok(())
        })
        .await?;
        if let Some(d) = input.retention_days {
            self.apply_retention(d).await?;
        }
        let after = self.settings().await?;
        let mut restart = Vec::new();
        for (name, changed) in [
            ("listen", before.listen != after.listen),
            ("proxyListen", before.proxy_listen != after.proxy_listen),
            ("proxyEnabled", before.proxy_enabled != after.proxy_enabled),
            ("captureBodies", before.capture_bodies != after.capture_bodies),
            ("bodyCaptureLimit", before.body_capture_limit != after.body_capture_limit),
        ] {
            if changed {
                restart.push(name.to_owned());
            }
        }
        Ok(dto::SettingsApplied { settings: after, restart_required: restart })
    }
}
