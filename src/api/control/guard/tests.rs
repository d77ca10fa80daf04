//! Unit tests of the control guard's decisions (the HTTP behaviour is in `tests/it/control.rs`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;

use crate::api::GuardConfig;
use crate::api::control::guard::{ControlGuard, Refusal};
use crate::control::token::ControlToken;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn guard() -> ControlGuard {
    let cfg = GuardConfig::for_listener("127.0.0.1:4937".parse().expect("addr"));
    ControlGuard::new(&cfg, Arc::new(ControlToken::from_value(TOKEN)))
}

fn req(method: &str, headers: &[(&str, &str)]) -> Request {
    let mut b = Request::builder().method(method).uri("/api/providers");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::empty()).expect("request")
}

#[test]
fn the_guard_checks_host_origin_token_and_content_type_in_that_order() {
    let g = guard();
    let auth = format!("Bearer {TOKEN}");
    let good = [("host", "127.0.0.1:4937"), ("authorization", auth.as_str()), ("content-type", "application/json")];
    assert_eq!(g.admit(&req("POST", &good)), Ok(()));
    assert_eq!(g.admit(&req("GET", &good[..2])), Ok(()), "GET needs no content type");
    let with = |extra: (&'static str, &'static str)| {
        let mut h: Vec<(&str, &str)> = good.iter().copied().filter(|(k, _)| *k != extra.0).collect();
        h.push(extra);
        g.admit(&req("POST", &h))
    };
    assert_eq!(with(("host", "localhost:4937")), Ok(()));
    assert_eq!(with(("host", "[::1]:4937")), Ok(()));
    assert_eq!(with(("origin", "http://localhost:4937")), Ok(()));
    for host in ["evil.example:4937", "127.0.0.1.nip.io:4937", "0.0.0.0:4937", "127.0.0.1:4938", "127.0.0.1"] {
        assert_eq!(with(("host", host)), Err(Refusal::Host), "{host}");
    }
    for origin in ["http://evil.example", "null", "http://localhost.evil.com:4937", "http://127.0.0.1:4937.evil.com"] {
        assert_eq!(with(("origin", origin)), Err(Refusal::Origin), "{origin}");
    }
    assert_eq!(with(("origin", "https://127.0.0.1:4937")), Err(Refusal::Origin), "scheme matters");
    assert_eq!(with(("authorization", "Bearer nope")), Err(Refusal::Token));
    assert_eq!(with(("authorization", TOKEN)), Err(Refusal::Token), "the Bearer scheme is required");
    assert_eq!(with(("content-type", "text/plain")), Err(Refusal::ContentType));
    assert_eq!(g.admit(&req("DELETE", &good[..2])), Err(Refusal::ContentType), "every method but GET/HEAD");
    assert_eq!(g.admit(&req("POST", &[("host", "evil.example"), ("content-type", "text/plain")])), Err(Refusal::Host));
}

#[test]
fn a_session_cookie_counts_only_from_the_page_itself() {
    use crate::api::control::session::Sessions;
    let sessions = Arc::new(Sessions::new(4937));
    let g = guard().with_sessions(sessions.clone());
    let id = sessions.redeem(&sessions.mint_nonce()).expect("session");
    let cookie = format!("kh_session_4937={id}");
    let base = [("host", "127.0.0.1:4937"), ("cookie", cookie.as_str())];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut h: Vec<(&str, &str)> = base.to_vec();
        h.extend_from_slice(extra);
        g.admit(&req("GET", &h))
    };
    assert_eq!(with(&[("sec-fetch-site", "same-origin")]), Ok(()));
    assert_eq!(with(&[("origin", "http://127.0.0.1:4937")]), Ok(()));
    assert_eq!(with(&[("x-keyhaven-ui", "1")]), Ok(()), "the UI's own header (needs a preflight cross-origin)");
    assert_eq!(with(&[]), Err(Refusal::Origin), "no proof the page asks");
    assert_eq!(with(&[("sec-fetch-site", "same-site")]), Err(Refusal::Origin), "another port of 127.0.0.1");
    assert_eq!(with(&[("origin", "http://127.0.0.1:8080")]), Err(Refusal::Origin));
    let forged = [("host", "127.0.0.1:4937"), ("cookie", "kh_session_4937=abcd"), ("sec-fetch-site", "same-origin")];
    assert_eq!(g.admit(&req("GET", &forged)), Err(Refusal::Token));
    let plain = guard();
    let h = [("host", "127.0.0.1:4937"), ("cookie", cookie.as_str()), ("sec-fetch-site", "same-origin")];
    assert_eq!(plain.admit(&req("GET", &h)), Err(Refusal::Token), "a guard without sessions takes no cookie");
    let post = [("host", "127.0.0.1:4937"), ("cookie", cookie.as_str()), ("origin", "http://localhost:4937")];
    assert_eq!(g.admit(&req("POST", &post)), Err(Refusal::ContentType), "JSON only, with a cookie too");
}

#[test]
fn only_loopback_peers_reach_the_control_api() {
    use axum::extract::ConnectInfo;
    let g = guard();
    let auth = format!("Bearer {TOKEN}");
    let from = |peer: &str| {
        let mut r = req("GET", &[("host", "127.0.0.1:4937"), ("authorization", auth.as_str())]);
        r.extensions_mut().insert(ConnectInfo(peer.parse::<std::net::SocketAddr>().expect("peer")));
        g.admit(&r)
    };
    assert_eq!(from("127.0.0.1:50000"), Ok(()));
    assert_eq!(from("[::1]:50000"), Ok(()));
    assert_eq!(from("[::ffff:127.0.0.1]:50000"), Ok(()), "IPv4 loopback on a dual-stack listener");
    assert_eq!(from("192.168.1.20:50000"), Err(Refusal::Remote), "a LAN peer, even with the token and a local Host");
    assert_eq!(from("[fe80::1]:50000"), Err(Refusal::Remote));
}
