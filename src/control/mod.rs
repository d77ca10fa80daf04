//! The management service the UI uses: one API for the tray app's window (in-process, through
//! `api::control::LocalControl`) and the headless HTTP control API (`api::control`). Every
//! argument and answer is a POD type from [`dto`].
//!
//! [`ControlService`] is a cheap `Clone` built by `app` from the engine's parts. It covers:
//! engine status; providers and models (list, create, edit, delete); connection tests; provider
//! keys (write-only); the Cursor routing mode and each model's route in hybrid mode; the local CA and its trust stores; usage (tokens,
//! cost, cache hit rate, latency percentiles, error rate by day, model, provider or client); the
//! call history (filter, page, detail, delete, retention); client setup (detect, route, undo); the
//! live log tail; and settings.
//!
//! Decisions:
//! - **The service owns the config file.** Every change is made on the file's text with
//!   `toml_edit` (comments and formatting of untouched lines survive), validated with
//!   [`config::load_str`](crate::config::load_str) and a fresh [`Catalog`], written atomically
//!   (temporary file + rename) and applied live with [`Gateway::set_catalog`]. Edits are
//!   serialised by one lock. Without a config path (tests, embedded use) edits are `unavailable`.
//! - **Connection test** = a 1-token chat call (`max_tokens = 1`, "ping") through the gateway, so
//!   it exercises exactly what clients use: key, URL, dialect, routing. It is recorded in the
//!   history as client `keyhaven-control` and may cost one token.
//! - **Keys are write-only.** They enter through [`dto::KeyInput`] into the keyring; answers carry
//!   only [`dto::KeyInfo`] (`hasKey` and the entry name).
//! - **Keys stay with their origin.** A key is stored bound to the provider's origin (see
//!   [`crate::secrets`]); every config change is checked so it pairs no `env:` variable, no entry
//!   without an origin and no reserved entry with a new origin (`edit::check_key_origins`); moving a
//!   provider with a key to another origin needs the key entered again (`ProviderInput.keyValue`).
//! - **Latency percentiles** come from the `latency_daily` histogram rollup (bucket upper bounds),
//!   never from a scan of `calls`; windows are capped at 366 days.
//! - **Live vs restart.** Providers, models, keys, routing mode and retention apply live; listen
//!   addresses, proxy on/off and body capture need a restart (the answer says so). The UI directory
//!   is set in the config file only.

mod budgets;
pub mod cursor_guard;
mod doctor;
pub mod dto;
pub use budgets::apply as apply_budgets;
mod edit;
pub mod export;
pub mod logs;
pub mod prices;
pub mod token;
mod usage;
mod web;

#[cfg(test)]
mod bindings;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use crate::config::{CursorRoute, FileConfig, KeyRef, RoutingMode, ToolsMode};
use crate::control::dto::ErrorBody;
use crate::control::edit::ConfigFile;
use crate::control::logs::LogRing;
use crate::model::{self, Message, Role};
use crate::pricing::PriceTable;
use crate::provider::{CallContext, Gateway};
use crate::proxy::ca::{CaError, CaPaths, LocalCa};
use crate::proxy::trust::{self, RootRef, TrustEnv};
use crate::proxy::{InterceptList, ModeSwitch};
use crate::secrets::{Keyring, RESERVED_ENTRIES, SecretError, origin_of};
use crate::setup::{self, ClientTokens, SetupEnv, SetupError, SetupOptions};
use crate::store::{Store, StoreError};

/// What the UI says when the machine has no OS keyring.
pub const NO_KEYRING: &str = "This machine has no OS keyring (no Secret Service answers on the session D-Bus, \
     as on most headless servers). Client tokens and the local CA key are then kept in files only you can read \
     (mode 0600). For a provider key, name an environment variable instead (key = \"env:NAME\", set before \
     Keyhaven starts), or start a keyring (e.g. gnome-keyring-daemon) and try again.";

/// The client name connection tests are recorded under.
pub const TEST_CLIENT: &str = "keyhaven-control";

/// What can go wrong in a control call. Reaches the UI as `{ kind, message }`.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("{0}")]
    NotFound(String),
    /// Bad input, or a change the config validation refuses.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    /// The engine was started without what this needs (a config file, the trust stores, ...).
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Io(String),
    #[error(transparent)]
    Ca(#[from] CaError),
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error("{0}")]
    Internal(String),
}

impl ControlError {
    pub fn kind(&self) -> &'static str {
        if self.keyring_unavailable().is_some() {
            return "keyring_unavailable";
        }
        match self {
            ControlError::NotFound(_) => "not_found",
            ControlError::Invalid(_) => "invalid",
            ControlError::Conflict(_) => "conflict",
            ControlError::Unavailable(_) => "unavailable",
            ControlError::Secret(_) => "keyring",
            ControlError::Store(_) => "store",
            ControlError::Io(_) => "io",
            ControlError::Ca(_) => "ca",
            ControlError::Setup(_) => "setup",
            ControlError::Internal(_) => "internal",
        }
    }

    /// The user's files or the setup state are in a shape that prevents the change (nothing to
    /// undo, read-only, edited meanwhile, unparsable): something the user can act on, not a fault.
    pub fn is_user_state(&self) -> bool {
        matches!(
            self,
            ControlError::Setup(
                SetupError::NotRouted { .. }
                    | SetupError::ReadOnly { .. }
                    | SetupError::ConcurrentEdit { .. }
                    | SetupError::Parse { .. }
                    | SetupError::Shape { .. },
            )
        )
    }

    /// The platform's own words when the failure is a missing OS keyring (a headless machine
    /// without a Secret Service, e.g. "DBus error: Unable to autolaunch a dbus-daemon"): for the
    /// log only; the UI gets [`NO_KEYRING`].
    pub fn keyring_unavailable(&self) -> Option<&str> {
        match self {
            ControlError::Secret(SecretError::Unavailable(raw))
            | ControlError::Setup(SetupError::Secret(SecretError::Unavailable(raw))) => Some(raw),
            _ => None,
        }
    }

    /// What the UI shows: the error in words, and for a missing keyring what to do instead of
    /// the raw platform error.
    pub fn message(&self) -> String {
        match self.keyring_unavailable() {
            Some(_) => NO_KEYRING.to_owned(),
            None => self.to_string(),
        }
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody { kind: self.kind().to_owned(), message: self.message() }
    }
}

