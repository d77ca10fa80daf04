//! Budgets (`[[budgets]]`): spend per budget and period, the check each new call passes, and the
//! state the control service reports.
//!
//! Where spend comes from: the ledger, once (`Budgets::configure`, at engine start and when the
//! budgets change: one grouped read of the calls started since each period's start), then in
//! memory: every finished call adds its exact cost to the budgets it matches ([`Budgets::finish`]),
//! and every call in flight counts with an estimate (a [`Reservation`] made at its start, released
//! at its finish). So the hot path reads counters under one short lock and never runs SQL. A
//! period's rollover resets the counters (a call belongs to the period it started in, as in the
//! ledger).
//!
//! Checked when a call starts ([`Budgets::check`]), never while it streams: a call already running
//! is never cut. A spent `refuse` budget refuses new calls; a spent `downgrade` budget sends new
//! conversations (no assistant message yet: a first turn, a subagent's or a background call) to its
//! cheaper model or group, and a conversation under way keeps its model, since switching models
//! mid-conversation throws away the provider's prompt cache and changes the answerer mid-task. A
//! conversation that started downgraded stays downgraded (remembered by a digest of its model and
//! first user message) until it is forgotten (bounded, oldest first).
//!
//! Alerts: when a budget's spend (finished calls plus estimates in flight) reaches its soft
//! threshold, and again when it reaches its limit, the tracker raises a [`BudgetAlert`] once per
//! budget, period and level: a log line, an entry in [`Budgets::alerts`] (the control service's
//! report, which the tray turns into a desktop notification and the dashboard into a banner) and
//! a call to the alert hook (`app` records it in the ledger). `configure` is told which alerts the
//! ledger already holds for the current periods, so a restart does not raise them again.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, OnceLock};

use crate::config::{BudgetAction, BudgetConfig, BudgetPeriod};
use crate::model::{self, AlertLevel, BudgetAlert, Role, SpendRow};

/// How many downgraded conversations are remembered.
const REMEMBERED: usize = 4096;
/// How many alerts raised by this process [`Budgets::alerts`] keeps (newest last).
const RECENT_ALERTS: usize = 32;

/// Called with every alert raised (outside the tracker's lock).
pub type AlertHook = Box<dyn Fn(&BudgetAlert) + Send + Sync>;

/// What a call is, for matching budgets.
#[derive(Debug, Clone, Copy)]
pub struct SpendKey<'a> {
    pub client: &'a str,
    pub provider: Option<&'a str>,
    /// The model or group name the call was routed as (after a downgrade: the cheaper one).
    pub requested: &'a str,
    /// The configured model that serves it.
    pub model: Option<&'a str>,
}

/// What a budget says about a new call.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Proceed,
    Refuse { budget: String, reset_ms: i64 },
    Downgrade { budget: String, to: String },
}

/// A budget's state, for the control service.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetState {
    pub name: String,
    /// `all`, `client`, `provider` or `model`.
    pub scope: &'static str,
    pub target: Option<String>,
    pub period: BudgetPeriod,
    pub limit_micros: u64,
    /// Finished calls of the period.
    pub spent_micros: u64,
    /// Estimates of calls in flight.
    pub reserved_micros: u64,
    pub soft_percent: u8,
    pub on_limit: BudgetAction,
    pub downgrade_to: Option<String>,
    pub period_start_ms: i64,
    pub reset_ms: i64,
}

impl BudgetState {
    pub fn used_micros(&self) -> u64 {
        self.spent_micros.saturating_add(self.reserved_micros)
    }

    pub fn exceeded(&self) -> bool {
        self.used_micros() >= self.limit_micros
    }

    pub fn warning(&self) -> bool {
        self.used_micros().saturating_mul(100) >= self.limit_micros.saturating_mul(u64::from(self.soft_percent))
    }
}

/// The estimates a call in flight holds (released at its finish).
#[derive(Debug, Default)]
pub struct Reservation {
    generation: u64,
    started_ms: i64,
    held: Vec<(usize, u64)>,
}

#[derive(Debug)]
struct Item {
    cfg: BudgetConfig,
    limit: u64,
    start: i64,
    end: i64,
    spent: u64,
    reserved: u64,
    /// The period starts the soft (`[0]`) and hard (`[1]`) alerts were raised for.
    alerted: [Option<i64>; 2],
}

