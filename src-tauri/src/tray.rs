//! The tray: an icon per engine state (running, stopped, error) and a menu with the status,
//! Start / Stop, Open dashboard, the routing mode (a submenu of check items, the current one
//! checked), Copy endpoint URL, Restore clients on stop (mirrors `[setup] restore_on_stop`) and
//! Quit. Every action is in the menu (Linux trays deliver no icon clicks). The menu follows the
//! supervisor's status and is refreshed after every change made from the window.
//!
//! Spend: a second line shows today's spend and the budget nearest its limit ("Today $3.12 ·
//! Monthly 41 %", from `/api/budgets` through the control service), polled every 30 s; a budget
//! past its warning threshold or its limit is marked there and in the tooltip.
//!
//! Alerts: the engine decides (`provider::budget`: a budget's soft threshold and its limit, each
//! once per period, remembered in the ledger across restarts) and reports them in
//! `/api/budgets`' `alerts`; the tray only shows each alert it has not shown yet as a desktop
//! notification (`desktop::notify`: on Linux `org.freedesktop.Notifications` on the session
//! D-Bus), at the next poll.
//!
//! Cursor: a third line follows the update guard (`/api/cursor/versions`): a Cursor version whose
//! self-test failed shows "Cursor 3.16.2: self-test failed — using Cursor's servers" (also in
//! the tooltip); choosing the line opens the dashboard, whose Cursor page has Retry.

use keyhaven::app::supervisor::Supervisor;
use keyhaven::control::dto::{self, EngineState, RoutingMode};
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tauri::image::Image;
use tauri::menu::{CheckMenuItem, Menu, MenuEvent, MenuItem, PredefinedMenuItem, Submenu};
use tauri::tray::TrayIconBuilder;
use tauri::{AppHandle, Manager, Runtime};

/// The tray's id (its D-Bus object is `/org/ayatana/NotificationItem/tray_icon_tray_app_keyhaven`).
pub const TRAY_ID: &str = "keyhaven";

/// Menu item ids.
pub mod id {
    pub const STATUS: &str = "status";
    pub const SPEND: &str = "spend";
    pub const CURSOR: &str = "cursor-guard";
    pub const START: &str = "start";
    pub const STOP: &str = "stop";
    pub const OPEN: &str = "open";
    pub const ROUTING: &str = "routing";
    pub const COPY_URL: &str = "copy-url";
    pub const RESTORE: &str = "restore-on-stop";
    pub const QUIT: &str = "quit";
}

const MODES: [(RoutingMode, &str, &str); 3] = [
    (RoutingMode::Local, "mode-local", "Local"),
    (RoutingMode::Hybrid, "mode-hybrid", "Hybrid"),
    (RoutingMode::Upstream, "mode-upstream", "Upstream (official service)"),
];

struct Tray<R: Runtime> {
    status: MenuItem<R>,
    spend: MenuItem<R>,
    cursor: MenuItem<R>,
    start: MenuItem<R>,
    stop: MenuItem<R>,
    routing: Submenu<R>,
    modes: Vec<(RoutingMode, CheckMenuItem<R>)>,
    copy: MenuItem<R>,
    restore: CheckMenuItem<R>,
    /// The setting as last read from the running engine (shown, greyed, while stopped).
    restore_on_stop: AtomicBool,
    /// The alerts shown as notifications (budget, period start, level).
    shown: Mutex<HashSet<(String, i64, bool)>>,
    /// When the app started (Unix ms): alerts raised before were the business of an earlier run.
    started_ms: i64,
}

/// The tray icon of a state: decoded to RGBA when this is compiled (`include_image!`), so no
/// PNG decoder is linked into the app.
fn icon(state: EngineState) -> Image<'static> {
    const RUNNING: Image<'static> = tauri::include_image!("icons/tray-running.png");
    const ERROR: Image<'static> = tauri::include_image!("icons/tray-error.png");
    const STOPPED: Image<'static> = tauri::include_image!("icons/tray-stopped.png");
    match state {
        EngineState::Running => RUNNING,
        EngineState::Error => ERROR,
        EngineState::Starting | EngineState::Stopping | EngineState::Stopped => STOPPED,
    }
}

