//! Unit tests of the proxy: allowlist matching, request heads, hop-by-hop headers, routing.

use http::{HeaderMap, HeaderValue};

use crate::config::RoutingMode;
use crate::proxy::allowlist::InterceptList;
use crate::proxy::listener::{HeadError, connect_target, parse_head};
use crate::proxy::upstream::strip_hop_by_hop;
use crate::proxy::{ModeSwitch, always_upstream};

#[test]
fn allowlist_matches_on_label_boundaries_only() {
    let list = InterceptList::new(["Cursor.sh", ".cursor.com", "cursor.sh"]);
    assert_eq!(list.domains(), ["cursor.com", "cursor.sh"]);
    for yes in [
        "cursor.sh",
        "api2.cursor.sh",
        "agentn.global.api5.cursor.sh",
        "API2.CURSOR.SH",
        "cursor.com.",
        "www.cursor.com",
    ] {
        assert!(list.matches(yes), "{yes}");
    }
    for no in [
        "evilcursor.sh",
        "cursor.sh.evil.com",
        "cursor.shx",
        "api2.cursor.sh.example",
        "example.com",
        "127.0.0.1",
        "::1",
        "",
        "a..cursor.sh",
        "*.cursor.sh",
        "api2.cursor.sh:443",
        "xn--cursor.sh_",
    ] {
        assert!(!list.matches(no), "{no}");
    }
}

#[test]
fn allowlist_and_name_constraints_come_from_one_list() {
    let list = InterceptList::new(["cursor.sh", "cursor.com"]);
    let nc = list.name_constraints();
    let dns: Vec<String> = nc
        .permitted_subtrees
        .iter()
        .filter_map(|s| match s {
            rcgen::GeneralSubtree::DnsName(d) => Some(d.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(dns, list.domains());
}

#[test]
fn request_heads_parse_or_fail_cleanly() {
    let h =
        parse_head(b"CONNECT api2.cursor.sh:443 HTTP/1.1\r\nHost: api2.cursor.sh:443\r\n\r\n\x16\x03").expect("head");
    assert_eq!((h.method.as_str(), h.target.as_str()), ("CONNECT", "api2.cursor.sh:443"));
    assert_eq!(h.len, 65, "the head ends after the blank line; the ClientHello bytes stay");
    assert_eq!(parse_head(b"CONNECT api2.cursor.sh:443 HTTP/1.1\r\n"), Err(HeadError::Incomplete));
    assert!(matches!(parse_head(b"\x16\x03\x01\x00\x00garbage\r\n\r\n"), Err(HeadError::Malformed(_))));
    assert_eq!(parse_head(&vec![b'a'; 20_000]), Err(HeadError::TooLarge));
}

#[test]
fn connect_targets_need_host_and_port() {
    assert_eq!(connect_target("API2.cursor.sh:443"), Some(("api2.cursor.sh".into(), 443)));
    assert_eq!(connect_target("[::1]:8443"), Some(("::1".into(), 8443)));
    assert_eq!(connect_target("api2.cursor.sh"), None);
    assert_eq!(connect_target("user@api2.cursor.sh:443"), None);
    assert_eq!(connect_target("/path"), None);
}

#[test]
fn hop_by_hop_headers_are_dropped_and_end_to_end_kept() {
    let mut h = HeaderMap::new();
    for (k, v) in [
        ("connection", "keep-alive, X-Foo"),
        ("x-foo", "1"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("te", "gzip, trailers"),
        ("upgrade", "h2c"),
        ("transfer-encoding", "chunked"),
        ("authorization", "Bearer t"),
        ("x-cursor-checksum", "abc"),
    ] {
        h.append(k, HeaderValue::from_static(v));
    }
    strip_hop_by_hop(&mut h);
    let mut names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["authorization", "te", "x-cursor-checksum"]);
    assert_eq!(h["te"], "trailers");
    let mut h = HeaderMap::new();
    h.insert("te", HeaderValue::from_static("gzip"));
    strip_hop_by_hop(&mut h);
    assert!(h.is_empty());
}

#[test]
fn account_calls_always_go_upstream() {
    for p in [
        "/auth/full_stripe_profile",
        "/aiserver.v1.AuthService/GetEmail",
        "/aiserver.v1.DashboardService/GetTeams",
        "/oauth/token",
    ] {
        assert!(always_upstream(p), "{p}");
    }
    for p in ["/aiserver.v1.AiService/AvailableModels", "/agent.v1.AgentService/Run", "/authx"] {
        assert!(!always_upstream(p), "{p}");
    }
}

#[test]
fn mode_switch_is_shared() {
    let a = ModeSwitch::new(RoutingMode::Hybrid);
    let b = a.clone();
    for m in [RoutingMode::Local, RoutingMode::Upstream, RoutingMode::Hybrid] {
        a.set(m);
        assert_eq!(b.get(), m);
    }
}

#[test]
fn allowlist_keeps_only_cursor_domains_and_reads_wildcards() {
    let list =
        InterceptList::new(["*.cursor.sh", "com", "co.uk", "github.com", "*.sh", "api2.cursor.com", "evilcursor.sh"]);
    assert_eq!(list.domains(), ["api2.cursor.com", "cursor.sh"]);
    assert!(list.matches("api2.cursor.sh"));
    assert!(!list.matches("github.com"));
    assert!(!list.matches("example.com"));
    assert!(!list.matches("www.cursor.com"), "only what the list names");
    let constraints = list.name_constraints();
    assert_eq!(constraints.permitted_subtrees.len(), 2, "the CA's name constraints never name another site");
}