impl Item {
    fn matches(&self, key: &SpendKey<'_>) -> bool {
        let c = &self.cfg;
        if let Some(client) = &c.client {
            return client_matches(client, key.client);
        }
        if let Some(p) = &c.provider {
            return key.provider == Some(p.as_str());
        }
        if let Some(m) = &c.model {
            return key.requested == m || key.model == Some(m.as_str());
        }
        true
    }

    /// Moves to the period holding `now_ms` when it has ended (counters start again at zero).
    fn roll(&mut self, offset_s: i32, now_ms: i64) {
        if now_ms >= self.end || now_ms < self.start {
            let (start, end) = period_bounds(self.cfg.period, offset_s, now_ms);
            if start != self.start {
                self.spent = 0;
            }
            self.start = start;
            self.end = end;
        }
    }

    fn state(&self) -> BudgetState {
        let c = &self.cfg;
        let (scope, target) = match (&c.client, &c.provider, &c.model) {
            (Some(t), _, _) => ("client", Some(t.clone())),
            (_, Some(t), _) => ("provider", Some(t.clone())),
            (_, _, Some(t)) => ("model", Some(t.clone())),
            _ => ("all", None),
        };
        BudgetState {
            name: c.name().to_owned(),
            scope,
            target,
            period: c.period,
            limit_micros: self.limit,
            spent_micros: self.spent,
            reserved_micros: self.reserved,
            soft_percent: c.soft_percent,
            on_limit: c.on_limit,
            downgrade_to: c.downgrade_to.clone(),
            period_start_ms: self.start,
            reset_ms: self.end,
        }
    }

    /// Raises the alert the budget's spend has reached, once per period and level: the limit
    /// (which also counts as the soft threshold: one alert, not two at once) or the soft threshold.
    fn alert_once(&mut self, now_ms: i64) -> Option<BudgetAlert> {
        let s = self.state();
        let level = if s.exceeded() && self.alerted[1] != Some(self.start) {
            AlertLevel::Hard
        } else if s.warning() && !s.exceeded() && self.alerted[0] != Some(self.start) {
            AlertLevel::Soft
        } else {
            return None;
        };
        self.alerted[0] = Some(self.start);
        if level == AlertLevel::Hard {
            self.alerted[1] = Some(self.start);
            tracing::warn!(
                budget = %s.name,
                spent_usd = s.used_micros() as f64 / 1e6,
                limit_usd = s.limit_micros as f64 / 1e6,
                "budget `{}` has reached its limit this {} ({})",
                s.name,
                s.period.as_str(),
                match s.on_limit {
                    BudgetAction::Refuse => "new calls are refused until it resets",
                    BudgetAction::Downgrade => "new conversations are downgraded until it resets",
                }
            );
        } else {
            tracing::warn!(
                budget = %s.name,
                spent_usd = s.used_micros() as f64 / 1e6,
                limit_usd = s.limit_micros as f64 / 1e6,
                percent = percent(&s),
                "budget `{}` has reached {} % of its limit this {}",
                s.name,
                percent(&s),
                s.period.as_str()
            );
        }
        Some(BudgetAlert {
            budget: s.name,
            level,
            period_start_ms: self.start,
            reset_ms: self.end,
            spent_micros: s.spent_micros.saturating_add(s.reserved_micros),
            limit_micros: s.limit_micros,
            at_ms: now_ms,
        })
    }
}

/// Whole percent used (may exceed 100).
pub fn percent(s: &BudgetState) -> u32 {
    if s.limit_micros == 0 {
        return 100;
    }
    u32::try_from(s.used_micros().saturating_mul(100) / s.limit_micros).unwrap_or(u32::MAX)
}

/// A client budget names the client as calls record it (`cursor`, `claude-code`, `codex`, a
/// client token's name), case-insensitively; calls without a client token record the
/// User-Agent, so `claude-code` also matches `claude-cli/…` and `codex` matches `codex…`.
fn client_matches(budget: &str, client: &str) -> bool {
    let b = budget.trim().to_ascii_lowercase().replace(' ', "-");
    let c = client.to_ascii_lowercase();
    if b == c {
        return true;
    }
    match b.as_str() {
        "claude-code" => c.starts_with("claude-cli") || c.starts_with("claude-code"),
        "codex" | "codex-cli" => c.starts_with("codex"),
        "cursor" => c.starts_with("cursor"),
        _ => false,
    }
}