/// The first menu line and the tooltip.
pub fn label(status: &dto::AppStatus) -> String {
    match status.state {
        EngineState::Running => {
            format!(
                "Keyhaven: running on {}",
                status.gateway_url.as_deref().unwrap_or("?").trim_start_matches("http://")
            )
        }
        EngineState::Starting => "Keyhaven: starting…".to_owned(),
        EngineState::Stopping => "Keyhaven: stopping…".to_owned(),
        EngineState::Stopped => "Keyhaven: stopped".to_owned(),
        EngineState::Error => {
            let reason = status.error.as_deref().unwrap_or("unknown error");
            let short: String = reason.chars().take(80).collect();
            format!("Keyhaven: error: {short}")
        }
    }
}

/// The spend line: today's spend and the budget nearest its limit, marked when it is past its
/// warning threshold ("Today $3.12 · Monthly 41 %", "Today $9.80 · ⚠ Monthly 98 %").
pub fn spend_line(report: &dto::BudgetReport) -> String {
    let today = format!("Today ${:.2}", report.today_micros as f64 / 1e6);
    let Some(b) = report.budgets.iter().find(|b| Some(&b.name) == report.nearest.as_ref()) else { return today };
    let period = match b.period {
        dto::BudgetPeriod::Day => "Daily",
        dto::BudgetPeriod::Week => "Weekly",
        dto::BudgetPeriod::Month => "Monthly",
    };
    let mark = match b.level {
        dto::BudgetLevel::Ok => "",
        dto::BudgetLevel::Warning => "⚠ ",
        dto::BudgetLevel::Exceeded => "⛔ ",
    };
    format!("{today} · {mark}{period} {} %", b.percent)
}

/// The Cursor line: the failed version's notice (the newest one, with how many more), or `None`
/// when no seen version failed its self-test.
pub fn cursor_line(report: &dto::CursorGuardReport) -> Option<String> {
    let mut failed = report.versions.iter().filter(|v| v.status == dto::CursorTestStatus::Failed);
    let first = failed.next()?;
    let line = first.notice.clone().unwrap_or_else(|| format!("Cursor {}: self-test failed", first.version));
    Some(match failed.count() {
        0 => line,
        n => format!("{line} (+{n} more)"),
    })
}