impl serde::Serialize for ControlError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.body().serialize(s)
    }
}

/// Runs blocking work (keyring, files, trust-store commands) off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ControlError> + Send + 'static,
) -> Result<T, ControlError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ControlError::Internal(format!("control task failed: {e}")))?
}

/// What `app` hands the service.
pub struct ControlDeps {
    pub gateway: Arc<Gateway>,
    pub store: Arc<Store>,
    pub prices: PriceTable,
    /// The config as the engine started with it.
    pub file: FileConfig,
    /// The config file the service edits (`None`: edits are unavailable).
    pub config_path: Option<PathBuf>,
    pub data_dir: PathBuf,
    pub ca_dir: PathBuf,
    pub gateway_addr: SocketAddr,
    pub proxy_addr: Option<SocketAddr>,
    /// The running proxy's mode switch.
    pub mode: Option<ModeSwitch>,
    /// Where the OS trust stores are (`None`: CA install/uninstall/rotate are unavailable).
    pub trust: Option<TrustEnv>,
    /// The user's home and Keyhaven's endpoints for client setup (`None`: unavailable).
    pub setup: Option<SetupEnv>,
    /// The log tail fed by the binary's tracing layer (`None`: an empty ring).
    pub logs: Option<LogRing>,
    /// Cancelled at engine shutdown (connection tests take a child token).
    pub shutdown: CancellationToken,
    /// The retention in days, shared with the engine's pruning loop.
    pub retention_days: Arc<AtomicU32>,
    /// The system's UTC offset in seconds (budgets follow it unless `time_zone` says otherwise).
    pub local_offset_s: i32,
    /// The Cursor update guard (`None`: no proxy).
    pub cursor_guard: Option<Arc<dyn cursor_guard::CursorGuardPort>>,
}

struct Inner {
    gateway: Arc<Gateway>,
    store: Arc<Store>,
    prices: PriceTable,
    config: ConfigFile,
    data_dir: PathBuf,
    ca_dir: PathBuf,
    gateway_addr: SocketAddr,
    proxy_addr: Option<SocketAddr>,
    mode: Option<ModeSwitch>,
    trust: Option<TrustEnv>,
    setup: Option<SetupEnv>,
    logs: LogRing,
    shutdown: CancellationToken,
    retention_days: Arc<AtomicU32>,
    local_offset_s: i32,
    cursor_guard: Option<Arc<dyn cursor_guard::CursorGuardPort>>,
    started: Instant,
    /// The config currently applied (the file's last validated content).
    current: RwLock<FileConfig>,
    /// `[web]` as the engine started with it (its tools are installed once per start).
    started_web: crate::config::WebConfig,
}

/// The management service. Cheap to clone.
#[derive(Clone)]
pub struct ControlService {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ControlService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlService").field("gateway", &self.inner.gateway_addr).finish_non_exhaustive()
    }
}

fn keyring_of(gateway: &Gateway) -> Arc<dyn Keyring> {
    gateway.secrets().keyring().clone()
}

impl ControlService {
    pub fn new(deps: ControlDeps) -> ControlService {
        ControlService {
            inner: Arc::new(Inner {
                config: ConfigFile::new(deps.config_path),
                started_web: deps.file.web.clone(),
                current: RwLock::new(deps.file),
                gateway: deps.gateway,
                store: deps.store,
                prices: deps.prices,
                data_dir: deps.data_dir,
                ca_dir: deps.ca_dir,
                gateway_addr: deps.gateway_addr,
                proxy_addr: deps.proxy_addr,
                mode: deps.mode,
                trust: deps.trust,
                setup: deps.setup,
                logs: deps.logs.unwrap_or_default(),
                shutdown: deps.shutdown,
                retention_days: deps.retention_days,
                local_offset_s: deps.local_offset_s,
                cursor_guard: deps.cursor_guard,
                started: Instant::now(),
            }),
        }
    }

    fn current(&self) -> FileConfig {
        self.inner.current.read().map(|c| c.clone()).unwrap_or_default()
    }

    // ---- status ----