/// The period holding `now_ms` in the zone `offset_s` seconds east of UTC: `[start, end)` in ms.
pub fn period_bounds(period: BudgetPeriod, offset_s: i32, now_ms: i64) -> (i64, i64) {
    let offset = time::UtcOffset::from_whole_seconds(offset_s).unwrap_or(time::UtcOffset::UTC);
    let now = time::OffsetDateTime::from_unix_timestamp(now_ms.div_euclid(1000))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
        .to_offset(offset);
    let day = now.date();
    let (start, end) = match period {
        BudgetPeriod::Day => (day, day.next_day().unwrap_or(day)),
        BudgetPeriod::Week => {
            let monday = day - time::Duration::days(i64::from(day.weekday().number_days_from_monday()));
            (monday, monday + time::Duration::days(7))
        }
        BudgetPeriod::Month => {
            let first = day.replace_day(1).unwrap_or(day);
            let next = match first.month() {
                time::Month::December => time::Date::from_calendar_date(first.year() + 1, time::Month::January, 1),
                m => time::Date::from_calendar_date(first.year(), m.next(), 1),
            }
            .unwrap_or(first);
            (first, next)
        }
    };
    let ms = |d: time::Date| d.midnight().assume_offset(offset).unix_timestamp().saturating_mul(1000);
    (ms(start), ms(end))
}

#[derive(Debug, Default)]
struct State {
    generation: u64,
    offset_s: i32,
    items: Vec<Item>,
    /// Conversations that started downgraded: digest → the model or group they run on.
    downgraded: HashMap<u64, String>,
    order: VecDeque<u64>,
    /// Everything spent today (finished calls), for the tray's "Today $…".
    today: (i64, i64, u64),
    /// Alerts raised by this process, newest last.
    alerts: VecDeque<BudgetAlert>,
}

impl State {
    fn push_alert(&mut self, alert: BudgetAlert) {
        self.alerts.push_back(alert);
        while self.alerts.len() > RECENT_ALERTS {
            self.alerts.pop_front();
        }
    }
}

/// The budgets of one engine. Cheap to share (`Arc`).
#[derive(Default)]
pub struct Budgets {
    state: Mutex<State>,
    hook: OnceLock<AlertHook>,
}

impl std::fmt::Debug for Budgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budgets").field("state", &self.state).finish_non_exhaustive()
    }
}

/// A digest of a conversation's identity: its model and first user message.
pub fn conversation_digest(model: &str, req: &model::Request) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    model.hash(&mut h);
    if let Some(first) = req.messages.iter().find(|m| m.role == Role::User) {
        first.joined_text("\n").hash(&mut h);
    }
    h.finish()
}

/// Whether a request starts a conversation (no assistant message yet).
pub fn is_new_conversation(req: &model::Request) -> bool {
    !req.messages.iter().any(|m| m.role == Role::Assistant)
}

impl Budgets {
    /// Sets the hook every raised alert is handed to (once; later calls are ignored).
    pub fn set_alert_hook(&self, hook: AlertHook) {
        let _ = self.hook.set(hook);
    }

    fn hand_over(&self, raised: &[BudgetAlert]) {
        if let Some(hook) = self.hook.get() {
            raised.iter().for_each(hook);
        }
    }

