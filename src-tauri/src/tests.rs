//! The shell's IPC command under Tauri's MockRuntime (no display): a real engine on port 0
//! behind the supervisor; `control` serves `/api/app…` and the engine's routes, and answers
//! `unavailable` while the engine is stopped. On Linux the command travels the window process's
//! pipe protocol, here over in-memory pipes, to the side the tray app runs.

use std::sync::Arc;
use std::time::Duration;

use keyhaven::app::EngineExtras;
use keyhaven::app::supervisor::{ConfigSource, Supervisor, SupervisorOptions};
use keyhaven::config::{EngineConfig, load_str};
use keyhaven::control::dto::IpcReply;
use keyhaven::secrets::Secrets;
use serde_json::{Value, json};
use tauri::Manager;
use tauri::ipc::{CallbackFn, InvokeBody};
use tauri::test::{INVOKE_KEY, MockRuntime, get_ipc_response, mock_builder, mock_context, noop_assets};
use tauri::webview::InvokeRequest;

fn supervisor(dir: &std::path::Path) -> Supervisor {
    let data = dir.to_path_buf();
    let config: ConfigSource = Arc::new(move || {
        let file = load_str("test.toml", "[server]\nlisten = \"127.0.0.1:0\"\n").map_err(|e| e.to_string())?;
        Ok(EngineConfig {
            config_path: None,
            database_path: data.join("keyhaven.db"),
            file,
            listen: None,
            ca_dir: data.join("ca"),
            proxy_listen: Some("127.0.0.1:0".parse().map_err(|e| format!("{e}"))?),
            upstream_overrides: Default::default(),
        })
    });
    Supervisor::new(SupervisorOptions {
        config,
        secrets: Secrets::empty(),
        extras: EngineExtras::default(),
        grace: Duration::from_secs(5),
        autostart: None,
    })
}

fn call(webview: &tauri::WebviewWindow<MockRuntime>, method: &str, path: &str, body: Value) -> IpcReply {
    let response = get_ipc_response(
        webview,
        InvokeRequest {
            cmd: "control".into(),
            callback: CallbackFn(0),
            error: CallbackFn(1),
            url: "tauri://localhost".parse().expect("url"),
            body: InvokeBody::Json(json!({ "method": method, "path": path, "body": body })),
            headers: Default::default(),
            invoke_key: INVOKE_KEY.to_owned(),
        },
    )
    .expect("the command answers");
    response.deserialize::<IpcReply>().expect("an IpcReply")
}

#[test]
fn control_command_round_trips_app_and_engine_routes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = mock_builder()
        .invoke_handler(tauri::generate_handler![crate::commands::control])
        .build(mock_context(noop_assets()))
        .expect("mock app");
    let sup = supervisor(dir.path());
    app.manage(sup.clone());
    #[cfg(target_os = "linux")]
    {
        let handle = app.handle().clone();
        let (link, _) = crate::window::pipe::in_memory(
            move |method, path, body| {
                let app = handle.clone();
                async move { crate::commands::serve(&app, &method, &path, body).await }
            },
            || {},
        );
        app.manage(link);
    }
    let webview =
        tauri::WebviewWindowBuilder::new(&app, crate::MAIN_WINDOW, Default::default()).build().expect("mock webview");

    let r = call(&webview, "GET", "/api/app", Value::Null);
    assert_eq!((r.status, r.body["state"].clone()), (200, json!("stopped")));
    assert_eq!(r.body["startOnLogin"], Value::Null, "no autostart switch in this host");
    let r = call(&webview, "GET", "/api/status", Value::Null);
    assert_eq!((r.status, r.body["kind"].clone()), (503, json!("unavailable")));

    let r = call(&webview, "POST", "/api/app/start", Value::Null);
    assert_eq!((r.status, r.body["state"].clone()), (200, json!("running")), "{}", r.body);
    let r = call(&webview, "GET", "/api/status", Value::Null);
    assert_eq!(r.status, 200, "{}", r.body);
    let url = sup.status().gateway_url.expect("running");
    assert_eq!(r.body["gatewayUrl"], json!(url));
    let r = call(&webview, "GET", "/api/calls?limit=3&offset=0", Value::Null);
    assert_eq!((r.status, r.body["limit"].clone()), (200, json!(3)));
    // Edits need a config file; this engine has none, and says so like `/api/` does.
    let r = call(&webview, "PUT", "/api/settings", json!({ "retentionDays": 3 }));
    assert_eq!((r.status, r.body["kind"].clone()), (503, json!("unavailable")), "{}", r.body);

    let r = call(&webview, "POST", "/api/app/stop", Value::Null);
    assert_eq!((r.status, r.body["state"].clone()), (200, json!("stopped")));
    assert_eq!(r.body["lastStop"]["drained"], json!(true));
    let r = call(&webview, "GET", "/api/status", Value::Null);
    assert_eq!(r.status, 503);
}

#[test]
fn tray_labels_name_the_state() {
    use keyhaven::control::dto::{AppStatus, EngineState};
    let mut s = AppStatus {
        state: EngineState::Running,
        error: None,
        gateway_url: Some("http://127.0.0.1:4937".into()),
        start_on_login: None,
        last_stop: None,
    };
    assert_eq!(crate::tray::label(&s), "Keyhaven: running on 127.0.0.1:4937");
    s.state = EngineState::Error;
    s.error = Some("cannot listen on 127.0.0.1:4937: address in use".into());
    assert_eq!(crate::tray::label(&s), "Keyhaven: error: cannot listen on 127.0.0.1:4937: address in use");
    s.state = EngineState::Stopped;
    assert_eq!(crate::tray::label(&s), "Keyhaven: stopped");
}

