//! Unit tests of the dashboard's nonces and sessions (the HTTP flow is in `tests/it/local_endpoints.rs`).

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};

use crate::api::control::session::Sessions;

fn cookie(value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::COOKIE, HeaderValue::from_str(value).expect("cookie"));
    h
}

#[test]
fn a_nonce_is_128_random_bits_and_works_once() {
    let s = Sessions::new(4937);
    let a = s.mint_nonce();
    let b = s.mint_nonce();
    assert_eq!(a.len(), 32, "128 bits in hex");
    assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(a, b);
    let session = s.redeem(&a).expect("first use");
    assert_eq!(session.len(), 64, "256 bits in hex");
    assert_eq!(s.redeem(&a), None, "a nonce never works twice");
    assert!(s.redeem(&b).is_some(), "another nonce is independent");
    assert_eq!(s.redeem("00000000000000000000000000000000"), None);
    assert_eq!(s.redeem(""), None);
}

#[test]
fn a_nonce_expires() {
    let s = Sessions::with_lifetimes(4937, Duration::from_millis(50), Duration::from_secs(60));
    let n = s.mint_nonce();
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(s.redeem(&n), None, "expired");
}

#[test]
fn the_cookie_is_http_only_strict_and_names_the_port() {
    let s = Sessions::new(4937);
    let id = s.redeem(&s.mint_nonce()).expect("session");
    assert_eq!(s.set_cookie(&id), format!("kh_session_4937={id}; HttpOnly; SameSite=Strict; Path=/"));
    assert!(s.verify(&cookie(&format!("kh_session_4937={id}"))));
    assert!(s.verify(&cookie(&format!("theme=dark; kh_session_4937={id}; other=1"))), "among other cookies");
    assert!(!s.verify(&cookie(&format!("kh_session_4938={id}"))), "another port's cookie");
    assert!(!s.verify(&cookie("kh_session_4937=0123")), "an unknown session");
    assert!(!s.verify(&HeaderMap::new()), "no cookie");
    let other = Sessions::new(4937);
    assert!(!other.verify(&cookie(&format!("kh_session_4937={id}"))), "another engine's session");
}

#[test]
fn a_session_ends_after_its_idle_time() {
    let s = Sessions::with_lifetimes(1, Duration::from_secs(60), Duration::from_millis(80));
    let id = s.redeem(&s.mint_nonce()).expect("session");
    let h = cookie(&format!("kh_session_1={id}"));
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(40));
        assert!(s.verify(&h), "each use refreshes the idle timer");
    }
    std::thread::sleep(Duration::from_millis(120));
    assert!(!s.verify(&h), "idle too long");
}

#[test]
fn outstanding_nonces_are_bounded() {
    let s = Sessions::new(1);
    let first = s.mint_nonce();
    for _ in 0..40 {
        s.mint_nonce();
    }
    assert_eq!(s.redeem(&first), None, "the oldest nonce made room");
}
