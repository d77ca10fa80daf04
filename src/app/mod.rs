//! Wiring and start-up: the one place that connects config, store, provider and api.
//! [`Engine`] owns the running engine (not `Clone`; consumed by [`Engine::shutdown`]);
//! [`EngineHandle`] is the cheap handle for queries.

mod clients;
mod files;
pub mod host;
pub mod supervisor;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::api::control::ControlApi;
use crate::api::cursor::CursorOptions;
use crate::api::{self, ApiState, GuardConfig};
use crate::config::EngineConfig;
use crate::control::logs::LogRing;
use crate::control::token::ControlToken;
use crate::control::{ControlDeps, ControlService};
use crate::cursor::agent::AgentOptions;
use crate::cursor::transport::{InboxOptions, RegistryOptions};
use crate::cursor::turn::{Backend, BackendOptions};
use crate::metrics::Metrics;
use crate::model::{CallFinish, CallStart};
use crate::pricing::PriceTable;
use crate::provider::{Ack, CallSink, Catalog, Gateway, GatewayOptions, NullSink};
use crate::proxy::ca::{CaOrigin, CaPaths, KeyLocation, LocalCa};
use crate::proxy::trust::TrustEnv;
use crate::proxy::upstream::{Upstream, UpstreamOptions};
use crate::proxy::{self, InterceptList, ModeSwitch, ProxyDeps, ProxyError, ProxyHandle, ProxyOptions, TracingSink};
use crate::search::WebTools;
use crate::secrets::Secrets;
use crate::setup::{ClientTokens, SetupEnv};
use crate::store::{Store, StoreError, StoreOptions};
use crate::task::Spawner;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {source} (is another Keyhaven or another program using this port?)")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("the shipped price table is invalid: {0}")]
    Pricing(String),
    #[error("{0}")]
    Catalog(String),
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    #[error("control: {0}")]
    Control(String),
    #[error("web tools: {0}")]
    Web(String),
    /// A listen address the policy refuses (`config::check_listen`).
    #[error("{0}")]
    Listen(String),
}

impl EngineError {
    pub fn kind(&self) -> &'static str {
        match self {
            EngineError::Store(e) => e.kind(),
            EngineError::Bind { .. } => "bind",
            EngineError::Pricing(_) => "pricing",
            EngineError::Catalog(_) => "catalog",
            EngineError::Proxy(e) => e.kind(),
            EngineError::Control(_) => "control",
            EngineError::Web(_) => "web",
            EngineError::Listen(_) => "listen",
        }
    }
}

/// Connects the provider's call recorder to the store.
struct StoreSink(Arc<Store>);

impl CallSink for StoreSink {
    fn start(&self, start: CallStart) -> Ack {
        let ack = self.0.record_start(start);
        Box::pin(async move {
            if let Err(e) = ack.await {
                tracing::warn!(error = %e, "call record (start) not written");
            }
        })
    }

    fn finish(&self, finish: CallFinish) -> Ack {
        let ack = self.0.record_finish(finish);
        Box::pin(async move {
            if let Err(e) = ack.await {
                tracing::warn!(error = %e, "call record (finish) not written");
            }
        })
    }

    fn reasoning(&self, record: crate::model::ReasoningRecord) -> Ack {
        let expire_before_ms = record.created_ms - crate::provider::reasoning_ttl_ms();
        let ack = self.0.conversation(crate::store::ConversationOp::Reasoning { record, expire_before_ms });
        Box::pin(async move {
            if let Err(e) = ack.await {
                tracing::warn!(error = %e, "reasoning memory not written");
            }
        })
    }
}

/// Feeds the metrics from every call record on its way to the store (or nowhere, without
/// `record_calls`): metrics do not depend on recording.
struct MeteredSink {
    inner: Arc<dyn CallSink>,
    metrics: Arc<Metrics>,
}

impl CallSink for MeteredSink {
    fn start(&self, start: CallStart) -> Ack {
        self.metrics.call_started(&start);
        self.inner.start(start)
    }

    fn finish(&self, finish: CallFinish) -> Ack {
        self.metrics.call_finished(&finish);
        self.inner.finish(finish)
    }

    fn reasoning(&self, record: crate::model::ReasoningRecord) -> Ack {
        self.inner.reasoning(record)
    }
}

