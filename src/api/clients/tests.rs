//! The client's session id from its headers: Claude Code's and Codex's header names, precedence,
//! and values that are not session ids.

use axum::http::{HeaderMap, HeaderValue};

use crate::api::clients::session;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).expect("header value"));
    }
    h
}

#[test]
fn claude_code_and_codex_sessions_are_read() {
    let id = "7f3c2a9e-0d4b-4c41-9d7e-2b8f0e6a1c55";
    assert_eq!(session(&headers(&[("x-claude-code-session-id", id)])).as_deref(), Some(id));
    assert_eq!(session(&headers(&[("session_id", id)])).as_deref(), Some(id));
    // Older Codex releases sent `conversation_id` (same value).
    assert_eq!(session(&headers(&[("conversation_id", id)])).as_deref(), Some(id));
    // Claude Code's header first, then Codex's current one.
    let both = headers(&[("conversation_id", "old"), ("session_id", "new"), ("x-claude-code-session-id", "cc")]);
    assert_eq!(session(&both).as_deref(), Some("cc"));
    assert_eq!(session(&headers(&[("conversation_id", "old"), ("session_id", "new")])).as_deref(), Some("new"));
}

#[test]
fn values_that_are_not_session_ids_are_ignored() {
    assert_eq!(session(&HeaderMap::new()), None);
    for bad in ["", "   ", "has space", &"x".repeat(129)] {
        assert_eq!(session(&headers(&[("x-claude-code-session-id", bad)])), None, "{bad:?}");
    }
    // A bad first header does not hide a good later one.
    let h = headers(&[("x-claude-code-session-id", "has space"), ("session_id", "ok-1")]);
    assert_eq!(session(&h).as_deref(), Some("ok-1"));
    assert_eq!(session(&headers(&[("session_id", &"y".repeat(128))])).map(|s| s.len()), Some(128));
}
