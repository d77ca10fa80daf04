//! The fetcher and both search providers against local HTTP servers on port 0: HTML conversion,
//! redirects (followed, and refused past the limit), the size cap, HTTP errors, schemes and
//! content types refused; provider success, 401, 429, 5xx and malformed JSON; the key sent in
//! its header and never in a message.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use secrecy::SecretString;

use crate::config::{KeyRef, WebConfig, WebFetch, WebSearch};
use crate::search::convert::{html_to_markdown, strip_tags};
use std::net::IpAddr;

use crate::search::http::{Lookup, USER_AGENT, WebOptions, api_client, special_range};
use crate::search::{BraveSearch, HttpFetcher, PageFetcher, SearchError, SearchProvider, Searxng, WebTools, render};
use crate::secrets::{Keyring, MemoryKeyring, Secrets};

const KEY: &str = "BSA-canary-key-0123456789";

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

fn opts(max_bytes: usize) -> WebOptions {
    WebOptions { timeout: Duration::from_secs(10), max_bytes }
}

fn fetcher(max_bytes: usize) -> HttpFetcher {
    HttpFetcher::new(&opts(max_bytes))
}

/// A fetcher whose names resolve through a fixed table (no DNS in tests).
fn fetcher_with(names: &[(&str, &str)]) -> HttpFetcher {
    let table: std::collections::HashMap<String, IpAddr> =
        names.iter().map(|(n, ip)| ((*n).to_owned(), ip.parse().expect("ip"))).collect();
    let lookup: Lookup = Arc::new(move |host: String| {
        let found = table.get(&host).copied();
        Box::pin(async move {
            found.map(|ip| vec![ip]).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "unknown name"))
        })
    });
    HttpFetcher::with_lookup(&opts(1 << 20), lookup)
}

/// A server that counts its requests and redirects every one to `to` (or answers a page).
async fn counting(to: Option<String>) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    let app = Router::new().fallback(move || {
        let h = h.clone();
        let to = to.clone();
        async move {
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match to {
                Some(to) => Redirect::temporary(&to).into_response(),
                None => ([(header::CONTENT_TYPE, "text/plain")], "internal secret page").into_response(),
            }
        }
    });
    (serve(app).await, hits)
}

fn port(url: &str) -> u16 {
    reqwest::Url::parse(url).expect("url").port().expect("port")
}