/// A cheap handle to the running engine.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    pub gateway: Arc<Gateway>,
    pub store: Arc<Store>,
    pub addr: SocketAddr,
    /// The intercepting proxy, when `[proxy] enabled`.
    pub proxy: Option<ProxyHandle>,
    /// The management service (the shell's commands and the HTTP control API use it).
    pub control: ControlService,
    /// The Cursor agent backend behind the proxy, when the proxy runs.
    pub cursor: Option<CursorParts>,
    /// The web dashboard's one-time links and browser sessions.
    pub dashboard: Arc<api::control::session::Sessions>,
    /// What `GET /metrics` serves.
    pub metrics: Arc<Metrics>,
}

/// The Cursor backend's parts, for tests and diagnostics (live transports, undecided routes).
#[derive(Debug, Clone)]
pub struct CursorParts {
    pub backend: Arc<Backend>,
    pub state: api::cursor::CursorState,
    /// The update guard (Cursor versions and their self-test).
    pub guard: Arc<crate::cursor::guard::Guard>,
}

/// The control service's view of the update guard.
#[derive(Debug)]
struct GuardPort(Arc<crate::cursor::guard::Guard>);

impl crate::control::cursor_guard::CursorGuardPort for GuardPort {
    fn versions(&self) -> Vec<crate::store::CursorVersionRow> {
        self.0.versions()
    }

    fn retry(&self, version: &str) -> bool {
        self.0.retry(version)
    }
}

impl EngineHandle {
    pub fn control(&self) -> &ControlService {
        &self.control
    }

    /// A one-time dashboard link (single use, valid for a minute), reached on loopback: what the
    /// headless banner prints instead of the control token.
    pub fn dashboard_link(&self) -> String {
        let nonce = self.dashboard.mint_nonce();
        format!("http://{}{}", host::loopback(self.addr), api::control::ui::auth_path(&nonce))
    }
}

/// Parts of the environment the engine cannot find itself (config is a value): passed in by the
/// binary or the shell. Every field is optional; what is missing makes the matching control
/// calls `unavailable`.
#[derive(Debug, Default, Clone)]
pub struct EngineExtras {
    /// The OS trust stores, for the control API's CA install, uninstall and rotate.
    pub trust: Option<TrustEnv>,
    /// The user's home and Keyhaven's endpoints, for client setup.
    pub setup: Option<SetupEnv>,
    /// The log ring the binary's tracing layer feeds, for the live log tail.
    pub logs: Option<LogRing>,
    /// The system's UTC offset in seconds, for budget periods when the config sets no
    /// `time_zone` (`None`: UTC).
    pub local_offset_s: Option<i32>,
}

/// The running engine.
#[derive(Debug)]
pub struct Engine {
    spawner: Spawner,
    handle: EngineHandle,
    database_path: PathBuf,
}

impl Engine {
    /// Opens the store (marking calls a previous process left in flight as interrupted), builds
    /// the catalog and binds the gateway listener.
    pub async fn start(config: EngineConfig, secrets: Secrets) -> Result<Engine, EngineError> {
        Engine::start_with(config, secrets, EngineExtras::default()).await
    }