    pub async fn status(&self) -> Result<dto::EngineStatus, ControlError> {
        let catalog = self.inner.gateway.catalog();
        let i = &self.inner;
        Ok(dto::EngineStatus {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            uptime_ms: u64::try_from(i.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            gateway_url: format!("http://{}", i.gateway_addr),
            proxy_addr: i.proxy_addr.map(|a| a.to_string()),
            model_count: u32::try_from(catalog.models().len()).unwrap_or(u32::MAX),
            provider_count: u32::try_from(catalog.provider_names().len()).unwrap_or(u32::MAX),
            recorder_drops: i.store.dropped(),
            config_path: i.config.path().map(|p| p.display().to_string()),
            data_dir: i.data_dir.display().to_string(),
        })
    }

    // ---- providers, models, keys ----

    pub async fn providers(&self) -> Result<Vec<dto::Provider>, ControlError> {
        let file = self.current();
        let health = self.inner.gateway.provider_health();
        let keyring = keyring_of(&self.inner.gateway);
        let secrets = self.inner.gateway.secrets().clone();
        blocking(move || {
            let mut out = Vec::new();
            for p in &file.providers {
                let h = health.iter().find(|h| h.provider == p.name());
                out.push(dto::Provider {
                    name: p.name().to_owned(),
                    kind: edit::kind_to_dto(p.kind),
                    base_url: p.base_url.as_ref().map_or_else(|| p.base_url().to_owned(), |u| u.get_ref().clone()),
                    key: p.key.as_ref().map(|k| key_info(k, keyring.as_ref(), &secrets)),
                    reasoning_content: p.reasoning_content,
                    max_completion_tokens: p.max_completion_tokens,
                    model_count: u32::try_from(file.models.iter().filter(|m| m.provider.get_ref() == p.name()).count())
                        .unwrap_or(u32::MAX),
                    health: h.map(|h| dto::ProviderHealth {
                        cooling_down: h.cooling_down,
                        cooldown_remaining_ms: h.cooldown_remaining_ms,
                        recent_failures: h.recent_failures,
                        last_error: h.last_error.clone(),
                        total_failures: h.total_failures,
                        total_successes: h.total_successes,
                    }),
                });
            }
            Ok(out)
        })
        .await
    }

    pub async fn models(&self) -> Result<Vec<dto::Model>, ControlError> {
        let file = self.current();
        let catalog = self.inner.gateway.catalog();
        let mut out = Vec::new();
        for m in &file.models {
            let entry = catalog.resolve(m.name()).map(|r| r.model);
            out.push(dto::Model {
                id: entry.as_ref().map(|e| e.id.clone()).unwrap_or_default(),
                name: m.name().to_owned(),
                aliases: m.aliases.clone(),
                provider: m.provider.get_ref().clone(),
                upstream: m.upstream.clone(),
                context_window: m.context_window,
                max_output_tokens: m.max_output_tokens,
                capabilities: dto::Capabilities {
                    tools: m.capabilities.tools,
                    vision: m.capabilities.vision,
                    thinking: m.capabilities.thinking,
                },
                tools: match m.tools {
                    ToolsMode::Native => dto::ToolsMode::Native,
                    ToolsMode::Emulated => dto::ToolsMode::Emulated,
                    ToolsMode::Auto => dto::ToolsMode::Auto,
                },
                priced: entry.is_some_and(|e| e.price.is_some()),
                price: m.price.as_ref().map(|p| dto::PriceInput {
                    input: p.input.clone(),
                    output: p.output.clone(),
                    cache_read: p.cache_read.clone(),
                    cache_write: p.cache_write.clone(),
                }),
            });
        }
        Ok(out)
    }

    /// Validates, writes and applies a config change made by `f` on the file's document.
    async fn change(
        &self,
        f: impl FnOnce(&mut toml_edit::DocumentMut, &FileConfig) -> Result<(), ControlError> + Send + 'static,
    ) -> Result<FileConfig, ControlError> {
        let _guard = self.inner.config.lock.lock().await;
        let current = self.current();
        let prices = self.inner.prices.clone();
        let secrets = self.inner.gateway.secrets().clone();
        let (file, catalog) = self.inner.config.edit(current, prices, secrets, f).await?;
        self.inner.gateway.set_catalog(catalog);
        if let Ok(mut c) = self.inner.current.write() {
            *c = file.clone();
        }
        Ok(file)
    }

    pub async fn create_provider(&self, mut input: dto::ProviderInput) -> Result<dto::Provider, ControlError> {
        edit::check_provider(&input)?;
        let name = input.name.clone();
        let file = self.current();
        if file.providers.iter().any(|p| p.name() == input.name) {
            return Err(ControlError::Conflict(format!("a provider named `{}` exists", input.name)));
        }
        self.store_input_key(&file, None, &mut input).await?;
        self.change(move |doc, file| {
            if file.providers.iter().any(|p| p.name() == input.name) {
                return Err(ControlError::Conflict(format!("a provider named `{}` exists", input.name)));
            }
            edit::add_provider(doc, &input);
            Ok(())
        })
        .await?;
        self.provider(&name).await
    }

    /// Edits a provider. Moving a provider that has a key to another origin needs the key entered
    /// again (`keyValue`): keys are bound to the origin they were stored for.
    pub async fn update_provider(
        &self,
        name: &str,
        mut input: dto::ProviderInput,
    ) -> Result<dto::Provider, ControlError> {
        edit::check_provider(&input)?;
        let file = self.current();
        let Some(before) = file.providers.iter().find(|p| p.name() == name) else {
            return Err(ControlError::NotFound(format!("no provider named `{name}`")));
        };
        let (from, to) = (origin_of(before.base_url()), origin_of(&input.base_url));
        if from != to && input.key.is_some() && input.key_value.is_none() {
            return Err(ControlError::Invalid(format!(
                "moving `{name}` from {} to {} needs its API key entered again: a stored key is only ever sent to \
                 the origin it was stored for",
                from.as_deref().unwrap_or("no origin"),
                to.as_deref().unwrap_or("no origin"),
            )));
        }
        self.store_input_key(&file, Some(name), &mut input).await?;
        let old = name.to_owned();
        let new = input.name.clone();
        self.change(move |doc, file| {
            if !file.providers.iter().any(|p| p.name() == old) {
                return Err(ControlError::NotFound(format!("no provider named `{old}`")));
            }
            if old != input.name && file.providers.iter().any(|p| p.name() == input.name) {
                return Err(ControlError::Conflict(format!("a provider named `{}` exists", input.name)));
            }
            edit::update_provider(doc, &old, &input)
        })
        .await?;
        self.provider(&new).await
    }

    /// Stores `input.key_value` (when given) in the keyring, bound to `input.base_url`'s origin,
    /// and points `input.key` at the entry used (see [`key_entry_for`]).
    async fn store_input_key(
        &self,
        file: &FileConfig,
        existing: Option<&str>,
        input: &mut dto::ProviderInput,
    ) -> Result<(), ControlError> {
        let Some(value) = input.key_value.take() else { return Ok(()) };
        let secret = key_secret(dto::KeyInput { value })?;
        if origin_of(&input.base_url).is_none() {
            return Err(ControlError::Invalid("a key needs an http(s) base URL to be bound to".into()));
        }
        let current = match &input.key {
            Some(dto::KeyRefInput { source: dto::KeySource::Keyring, name }) => Some(name.as_str()),
            _ => None,
        };
        let entry = key_entry_for(file, existing.unwrap_or(&input.name), current, &input.base_url);
        let secrets = self.inner.gateway.secrets().clone();
        let (e, origin) = (entry.clone(), input.base_url.clone());
        blocking(move || Ok(secrets.store(&e, &origin, &secret)?)).await?;
        input.key = Some(dto::KeyRefInput { source: dto::KeySource::Keyring, name: entry });
        Ok(())
    }

    pub async fn delete_provider(&self, name: &str) -> Result<(), ControlError> {
        let name = name.to_owned();
        self.change(move |doc, file| {
            if !file.providers.iter().any(|p| p.name() == name) {
                return Err(ControlError::NotFound(format!("no provider named `{name}`")));
            }
            let users: Vec<&str> =
                file.models.iter().filter(|m| m.provider.get_ref() == &name).map(|m| m.name()).collect();
            if !users.is_empty() {
                return Err(ControlError::Conflict(format!(
                    "provider `{name}` is used by {}; delete or move those models first",
                    users.join(", ")
                )));
            }
            edit::remove_named(doc, "providers", &name)
        })
        .await?;
        Ok(())
    }

    async fn provider(&self, name: &str) -> Result<dto::Provider, ControlError> {
        self.providers()
            .await?
            .into_iter()
            .find(|p| p.name == name)
            .ok_or_else(|| ControlError::NotFound(format!("no provider named `{name}`")))
    }

    async fn model(&self, name: &str) -> Result<dto::Model, ControlError> {
        self.models()
            .await?
            .into_iter()
            .find(|m| m.name == name)
            .ok_or_else(|| ControlError::NotFound(format!("no model named `{name}`")))
    }

    pub async fn create_model(&self, input: dto::ModelInput) -> Result<dto::Model, ControlError> {
        edit::check_model(&input)?;
        let name = input.name.clone();
        self.change(move |doc, file| {
            if file.models.iter().any(|m| m.name() == input.name) {
                return Err(ControlError::Conflict(format!("a model named `{}` exists", input.name)));
            }
            edit::add_model(doc, &input);
            Ok(())
        })
        .await?;
        self.model(&name).await
    }

    pub async fn update_model(&self, name: &str, input: dto::ModelInput) -> Result<dto::Model, ControlError> {
        edit::check_model(&input)?;
        let old = name.to_owned();
        let new = input.name.clone();
        self.change(move |doc, file| {
            if !file.models.iter().any(|m| m.name() == old) {
                return Err(ControlError::NotFound(format!("no model named `{old}`")));
            }
            if old != input.name && file.models.iter().any(|m| m.name() == input.name) {
                return Err(ControlError::Conflict(format!("a model named `{}` exists", input.name)));
            }
            edit::update_model(doc, &old, &input)
        })
        .await?;
        self.model(&new).await
    }

    pub async fn delete_model(&self, name: &str) -> Result<(), ControlError> {
        let name = name.to_owned();
        self.change(move |doc, file| {
            if !file.models.iter().any(|m| m.name() == name) {
                return Err(ControlError::NotFound(format!("no model named `{name}`")));
            }
            edit::remove_named(doc, "models", &name)
        })
        .await?;
        Ok(())
    }

    /// Stores a provider's key in the keyring, bound to the provider's origin. A provider without a
    /// key reference gets `key = "keyring:<provider>"`, and so does one whose entry another
    /// provider or the Brave key uses for another origin; one whose key comes from an environment
    /// variable is refused.
    pub async fn set_provider_key(&self, provider: &str, input: dto::KeyInput) -> Result<dto::KeyInfo, ControlError> {
        let secret = key_secret(input)?;
        let file = self.current();
        let p = file
            .providers
            .iter()
            .find(|p| p.name() == provider)
            .ok_or_else(|| ControlError::NotFound(format!("no provider named `{provider}`")))?;
        let current = match &p.key {
            Some(KeyRef::Keyring(n)) => Some(n.as_str()),
            Some(KeyRef::Env(var)) => {
                return Err(ControlError::Invalid(format!(
                    "provider `{provider}` reads its key from the environment variable `{var}`; \
                     switch it to the keyring first"
                )));
            }
            None => None,
        };
        let base_url = p.base_url().to_owned();
        if origin_of(&base_url).is_none() {
            return Err(ControlError::Invalid(format!(
                "provider `{provider}` has no http(s) base URL for its key to be bound to"
            )));
        }
        let name = key_entry_for(&file, provider, current, &base_url);
        let secrets = self.inner.gateway.secrets().clone();
        let entry = name.clone();
        blocking(move || Ok(secrets.store(&entry, &base_url, &secret)?)).await?;
        if current != Some(name.as_str()) {
            let provider = provider.to_owned();
            let key = format!("keyring:{name}");
            self.change(move |doc, _| edit::set_provider_key_ref(doc, &provider, &key)).await?;
        }
        Ok(dto::KeyInfo { source: dto::KeySource::Keyring, name, has_key: true })
    }

    /// Removes a provider's key from the keyring (the reference in the config stays).
    pub async fn delete_provider_key(&self, provider: &str) -> Result<dto::KeyInfo, ControlError> {
        let file = self.current();
        let p = file
            .providers
            .iter()
            .find(|p| p.name() == provider)
            .ok_or_else(|| ControlError::NotFound(format!("no provider named `{provider}`")))?;
        let Some(KeyRef::Keyring(name)) = &p.key else {
            return Err(ControlError::Invalid(format!("provider `{provider}` has no key in the keyring")));
        };
        let keyring = keyring_of(&self.inner.gateway);
        let entry = name.clone();
        blocking(move || Ok(keyring.delete(&entry)?)).await?;
        self.inner.gateway.secrets().clear_cache();
        Ok(dto::KeyInfo { source: dto::KeySource::Keyring, name: name.clone(), has_key: false })
    }

    /// A 1-token chat call to `model` through the gateway (see the module docs).
    pub async fn test_model(&self, model: &str) -> Result<dto::ConnectionTest, ControlError> {
        let Some(route) = self.inner.gateway.catalog().resolve(model) else {
            return Err(ControlError::NotFound(format!("no model named `{model}`")));
        };
        let id = format!("kh-test-{:016x}", rand::random::<u64>());
        let mut req = model::Request {
            model: route.model.name.clone(),
            messages: vec![Message::text(Role::User, "ping")],
            ..model::Request::default()
        };
        req.params.max_tokens = Some(1);
        let ctx = CallContext {
            id: id.clone(),
            dialect: "control_test",
            client: TEST_CLIENT.to_owned(),
            request_body: None,
            cancel: self.inner.shutdown.child_token(),
            conversation_id: None,
            request_id: None,
            session_id: None,
        };
        let started = Instant::now();
        let result = match tokio::time::timeout(Duration::from_secs(120), async {
            match self.inner.gateway.call(req, ctx).await {
                Ok(call) => call.collect().await.0.map(|_| ()),
                Err(failure) => Err(failure.error),
            }
        })
        .await
        {
            Ok(r) => r.map_err(|e| (e.kind().to_owned(), e.to_string())),
            Err(_) => Err(("timeout".to_owned(), "no answer within 120 s".to_owned())),
        };
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        // The answer links to the call: its row is committed first (starts are journaled, not
        // committed, before a call goes out).
        if let Err(e) = self.inner.store.flush().await {
            tracing::warn!(error = %e, "store flush after a connection test failed");
        }
        let (ok, error_kind, message) = match result {
            Ok(()) => (true, None, "the provider answered".to_owned()),
            Err((kind, message)) => (false, Some(kind), message),
        };
        Ok(dto::ConnectionTest {
            ok,
            model: route.model.name.clone(),
            provider: route.provider.name.clone(),
            latency_ms,
            error_kind,
            message,
            call_id: id,
        })
    }

    /// Tests a provider through its first model.
    pub async fn test_provider(&self, provider: &str) -> Result<dto::ConnectionTest, ControlError> {
        let file = self.current();
        if !file.providers.iter().any(|p| p.name() == provider) {
            return Err(ControlError::NotFound(format!("no provider named `{provider}`")));
        }
        let Some(m) = file.models.iter().find(|m| m.provider.get_ref() == provider) else {
            return Err(ControlError::Invalid(format!(
                "provider `{provider}` has no model yet; add one to test the connection"
            )));
        };
        self.test_model(m.name()).await
    }

    // ---- routing mode ----

    pub async fn routing(&self) -> Result<dto::Routing, ControlError> {
        let mode = match &self.inner.mode {
            Some(m) => m.get(),
            None => self.current().proxy.mode,
        };
        let models = self
            .current()
            .models
            .iter()
            .map(|m| dto::ModelRoute {
                model: m.name().to_owned(),
                route: match m.cursor {
                    CursorRoute::Local => dto::CursorRoute::Local,
                    CursorRoute::Upstream => dto::CursorRoute::Upstream,
                },
            })
            .collect();
        let file = self.current();
        let tab = dto::TabRouting {
            model: file.cursor_tab.local_model().map(str::to_owned),
            fim_models: file.models.iter().filter(|m| m.fim_dialect().is_some()).map(|m| m.name().to_owned()).collect(),
        };
        Ok(dto::Routing { mode: mode_to_dto(mode), proxy_running: self.inner.mode.is_some(), models, tab })
    }

    /// Chooses who answers Cursor Tab (`[cursor_tab] model`): a FIM model, or Cursor's official
    /// service (`None`). Applies to the next suggestion.
    pub async fn set_tab(&self, input: dto::TabInput) -> Result<dto::Routing, ControlError> {
        let model = input.model.filter(|m| !m.trim().is_empty() && m != crate::config::TAB_OFFICIAL);
        self.change(move |doc, file| {
            if let Some(name) = &model {
                match file.models.iter().find(|m| m.name() == name) {
                    None => return Err(ControlError::NotFound(format!("no model named `{name}`"))),
                    Some(m) if m.fim_dialect().is_none() => {
                        return Err(ControlError::Invalid(format!(
                            "`{name}` is not a FIM model: mark it `fim = true` (or a FIM dialect) to use it for Tab"
                        )));
                    }
                    Some(_) => {}
                }
            }
            let value = model.as_deref().unwrap_or(crate::config::TAB_OFFICIAL);
            edit::set_in_table(doc, "cursor_tab", "model", toml_edit::Value::from(value));
            Ok(())
        })
        .await?;
        self.routing().await
    }

    /// Sets where Cursor runs with `model` go in hybrid mode (`[[models]] cursor`); applies to
    /// the next run.
    pub async fn set_model_route(
        &self,
        model: &str,
        input: dto::ModelRouteInput,
    ) -> Result<dto::Routing, ControlError> {
        let route = match input.route {
            dto::CursorRoute::Local => CursorRoute::Local,
            dto::CursorRoute::Upstream => CursorRoute::Upstream,
        };
        let name = model.to_owned();
        self.change(move |doc, file| {
            if !file.models.iter().any(|m| m.name() == name) {
                return Err(ControlError::NotFound(format!("no model named `{name}`")));
            }
            edit::set_model_route(doc, &name, route.as_str())
        })
        .await?;
        self.routing().await
    }

    /// Switches the mode of the running proxy (next request) and keeps it in the config file.
    pub async fn set_routing(&self, input: dto::RoutingInput) -> Result<dto::Routing, ControlError> {
        let mode = match input.mode {
            dto::RoutingMode::Local => RoutingMode::Local,
            dto::RoutingMode::Upstream => RoutingMode::Upstream,
            dto::RoutingMode::Hybrid => RoutingMode::Hybrid,
        };
        if self.inner.config.path().is_some() {
            self.change(move |doc, _| {
                edit::set_in_table(doc, "proxy", "mode", toml_edit::Value::from(mode.as_str()));
                Ok(())
            })
            .await?;
        } else if self.inner.mode.is_none() {
            return Err(ControlError::Unavailable("the proxy is not running and there is no config file".into()));
        }
        if let Some(m) = &self.inner.mode {
            m.set(mode);
        }
        self.routing().await
    }

    // ---- the local CA ----

    fn ca_parts(&self) -> (CaPaths, Arc<dyn Keyring>, InterceptList) {
        (
            CaPaths::new(self.inner.ca_dir.clone()),
            keyring_of(&self.inner.gateway),
            InterceptList::new(&self.current().proxy.intercept),
        )
    }

    fn trust_env(&self) -> Result<TrustEnv, ControlError> {
        self.inner
            .trust
            .clone()
            .ok_or_else(|| ControlError::Unavailable("the trust stores are not available to this engine".into()))
    }

    pub async fn ca_status(&self) -> Result<dto::CaStatus, ControlError> {
        let (paths, keyring, intercept) = self.ca_parts();
        let trust = self.inner.trust.clone();
        blocking(move || {
            let ca = LocalCa::load(&paths, keyring.as_ref(), &intercept, time::OffsetDateTime::now_utc())?;
            Ok(ca_status(ca.as_ref(), &paths, &intercept, trust.as_ref()))
        })
        .await
    }

    /// Creates the root if needed and installs it in every trust store.
    pub async fn ca_install(&self) -> Result<dto::CaChange, ControlError> {
        let (paths, keyring, intercept) = self.ca_parts();
        let env = self.trust_env()?;
        blocking(move || {
            let (ca, _) =
                LocalCa::load_or_create(&paths, keyring.as_ref(), &intercept, time::OffsetDateTime::now_utc())?;
            let reports = trust::install(&env, &root_ref(&ca, &paths));
            Ok(ca_change(
                &ca_status(Some(&ca), &paths, &intercept, Some(&env)),
                &reports,
                vec![trust::RESTART_HINT.into()],
            ))
        })
        .await
    }

    /// Removes every Keyhaven root from every trust store (the root itself stays).
    pub async fn ca_uninstall(&self) -> Result<dto::CaChange, ControlError> {
        let (paths, keyring, intercept) = self.ca_parts();
        let env = self.trust_env()?;
        blocking(move || {
            let reports = trust::uninstall(&env);
            let ca =
                LocalCa::load(&paths, keyring.as_ref(), &intercept, time::OffsetDateTime::now_utc()).ok().flatten();
            Ok(ca_change(&ca_status(ca.as_ref(), &paths, &intercept, Some(&env)), &reports, Vec::new()))
        })
        .await
    }

    /// Replaces the root: removes the old one from every store and the keyring, creates a new one
    /// and trusts it where the old one was trusted. The running proxy keeps the old root until
    /// Keyhaven restarts.
    pub async fn ca_rotate(&self) -> Result<dto::CaChange, ControlError> {
        let (paths, keyring, intercept) = self.ca_parts();
        let env = self.trust_env()?;
        let proxy_running = self.inner.mode.is_some();
        blocking(move || {
            let now = time::OffsetDateTime::now_utc();
            let was_trusted = match LocalCa::load(&paths, keyring.as_ref(), &intercept, now) {
                Ok(Some(old)) => trust::status(&env, &root_ref(&old, &paths))
                    .iter()
                    .any(|r| matches!(r.outcome, trust::Outcome::Present | trust::Outcome::Stale)),
                _ => true,
            };
            let mut reports = trust::uninstall(&env);
            if reports.iter().any(|r| r.outcome.is_failure()) {
                let status = ca_status(None, &paths, &intercept, None);
                let notes = vec!["the old root could not be removed everywhere; nothing was rotated".to_owned()];
                return Ok(ca_change(&status, &reports, notes));
            }
            crate::proxy::ca::remove_root(&paths, keyring.as_ref())?;
            let ca = LocalCa::create(&paths, keyring.as_ref(), &intercept, now)?;
            let mut notes = Vec::new();
            if was_trusted {
                reports.extend(trust::install(&env, &root_ref(&ca, &paths)));
                notes.push(trust::RESTART_HINT.to_owned());
            }
            if proxy_running {
                notes.push("Restart Keyhaven so the proxy signs with the new root.".to_owned());
            }
            Ok(ca_change(&ca_status(Some(&ca), &paths, &intercept, Some(&env)), &reports, notes))
        })
        .await
    }

    // ---- client setup ----

    /// The setup choices for routing `client`, with Claude Code's tool search decided from the
    /// current config ([`setup::serves_on_anthropic`]).
    fn setup_options(&self, client: setup::Client, opts: dto::RouteOptions) -> SetupOptions {
        let tool_search = client == setup::Client::ClaudeCode
            && opts.model.as_deref().is_some_and(|m| setup::serves_on_anthropic(&self.current(), m));
        SetupOptions {
            model: opts.model,
            small_model: opts.small_model,
            disable_http2: opts.disable_http2,
            tool_search,
        }
    }

    fn setup_env(&self) -> Result<SetupEnv, ControlError> {
        self.inner
            .setup
            .clone()
            .ok_or_else(|| ControlError::Unavailable("client setup is not available to this engine".into()))
    }

    pub async fn clients(&self) -> Result<Vec<dto::ClientSetup>, ControlError> {
        let env = self.setup_env()?;
        blocking(move || {
            let mut out = Vec::new();
            for client in setup::Client::ALL {
                let d = setup::detect(&env, client)?;
                out.push(dto::ClientSetup {
                    client: client_to_dto(client),
                    display_name: client.display_name().to_owned(),
                    config_path: d.config_path.display().to_string(),
                    installed: d.installed,
                    routed: d.routed,
                    recorded: d.recorded,
                    restart_hint: client.restart_hint().to_owned(),
                });
            }
            Ok(out)
        })
        .await
    }

    pub async fn route_client(
        &self,
        client: dto::SetupClient,
        opts: dto::RouteOptions,
    ) -> Result<dto::SetupResult, ControlError> {
        let env = self.setup_env()?;
        let tokens = ClientTokens::new(keyring_of(&self.inner.gateway), &self.inner.data_dir);
        let client = client_from_dto(client);
        let opts = self.setup_options(client, opts);
        blocking(move || Ok(setup_result(setup::route(&env, client, &opts, &tokens)?))).await
    }

    /// What [`route_client`](Self::route_client) would change, without changing anything: the
    /// same plan, shown as a diff with the client token redacted.
    pub async fn preview_route(
        &self,
        client: dto::SetupClient,
        opts: dto::RouteOptions,
    ) -> Result<dto::SetupPreview, ControlError> {
        let env = self.setup_env()?;
        let tokens = ClientTokens::new(keyring_of(&self.inner.gateway), &self.inner.data_dir);
        let client = client_from_dto(client);
        let opts = self.setup_options(client, opts);
        blocking(move || Ok(setup_preview(&setup::plan_route(&env, client, &opts, &tokens)?))).await
    }

    /// What [`undo_client`](Self::undo_client) would change, without changing anything.
    pub async fn preview_undo(&self, client: dto::SetupClient) -> Result<dto::SetupPreview, ControlError> {
        let env = self.setup_env()?;
        let tokens = ClientTokens::new(keyring_of(&self.inner.gateway), &self.inner.data_dir);
        let client = client_from_dto(client);
        blocking(move || Ok(setup_preview(&setup::plan_undo(&env, client, &tokens)?))).await
    }

    /// The generic client's shell exports with the token redacted (nothing is issued).
    pub async fn env_setup(&self) -> Result<dto::EnvSetup, ControlError> {
        let env = self.setup_env()?;
        let tokens = ClientTokens::new(keyring_of(&self.inner.gateway), &self.inner.data_dir);
        blocking(move || {
            let issued = tokens.get(setup::ENV_CLIENT)?.is_some();
            let shown = if issued { ENV_TOKEN_REDACTED } else { ENV_TOKEN_PENDING };
            Ok(env_setup(&env, issued, shown))
        })
        .await
    }

    /// Issues the generic client's token when it has none and answers with the exports that
    /// carry it (for the user to paste into a shell; `keyhaven setup env` prints the same).
    pub async fn route_env(&self) -> Result<dto::EnvSetup, ControlError> {
        let env = self.setup_env()?;
        let tokens = ClientTokens::new(keyring_of(&self.inner.gateway), &self.inner.data_dir);
        blocking(move || {
            let token = tokens.issue(setup::ENV_CLIENT)?;
            Ok(env_setup(&env, true, secrecy::ExposeSecret::expose_secret(&token)))
        })
        .await
    }

    /// Revokes the generic client's token; the answer's `unsets` clear the variables.
    pub async fn undo_env(&self) -> Result<dto::EnvSetup, ControlError> {
        let env = self.setup_env()?;
        let tokens = ClientTokens::new(keyring_of(&self.inner.gateway), &self.inner.data_dir);
        blocking(move || {
            tokens.revoke(setup::ENV_CLIENT)?;
            Ok(env_setup(&env, false, ENV_TOKEN_PENDING))
        })
        .await
    }

    pub async fn undo_client(&self, client: dto::SetupClient) -> Result<dto::SetupResult, ControlError> {
        let env = self.setup_env()?;
        let tokens = ClientTokens::new(keyring_of(&self.inner.gateway), &self.inner.data_dir);
        let client = client_from_dto(client);
        blocking(move || Ok(setup_result(setup::undo(&env, client, &tokens)?))).await
    }

    // ---- logs ----

    /// The last `n` log lines, oldest first (at most the ring's capacity).
    pub fn tail(&self, n: usize) -> Vec<dto::LogLine> {
        self.inner.logs.tail(n)
    }

    /// Lines newer than `seq`, oldest first.
    pub fn logs_after(&self, seq: u64, n: usize) -> Vec<dto::LogLine> {
        self.inner.logs.after(seq, n)
    }

    /// Every new log line, live. A slow receiver skips lines (`RecvError::Lagged`).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<dto::LogLine> {
        self.inner.logs.subscribe()
    }