/// A budget alert's notification: its title and body. `offset_s` is the budgets' zone (the reset
/// time is given in it).
pub fn alert_notice(alert: &dto::BudgetAlert, offset_s: i32) -> (String, String) {
    let offset = time::UtcOffset::from_whole_seconds(offset_s).unwrap_or(time::UtcOffset::UTC);
    let reset = time::OffsetDateTime::from_unix_timestamp(alert.reset_ms.div_euclid(1000))
        .map(|t| t.to_offset(offset))
        .ok()
        .and_then(|t| t.format(time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]")).ok())
        .unwrap_or_else(|| "the next period".to_owned());
    let spent = format!("${:.2} of ${:.2}", alert.spent_usd, alert.limit_usd);
    match alert.level {
        dto::BudgetAlertLevel::Soft => (
            format!("Keyhaven budget “{}” at {} %", alert.budget, alert.percent),
            format!("{spent} spent this period. It resets at {reset}."),
        ),
        dto::BudgetAlertLevel::Hard => {
            let then = match alert.on_limit {
                Some(dto::BudgetAction::Downgrade) => "new conversations go to the cheaper model",
                _ => "new calls are refused",
            };
            (
                format!("Keyhaven budget “{}” reached", alert.budget),
                format!("{spent} spent: {then} until it resets at {reset}."),
            )
        }
    }
}

/// The alerts of `report` raised since `since_ms` (the app's start: alerts of earlier runs were
/// shown by them) and not shown yet; marks them shown.
pub(crate) fn unseen(
    shown: &Mutex<HashSet<(String, i64, bool)>>,
    report: &dto::BudgetReport,
    since_ms: i64,
) -> Vec<dto::BudgetAlert> {
    let mut shown = shown.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    report
        .alerts
        .iter()
        .filter(|a| a.at_ms >= since_ms)
        .filter(|a| shown.insert((a.budget.clone(), a.period_start_ms, a.level == dto::BudgetAlertLevel::Hard)))
        .cloned()
        .collect()
}

/// Shows each new alert of `report` as a desktop notification.
fn notify<R: Runtime>(app: &AppHandle<R>, tray: &Tray<R>, report: &dto::BudgetReport) {
    for alert in unseen(&tray.shown, report, tray.started_ms) {
        let (title, body) = alert_notice(&alert, report.utc_offset_s);
        crate::desktop::notify(app, &title, &body);
    }
}

/// Builds the tray and starts following the supervisor (which must be managed already).
pub fn install<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<()> {
    let status = MenuItem::with_id(app, id::STATUS, "Keyhaven: starting…", false, None::<&str>)?;
    let spend = MenuItem::with_id(app, id::SPEND, "Today —", false, None::<&str>)?;
    let cursor = MenuItem::with_id(app, id::CURSOR, "Cursor: —", false, None::<&str>)?;
    let start = MenuItem::with_id(app, id::START, "Start", false, None::<&str>)?;
    let stop = MenuItem::with_id(app, id::STOP, "Stop", false, None::<&str>)?;
    let open = MenuItem::with_id(app, id::OPEN, "Open dashboard", true, None::<&str>)?;
    let mut modes = Vec::new();
    for (mode, item_id, text) in MODES {
        modes.push((mode, CheckMenuItem::with_id(app, item_id, text, false, false, None::<&str>)?));
    }
    let mode_items: Vec<&dyn tauri::menu::IsMenuItem<R>> =
        modes.iter().map(|(_, i)| i as &dyn tauri::menu::IsMenuItem<R>).collect();
    let routing = Submenu::with_id_and_items(app, id::ROUTING, "Routing mode", false, &mode_items)?;
    let copy = MenuItem::with_id(app, id::COPY_URL, "Copy endpoint URL", false, None::<&str>)?;
    let restore = CheckMenuItem::with_id(app, id::RESTORE, "Restore clients on stop", false, false, None::<&str>)?;
    let quit = MenuItem::with_id(app, id::QUIT, "Quit", true, None::<&str>)?;
    let menu = Menu::with_items(
        app,
        &[
            &status,
            &spend,
            &cursor,
            &PredefinedMenuItem::separator(app)?,
            &start,
            &stop,
            &open,
            &routing,
            &copy,
            &restore,
            &PredefinedMenuItem::separator(app)?,
            &quit,
        ],
    )?;
    TrayIconBuilder::with_id(TRAY_ID)
        .tooltip("Keyhaven")
        .menu(&menu)
        .on_menu_event(on_menu)
        .icon(icon(EngineState::Stopped))
        .build(app)?;
    app.manage(Tray {
        status,
        spend,
        cursor,
        start,
        stop,
        routing,
        modes,
        copy,
        restore,
        restore_on_stop: AtomicBool::new(false),
        shown: Mutex::new(HashSet::new()),
        started_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
    });

    // Spend changes with every call: polled (a read of in-memory counters, no SQL).
    let poller = app.clone();
    tauri::async_runtime::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            refresh(&poller).await;
        }
    });
    let app = app.clone();
    let mut changes = app.state::<Supervisor>().subscribe();
    tauri::async_runtime::spawn(async move {
        loop {
            refresh(&app).await;
            if changes.changed().await.is_err() {
                break;
            }
        }
    });
    Ok(())
}

