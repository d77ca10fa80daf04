//! The engine's lifecycle for a long-running host (the tray app, and `keyhaven serve`): start,
//! stop, status, an error state, drain on stop, and the optional restore of routed clients.
//!
//! [`Supervisor`] is a cheap `Clone`. It owns at most one running [`Engine`]; `start` builds a
//! fresh one from the [`ConfigSource`] (so edits made while running, which the control service
//! wrote to the config file, apply on the next start) and `stop` shuts it down with a grace
//! period. Start and stop are serialised; a failed start leaves the `error` state with the reason.
//!
//! Stop: when `[setup] restore_on_stop` is on (read from the running engine, so a change made a
//! second ago counts), every client Keyhaven routed (its file carries Keyhaven's values and the
//! setup state has a record) is put back first, then the engine drains. Start does not route
//! clients again: routing is the user's choice, made on the Clients page or with `keyhaven setup`.
//!
//! [`Supervisor::request`] is the in-process control transport of the app window: `/api/app…`
//! (status, start, stop, start on login) is answered here; everything else goes to the engine's
//! one route table ([`LocalControl`]). While stopped those calls answer 503 `unavailable`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{Mutex, watch};

use crate::api::control::LocalControl;
use crate::app::{Engine, EngineError, EngineExtras, EngineHandle};
use crate::config::EngineConfig;
use crate::control::{ControlService, dto};
use crate::secrets::Secrets;

/// Builds the config for each start (the host reads files and the environment; the engine
/// does not).
pub type ConfigSource = Arc<dyn Fn() -> Result<EngineConfig, String> + Send + Sync>;

/// The host's start-on-login switch (the tray app's autostart entry).
pub trait Autostart: Send + Sync {
    fn is_enabled(&self) -> Result<bool, String>;
    fn set_enabled(&self, on: bool) -> Result<(), String>;
}

/// What a supervisor needs.
pub struct SupervisorOptions {
    pub config: ConfigSource,
    pub secrets: Secrets,
    pub extras: EngineExtras,
    /// How long a stop waits for calls and tasks to finish.
    pub grace: Duration,
    /// `None`: start on login is not offered (`startOnLogin: null`).
    pub autostart: Option<Arc<dyn Autostart>>,
}

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("Keyhaven is shutting down")]
    Closed,
}

impl SupervisorError {
    pub fn kind(&self) -> &'static str {
        match self {
            SupervisorError::Config(_) => "config",
            SupervisorError::Engine(e) => e.kind(),
            SupervisorError::Closed => "closed",
        }
    }
}

enum Slot {
    Stopped,
    Running(Box<Engine>),
    Failed,
    /// After [`Supervisor::shutdown`]: no more starts.
    Closed,
}

struct Inner {
    opts: SupervisorOptions,
    /// Serialises start and stop.
    slot: Mutex<Slot>,
    /// The running engine's handle and in-process control routes, for calls that must not wait
    /// behind a start or stop.
    current: RwLock<Option<(EngineHandle, LocalControl)>>,
    status: watch::Sender<dto::AppStatus>,
}

/// Starts and stops the engine. Cheap to clone.
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor").field("state", &self.inner.status.borrow().state).finish_non_exhaustive()
    }
}

fn stopped() -> dto::AppStatus {
    dto::AppStatus {
        state: dto::EngineState::Stopped,
        error: None,
        gateway_url: None,
        start_on_login: None,
        last_stop: None,
    }
}

fn error_reply(status: u16, kind: &str, message: impl Into<String>) -> dto::IpcReply {
    dto::IpcReply {
        status,
        body: serde_json::to_value(dto::ErrorBody { kind: kind.to_owned(), message: message.into() })
            .unwrap_or_default(),
    }
}

impl Supervisor {
    /// A supervisor in the `stopped` state; call [`Supervisor::start`].
    pub fn new(opts: SupervisorOptions) -> Supervisor {
        let (status, _) = watch::channel(stopped());
        Supervisor {
            inner: Arc::new(Inner { opts, slot: Mutex::new(Slot::Stopped), current: RwLock::new(None), status }),
        }
    }