    /// The retention in days, shared with the engine's pruning loop.
    pub fn retention_days(&self) -> u32 {
        self.inner.retention_days.load(Ordering::Relaxed)
    }
}

/// The keyring entry a key for `provider` (bound to `base_url`'s origin) is stored under: its
/// `current` entry unless another provider, or the Brave key, uses that entry for another origin
/// (storing there would take the key from them); otherwise a free name made from the provider's.
fn key_entry_for(file: &FileConfig, provider: &str, current: Option<&str>, base_url: &str) -> String {
    let origin = origin_of(base_url);
    let mut users: Vec<(String, Option<String>)> = file
        .providers
        .iter()
        .filter(|p| p.name() != provider)
        .filter_map(|p| match &p.key {
            Some(KeyRef::Keyring(n)) => Some((n.clone(), origin_of(p.base_url()))),
            _ => None,
        })
        .collect();
    if let KeyRef::Keyring(n) = file.web.key_ref() {
        users.push((n, file.web.search_base_url().as_deref().and_then(origin_of)));
    }
    let free = |n: &str| !RESERVED_ENTRIES.contains(&n) && users.iter().all(|(u, o)| u != n || *o == origin);
    if let Some(c) = current.filter(|c| free(c)) {
        return c.to_owned();
    }
    // The entry is named after the provider, in the characters a key reference allows.
    let base: String =
        provider.chars().map(|c| if c.is_ascii_alphanumeric() || "_-.".contains(c) { c } else { '-' }).collect();
    let unused = |n: &str| !RESERVED_ENTRIES.contains(&n) && users.iter().all(|(u, _)| u != n);
    if unused(&base) && Some(base.as_str()) != current {
        return base;
    }
    (2..).map(|i| format!("{base}-{i}")).find(|n| unused(n)).unwrap_or(base)
}

