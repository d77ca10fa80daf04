//! Cooldown: threshold within the window, expiry, success resets.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::RoutingConfig;
use crate::provider::health::HealthBook;

fn book() -> HealthBook {
    HealthBook::new(RoutingConfig { cooldown_failures: 3, cooldown_window: 1_000, cooldown: 500 })
}

#[test]
fn three_failures_in_the_window_start_a_cooldown_that_expires() {
    let h = book();
    let t0 = Instant::now();
    h.failure("p", "boom", t0);
    h.failure("p", "boom", t0 + Duration::from_millis(100));
    assert!(!h.cooling("p", t0 + Duration::from_millis(100)));
    h.failure("p", "boom", t0 + Duration::from_millis(200));
    assert!(h.cooling("p", t0 + Duration::from_millis(300)));
    let rows = h.snapshot(&["p".into(), "q".into()], t0 + Duration::from_millis(300));
    assert!(rows[0].cooling_down);
    assert_eq!(rows[0].cooldown_remaining_ms, 400);
    assert_eq!(rows[0].total_failures, 3);
    assert_eq!(rows[0].last_error.as_deref(), Some("boom"));
    assert!(!rows[1].cooling_down);
    assert!(!h.cooling("p", t0 + Duration::from_millis(701)), "the cooldown ends");
}

#[test]
fn failures_outside_the_window_do_not_count() {
    let h = book();
    let t0 = Instant::now();
    h.failure("p", "x", t0);
    h.failure("p", "x", t0 + Duration::from_millis(600));
    h.failure("p", "x", t0 + Duration::from_millis(1_200));
    assert!(!h.cooling("p", t0 + Duration::from_millis(1_200)));
    assert_eq!(h.snapshot(&["p".into()], t0 + Duration::from_millis(1_200))[0].recent_failures, 2);
}

#[test]
fn a_success_resets_the_count() {
    let h = book();
    let t0 = Instant::now();
    h.failure("p", "x", t0);
    h.failure("p", "x", t0);
    h.success("p");
    h.failure("p", "x", t0);
    assert!(!h.cooling("p", t0));
    assert_eq!(h.snapshot(&["p".into()], t0)[0].total_successes, 1);
}