    fn publish(&self, f: impl FnOnce(&mut dto::AppStatus)) {
        self.inner.status.send_modify(f);
    }

    /// The current status (start on login is asked from the host each time).
    pub fn status(&self) -> dto::AppStatus {
        let mut s = self.inner.status.borrow().clone();
        s.start_on_login = self.inner.opts.autostart.as_ref().and_then(|a| a.is_enabled().ok());
        s
    }

    /// Every status change (the tray icon follows it).
    pub fn subscribe(&self) -> watch::Receiver<dto::AppStatus> {
        self.inner.status.subscribe()
    }

    /// The running engine's handle, if it runs.
    pub fn handle(&self) -> Option<EngineHandle> {
        self.inner.current.read().ok()?.as_ref().map(|(h, _)| h.clone())
    }

    /// The running engine's control service, if it runs.
    pub fn control(&self) -> Option<ControlService> {
        self.handle().map(|h| h.control)
    }

    /// Starts the engine unless it runs. A failure leaves the `error` state with the reason.
    pub async fn start(&self) -> Result<EngineHandle, SupervisorError> {
        let mut slot = self.inner.slot.lock().await;
        match &*slot {
            Slot::Running(engine) => return Ok(engine.handle()),
            Slot::Closed => return Err(SupervisorError::Closed),
            Slot::Stopped | Slot::Failed => {}
        }
        self.publish(|s| {
            s.state = dto::EngineState::Starting;
            s.error = None;
        });
        let started = match (self.inner.opts.config)() {
            Ok(config) => Engine::start_with(config, self.inner.opts.secrets.clone(), self.inner.opts.extras.clone())
                .await
                .map_err(SupervisorError::from),
            Err(e) => Err(SupervisorError::Config(e)),
        };
        match started {
            Ok(engine) => {
                let handle = engine.handle();
                let local = LocalControl::new(handle.control.clone());
                if let Ok(mut c) = self.inner.current.write() {
                    *c = Some((handle.clone(), local));
                }
                let url = format!("http://{}", handle.addr);
                *slot = Slot::Running(Box::new(engine));
                self.publish(|s| {
                    s.state = dto::EngineState::Running;
                    s.gateway_url = Some(url);
                });
                tracing::info!(addr = %handle.addr, "engine started");
                Ok(handle)
            }
            Err(e) => {
                tracing::warn!(error = %e, "engine did not start");
                *slot = Slot::Failed;
                let message = e.to_string();
                self.publish(|s| {
                    s.state = dto::EngineState::Error;
                    s.error = Some(message);
                    s.gateway_url = None;
                });
                Err(e)
            }
        }
    }

    /// Stops the engine if it runs: restores routed clients when `restore_on_stop` is set, then
    /// drains. From the `error` state it goes back to `stopped`. Returns what this stop did.
    pub async fn stop(&self) -> dto::StopReport {
        let mut slot = self.inner.slot.lock().await;
        self.stop_locked(&mut slot).await
    }

    async fn stop_locked(&self, slot: &mut Slot) -> dto::StopReport {
        let engine = match std::mem::replace(slot, Slot::Stopped) {
            Slot::Running(engine) => engine,
            Slot::Closed => {
                *slot = Slot::Closed;
                return dto::StopReport { drained: true, ..dto::StopReport::default() };
            }
            Slot::Stopped | Slot::Failed => {
                self.publish(|s| {
                    s.state = dto::EngineState::Stopped;
                    s.error = None;
                });
                return dto::StopReport { drained: true, ..dto::StopReport::default() };
            }
        };
        self.publish(|s| s.state = dto::EngineState::Stopping);
        let control = engine.handle().control;
        let mut report = dto::StopReport::default();
        match control.settings().await {
            Ok(settings) if settings.restore_on_stop => restore_clients(&control, &mut report).await,
            Ok(_) => {}
            Err(e) => report.notes.push(format!("restore on stop: settings unreadable: {e}")),
        }
        // New IPC calls see `stopped` from here on; calls in flight finish within the grace.
        if let Ok(mut c) = self.inner.current.write() {
            *c = None;
        }
        report.drained = engine.shutdown(self.inner.opts.grace).await;
        if !report.drained {
            tracing::warn!(
                grace_ms = self.inner.opts.grace.as_millis(),
                "some calls did not finish within the grace period"
            );
        }
        for client in &report.restored {
            tracing::info!(%client, "client config restored");
        }
        for note in &report.notes {
            tracing::warn!("{note}");
        }
        tracing::info!(restored = report.restored.len(), "engine stopped");
        let last = report.clone();
        self.publish(|s| {
            s.state = dto::EngineState::Stopped;
            s.error = None;
            s.gateway_url = None;
            s.last_stop = Some(last);
        });
        report
    }