/// A key from the UI, checked: 1 to 8192 printable characters (surrounding blanks dropped).
fn key_secret(input: dto::KeyInput) -> Result<SecretString, ControlError> {
    let value = input.value.trim().to_owned();
    if value.is_empty() || value.len() > 8192 || value.chars().any(char::is_control) {
        return Err(ControlError::Invalid("the key must be 1 to 8192 printable characters".into()));
    }
    Ok(SecretString::from(value))
}

fn key_info(key: &KeyRef, keyring: &dyn Keyring, secrets: &crate::secrets::Secrets) -> dto::KeyInfo {
    match key {
        KeyRef::Keyring(name) => dto::KeyInfo {
            source: dto::KeySource::Keyring,
            name: name.clone(),
            has_key: keyring.get(name).is_ok_and(|v| v.is_some()),
        },
        KeyRef::Env(var) => {
            dto::KeyInfo { source: dto::KeySource::Env, name: var.clone(), has_key: secrets.env_is_set(var) }
        }
    }
}

fn mode_to_dto(mode: RoutingMode) -> dto::RoutingMode {
    match mode {
        RoutingMode::Local => dto::RoutingMode::Local,
        RoutingMode::Upstream => dto::RoutingMode::Upstream,
        RoutingMode::Hybrid => dto::RoutingMode::Hybrid,
    }
}