    /// Replaces the budgets. `ledger(since_ms)` gives the spend of the calls started since then
    /// (one row per client, provider and model); `model_name` maps a row's model id to its
    /// configured name; `raised` are the alerts already raised (the ledger's), which are not
    /// raised again in the same period but are listed by [`Budgets::alerts`] while their period
    /// lasts. Calls in flight lose their reservations (they are counted
    /// at finish).
    pub fn configure(
        &self,
        budgets: &[BudgetConfig],
        offset_s: i32,
        now_ms: i64,
        ledger: &mut dyn FnMut(i64) -> Vec<SpendRow>,
        model_name: &dyn Fn(&str) -> Option<String>,
        raised: &[BudgetAlert],
    ) {
        let mut items: Vec<Item> = budgets
            .iter()
            .map(|cfg| {
                let (start, end) = period_bounds(cfg.period, offset_s, now_ms);
                let was = |level: AlertLevel| {
                    raised
                        .iter()
                        .any(|a| a.budget == cfg.name() && a.period_start_ms == start && a.level == level)
                        .then_some(start)
                };
                let alerted = [was(AlertLevel::Soft), was(AlertLevel::Hard)];
                Item { limit: cfg.limit_micros(), cfg: cfg.clone(), start, end, spent: 0, reserved: 0, alerted }
            })
            .collect();
        let today = period_bounds(BudgetPeriod::Day, offset_s, now_ms);
        let mut today_spent = 0u64;
        let mut starts: Vec<i64> = items.iter().map(|i| i.start).chain([today.0]).collect();
        starts.sort_unstable();
        starts.dedup();
        for since in starts {
            let rows = ledger(since);
            if since == today.0 {
                today_spent = rows.iter().map(|r| r.cost_micros).fold(0, u64::saturating_add);
            }
            for row in &rows {
                let name = row.model_id.as_deref().and_then(model_name);
                let key = SpendKey {
                    client: &row.client,
                    provider: row.provider.as_deref(),
                    requested: &row.model,
                    model: name.as_deref(),
                };
                for item in items.iter_mut().filter(|i| i.start == since && i.matches(&key)) {
                    item.spent = item.spent.saturating_add(row.cost_micros);
                }
            }
        }
        let Ok(mut st) = self.state.lock() else { return };
        // Keep the once-per-period alerts across edits of the same budget.
        let mut new = Vec::new();
        for item in &mut items {
            if let Some(old) = st.items.iter().find(|o| o.cfg.name() == item.cfg.name()) {
                for (mine, theirs) in item.alerted.iter_mut().zip(old.alerted) {
                    *mine = mine.or(theirs.filter(|s| *s == item.start));
                }
            }
            new.extend(item.alert_once(now_ms));
        }
        // The current periods' alerts from the ledger are listed again (a restarted engine still
        // reports them, with the time they were raised), but not raised again.
        for a in raised {
            let current = items.iter().any(|i| i.cfg.name() == a.budget && i.start == a.period_start_ms);
            let listed = st
                .alerts
                .iter()
                .any(|l| l.budget == a.budget && l.period_start_ms == a.period_start_ms && l.level == a.level);
            if current && !listed {
                st.push_alert(a.clone());
            }
        }
        st.generation += 1;
        st.offset_s = offset_s;
        st.items = items;
        st.today = (today.0, today.1, today_spent);
        new.iter().for_each(|a| st.push_alert(a.clone()));
        drop(st);
        self.hand_over(&new);
    }

    /// The alerts of the current periods: raised by this process, or before it and read from the
    /// ledger at [`Budgets::configure`] (at most 32, newest last).
    pub fn alerts(&self) -> Vec<BudgetAlert> {
        self.state.lock().map(|s| s.alerts.iter().cloned().collect()).unwrap_or_default()
    }

    /// Whether any budget is configured (the gateway skips everything else when none is).
    pub fn is_empty(&self) -> bool {
        self.state.lock().map(|s| s.items.is_empty()).unwrap_or(true)
    }

    /// The decision for a new call. `conversation` is the call's digest when it continues a
    /// conversation (`None` for a new one).
    pub fn check(&self, key: &SpendKey<'_>, conversation: Option<u64>, now_ms: i64) -> Decision {
        let Ok(mut st) = self.state.lock() else { return Decision::Proceed };
        let offset = st.offset_s;
        let mut downgrade = None;
        for item in &mut st.items {
            item.roll(offset, now_ms);
            if !item.matches(key) || item.spent.saturating_add(item.reserved) < item.limit {
                continue;
            }
            match (item.cfg.on_limit, &item.cfg.downgrade_to) {
                (BudgetAction::Downgrade, Some(to)) => {
                    if conversation.is_none() && downgrade.is_none() && to != key.requested {
                        downgrade = Some(Decision::Downgrade { budget: item.cfg.name().to_owned(), to: to.clone() });
                    }
                }
                _ => return Decision::Refuse { budget: item.cfg.name().to_owned(), reset_ms: item.end },
            }
        }
        downgrade.unwrap_or(Decision::Proceed)
    }