    /// [`Engine::start`] with the environment the control service needs.
    pub async fn start_with(
        config: EngineConfig,
        secrets: Secrets,
        extras: EngineExtras,
    ) -> Result<Engine, EngineError> {
        crate::config::check_listen(&config.file.server, config.listen_addr(), config.proxy_listen_addr())
            .map_err(EngineError::Listen)?;
        files::secure(&config)?;
        let epoch = crate::clock::now_ms();
        let db = config.database_path.clone();
        let synchronous_full = config.file.server.synchronous == crate::config::Synchronous::Full;
        let max_wal_bytes = u64::from(config.file.server.max_wal_mb.max(1)) * 1024 * 1024;
        let store = tokio::task::spawn_blocking(move || {
            Store::open(&db, StoreOptions { epoch, synchronous_full, max_wal_bytes, ..StoreOptions::default() })
        })
        .await
        .map_err(|e| EngineError::Catalog(format!("store open task failed: {e}")))??;
        let store = Arc::new(store);
        let interrupted = store.interrupt_stale().await?;
        if interrupted > 0 {
            tracing::warn!(interrupted, "calls left in flight by a previous run are marked interrupted");
        }
        let prices = PriceTable::builtin().map_err(|e| EngineError::Pricing(e.to_string()))?;
        let catalog = Catalog::new(&config.file, &prices).map_err(EngineError::Catalog)?;
        let control_prices = prices.clone();
        let server = &config.file.server;
        let secrets_keyring = secrets.keyring().clone();
        // Environment variables are sent only to the origins this config pairs them with.
        let secrets = secrets.with_env_origins(&config.file);
        let metrics = Arc::new(Metrics::new(Some(store.clone())).map_err(|e| EngineError::Control(e.to_string()))?);
        let recorder: Arc<dyn CallSink> =
            if server.record_calls { Arc::new(StoreSink(store.clone())) } else { Arc::new(NullSink) };
        let gateway = Arc::new(Gateway::new(
            catalog,
            secrets,
            Arc::new(MeteredSink { inner: recorder, metrics: metrics.clone() }),
            GatewayOptions {
                timeouts: config.file.timeouts,
                retry: config.file.retry,
                routing: config.file.routing,
                capture_bodies: server.capture_bodies,
                body_capture_limit: server.body_capture_limit,
            },
        ));
        if server.record_calls {
            // The gateway's reasoning memory survives a restart (provider::memory).
            let since = crate::clock::now_ms() - crate::provider::reasoning_ttl_ms();
            match store.reasoning_since(since).await {
                Ok(records) => {
                    let n = gateway.load_reasoning(&records);
                    if n > 0 {
                        tracing::debug!(tool_calls = n, "reasoning memory loaded");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "reasoning memory not loaded"),
            }
        }
        // Budgets: spend so far this period from the ledger, then counted in memory.
        let local_offset_s = extras.local_offset_s.unwrap_or(0);
        if server.record_calls {
            // Raised alerts are kept in the ledger, so a restart does not raise them again.
            let alerts = store.clone();
            gateway.budgets().set_alert_hook(Box::new(move |a| {
                // Queued (never blocks); the writer applies it whether or not the ack is awaited.
                drop(alerts.record_budget_alert(a.clone()));
            }));
        }
        crate::control::apply_budgets(&gateway, &store, &config.file, local_offset_s).await;
        let budgets = gateway.budgets().clone();
        metrics.set_budget_source(Box::new(move || {
            budgets
                .states(crate::clock::now_ms())
                .into_iter()
                .map(|s| crate::metrics::BudgetSample {
                    period: s.period.as_str(),
                    scope: s.scope,
                    spent_micros: s.spent_micros,
                    in_flight_micros: s.reserved_micros,
                    limit_micros: s.limit_micros,
                    soft_percent: s.soft_percent,
                    reset_ms: s.reset_ms,
                    name: s.name,
                })
                .collect()
        }));
        let addr = config.listen_addr();
        if !addr.ip().is_loopback() {
            // Only with allow_remote and required client tokens (checked above).
            tracing::warn!(%addr, "listening on a non-loopback address: other machines can reach this gateway (client tokens required)");
        }
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(|source| EngineError::Bind { addr, source })?;
        let addr = listener.local_addr().map_err(|source| EngineError::Bind { addr, source })?;
        let spawner = Spawner::new();
        let data_dir = config.database_path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
        let directory =
            Arc::new(clients::TokenDirectory::new(ClientTokens::new(gateway.secrets().keyring().clone(), &data_dir)));
        let d = directory.clone();
        let _ = tokio::task::spawn_blocking(move || d.refresh()).await;
        let d = directory.clone();
        spawner.spawn(spawner.root_token().child_token(), async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let d = d.clone();
                let _ = tokio::task::spawn_blocking(move || d.refresh()).await;
            }
        });
        let (proxy, cursor) = if config.file.proxy.enabled {
            let (proxy, cursor) =
                start_proxy(&config, &secrets_keyring, &spawner, gateway.clone(), store.clone()).await?;
            (Some(proxy), Some(cursor))
        } else {
            (None, None)
        };
        let token_dir = data_dir.clone();
        let token = tokio::task::spawn_blocking(move || ControlToken::load_or_create(&token_dir))
            .await
            .map_err(|e| EngineError::Catalog(format!("control token task failed: {e}")))?
            .map_err(|e| EngineError::Control(e.to_string()))?;
        let retention_days = Arc::new(AtomicU32::new(server.retention_days));
        let control = ControlService::new(ControlDeps {
            gateway: gateway.clone(),
            store: store.clone(),
            prices: control_prices,
            file: config.file.clone(),
            config_path: config.config_path.clone(),
            data_dir: data_dir.clone(),
            ca_dir: config.ca_dir.clone(),
            gateway_addr: addr,
            proxy_addr: proxy.as_ref().map(|p| p.addr),
            mode: proxy.as_ref().map(|p| p.mode.clone()),
            trust: extras.trust,
            setup: extras.setup,
            logs: extras.logs,
            shutdown: spawner.root_token().child_token(),
            retention_days: retention_days.clone(),
            local_offset_s,
            cursor_guard: cursor.as_ref().map(|c| {
                Arc::new(GuardPort(c.guard.clone())) as Arc<dyn crate::control::cursor_guard::CursorGuardPort>
            }),
        });
        let dashboard = Arc::new(api::control::session::Sessions::new(addr.port()));
        let mut guard = GuardConfig::for_listener(addr);
        guard.remote = !addr.ip().is_loopback();
        let state = ApiState {
            gateway: gateway.clone(),
            guard: Arc::new(guard),
            max_request_bytes: server.max_request_bytes,
            shutdown: spawner.root_token().child_token(),
            clients: directory,
            require_client_token: server.require_client_token,
            conversations: Arc::new(api::Conversations::default()),
            control: Some(ControlApi {
                service: control.clone(),
                token: Arc::new(token),
                sessions: dashboard.clone(),
                ui_dir: server.ui_dir.clone(),
            }),
            metrics: Some(metrics.clone()),
        };
        let token = spawner.root_token().clone();
        let app = api::router(state);
        // Streams are many small writes: without TCP_NODELAY, Nagle holds each back ~40 ms.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "TCP_NODELAY not set");
            }
        });
        spawner.spawn_graceful(async move {
            // The peer address lets the control API refuse other machines (`allow_remote`).
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            let serve = axum::serve(listener, app).with_graceful_shutdown(token.cancelled_owned());
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "gateway listener stopped");
            }
        });
        // Retention is live: the control service changes the shared value.
        let prune_store = store.clone();
        spawner.spawn(spawner.root_token().child_token(), async move {
            loop {
                let days = retention_days.load(Ordering::Relaxed);
                if days > 0 {
                    let cutoff = crate::clock::now_ms().saturating_sub(i64::from(days) * 86_400_000);
                    match prune_store.prune(cutoff).await {
                        Ok(n) if n > 0 => tracing::info!(deleted = n, "pruned calls past retention"),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "pruning old calls failed"),
                    }
                }
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        });
        tracing::info!(%addr, models = gateway.catalog().models().len(), "keyhaven gateway listening");
        Ok(Engine {
            spawner,
            handle: EngineHandle { gateway, store, addr, proxy, control, cursor, dashboard, metrics },
            database_path: config.database_path,
        })
    }

    /// Spawns and counts the engine's tasks (tests check that connections leave none behind).
    pub fn spawner(&self) -> &Spawner {
        &self.spawner
    }

    pub fn handle(&self) -> EngineHandle {
        self.handle.clone()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.handle.addr
    }

    pub fn database_path(&self) -> &std::path::Path {
        &self.database_path
    }

    /// Stops accepting, cancels running calls (their records are finalised as canceled), waits up
    /// to `grace` for tasks to drain, then flushes the store. Returns false if tasks outlived `grace`.
    pub async fn shutdown(self, grace: Duration) -> bool {
        let drained = self.spawner.shutdown(grace).await;
        if let Err(e) = self.handle.store.flush().await {
            tracing::warn!(error = %e, "final store flush failed");
        }
        drained
    }
}

