//! `keyhaven doctor` and the Settings page's checks: the keyring, the listeners, the local CA in
//! each trust store, each client's routing, each provider with its key (one cheap request through
//! the gateway, like the Test button) and Cursor's HTTP/2 setting. Every warning and failure says
//! what to do. Read-only but for the provider requests and a keyring probe entry that is removed
//! again.

use secrecy::SecretString;

use crate::control::dto::{self, DoctorCheck, DoctorReport, DoctorStatus};
use crate::control::{ControlError, ControlService, blocking, keyring_of};
use crate::setup;

/// The keyring entry the probe writes and removes.
const PROBE_ENTRY: &str = "keyhaven-doctor-probe";

fn check(area: &str, title: impl Into<String>, status: DoctorStatus, detail: impl Into<String>) -> DoctorCheck {
    DoctorCheck { area: area.to_owned(), title: title.into(), status, detail: detail.into(), fix: None }
}

fn with_fix(mut c: DoctorCheck, fix: impl Into<String>) -> DoctorCheck {
    c.fix = Some(fix.into());
    c
}

impl ControlService {
    /// Runs every check; a check that cannot run is itself reported, never an error.
    pub async fn doctor(&self) -> DoctorReport {
        let mut checks = Vec::new();
        checks.push(self.keyring_check().await);
        checks.extend(self.port_checks());
        checks.extend(self.ca_checks().await);
        checks.extend(self.client_checks().await);
        checks.extend(self.cursor_checks().await);
        checks.extend(self.provider_checks().await);
        let ok = !checks.iter().any(|c| c.status == DoctorStatus::Fail);
        DoctorReport { ok, checks }
    }

    async fn keyring_check(&self) -> DoctorCheck {
        let keyring = keyring_of(&self.inner.gateway);
        let probe = blocking(move || {
            let value = SecretString::from(format!("probe-{:016x}", rand::random::<u64>()));
            let outcome = keyring.set(PROBE_ENTRY, &value).and_then(|()| keyring.get(PROBE_ENTRY));
            let _ = keyring.delete(PROBE_ENTRY);
            Ok(outcome.map(|got| got.is_some()))
        })
        .await;
        let title = "The OS keyring stores and returns keys";
        match probe {
            Ok(Ok(true)) => {
                check("keyring", title, DoctorStatus::Ok, "a probe entry was written, read back and removed")
            }
            Ok(Ok(false)) => with_fix(
                check("keyring", title, DoctorStatus::Fail, "a probe entry was written but could not be read back"),
                "Unlock the keyring (on Linux: the Secret Service, e.g. gnome-keyring) and run the check again",
            ),
            Ok(Err(e)) => with_fix(
                check("keyring", title, DoctorStatus::Fail, format!("the keyring is not usable: {}", e.kind())),
                "On a desktop, unlock your keyring. On a headless server without a Secret Service, name keys by \
                 environment variable instead (key = \"env:KEYHAVEN_…\" in the config) — see README, Troubleshooting",
            ),
            Err(e) => check("keyring", title, DoctorStatus::Fail, e.to_string()),
        }
    }

    fn port_checks(&self) -> Vec<DoctorCheck> {
        let i = &self.inner;
        let mut out = vec![check(
            "ports",
            "The gateway listens",
            DoctorStatus::Ok,
            format!("http://{} (OpenAI base http://{}/v1)", i.gateway_addr, i.gateway_addr),
        )];
        out.push(match i.proxy_addr {
            Some(addr) => check("ports", "The Cursor proxy listens", DoctorStatus::Ok, format!("{addr} (loopback)")),
            None => {
                check("ports", "The Cursor proxy listens", DoctorStatus::Skip, "the proxy is off in this configuration")
            }
        });
        out
    }

    async fn ca_checks(&self) -> Vec<DoctorCheck> {
        let status = match self.ca_status().await {
            Ok(s) => s,
            Err(e) => return vec![check("ca", "The local CA", DoctorStatus::Warn, e.to_string())],
        };
        if !status.exists {
            return vec![with_fix(
                check("ca", "The local CA exists", DoctorStatus::Skip, "no root yet (only Cursor needs it)"),
                "For Cursor: CA Trust page → Install, or `keyhaven ca install`",
            )];
        }
        let mut out = vec![check(
            "ca",
            "The local CA exists",
            DoctorStatus::Ok,
            format!("key in the {}", status.key_location.as_deref().unwrap_or("keyring")),
        )];
        for store in status.stores {
            let title = format!("The CA is trusted in {}", store.store);
            let c = match store.state {
                dto::TrustState::Present | dto::TrustState::AlreadyInstalled | dto::TrustState::Installed => {
                    check("ca", title, DoctorStatus::Ok, store.detail)
                }
                dto::TrustState::Absent | dto::TrustState::Removed => with_fix(
                    check("ca", title, DoctorStatus::Warn, store.detail),
                    "CA Trust page → Install, or `keyhaven ca install`; then restart Cursor",
                ),
                dto::TrustState::Stale => with_fix(
                    check(
                        "ca",
                        title,
                        DoctorStatus::Warn,
                        format!("an older Keyhaven root is there: {}", store.detail),
                    ),
                    "CA Trust page → Install, or `keyhaven ca install`; then restart Cursor",
                ),
                dto::TrustState::Skipped => check("ca", title, DoctorStatus::Skip, store.detail),
                dto::TrustState::Failed => with_fix(
                    check("ca", title, DoctorStatus::Fail, store.detail),
                    "Install the store's tool (e.g. certutil from libnss3-tools) and run `keyhaven ca install`",
                ),
            };
            out.push(c);
        }
        out
    }