    /// The model a conversation that started downgraded runs on.
    pub fn downgraded(&self, digest: u64) -> Option<String> {
        let st = self.state.lock().ok()?;
        st.downgraded.get(&digest).cloned()
    }

    /// Whether any conversation is remembered as downgraded.
    pub fn any_downgraded(&self) -> bool {
        self.state.lock().map(|s| !s.downgraded.is_empty()).unwrap_or(false)
    }

    /// Remembers that the conversation with `digest` (taken with the model the client asked for)
    /// runs on `to`.
    pub fn remember_downgrade(&self, digest: u64, to: &str) {
        let Ok(mut st) = self.state.lock() else { return };
        if st.downgraded.insert(digest, to.to_owned()).is_none() {
            st.order.push_back(digest);
        }
        while st.order.len() > REMEMBERED {
            if let Some(old) = st.order.pop_front() {
                st.downgraded.remove(&old);
            }
        }
    }

    /// Counts `estimate_micros` against every budget the call matches until it finishes.
    pub fn reserve(&self, key: &SpendKey<'_>, estimate_micros: u64, now_ms: i64) -> Reservation {
        let Ok(mut st) = self.state.lock() else { return Reservation::default() };
        let offset = st.offset_s;
        let mut held = Vec::new();
        for (i, item) in st.items.iter_mut().enumerate() {
            item.roll(offset, now_ms);
            if item.matches(key) {
                item.reserved = item.reserved.saturating_add(estimate_micros);
                held.push((i, estimate_micros));
            }
        }
        Reservation { generation: st.generation, started_ms: now_ms, held }
    }

    /// A call finished: its reservation is released and its cost added to every budget it
    /// matches whose period it started in.
    pub fn finish(&self, reservation: Reservation, key: &SpendKey<'_>, cost_micros: u64) {
        self.finish_at(reservation, key, cost_micros, crate::clock::now_ms());
    }

    /// [`Budgets::finish`] at `now_ms` (the alerts' time).
    pub fn finish_at(&self, reservation: Reservation, key: &SpendKey<'_>, cost_micros: u64, now_ms: i64) {
        let Ok(mut st) = self.state.lock() else { return };
        if reservation.generation == st.generation {
            for (i, amount) in &reservation.held {
                if let Some(item) = st.items.get_mut(*i) {
                    item.reserved = item.reserved.saturating_sub(*amount);
                }
            }
        }
        if cost_micros == 0 {
            return;
        }
        let started = reservation.started_ms;
        let offset = st.offset_s;
        if started >= st.today.1 {
            let (start, end) = period_bounds(BudgetPeriod::Day, offset, started);
            st.today = (start, end, 0);
        }
        if started >= st.today.0 {
            st.today.2 = st.today.2.saturating_add(cost_micros);
        }
        let mut new = Vec::new();
        for item in &mut st.items {
            if started >= item.start && started < item.end && item.matches(key) {
                item.spent = item.spent.saturating_add(cost_micros);
                new.extend(item.alert_once(now_ms));
            }
        }
        new.iter().for_each(|a| st.push_alert(a.clone()));
        drop(st);
        self.hand_over(&new);
    }

    /// Every budget's state at `now_ms`.
    pub fn states(&self, now_ms: i64) -> Vec<BudgetState> {
        let Ok(mut st) = self.state.lock() else { return Vec::new() };
        let offset = st.offset_s;
        st.items
            .iter_mut()
            .map(|i| {
                i.roll(offset, now_ms);
                i.state()
            })
            .collect()
    }

    /// Everything spent today (finished calls) at `now_ms`.
    pub fn today_micros(&self, now_ms: i64) -> u64 {
        let Ok(st) = self.state.lock() else { return 0 };
        if now_ms >= st.today.0 && now_ms < st.today.1 { st.today.2 } else { 0 }
    }

    /// The zone offset budgets follow (seconds east of UTC).
    pub fn offset_s(&self) -> i32 {
        self.state.lock().map(|s| s.offset_s).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
