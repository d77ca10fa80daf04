//! Unit tests of the budget tracker: periods in a time zone, matching, reservations, rollover.

use super::*;

fn ms(y: i32, m: u8, d: u8, h: u8, offset_h: i8) -> i64 {
    let date = time::Date::from_calendar_date(y, time::Month::try_from(m).expect("month"), d).expect("date");
    let offset = time::UtcOffset::from_hms(offset_h, 0, 0).expect("offset");
    date.with_hms(h, 0, 0).expect("time").assume_offset(offset).unix_timestamp() * 1000
}

fn budget(text: &str) -> BudgetConfig {
    let file = crate::config::load_str(
        "t.toml",
        &format!(
            "[[providers]]\nname = \"p\"\nkind = \"openai\"\nbase_url = \"https://x.example\"\n\
             [[models]]\nname = \"m\"\nprovider = \"p\"\nupstream = \"u\"\n\
             [[models]]\nname = \"cheap\"\nprovider = \"p\"\nupstream = \"c\"\n[[budgets]]\n{text}"
        ),
    )
    .expect("config");
    file.budgets[0].clone()
}

#[test]
fn periods_start_at_local_midnight_monday_and_the_first() {
    // Wednesday 2026-12-02, 00:30 at +02:00 is still Tuesday in UTC.
    let now = ms(2026, 12, 2, 0, 2) + 30 * 60_000;
    assert_eq!(period_bounds(BudgetPeriod::Day, 7200, now), (ms(2026, 12, 2, 0, 2), ms(2026, 12, 3, 0, 2)));
    assert_eq!(period_bounds(BudgetPeriod::Day, 0, now), (ms(2026, 12, 1, 0, 0), ms(2026, 12, 2, 0, 0)));
    assert_eq!(period_bounds(BudgetPeriod::Week, 7200, now), (ms(2026, 11, 30, 0, 2), ms(2026, 12, 7, 0, 2)));
    assert_eq!(period_bounds(BudgetPeriod::Month, 7200, now), (ms(2026, 12, 1, 0, 2), ms(2027, 1, 1, 0, 2)));
    assert_eq!(
        period_bounds(BudgetPeriod::Month, -18000, ms(2027, 2, 28, 23, -5)),
        (ms(2027, 2, 1, 0, -5), ms(2027, 3, 1, 0, -5))
    );
}

#[test]
fn in_flight_estimates_count_until_the_finish_and_a_new_period_starts_at_zero() {
    let b = Budgets::default();
    let cfg = budget("name = \"d\"\nperiod = \"day\"\nlimit_usd = 1\n");
    let t0 = ms(2026, 12, 2, 10, 0);
    let seed = SpendRow {
        client: "c".into(),
        provider: Some("p".into()),
        model: "m".into(),
        model_id: None,
        cost_micros: 400_000,
    };
    b.configure(&[cfg], 0, t0, &mut |_| vec![seed.clone()], &|_| None, &[]);
    let key = SpendKey { client: "c", provider: Some("p"), requested: "m", model: Some("m") };
    let r = b.reserve(&key, 700_000, t0);
    assert_eq!(b.states(t0)[0].used_micros(), 1_100_000);
    assert!(matches!(b.check(&key, None, t0), Decision::Refuse { .. }), "the estimate counts");
    b.finish(r, &key, 100_000);
    let s = &b.states(t0)[0];
    assert_eq!((s.spent_micros, s.reserved_micros), (500_000, 0));
    assert_eq!(b.check(&key, None, t0), Decision::Proceed);
    assert_eq!(b.today_micros(t0), 500_000);
    // The next day starts from zero; a call that started yesterday does not count today.
    let t1 = ms(2026, 12, 3, 0, 0) + 1;
    let late = b.reserve(&key, 0, t0);
    assert_eq!(b.states(t1)[0].spent_micros, 0);
    b.finish(late, &key, 900_000);
    assert_eq!(b.states(t1)[0].spent_micros, 0);
}

#[test]
fn a_downgrade_applies_to_new_conversations_only() {
    let b = Budgets::default();
    let cfg =
        budget("name = \"d\"\nmodel = \"m\"\nlimit_usd = 0.5\non_limit = \"downgrade\"\ndowngrade_to = \"cheap\"\n");
    let now = ms(2026, 12, 2, 10, 0);
    let seed = SpendRow {
        client: "c".into(),
        provider: Some("p".into()),
        model: "m".into(),
        model_id: None,
        cost_micros: 600_000,
    };
    b.configure(&[cfg], 0, now, &mut |_| vec![seed.clone()], &|_| None, &[]);
    let key = SpendKey { client: "claude-cli/2.0", provider: Some("p"), requested: "m", model: Some("m") };
    assert_eq!(b.check(&key, None, now), Decision::Downgrade { budget: "d".into(), to: "cheap".into() });
    assert_eq!(b.check(&key, Some(7), now), Decision::Proceed, "a conversation under way keeps its model");
    let other = SpendKey { requested: "cheap", model: Some("cheap"), ..key };
    assert_eq!(b.check(&other, None, now), Decision::Proceed, "the budget limits `m` only");
}

#[test]
fn client_budgets_match_the_recorded_name_or_the_clients_user_agent() {
    assert!(client_matches("Claude Code", "claude-code"));
    assert!(client_matches("claude-code", "claude-cli/2.0.1 (external, cli)"));
    assert!(client_matches("codex", "codex_cli_rs/0.46.0"));
    assert!(client_matches("my-token", "my-token"));
    assert!(!client_matches("cursor", "claude-code"));
}