#[tokio::test]
async fn the_approved_loopback_host_is_fetched() {
    // Tests run against local servers, so the approved URL is an explicit 127.0.0.1 one.
    let (inner, hits) = counting(None).await;
    let page = fetcher(1 << 20).fetch(&format!("{inner}/x")).await.expect("approved host");
    assert_eq!(page.markdown, "internal secret page");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_redirect_to_loopback_is_refused_unless_it_is_the_approved_host() {
    let (inner, inner_hits) = counting(None).await;
    // approved.test is the approved host (it resolves to the test server); it redirects to 127.0.0.1.
    let (outer, outer_hits) = counting(Some(format!("{inner}/x"))).await;
    let f = fetcher_with(&[("approved.test", "127.0.0.1")]);
    let err = f.fetch(&format!("http://approved.test:{}/start", port(&outer))).await.expect_err("refused");
    let m = err.to_string();
    assert!(m.contains("127.0.0.1 is a loopback address"), "{m}");
    assert!(m.contains("approved exactly"), "{m}");
    assert_eq!(outer_hits.load(std::sync::atomic::Ordering::SeqCst), 1, "the approved host was asked");
    assert_eq!(inner_hits.load(std::sync::atomic::Ordering::SeqCst), 0, "the loopback target saw nothing");

    // A name that resolves to loopback, reached by a redirect from the approved host: refused too.
    let (outer2, _) = counting(Some(format!("http://sneaky.test:{}/x", port(&inner)))).await;
    let f = fetcher_with(&[("approved.test", "127.0.0.1"), ("sneaky.test", "127.0.0.1")]);
    let err = f.fetch(&format!("http://approved.test:{}/start", port(&outer2))).await.expect_err("refused");
    assert!(err.to_string().contains("sneaky.test resolves to 127.0.0.1, which is a loopback address"), "{err}");
    assert_eq!(inner_hits.load(std::sync::atomic::Ordering::SeqCst), 0);

    // The same redirect within the approved host is followed.
    let (outer3, _) = counting(Some(format!("http://approved.test:{}/x", port(&inner)))).await;
    let page = f.fetch(&format!("http://approved.test:{}/start", port(&outer3))).await.expect("same host");
    assert_eq!(page.markdown, "internal secret page");
    assert_eq!(page.url, format!("http://approved.test:{}/x", port(&inner)), "the final URL is reported");
}

#[tokio::test]
async fn names_resolving_to_private_or_metadata_addresses_are_refused() {
    for (to, needle) in [
        ("http://intranet.test/", "intranet.test resolves to 10.1.2.3, which is a private address"),
        ("http://metadata.test/latest/meta-data/", "resolves to 169.254.169.254, which is a link-local address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("http://[fd00::1]/", "[fd00::1] is a unique-local address"),
        ("http://v6.test/", "v6.test resolves to ::ffff:192.168.1.1, which is a private address"),
    ] {
        let (outer, _) = counting(Some(to.to_owned())).await;
        let f = fetcher_with(&[
            ("approved.test", "127.0.0.1"),
            ("intranet.test", "10.1.2.3"),
            ("metadata.test", "169.254.169.254"),
            ("v6.test", "::ffff:192.168.1.1"),
        ]);
        let err = f.fetch(&format!("http://approved.test:{}/", port(&outer))).await.expect_err(to);
        assert!(err.to_string().contains(needle), "{to}: {err}");
    }
}

#[test]
fn special_ranges_are_named() {
    let range = |ip: &str| special_range(ip.parse().expect("ip"));
    for (ip, want) in [
        ("127.0.0.1", Some("loopback")),
        ("127.255.0.9", Some("loopback")),
        ("10.0.0.1", Some("private")),
        ("172.16.5.4", Some("private")),
        ("172.32.0.1", None),
        ("192.168.0.1", Some("private")),
        ("169.254.169.254", Some("link-local")),
        ("100.64.0.1", Some("shared (carrier-grade NAT)")),
        ("0.0.0.0", Some("unspecified")),
        ("224.0.0.1", Some("multicast or reserved")),
        ("255.255.255.255", Some("multicast or reserved")),
        ("8.8.8.8", None),
        ("93.184.216.34", None),
        ("::1", Some("loopback")),
        ("::", Some("unspecified")),
        ("fe80::1", Some("link-local")),
        ("fd12:3456::1", Some("unique-local")),
        ("::ffff:127.0.0.1", Some("loopback")),
        ("64:ff9b::a9fe:a9fe", Some("link-local")),
        ("2001:db8::1", Some("documentation")),
        ("2606:4700::1111", None),
    ] {
        assert_eq!(range(ip), want, "{ip}");
    }
}

const PAGE: &str = "<!doctype html><html><head><title>Keyhaven &amp; the web</title>\
    <style>body { color: red }</style><script>alert('x')</script></head>\
    <body><h1>Hello</h1><p>Some <b>bold</b> text and a <a href=\"https://example.org/\">link</a>.</p>\
    <ul><li>one</li><li>two</li></ul></body></html>";

async fn site() -> String {
    let ua = |h: HeaderMap| h.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let app = Router::new()
        .route("/page", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE) }))
        .route("/ua", get(move |h: HeaderMap| async move { ([(header::CONTENT_TYPE, "text/plain")], ua(h)) }))
        .route("/redirect", get(|| async { Redirect::temporary("/page") }))
        .route(
            "/loop/{n}",
            get(|uri: Uri| async move {
                let n: u32 = uri.path().rsplit('/').next().and_then(|n| n.parse().ok()).unwrap_or(0);
                Redirect::temporary(&format!("/loop/{}", n + 1))
            }),
        )
        .route("/to-ftp", get(|| async { Redirect::temporary("ftp://example.org/file") }))
        .route("/big", get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "abcdefghij".repeat(10_000)) }))
        .route("/json", get(|| async { ([(header::CONTENT_TYPE, "application/json")], r#"{"a":[1,2]}"#) }))
        .route("/missing", get(|| async { (StatusCode::NOT_FOUND, "nothing here") }))
        .route(
            "/image",
            get(|| async { ([(header::CONTENT_TYPE, "image/png")], vec![0x89u8, b'P', b'N', b'G', 0, 0]) }),
        )
        .route("/untyped-binary", get(|| async { Response::new(axum::body::Body::from(vec![1u8, 0, 2, 0, 3])) }))
        .route(
            "/untyped-html",
            get(|| async { Response::new(axum::body::Body::from("<html><body><p>hi</p></body></html>")) }),
        );
    serve(app).await
}

#[tokio::test]
async fn html_becomes_markdown_without_scripts_or_styles() {
    let base = site().await;
    let page = fetcher(1 << 20).fetch(&format!("{base}/page")).await.expect("page");
    assert!(!page.truncated);
    assert_eq!(page.url, format!("{base}/page"));
    let md = &page.markdown;
    assert!(md.starts_with("# Keyhaven & the web\n"), "{md}");
    assert!(md.contains("Hello") && md.contains("**bold**"), "{md}");
    assert!(md.contains("[link](https://example.org/)"), "{md}");
    assert!(md.contains("one") && md.contains("two"), "{md}");
    assert!(!md.contains("alert") && !md.contains("color: red") && !md.contains('<'), "{md}");
}

#[tokio::test]
async fn redirects_are_followed_up_to_the_limit_and_only_to_http() {
    let base = site().await;
    let f = fetcher(1 << 20);
    let page = f.fetch(&format!("{base}/redirect")).await.expect("redirected");
    assert_eq!(page.url, format!("{base}/page"), "the final URL is reported");
    assert!(page.markdown.contains("Hello"));
    let err = f.fetch(&format!("{base}/loop/0")).await.expect_err("endless redirects");
    let SearchError::Fetch(m) = err else { panic!("a fetch error") };
    assert!(m.contains("more than 5 redirects"), "{m}");
    let err = f.fetch(&format!("{base}/to-ftp")).await.expect_err("ftp redirect");
    assert!(err.to_string().contains("`ftp:`"), "{err}");
}

#[tokio::test]
async fn long_bodies_are_cut_at_the_cap_and_marked() {
    let base = site().await;
    let page = fetcher(1000).fetch(&format!("{base}/big")).await.expect("big");
    assert!(page.truncated);
    assert_eq!(page.markdown.len(), 1000);
    let page = fetcher(1 << 20).fetch(&format!("{base}/big")).await.expect("whole");
    assert!(!page.truncated);
    assert_eq!(page.markdown.len(), 100_000);
}

#[tokio::test]
async fn http_errors_schemes_and_binary_types_are_refused_clearly() {
    let base = site().await;
    let f = fetcher(1 << 20);
    let err = f.fetch(&format!("{base}/missing")).await.expect_err("404");
    assert_eq!(err, SearchError::Fetch(format!("{base}/missing returned HTTP 404 Not Found")));
    let err = f.fetch("file:///etc/passwd").await.expect_err("file scheme");
    assert!(err.to_string().contains("only http and https"), "{err}");
    let err = f.fetch("not a url").await.expect_err("garbage");
    assert!(err.to_string().contains("is not a URL"), "{err}");
    let err = f.fetch(&format!("{base}/image")).await.expect_err("image");
    assert!(err.to_string().contains("`image/png`") && err.to_string().contains("only HTML, text and JSON"), "{err}");
    let err = f.fetch(&format!("{base}/untyped-binary")).await.expect_err("binary");
    assert!(err.to_string().contains("not text"), "{err}");
    let page = f.fetch(&format!("{base}/untyped-html")).await.expect("sniffed html");
    assert_eq!(page.markdown, "hi");
    let page = f.fetch(&format!("{base}/json")).await.expect("json");
    assert_eq!(page.markdown, r#"{"a":[1,2]}"#);
    let page = f.fetch(&format!("{base}/ua")).await.expect("ua");
    assert_eq!(page.markdown, USER_AGENT);
    assert!(USER_AGENT.starts_with("Keyhaven/"));
}

#[tokio::test]
async fn credentials_in_a_url_never_reach_a_message() {
    let base = site().await;
    let with_creds = base.replacen("http://", "http://user:hunter2secret@", 1);
    let err = fetcher(1 << 20).fetch(&format!("{with_creds}/missing")).await.expect_err("404");
    assert!(!err.to_string().contains("hunter2secret"), "{err}");
    let dead = "http://user:hunter2secret@127.0.0.1:9/x";
    let err = fetcher(1 << 20).fetch(dead).await.expect_err("connect refused");
    assert!(err.to_string().contains("cannot connect") && !err.to_string().contains("hunter2secret"), "{err}");
}

/// A search API that gives one scripted answer and records what it was asked.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, HeaderMap)>>>);

async fn api(status: u16, body: &'static str) -> (String, Seen) {
    let seen = Seen::default();
    let s = seen.clone();
    let handler = move |uri: Uri, headers: HeaderMap| {
        let s = s.clone();
        async move {
            s.0.lock().expect("seen").push((uri.to_string(), headers));
            let status = StatusCode::from_u16(status).expect("status");
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
    };
    let app = Router::new().fallback(handler);
    (serve(app).await, seen)
}

fn secrets_with_key() -> Secrets {
    let kr = Arc::new(MemoryKeyring::default());
    kr.set("brave-search", &SecretString::from(KEY)).expect("set");
    Secrets::new(kr, Arc::new(|_| None))
}

fn brave(base: &str, secrets: Secrets) -> BraveSearch {
    let o = opts(1 << 20);
    BraveSearch::new(api_client(&o).expect("client"), base, secrets, KeyRef::Keyring("brave-search".into()), o.timeout)
}

fn searxng(base: &str) -> Searxng {
    let o = opts(1 << 20);
    Searxng::new(api_client(&o).expect("client"), base, o.timeout)
}

const BRAVE_OK: &str = r#"{"type":"search","web":{"results":[
  {"title":"Rust <strong>Programming</strong>","url":"https://www.rust-lang.org/","description":"A language &amp; <strong>tools</strong>"},
  {"title":"Second","url":"https://example.org/2","description":"two"},
  {"title":"Third","url":"https://example.org/3","description":"three"}]}}"#;

#[tokio::test]
async fn brave_search_sends_the_key_and_maps_results() {
    let (base, seen) = api(200, BRAVE_OK).await;
    let hits = brave(&base, secrets_with_key()).search("rust lang", 2).await.expect("hits");
    assert_eq!(hits.len(), 2, "at most `limit`");
    assert_eq!(hits[0].title, "Rust Programming");
    assert_eq!(hits[0].url, "https://www.rust-lang.org/");
    assert_eq!(hits[0].snippet, "A language & tools");
    let seen = seen.0.lock().expect("seen");
    let (uri, headers) = &seen[0];
    assert_eq!(uri, "/res/v1/web/search?q=rust+lang&count=2");
    assert_eq!(headers.get("x-subscription-token").and_then(|v| v.to_str().ok()), Some(KEY));
    assert!(render("rust lang", &hits).contains("1. Rust Programming"));
}

#[tokio::test]
async fn the_brave_key_goes_only_to_the_origin_it_was_stored_for() {
    let (stored_for, _) = api(200, BRAVE_OK).await;
    let (elsewhere, seen) = api(200, BRAVE_OK).await;
    let kr = Arc::new(MemoryKeyring::default());
    let secrets = Secrets::new(kr, Arc::new(|_| None));
    secrets.store("brave-search", &stored_for, &SecretString::from(KEY)).expect("store");
    let err = brave(&elsewhere, secrets.clone()).search("q", 5).await.expect_err("another origin");
    assert!(err.to_string().contains("never sent to"), "{err}");
    assert!(seen.0.lock().expect("seen").is_empty(), "the other server saw nothing");
    assert!(brave(&stored_for, secrets).search("q", 5).await.is_ok());
}

#[tokio::test]
async fn a_search_redirect_is_not_followed_and_names_the_location() {
    let (target, target_seen) = api(200, BRAVE_OK).await;
    let loc = format!("{target}/res/v1/web/search");
    let app = Router::new().fallback(move || {
        let loc = loc.clone();
        async move { Redirect::temporary(&loc) }
    });
    let base = serve(app).await;
    let err = brave(&base, secrets_with_key()).search("q", 5).await.expect_err("redirect");
    assert!(err.to_string().contains(&format!("(HTTP 307) to {target}/res/v1/web/search")), "{err}");
    assert!(!err.to_string().contains(KEY));
    assert!(target_seen.0.lock().expect("seen").is_empty(), "the redirect target saw nothing");
}

#[tokio::test]
async fn brave_errors_are_clear_and_never_carry_the_key() {
    for (status, body, expect) in [
        (401, r#"{"error":"unauthorized"}"#, "HTTP 401): check the API key"),
        (429, r#"{"error":"rate"}"#, "rate limit reached (HTTP 429)"),
        (503, "{}", "unavailable (HTTP 503)"),
        (302, "{}", "answered with a redirect (HTTP 302)"),
        (200, "{not json", "not the expected JSON"),
        (200, r#"{"web":{"results":[{"title":"no url"}]}}"#, "not the expected JSON"),
    ] {
        let (base, _) = api(status, body).await;
        let err = brave(&base, secrets_with_key()).search("q", 5).await.expect_err("an error");
        let SearchError::Provider(m) = &err else { panic!("a provider error: {err:?}") };
        assert!(m.contains(expect), "{status}: {m}");
        assert!(m.starts_with("Brave Search"), "{m}");
        assert!(!m.contains(KEY));
    }
    let (base, seen) = api(200, BRAVE_OK).await;
    let err = brave(&base, Secrets::empty()).search("q", 5).await.expect_err("no key");
    assert!(err.to_string().contains("no Brave Search API key") && err.to_string().contains("brave-search"), "{err}");
    assert!(seen.0.lock().expect("seen").is_empty(), "no request without a key");
    let (base, _) = api(200, r#"{"type":"search"}"#).await;
    assert_eq!(brave(&base, secrets_with_key()).search("q", 5).await.expect("no web section"), vec![]);
}

#[tokio::test]
async fn searxng_maps_results_and_errors() {
    let body = r#"{"query":"q","results":[
      {"title":"A <em>hit</em>","url":"https://a.example/","content":"first &lt;one&gt;","engine":"x"},
      {"title":"B","url":"https://b.example/"}]}"#;
    let (base, seen) = api(200, body).await;
    let hits = searxng(&format!("{base}/")).search("two words", 10).await.expect("hits");
    assert_eq!(hits.len(), 2);
    assert_eq!((hits[0].title.as_str(), hits[0].snippet.as_str()), ("A hit", "first <one>"));
    assert_eq!(hits[1].snippet, "");
    assert_eq!(seen.0.lock().expect("seen")[0].0, "/search?q=two+words&format=json");
    for (status, body, expect) in [
        (401, "{}", "HTTP 401"),
        (403, "{}", "must allow the JSON format"),
        (429, "{}", "rate limit reached (HTTP 429)"),
        (502, "{}", "unavailable (HTTP 502)"),
        (200, "<html>not json</html>", "not the expected JSON"),
    ] {
        let (base, _) = api(status, body).await;
        let err = searxng(&base).search("q", 5).await.expect_err("an error");
        assert!(matches!(&err, SearchError::Provider(m) if m.contains(expect) && m.starts_with("SearXNG")), "{err}");
    }
    let err = searxng("http://127.0.0.1:9").search("q", 5).await.expect_err("nobody listens");
    assert!(err.to_string().contains("SearXNG could not be reached"), "{err}");
}

#[test]
fn web_tools_follow_the_config() {
    let secrets = Secrets::empty();
    let none = WebTools::from_config(&WebConfig::default(), &secrets).expect("default");
    assert!(none.search.is_none() && none.fetcher.is_some(), "default: no search, Keyhaven fetches");
    let web = WebConfig {
        search: WebSearch::Searxng,
        search_url: Some("http://127.0.0.1:1".into()),
        fetch: WebFetch::Editor,
        ..WebConfig::default()
    };
    let t = WebTools::from_config(&web, &secrets).expect("searxng");
    assert!(t.search.is_some() && t.fetcher.is_none(), "editor mode installs no fetcher");
    let web = WebConfig { search: WebSearch::Brave, ..WebConfig::default() };
    assert!(WebTools::from_config(&web, &secrets).expect("brave").search.is_some());
    let web = WebConfig { search: WebSearch::Searxng, search_url: None, ..WebConfig::default() };
    assert!(WebTools::from_config(&web, &secrets).is_err(), "searxng without a URL");
}

#[test]
fn snippets_and_fragments_convert() {
    assert_eq!(strip_tags("a <b>bold</b> &amp; &#39;quoted&#x27; &unknown; 1 < 2"), "a bold & 'quoted' &unknown; 1 ");
    assert_eq!(html_to_markdown("<p>x</p>\n\n\n\n<p>y</p>"), "x\n\ny");
}

#[tokio::test]
async fn a_search_api_redirect_is_not_followed_with_the_key() {
    let (elsewhere, seen) = api(200, BRAVE_OK).await;
    let target = format!("{elsewhere}/res/v1/web/search");
    let app = Router::new().fallback(move || {
        let target = target.clone();
        async move { Redirect::temporary(&target) }
    });
    let base = serve(app).await;
    let err = brave(&base, secrets_with_key()).search("q", 5).await.expect_err("a redirect");
    assert!(err.to_string().contains("redirect (HTTP 307)"), "{err}");
    assert!(seen.0.lock().expect("seen").is_empty(), "the key never went to the other host");
}

#[tokio::test]
async fn a_silent_search_api_is_a_timeout_in_words() {
    let app = Router::new().fallback(|| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        "late"
    });
    let base = serve(app).await;
    let o = WebOptions { timeout: Duration::from_millis(200), max_bytes: 1 << 20 };
    let s = Searxng::new(api_client(&o).expect("client"), &base, o.timeout);
    let err = s.search("q", 5).await.expect_err("timed out");
    assert_eq!(err, SearchError::Provider("SearXNG did not answer within 0.2 s".into()));
}