fn client_to_dto(c: setup::Client) -> dto::SetupClient {
    match c {
        setup::Client::Cursor => dto::SetupClient::Cursor,
        setup::Client::ClaudeCode => dto::SetupClient::ClaudeCode,
        setup::Client::Codex => dto::SetupClient::Codex,
    }
}

fn client_from_dto(c: dto::SetupClient) -> setup::Client {
    match c {
        dto::SetupClient::Cursor => setup::Client::Cursor,
        dto::SetupClient::ClaudeCode => setup::Client::ClaudeCode,
        dto::SetupClient::Codex => setup::Client::Codex,
    }
}

fn setup_result(o: setup::Outcome) -> dto::SetupResult {
    dto::SetupResult {
        client: client_to_dto(o.client),
        path: o.path.display().to_string(),
        changed: o.changed,
        backup: o.backup.map(|b| b.display().to_string()),
        notes: o.notes,
        restart_hint: o.client.restart_hint().to_owned(),
    }
}

/// Stands in for the generic client's token in answers that must not carry it.
const ENV_TOKEN_REDACTED: &str = "kh-<redacted: press Copy to fetch it>";
const ENV_TOKEN_PENDING: &str = "kh-<issued when you press Copy>";

fn env_setup(env: &SetupEnv, issued: bool, token: &str) -> dto::EnvSetup {
    dto::EnvSetup {
        token_issued: issued,
        shell: match env.platform {
            setup::Platform::Windows => "powershell".into(),
            setup::Platform::Linux | setup::Platform::MacOs => "sh".into(),
        },
        vars: setup::env_vars(env, token)
            .into_iter()
            .map(|(name, value)| dto::EnvVar { name: name.to_owned(), value })
            .collect(),
        exports: setup::env_exports(env, token),
        unsets: setup::env_unsets(env),
    }
}