/// Brings the icon and the menu in line with the engine.
pub async fn refresh<R: Runtime>(app: &AppHandle<R>) {
    let Some(supervisor) = app.try_state::<Supervisor>().map(|s| s.inner().clone()) else { return };
    let status = supervisor.status();
    let running = status.state == EngineState::Running;
    let (mode, restore, budgets, guard) = match supervisor.control() {
        Some(c) => (
            c.routing().await.ok().map(|r| r.mode),
            c.settings().await.ok().map(|s| s.restore_on_stop),
            c.budgets().await.ok(),
            c.cursor_versions().await.ok(),
        ),
        None => (None, None, None, None),
    };
    let Some(tray) = app.try_state::<Tray<R>>() else { return };
    if let Some(r) = restore {
        tray.restore_on_stop.store(r, Ordering::Relaxed);
    }
    let mut text = label(&status);
    let _ = tray.status.set_text(&text);
    if let Some(report) = budgets.as_ref().filter(|_| running) {
        notify(app, &tray, report);
    }
    let spend = budgets.as_ref().filter(|_| running).map(spend_line);
    let _ = tray.spend.set_text(spend.as_deref().unwrap_or("Today —"));
    if let Some(line) = &spend {
        text = format!("{text}\n{line}");
    }
    let cursor = guard.as_ref().filter(|_| running).and_then(cursor_line);
    let _ = tray.cursor.set_text(cursor.as_deref().unwrap_or("Cursor: —"));
    let _ = tray.cursor.set_enabled(cursor.is_some());
    if let Some(line) = &cursor {
        text = format!("{text}\n{line}");
    }
    let _ = tray.start.set_enabled(matches!(status.state, EngineState::Stopped | EngineState::Error));
    let _ = tray.stop.set_enabled(running);
    let _ = tray.copy.set_enabled(running);
    let _ = tray.routing.set_enabled(running);
    for (m, item) in &tray.modes {
        let _ = item.set_enabled(running);
        let _ = item.set_checked(Some(*m) == mode);
    }
    let _ = tray.restore.set_enabled(running);
    let _ = tray.restore.set_checked(tray.restore_on_stop.load(Ordering::Relaxed));
    if let Some(t) = app.tray_by_id(TRAY_ID) {
        let _ = t.set_icon(Some(icon(status.state)));
        let _ = t.set_tooltip(Some(&text));
    }
}

fn on_menu<R: Runtime>(app: &AppHandle<R>, event: MenuEvent) {
    let Some(supervisor) = app.try_state::<Supervisor>().map(|s| s.inner().clone()) else { return };
    let app = app.clone();
    let id = event.id().as_ref().to_owned();
    match id.as_str() {
        id::OPEN | id::CURSOR => crate::window::open(&app),
        id::QUIT => crate::quit(&app),
        id::COPY_URL => {
            if let Some(url) = supervisor.status().gateway_url {
                crate::desktop::copy_text(&app, format!("{url}/v1"));
            }
        }
        _ => {
            tauri::async_runtime::spawn(async move {
                act(&supervisor, &id).await;
                refresh(&app).await;
            });
        }
    }
}

/// The menu actions that talk to the engine.
async fn act(supervisor: &Supervisor, item: &str) {
    match item {
        id::START => {
            let _ = supervisor.start().await;
        }
        id::STOP => {
            supervisor.stop().await;
        }
        id::RESTORE => {
            if let Some(c) = supervisor.control() {
                let on = !c.settings().await.is_ok_and(|s| s.restore_on_stop);
                let input = dto::SettingsInput { restore_on_stop: Some(on), ..dto::SettingsInput::default() };
                if let Err(e) = c.set_settings(input).await {
                    tracing::warn!(error = %e, "restore on stop not changed");
                }
            }
        }
        other => {
            let Some((mode, _, _)) = MODES.iter().find(|(_, i, _)| *i == other) else { return };
            if let Some(c) = supervisor.control()
                && let Err(e) = c.set_routing(dto::RoutingInput { mode: *mode }).await
            {
                tracing::warn!(error = %e, "routing mode not changed");
            }
        }
    }
}
