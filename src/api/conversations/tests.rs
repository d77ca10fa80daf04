//! Tests of the conversation LRU: lookups, eviction by count and by bytes, replacement.

use crate::api::conversations::Conversations;
use crate::model::{Message, Role};

fn conv(text: &str) -> Vec<Message> {
    vec![Message::text(Role::User, text), Message::text(Role::Assistant, "ok")]
}

#[test]
fn keeps_and_returns_conversations() {
    let c = Conversations::new(4, 1 << 20);
    assert!(c.get("resp_1").is_none());
    c.put("resp_1".into(), conv("hi"));
    let got = c.get("resp_1").expect("kept");
    assert_eq!(got.len(), 2);
    assert_eq!(got[0], Message::text(Role::User, "hi"));
    assert_eq!(c.len(), 1);
}

#[test]
fn evicts_the_least_recently_used_by_count() {
    let c = Conversations::new(2, 1 << 20);
    c.put("a".into(), conv("a"));
    c.put("b".into(), conv("b"));
    assert!(c.get("a").is_some(), "touch a: b is now the oldest");
    c.put("c".into(), conv("c"));
    assert!(c.get("a").is_some());
    assert!(c.get("b").is_none(), "b was evicted");
    assert!(c.get("c").is_some());
    assert_eq!(c.len(), 2);
}

#[test]
fn evicts_by_bytes_and_refuses_what_never_fits() {
    let c = Conversations::new(100, 2_000);
    c.put("a".into(), conv(&"x".repeat(1200)));
    c.put("b".into(), conv(&"y".repeat(1200)));
    assert!(c.get("a").is_none(), "a made room for b");
    assert!(c.get("b").is_some());
    c.put("huge".into(), conv(&"z".repeat(10_000)));
    assert!(c.get("huge").is_none(), "larger than the whole budget");
    assert!(c.get("b").is_some(), "a refused entry evicts nothing");
}

#[test]
fn putting_an_id_again_replaces_it() {
    let c = Conversations::new(2, 1 << 20);
    c.put("a".into(), conv("one"));
    c.put("a".into(), conv("two"));
    assert_eq!(c.len(), 1);
    assert_eq!(c.get("a").expect("kept")[0], Message::text(Role::User, "two"));
}