#[test]
fn the_soft_threshold_and_the_limit_alert_once_per_period() {
    let cfg = budget("name = \"w\"\nperiod = \"day\"\nlimit_usd = 1\nsoft_percent = 50\n");
    let t0 = ms(2026, 12, 2, 10, 0);
    let (start, end) = period_bounds(BudgetPeriod::Day, 0, t0);
    let mut item =
        Item { limit: cfg.limit_micros(), cfg, start, end, spent: 400_000, reserved: 0, alerted: [None, None] };
    assert_eq!(item.alert_once(t0), None, "40 % is below the threshold");
    item.spent = 500_000;
    let soft = item.alert_once(t0).expect("50 % reaches it");
    assert_eq!((soft.level, soft.spent_micros, soft.limit_micros), (AlertLevel::Soft, 500_000, 1_000_000));
    assert_eq!((soft.period_start_ms, soft.reset_ms), (start, end));
    item.spent = 900_000;
    assert_eq!(item.alert_once(t0), None, "not again in the same period");
    item.spent = 1_000_000;
    assert_eq!(item.alert_once(t0).map(|a| a.level), Some(AlertLevel::Hard), "the limit");
    item.spent = 1_500_000;
    assert_eq!(item.alert_once(t0), None, "the limit once");
    item.roll(0, end + 1);
    item.spent = 600_000;
    assert_eq!(item.alert_once(end + 1).map(|a| a.level), Some(AlertLevel::Soft), "a new period alerts again");
    // Straight past the limit: one alert (hard), not two.
    item.roll(0, end + 86_400_000);
    item.spent = 2_000_000;
    assert_eq!(item.alert_once(end).map(|a| a.level), Some(AlertLevel::Hard));
    assert_eq!(item.alert_once(end), None);
}

#[test]
fn alerts_reach_the_hook_once_and_those_already_raised_are_not_raised_again() {
    let cfg = budget("name = \"w\"\nperiod = \"day\"\nlimit_usd = 1\nsoft_percent = 80\n");
    let t0 = ms(2026, 12, 2, 10, 0);
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let b = Budgets::default();
    let sink = seen.clone();
    b.set_alert_hook(Box::new(move |a| sink.lock().expect("lock").push(a.clone())));
    let seed = |micros| SpendRow {
        client: "c".into(),
        provider: None,
        model: "m".into(),
        model_id: None,
        cost_micros: micros,
    };
    b.configure(std::slice::from_ref(&cfg), 0, t0, &mut |_| vec![seed(700_000)], &|_| None, &[]);
    assert!(b.alerts().is_empty(), "70 %: nothing");
    let key = SpendKey { client: "c", provider: None, requested: "m", model: Some("m") };
    for _ in 0..3 {
        let r = b.reserve(&key, 0, t0);
        b.finish_at(r, &key, 50_000, t0 + 1);
    }
    let got = b.alerts();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].budget.as_str(), got[0].level, got[0].spent_micros), ("w", AlertLevel::Soft, 800_000));
    assert_eq!(got[0].at_ms, t0 + 1);
    assert_eq!(*seen.lock().expect("lock"), got, "the hook saw the same alert, once");
    // An edit (re-seed) keeps the alert: not raised again.
    b.configure(std::slice::from_ref(&cfg), 0, t0 + 2, &mut |_| vec![seed(850_000)], &|_| None, &[]);
    assert_eq!(b.alerts().len(), 1);
    // A new process at 85 % with the ledger's soft alert: listed as it was raised, but not raised
    // again (the hook sees nothing); without it: raised at start.
    let again = Budgets::default();
    let raised_again = std::sync::Arc::new(Mutex::new(Vec::new()));
    let sink = raised_again.clone();
    again.set_alert_hook(Box::new(move |a| sink.lock().expect("lock").push(a.clone())));
    again.configure(std::slice::from_ref(&cfg), 0, t0 + 3, &mut |_| vec![seed(850_000)], &|_| None, &got);
    assert_eq!(again.alerts(), got, "the ledger's alert, with its own time");
    assert!(raised_again.lock().expect("lock").is_empty(), "not raised again");
    let fresh = Budgets::default();
    fresh.configure(std::slice::from_ref(&cfg), 0, t0 + 3, &mut |_| vec![seed(850_000)], &|_| None, &[]);
    assert_eq!(fresh.alerts().iter().map(|a| a.level).collect::<Vec<_>>(), [AlertLevel::Soft]);
    // The limit after a restart: the hard alert, once.
    let r = again.reserve(&key, 0, t0);
    again.finish_at(r, &key, 200_000, t0 + 4);
    let r = again.reserve(&key, 0, t0);
    again.finish_at(r, &key, 200_000, t0 + 5);
    assert_eq!(
        again.alerts().iter().map(|a| (a.level, a.at_ms)).collect::<Vec<_>>(),
        [(AlertLevel::Soft, t0 + 1), (AlertLevel::Hard, t0 + 4)]
    );
    let hooked = raised_again.lock().expect("lock").iter().map(|a| (a.level, a.at_ms)).collect::<Vec<_>>();
    assert_eq!(hooked, [(AlertLevel::Hard, t0 + 4)]);
}