/// Loads or creates the local CA and starts the intercepting proxy. Decrypted requests are served
/// by the Cursor router (`api::cursor`): the agent streams and the model catalog locally,
/// everything else forwarded to the official host.
async fn start_proxy(
    config: &EngineConfig,
    keyring: &Arc<dyn crate::secrets::Keyring>,
    spawner: &Spawner,
    gateway: Arc<Gateway>,
    store: Arc<Store>,
) -> Result<(ProxyHandle, CursorParts), EngineError> {
    let intercept = InterceptList::new(&config.file.proxy.intercept);
    let paths = CaPaths::new(config.ca_dir.clone());
    let keyring = keyring.clone();
    let ca_intercept = intercept.clone();
    let (ca, origin) = tokio::task::spawn_blocking(move || {
        LocalCa::load_or_create(&paths, keyring.as_ref(), &ca_intercept, time::OffsetDateTime::now_utc())
    })
    .await
    .map_err(|e| EngineError::Catalog(format!("CA task failed: {e}")))?
    .map_err(ProxyError::from)?;
    if origin == CaOrigin::Created {
        tracing::info!(
            fingerprint = %ca.fingerprint_sha256(),
            "created the local CA; trust it with `keyhaven ca install`, then restart Cursor"
        );
    }
    if let KeyLocation::File(path) = ca.key_location() {
        tracing::warn!(path = %path.display(), "no OS keyring: the local CA key is a 0600 file on disk");
    }
    let upstream = Upstream::new(
        &UpstreamOptions { overrides: config.upstream_overrides.clone(), ..UpstreamOptions::default() },
        spawner,
    )?;
    let c = &config.file.cursor;
    let web =
        WebTools::from_config(&config.file.web, gateway.secrets()).map_err(|e| EngineError::Web(e.to_string()))?;
    // `record_calls = false` keeps no transcript either: conversations live in memory only.
    let transcripts = config.file.server.record_calls.then_some(store.clone());
    let backend = Backend::new(gateway, transcripts, spawner.clone(), backend_options(config));
    // The update guard's rows are not call data: kept whatever `record_calls` says.
    let prices = PriceTable::builtin().map_err(|e| EngineError::Pricing(e.to_string()))?;
    let catalog: api::cursor::selftest::CatalogBuilder = Arc::new(move |f| Catalog::new(f, &prices));
    let self_test = Arc::new(api::cursor::selftest::CursorSelfTest::new(upstream.clone(), spawner.clone(), catalog));
    let guard = crate::cursor::guard::Guard::load(Some(store), spawner.clone(), self_test).await;
    guard.set_enabled(c.update_guard);
    install_web_tools(&backend, web);
    let mode = ModeSwitch::new(config.file.proxy.mode);
    let state = api::cursor::CursorState::new(
        backend.clone(),
        upstream.clone(),
        spawner.clone(),
        mode.clone(),
        CursorOptions { http2: c.http2, route_wait: Duration::from_millis(c.first_message_wait) },
    )
    .with_guard(guard.clone());
    let service = api::cursor::router(state.clone());
    let deps =
        ProxyDeps { ca: Arc::new(ca), service, upstream, mode, sink: Arc::new(TracingSink), spawner: spawner.clone() };
    let proxy = proxy::start(ProxyOptions::new(config.proxy_listen_addr()), deps).await?;
    Ok((proxy, CursorParts { backend, state, guard }))
}