    /// The final stop (Quit, a signal): like [`Supervisor::stop`], then refuses further starts.
    pub async fn shutdown(&self) -> dto::StopReport {
        let mut slot = self.inner.slot.lock().await;
        let report = self.stop_locked(&mut slot).await;
        *slot = Slot::Closed;
        report
    }

    /// One control call from the app window: `/api/app…` here, the rest through the engine's
    /// route table; 503 `unavailable` while the engine is not running.
    pub async fn request(&self, method: &str, path: &str, body: Option<Value>) -> dto::IpcReply {
        let route = path.split('?').next().unwrap_or(path);
        if route == "/api/app" || route.starts_with("/api/app/") {
            return self.app_route(method, route, body).await;
        }
        let local = self.inner.current.read().ok().and_then(|c| c.as_ref().map(|(_, l)| l.clone()));
        match local {
            Some(local) => local.call(method, path, body).await,
            None => {
                let status = self.inner.status.borrow().clone();
                let message = match (status.state, status.error) {
                    (_, Some(e)) => format!("Keyhaven is not running: {e}"),
                    (dto::EngineState::Starting, None) => "Keyhaven is starting; try again in a moment".to_owned(),
                    _ => "Keyhaven is stopped; start it to use this".to_owned(),
                };
                error_reply(503, "unavailable", message)
            }
        }
    }

    async fn app_route(&self, method: &str, route: &str, body: Option<Value>) -> dto::IpcReply {
        let ok = |s: dto::AppStatus| dto::IpcReply { status: 200, body: serde_json::to_value(s).unwrap_or_default() };
        match (method, route) {
            ("GET", "/api/app") => ok(self.status()),
            ("PUT", "/api/app") => {
                let input: dto::AppInput = match serde_json::from_value(body.unwrap_or_default()) {
                    Ok(i) => i,
                    Err(e) => return error_reply(400, "invalid", format!("bad JSON body: {e}")),
                };
                if let Some(on) = input.start_on_login {
                    let Some(a) = &self.inner.opts.autostart else {
                        return error_reply(503, "unavailable", "start on login is not available here");
                    };
                    if let Err(e) = a.set_enabled(on) {
                        return error_reply(500, "autostart", e);
                    }
                }
                ok(self.status())
            }
            ("POST", "/api/app/start") => match self.start().await {
                Ok(_) => ok(self.status()),
                Err(e) => error_reply(500, e.kind(), e.to_string()),
            },
            ("POST", "/api/app/stop") => {
                self.stop().await;
                ok(self.status())
            }
            _ => error_reply(404, "not_found", format!("no route for {method} {route}")),
        }
    }
}

/// Puts back every client whose config Keyhaven changed and still carries Keyhaven's values.
async fn restore_clients(control: &ControlService, report: &mut dto::StopReport) {
    let clients = match control.clients().await {
        Ok(c) => c,
        Err(e) => {
            report.notes.push(format!("restore on stop: {e}"));
            return;
        }
    };
    for c in clients.into_iter().filter(|c| c.routed && c.recorded) {
        match control.undo_client(c.client).await {
            Ok(_) => report.restored.push(c.display_name),
            Err(e) => {
                tracing::warn!(client = %c.display_name, error = %e, "client not restored on stop");
                report.notes.push(format!("{}: {e}", c.display_name));
            }
        }
    }
}