#[test]
fn the_tray_spend_line_shows_today_and_the_nearest_budget() {
    use keyhaven::control::dto::{Budget, BudgetAction, BudgetLevel, BudgetPeriod, BudgetReport, BudgetScope};
    let monthly = Budget {
        name: "monthly".into(),
        scope: BudgetScope::All,
        target: None,
        period: BudgetPeriod::Month,
        limit_usd: 100.0,
        soft_percent: 80,
        on_limit: BudgetAction::Refuse,
        downgrade_to: None,
        spent_micros: 41_000_000,
        spent_usd: 41.0,
        in_flight_micros: 0,
        percent: 41,
        level: BudgetLevel::Ok,
        period_start_ms: 0,
        reset_ms: 0,
    };
    let mut report = BudgetReport {
        budgets: vec![monthly],
        today_micros: 3_120_000,
        today_usd: 3.12,
        nearest: Some("monthly".into()),
        utc_offset_s: 0,
        time_zone: "local".into(),
        alerts: Vec::new(),
    };
    assert_eq!(crate::tray::spend_line(&report), "Today $3.12 · Monthly 41 %");
    report.budgets[0].level = BudgetLevel::Warning;
    report.budgets[0].percent = 85;
    assert_eq!(crate::tray::spend_line(&report), "Today $3.12 · ⚠ Monthly 85 %");
    report.budgets.clear();
    report.nearest = None;
    assert_eq!(crate::tray::spend_line(&report), "Today $3.12");
}

#[test]
fn the_tray_cursor_line_names_a_version_that_failed_its_self_test() {
    use keyhaven::control::dto::{CursorGuardReport, CursorTestStatus, CursorVersion};
    let version = |v: &str, status: CursorTestStatus| CursorVersion {
        version: v.into(),
        first_seen_ms: 1,
        last_seen_ms: 2,
        status,
        failed_step: None,
        detail: None,
        tested_ms: Some(2),
        notice: (status == CursorTestStatus::Failed)
            .then(|| format!("Cursor {v}: self-test failed — using Cursor's servers")),
    };
    let mut report = CursorGuardReport { available: true, versions: vec![version("3.15.0", CursorTestStatus::Passed)] };
    assert_eq!(crate::tray::cursor_line(&report), None);
    report.versions.insert(0, version("3.16.2", CursorTestStatus::Failed));
    assert_eq!(
        crate::tray::cursor_line(&report).as_deref(),
        Some("Cursor 3.16.2: self-test failed — using Cursor's servers")
    );
    report.versions.push(version("3.14.1", CursorTestStatus::Failed));
    assert_eq!(
        crate::tray::cursor_line(&report).as_deref(),
        Some("Cursor 3.16.2: self-test failed — using Cursor's servers (+1 more)")
    );
}

#[test]
fn budget_alerts_become_one_notification_each() {
    use keyhaven::control::dto::{BudgetAction, BudgetAlert, BudgetAlertLevel, BudgetReport};
    // 2027-01-01T00:00:00+01:00 = 2026-12-31T23:00:00Z.
    let reset_ms = 1_798_758_000_000;
    let soft = BudgetAlert {
        budget: "monthly".into(),
        level: BudgetAlertLevel::Soft,
        spent_usd: 41.5,
        limit_usd: 50.0,
        percent: 83,
        on_limit: Some(BudgetAction::Refuse),
        period_start_ms: 1_796_079_600_000,
        reset_ms,
        at_ms: 1_796_100_000_000,
    };
    assert_eq!(
        crate::tray::alert_notice(&soft, 3600),
        (
            "Keyhaven budget “monthly” at 83 %".to_owned(),
            "$41.50 of $50.00 spent this period. It resets at 2027-01-01 00:00.".to_owned()
        )
    );
    let hard = BudgetAlert {
        level: BudgetAlertLevel::Hard,
        spent_usd: 50.02,
        percent: 100,
        on_limit: Some(BudgetAction::Downgrade),
        ..soft.clone()
    };
    assert_eq!(
        crate::tray::alert_notice(&hard, 0),
        (
            "Keyhaven budget “monthly” reached".to_owned(),
            "$50.02 of $50.00 spent: new conversations go to the cheaper model until it resets at 2026-12-31 23:00."
                .to_owned()
        )
    );
    let refuse = BudgetAlert { on_limit: Some(BudgetAction::Refuse), ..hard.clone() };
    assert!(crate::tray::alert_notice(&refuse, 0).1.contains("new calls are refused until"));

    // Each alert once, across polls; the hard one of the same period is another alert.
    let shown = std::sync::Mutex::new(std::collections::HashSet::new());
    let mut report = BudgetReport {
        budgets: Vec::new(),
        today_micros: 0,
        today_usd: 0.0,
        nearest: None,
        utc_offset_s: 3600,
        time_zone: "+01:00".into(),
        alerts: vec![soft.clone()],
    };
    assert!(crate::tray::unseen(&shown, &report, soft.at_ms + 1).is_empty(), "raised before the app started");
    assert_eq!(crate::tray::unseen(&shown, &report, soft.at_ms), std::slice::from_ref(&soft));
    assert!(crate::tray::unseen(&shown, &report, 0).is_empty(), "the next poll shows nothing");
    report.alerts.push(hard.clone());
    assert_eq!(crate::tray::unseen(&shown, &report, 0), [hard]);
    assert!(crate::tray::unseen(&shown, &report, 0).is_empty());
}
