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
    b.configure(&[cfg], 0, t0, &mut |_| vec![seed.clone()], &|_| None);
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
    b.configure(&[cfg], 0, now, &mut |_| vec![seed.clone()], &|_| None);
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
fn the_soft_threshold_is_logged_once_per_period() {
    let cfg = budget("name = \"w\"\nperiod = \"day\"\nlimit_usd = 1\nsoft_percent = 50\n");
    let t0 = ms(2026, 12, 2, 10, 0);
    let (start, end) = period_bounds(BudgetPeriod::Day, 0, t0);
    let mut item = Item { limit: cfg.limit_micros(), cfg, start, end, spent: 400_000, reserved: 0, warned: None };
    assert!(!item.warn_once(), "40 % is below the threshold");
    item.spent = 500_000;
    assert!(item.warn_once(), "50 % reaches it: logged");
    item.spent = 900_000;
    assert!(!item.warn_once(), "not again in the same period");
    item.roll(0, end + 1);
    item.spent = 600_000;
    assert!(item.warn_once(), "a new period warns again");
}