fn setup_preview(plan: &setup::Plan) -> dto::SetupPreview {
    dto::SetupPreview {
        client: client_to_dto(plan.client()),
        path: plan.path().display().to_string(),
        changes_file: plan.changes_file(),
        diff: plan.diff(),
        notes: plan.notes().to_vec(),
        restart_hint: plan.client().restart_hint().to_owned(),
    }
}

fn x509_common_name(ca: &LocalCa) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(ca.cert_der().as_ref()).ok()?;
    cert.subject().iter_common_name().next()?.as_str().ok().map(str::to_owned)
}

fn root_ref(ca: &LocalCa, paths: &CaPaths) -> RootRef {
    RootRef {
        pem: ca.cert_pem().to_owned(),
        path: paths.cert(),
        nickname: x509_common_name(ca).unwrap_or_else(|| crate::proxy::ca::ROOT_CN_PREFIX.to_owned()),
        sha1: ca.fingerprint_sha1(),
    }
}

fn trust_stores(reports: &[trust::StoreReport]) -> Vec<dto::TrustStore> {
    reports
        .iter()
        .map(|r| dto::TrustStore {
            store: r.store.clone(),
            state: match r.outcome {
                trust::Outcome::Installed => dto::TrustState::Installed,
                trust::Outcome::AlreadyInstalled => dto::TrustState::AlreadyInstalled,
                trust::Outcome::Removed(_) => dto::TrustState::Removed,
                trust::Outcome::Present => dto::TrustState::Present,
                trust::Outcome::Absent => dto::TrustState::Absent,
                trust::Outcome::Stale => dto::TrustState::Stale,
                trust::Outcome::Skipped(_) => dto::TrustState::Skipped,
                trust::Outcome::Failed(_) => dto::TrustState::Failed,
            },
            detail: r.outcome.to_string(),
        })
        .collect()
}