/// Installs `[web]`'s search provider and page fetcher into the Cursor backend: none with
/// `search = "none"`, no fetcher with `fetch = "editor"` (the editor fetches).
fn install_web_tools(backend: &Backend, web: WebTools) {
    let searching = web.search.is_some();
    let fetching = web.fetcher.is_some();
    if let Some(search) = web.search {
        backend.set_search_provider(search);
    }
    if let Some(fetcher) = web.fetcher {
        backend.set_page_fetcher(fetcher);
    }
    tracing::debug!(search = searching, keyhaven_fetches = fetching, "web tools installed");
}

/// The Cursor backend's timing from `[cursor]` and the agent loop's limits from `[agent]`.
fn backend_options(config: &EngineConfig) -> BackendOptions {
    let c = &config.file.cursor;
    let ms = Duration::from_millis;
    BackendOptions {
        registry: RegistryOptions {
            inbox: InboxOptions { gap_wait: ms(c.gap_wait), ..InboxOptions::default() },
            heartbeat: ms(c.heartbeat),
            ..RegistryOptions::default()
        },
        first_message_wait: ms(c.first_message_wait),
        linger: ms(c.linger),
        agent: AgentOptions {
            max_steps: config.file.agent.max_steps.max(1),
            exec_timeout: ms(config.file.agent.exec_timeout.max(1)),
            blob_ack_timeout: ms(config.file.agent.blob_ack_timeout.max(1)),
            detach_grace: ms(config.file.agent.detach_grace),
            compact_at_percent: config.file.agent.compact_at.min(100),
            question_timeout: ms(config.file.agent.question_timeout.max(1)),
        },
    }
}
