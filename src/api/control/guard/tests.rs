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