/// Blocking when `trust` is given: runs the stores' status commands.
fn ca_status(
    ca: Option<&LocalCa>,
    paths: &CaPaths,
    intercept: &InterceptList,
    trust: Option<&TrustEnv>,
) -> dto::CaStatus {
    let Some(ca) = ca else {
        return dto::CaStatus {
            exists: false,
            fingerprint_sha256: None,
            not_after: None,
            intercept: intercept.domains().to_vec(),
            key_location: None,
            stores: Vec::new(),
        };
    };
    let stores = trust.map(|env| trust_stores(&trust::status(env, &root_ref(ca, paths)))).unwrap_or_default();
    dto::CaStatus {
        exists: true,
        fingerprint_sha256: Some(ca.fingerprint_sha256()),
        not_after: ca.not_after().format(&time::format_description::well_known::Rfc3339).ok(),
        intercept: ca.intercept().domains().to_vec(),
        key_location: Some(match ca.key_location() {
            crate::proxy::ca::KeyLocation::Keyring => "keyring".to_owned(),
            crate::proxy::ca::KeyLocation::File(_) => "file".to_owned(),
        }),
        stores,
    }
}

fn ca_change(status: &dto::CaStatus, reports: &[trust::StoreReport], notes: Vec<String>) -> dto::CaChange {
    dto::CaChange {
        status: status.clone(),
        stores: trust_stores(reports),
        ok: !reports.iter().any(|r| r.outcome.is_failure()),
        notes,
    }
}
