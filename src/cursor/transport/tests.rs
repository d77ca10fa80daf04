//! Transport: seqno ordering (out of order, duplicates, stale, gaps with a bound, overflow, a
//! run request at a seqno other than 0),
//! the output hub's replay, terminal close and idle heartbeats, and the registry's bound.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::cursor::transport::{Inbox, InboxOptions, Output, Push, Registry, RegistryError, RegistryOptions};

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

#[tokio::test]
async fn inbox_orders_out_of_order_appends_and_drops_duplicates() {
    let inbox = Inbox::new(InboxOptions::default());
    assert_eq!(inbox.push(2, b("two")), Push::Accepted);
    assert_eq!(inbox.push(1, b("one")), Push::Accepted);
    assert_eq!(inbox.push(1, b("one again")), Push::Duplicate);
    assert_eq!(inbox.push(0, b("zero")), Push::Accepted);
    for (n, want) in [(0, "zero"), (1, "one"), (2, "two")] {
        assert_eq!(inbox.next().await, Some((n, b(want))));
    }
    assert_eq!(inbox.push(1, b("late")), Push::Stale);
    inbox.close();
    assert_eq!(inbox.next().await, None);
    assert_eq!(inbox.push(3, b("after")), Push::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_run_request_at_a_later_seqno_starts_at_once_and_orders_from_there() {
    let inbox = Inbox::new(InboxOptions { max_pending: 8, gap_wait: Duration::from_secs(30) });
    let is_start = |d: &[u8]| d.starts_with(b"run");
    assert_eq!(inbox.push(6, b("heartbeat")), Push::Accepted);
    assert_eq!(inbox.push(4, b("older")), Push::Accepted);
    assert_eq!(inbox.push(5, b("run request")), Push::Accepted);
    let started = tokio::time::Instant::now();
    assert_eq!(inbox.first(&is_start).await, Some((5, b("run request"))));
    assert_eq!(started.elapsed(), Duration::ZERO, "no wait for seqno 0");
    assert_eq!(inbox.next().await, Some((6, b("heartbeat"))));
    assert_eq!(inbox.push(0, b("zero")), Push::Stale, "seqnos before the run request are stale");
    assert_eq!(inbox.push(4, b("older")), Push::Stale);

    // Without a start ahead of the gap, seqno 0 is awaited as usual.
    let inbox = Inbox::new(InboxOptions::default());
    assert_eq!(inbox.push(1, b("heartbeat")), Push::Accepted);
    assert_eq!(inbox.push(0, b("run request")), Push::Accepted);
    assert_eq!(inbox.first(&is_start).await, Some((0, b("run request"))));
    assert_eq!(inbox.next().await, Some((1, b("heartbeat"))));
}

#[tokio::test(start_paused = true)]
async fn a_gap_waits_then_is_skipped_after_the_bound() {
    let inbox = Inbox::new(InboxOptions { max_pending: 4, gap_wait: Duration::from_secs(30) });
    assert_eq!(inbox.push(0, b("zero")), Push::Accepted);
    assert_eq!(inbox.push(2, b("two")), Push::Accepted);
    assert_eq!(inbox.next().await, Some((0, b("zero"))));
    let started = tokio::time::Instant::now();
    assert_eq!(inbox.next().await, Some((2, b("two"))), "seqno 1 never came: skipped");
    assert!(started.elapsed() >= Duration::from_secs(29), "the gap waited for its bound");
}

#[tokio::test(start_paused = true)]
async fn a_gap_filled_in_time_delivers_in_order() {
    let inbox = Arc::new(Inbox::new(InboxOptions::default()));
    assert_eq!(inbox.push(1, b("one")), Push::Accepted);
    let i = inbox.clone();
    let filler = async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        i.push(0, b("zero"))
    };
    let (first, pushed) = tokio::join!(inbox.next(), filler);
    assert_eq!(pushed, Push::Accepted);
    assert_eq!(first, Some((0, b("zero"))));
    assert_eq!(inbox.next().await, Some((1, b("one"))));
}

#[test]
fn inbox_overflow_is_refused() {
    let inbox = Inbox::new(InboxOptions { max_pending: 2, gap_wait: Duration::from_secs(1) });
    assert_eq!(inbox.push(5, b("a")), Push::Accepted);
    assert_eq!(inbox.push(6, b("b")), Push::Accepted);
    assert_eq!(inbox.push(7, b("c")), Push::Overflow);
}

#[tokio::test]
async fn output_replays_to_a_resubscriber_and_ends_after_the_terminal_frame() {
    let hub = Arc::new(Output::new(1 << 20));
    let hb = b("hb");
    let mut first = hub.subscribe(Duration::from_secs(5), hb.clone());
    assert!(hub.publish(b("a")));
    assert_eq!(first.next().await, Some(b("a")));
    drop(first);
    assert!(hub.publish(b("b")));
    assert!(hub.finish(b("end")));
    assert!(!hub.publish(b("late")), "nothing follows the terminal frame");
    assert!(!hub.finish(b("end2")));
    let mut again = hub.subscribe(Duration::from_secs(5), hb);
    let mut got = Vec::new();
    while let Some(f) = again.next().await {
        got.push(f);
    }
    assert_eq!(got, vec![b("a"), b("b"), b("end")]);
}

#[tokio::test(start_paused = true)]
async fn idle_subscribers_get_heartbeats() {
    let hub = Arc::new(Output::new(1 << 20));
    let mut sub = hub.subscribe(Duration::from_secs(5), b("hb"));
    let started = tokio::time::Instant::now();
    assert_eq!(sub.next().await, Some(b("hb")));
    assert!(started.elapsed() >= Duration::from_secs(5));
    hub.finish(b("end"));
    assert_eq!(sub.next().await, Some(b("end")));
    assert_eq!(sub.next().await, None);
}

#[tokio::test]
async fn replay_buffer_is_bounded() {
    let hub = Arc::new(Output::new(4));
    for f in ["aa", "bb", "cc"] {
        hub.publish(b(f));
    }
    hub.finish(b("dd"));
    let mut sub = hub.subscribe(Duration::from_secs(5), b("hb"));
    assert_eq!(sub.next().await, Some(b("cc")));
    assert_eq!(sub.next().await, Some(b("dd")));
    assert_eq!(sub.next().await, None);
    assert_eq!(hub.published(), 4);
}

#[test]
fn registry_is_bounded_and_returns_the_same_transport() {
    let reg = Registry::new(RegistryOptions { max_transports: 1, ..RegistryOptions::default() });
    let root = CancellationToken::new();
    let (a, created) = reg.get_or_create("r1", &root).expect("first");
    assert!(created);
    let (again, created) = reg.get_or_create("r1", &root).expect("same");
    assert!(!created);
    assert!(Arc::ptr_eq(&a, &again));
    assert_eq!(reg.get_or_create("r2", &root).err(), Some(RegistryError::Full));
    root.cancel();
    assert!(a.cancel.is_cancelled(), "a transport's token is a child of the engine's");
    reg.remove("r1");
    assert!(reg.is_empty());
}
