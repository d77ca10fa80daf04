//! Per-provider health for routing: failed attempts within a window put a provider into a
//! cooldown that model groups skip. The state is readable as [`ProviderHealth`] rows (for the
//! control API).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::config::RoutingConfig;

/// One provider's health, as the control API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderHealth {
    pub provider: String,
    /// Groups skip the provider until the cooldown ends.
    pub cooling_down: bool,
    /// Milliseconds left of the cooldown (0 when not cooling down).
    pub cooldown_remaining_ms: u64,
    /// Failed attempts inside the current window.
    pub recent_failures: u32,
    /// The latest failure, without secrets.
    pub last_error: Option<String>,
    pub total_failures: u64,
    pub total_successes: u64,
}

#[derive(Debug, Default)]
struct State {
    failures: VecDeque<Instant>,
    cooldown_until: Option<Instant>,
    last_error: Option<String>,
    total_failures: u64,
    total_successes: u64,
}

#[derive(Debug)]
pub struct HealthBook {
    cfg: RoutingConfig,
    inner: Mutex<HashMap<String, State>>,
}

impl HealthBook {
    pub fn new(cfg: RoutingConfig) -> HealthBook {
        HealthBook { cfg, inner: Mutex::new(HashMap::new()) }
    }

    fn window(&self) -> Duration {
        Duration::from_millis(self.cfg.cooldown_window)
    }

    /// Records a failed attempt; the `cooldown_failures`-th within the window starts a cooldown.
    pub fn failure(&self, provider: &str, error: &str, now: Instant) {
        let Ok(mut map) = self.inner.lock() else { return };
        let s = map.entry(provider.to_owned()).or_default();
        s.total_failures += 1;
        s.last_error = Some(error.chars().take(300).collect());
        let window = self.window();
        s.failures.retain(|t| now.saturating_duration_since(*t) < window);
        s.failures.push_back(now);
        if s.failures.len() >= self.cfg.cooldown_failures as usize {
            s.cooldown_until = Some(now + Duration::from_millis(self.cfg.cooldown));
            s.failures.clear();
            tracing::warn!(provider, cooldown_ms = self.cfg.cooldown, "provider cooling down after repeated failures");
        }
    }

    /// Records a successful attempt: the failure count starts over.
    pub fn success(&self, provider: &str) {
        let Ok(mut map) = self.inner.lock() else { return };
        let s = map.entry(provider.to_owned()).or_default();
        s.total_successes += 1;
        s.failures.clear();
        s.cooldown_until = None;
    }

    pub fn cooling(&self, provider: &str, now: Instant) -> bool {
        let Ok(map) = self.inner.lock() else { return false };
        map.get(provider).and_then(|s| s.cooldown_until).is_some_and(|until| until > now)
    }

    /// Rows for `providers` (every configured one, healthy or not), in that order.
    pub fn snapshot(&self, providers: &[String], now: Instant) -> Vec<ProviderHealth> {
        let Ok(map) = self.inner.lock() else { return Vec::new() };
        let window = self.window();
        providers
            .iter()
            .map(|p| {
                let s = map.get(p);
                let remaining = s
                    .and_then(|s| s.cooldown_until)
                    .map_or(Duration::ZERO, |until| until.saturating_duration_since(now));
                ProviderHealth {
                    provider: p.clone(),
                    cooling_down: !remaining.is_zero(),
                    cooldown_remaining_ms: u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
                    recent_failures: s.map_or(0, |s| {
                        let n = s.failures.iter().filter(|t| now.saturating_duration_since(**t) < window).count();
                        u32::try_from(n).unwrap_or(u32::MAX)
                    }),
                    last_error: s.and_then(|s| s.last_error.clone()),
                    total_failures: s.map_or(0, |s| s.total_failures),
                    total_successes: s.map_or(0, |s| s.total_successes),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