    async fn client_checks(&self) -> Vec<DoctorCheck> {
        let clients = match self.clients().await {
            Ok(c) => c,
            Err(e) => return vec![check("clients", "Client setup", DoctorStatus::Skip, e.to_string())],
        };
        clients
            .into_iter()
            .map(|c| {
                let title = format!("{} is pointed at Keyhaven", c.display_name);
                if !c.installed {
                    check("clients", title, DoctorStatus::Skip, "not installed for this user")
                } else if c.routed {
                    check("clients", title, DoctorStatus::Ok, format!("{} carries Keyhaven's values", c.config_path))
                } else {
                    let cli = match c.client {
                        dto::SetupClient::Cursor => "cursor",
                        dto::SetupClient::ClaudeCode => "claude-code",
                        dto::SetupClient::Codex => "codex",
                    };
                    with_fix(
                        check(
                            "clients",
                            title,
                            DoctorStatus::Warn,
                            format!("{} does not point at Keyhaven", c.config_path),
                        ),
                        format!("Clients page → Route, or `keyhaven setup {cli}`; {}", c.restart_hint),
                    )
                }
            })
            .collect()
    }

    async fn cursor_checks(&self) -> Vec<DoctorCheck> {
        let Ok(env) = self.setup_env() else { return Vec::new() };
        let routed = setup::detect(&env, setup::Client::Cursor).map(|d| d.routed).unwrap_or(false);
        if !routed {
            return Vec::new();
        }
        let title = "Cursor's agent traffic reaches the proxy";
        let disabled = blocking(move || Ok(setup::cursor_http2_disabled(&env)?)).await;
        let own_h2 = !matches!(self.current().cursor.http2, crate::config::CursorHttp2::Official);
        vec![match disabled {
            Ok(Some(true)) => {
                check("cursor", title, DoctorStatus::Ok, "HTTP/2 is off in Cursor: everything goes through http.proxy")
            }
            Ok(_) if own_h2 => check(
                "cursor",
                title,
                DoctorStatus::Ok,
                "HTTP/2 is on in Cursor; Keyhaven sets Cursor's HTTP/2 mode through [cursor] http2",
            ),
            Ok(_) => with_fix(
                check(
                    "cursor",
                    title,
                    DoctorStatus::Warn,
                    "HTTP/2 is on in Cursor; some Cursor versions send HTTP/2 agent traffic past http.proxy",
                ),
                "If Cursor's agent calls never show on the Calls page: Clients page → Cursor → Route with \
                 \"Disable HTTP/2\" (or `keyhaven setup cursor --disable-http2`), then restart Cursor",
            ),
            Err(e) => check("cursor", title, DoctorStatus::Skip, e.to_string()),
        }]
    }

    async fn provider_checks(&self) -> Vec<DoctorCheck> {
        let names: Vec<String> = self.current().providers.iter().map(|p| p.name().to_owned()).collect();
        if names.is_empty() {
            return vec![with_fix(
                check("providers", "A provider is configured", DoctorStatus::Warn, "no providers yet"),
                "Providers & Models page → Add provider (pick a preset and paste its key)",
            )];
        }
        let tests = futures::future::join_all(names.iter().map(|n| self.test_provider(n))).await;
        names
            .into_iter()
            .zip(tests)
            .map(|(name, result)| {
                let title = format!("Provider {name} answers with its key");
                match result {
                    Ok(t) if t.ok => check(
                        "providers",
                        title,
                        DoctorStatus::Ok,
                        format!("{} answered in {} ms", t.model, t.latency_ms),
                    ),
                    Ok(t) => {
                        let fix = provider_fix(t.error_kind.as_deref().unwrap_or(""), &name);
                        with_fix(check("providers", title, DoctorStatus::Fail, t.message), fix)
                    }
                    Err(ControlError::Invalid(m)) => with_fix(
                        check("providers", title, DoctorStatus::Warn, m),
                        "Providers & Models page → add a model for this provider",
                    ),
                    Err(e) => check("providers", title, DoctorStatus::Fail, e.to_string()),
                }
            })
            .collect()
    }
}

/// What to do about a failed provider test, by the call's error kind.
fn provider_fix(kind: &str, provider: &str) -> String {
    match kind {
        "key" | "authentication" | "permission_denied" => format!(
            "Enter the key again (Providers & Models page → {provider} → Key, or `keyhaven key set {provider}`)"
        ),
        "connect" | "timeout" => "Check the provider's base URL and your network; behind a corporate proxy, start \
                                  Keyhaven with HTTPS_PROXY set"
            .to_owned(),
        "not_found" | "unknown_model" => "Check the model's upstream name on the Providers & Models page".to_owned(),
        "rate_limited" | "overloaded" => {
            "The provider is busy or out of quota; try again later or check your plan".to_owned()
        }
        _ => "See the call on the Calls page (client keyhaven-control) for the provider's answer".to_owned(),
    }
}
