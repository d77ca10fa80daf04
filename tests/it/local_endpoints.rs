//! Issue 14 §1 and §6 against a real engine: the page and its files carry no credential; a
//! one-time dashboard link gives a session cookie once; the cookie opens the control API only
//! from the page itself; listening beyond loopback is refused.

use std::sync::Arc;

use keyhaven::app::{Engine, EngineExtras, host};
use keyhaven::config::{EngineConfig, load_str};
use keyhaven::control::token::ControlToken;
use keyhaven::secrets::{MemoryKeyring, Secrets};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::Value;

use crate::support::{MockUpstream, TestEngine, config_text};

/// An engine serving a fixture UI of a few files, and its control token.
async fn engine_with_ui(mock: &MockUpstream) -> (TestEngine, ControlToken) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = dir.path().join("ui");
    std::fs::create_dir_all(ui.join("assets")).expect("ui");
    std::fs::write(ui.join("index.html"), "<!doctype html><div id=app></div><script src=/assets/app.js></script>")
        .expect("index");
    std::fs::write(ui.join("assets").join("app.js"), "console.log('%KEYHAVEN_TOKEN%')").expect("js");
    std::fs::write(ui.join("assets").join("app.css"), "body{}").expect("css");
    std::fs::write(ui.join("favicon.svg"), "<svg/>").expect("svg");
    let extra = format!("ui_dir = {:?}", ui.display().to_string());
    let engine = TestEngine::start_full(
        dir,
        &config_text(&mock.url(), &extra),
        Arc::new(MemoryKeyring::default()),
        false,
        EngineExtras::default(),
    )
    .await;
    let token = ControlToken::load_or_create(engine.dir.path()).expect("token");
    (engine, token)
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client")
}

/// Mints a link through the HTTP endpoint `keyhaven dashboard` uses.
async fn mint(engine: &TestEngine, token: &ControlToken) -> String {
    let resp = engine
        .http
        .post(engine.url("/api/session/nonce"))
        .bearer_auth(token.expose())
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.expect("json");
    assert_eq!(v["expiresInSecs"], 60, "{v}");
    v["url"].as_str().expect("url").to_owned()
}

/// Opens a link like a browser's address bar: the session cookie it sets, if any.
async fn open(link: &str) -> (u16, Option<String>, String) {
    let resp = no_redirects().get(link).send().await.expect("send");
    let status = resp.status().as_u16();
    let cookie = resp.headers().get("set-cookie").map(|v| v.to_str().expect("ascii").to_owned());
    if status == 303 {
        assert_eq!(resp.headers()["location"], "/", "the nonce leaves the address bar");
    }
    (status, cookie, resp.text().await.expect("body"))
}

#[tokio::test]
async fn no_served_file_contains_the_control_token() {
    let mock = MockUpstream::start().await;
    let (engine, token) = engine_with_ui(&mock).await;
    for path in ["/", "/index.html", "/overview", "/clients/env", "/assets/app.js", "/assets/app.css", "/favicon.svg"] {
        for host in ["127.0.0.1", "localhost"] {
            let url = engine.url(path).replace("127.0.0.1", host);
            let resp = engine.http.get(&url).send().await.expect("send");
            assert_eq!(resp.status(), 200, "{url}");
            assert!(resp.headers().get("set-cookie").is_none(), "{url} sets no cookie");
            let body = resp.text().await.expect("body");
            assert!(!body.contains(token.expose()), "{url} carries the token");
        }
    }
    // The placeholder the engine used to replace is served as it is.
    let js = engine.http.get(engine.url("/assets/app.js")).send().await.expect("send").text().await.expect("js");
    assert_eq!(js, "console.log('%KEYHAVEN_TOKEN%')");
    // The shipped UI source does not ask for one either.
    let index = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/index.html")).expect("ui/index.html");
    assert!(!index.contains("KEYHAVEN_TOKEN") && !index.contains("keyhaven-token"), "{index}");
    engine.stop().await;
}

#[tokio::test]
async fn a_dashboard_link_gives_a_session_once() {
    let mock = MockUpstream::start().await;
    let (engine, token) = engine_with_ui(&mock).await;
    let port = engine.handle.addr.port();
    let unauth = engine.http.post(engine.url("/api/session/nonce")).header("content-type", "application/json");
    assert_eq!(unauth.send().await.expect("send").status(), 401, "minting needs the token");

    let link = mint(&engine, &token).await;
    let prefix = format!("http://127.0.0.1:{port}/auth?nonce=");
    let nonce = link.strip_prefix(&prefix).unwrap_or_else(|| panic!("{link}"));
    assert!(nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_hexdigit()), "128 random bits: {nonce}");
    assert!(!link.contains(token.expose()));

    let (status, cookie, _) = open(&link).await;
    assert_eq!(status, 303);
    let cookie = cookie.expect("a session cookie");
    let name = format!("kh_session_{port}=");
    let (pair, attrs) = cookie.split_once(';').expect("attributes");
    let session = pair.strip_prefix(&name).unwrap_or_else(|| panic!("{cookie}"));
    assert_eq!(session.len(), 64, "{cookie}");
    assert_ne!(session, token.expose(), "the session is not the control token");
    let attrs: Vec<&str> = attrs.split(';').map(str::trim).collect();
    assert_eq!(attrs, ["HttpOnly", "SameSite=Strict", "Path=/"], "{cookie}");

    let (again, no_cookie, page) = open(&link).await;
    assert_eq!(again, 401, "a nonce works once");
    assert!(no_cookie.is_none());
    assert!(page.contains("keyhaven dashboard"), "the page says how to get a new link: {page}");
    for bad in ["/auth", "/auth?nonce=", "/auth?nonce=00000000000000000000000000000000", "/auth?other=1"] {
        assert_eq!(open(&engine.url(bad)).await.0, 401, "{bad}");
    }
    let rebinding = no_redirects().get(&link).header("host", "evil.example").send().await.expect("send");
    assert_eq!(rebinding.status(), 403, "Host is checked on /auth too");

    // The in-process link (the headless banner's) works the same way, once.
    let local = engine.handle.dashboard_link();
    assert!(local.starts_with(&prefix), "{local}");
    assert_eq!(open(&local).await.0, 303);
    assert_eq!(open(&local).await.0, 401);
    engine.stop().await;
}

#[tokio::test]
async fn the_session_cookie_opens_the_control_api_only_from_the_page() {
    let mock = MockUpstream::start().await;
    let (engine, token) = engine_with_ui(&mock).await;
    let port = engine.handle.addr.port();
    let (_, cookie, _) = open(&mint(&engine, &token).await).await;
    let cookie = cookie.expect("cookie");
    let pair = cookie.split(';').next().expect("pair").to_owned();
    let own = format!("http://127.0.0.1:{port}");

    let get = |headers: Vec<(&'static str, String)>| {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(k, HeaderValue::from_str(&v).expect("value"));
        }
        engine.http.get(engine.url("/api/status")).headers(h).send()
    };
    let status = |r: reqwest::Response| r.status().as_u16();
    // What a page's own fetch sends: Sec-Fetch-Site on a same-origin GET, Origin on other methods.
    assert_eq!(
        status(get(vec![("cookie", pair.clone()), ("sec-fetch-site", "same-origin".into())]).await.expect("s")),
        200
    );
    assert_eq!(status(get(vec![("cookie", pair.clone()), ("origin", own.clone())]).await.expect("s")), 200);
    assert_eq!(status(get(vec![("cookie", pair.clone()), ("x-keyhaven-ui", "1".into())]).await.expect("s")), 200);
    let localhost = format!("http://localhost:{port}");
    assert_eq!(status(get(vec![("cookie", pair.clone()), ("origin", localhost)]).await.expect("s")), 200);
    // Without proof that the page itself asks: refused.
    assert_eq!(status(get(vec![("cookie", pair.clone())]).await.expect("s")), 403, "no Origin, no Sec-Fetch-Site");
    for site in ["same-site", "cross-site", "none"] {
        let r = get(vec![("cookie", pair.clone()), ("sec-fetch-site", site.into())]).await.expect("s");
        assert_eq!(status(r), 403, "Sec-Fetch-Site: {site}");
    }
    for origin in ["http://evil.example", "http://127.0.0.1:1", "null"] {
        let r = get(vec![("cookie", pair.clone()), ("origin", origin.into())]).await.expect("s");
        assert_eq!(status(r), 403, "Origin: {origin}");
    }
    // A cookie that did not come from a nonce exchange is nothing.
    let forged = format!("kh_session_{port}={}", "ab".repeat(32));
    let r = get(vec![("cookie", forged), ("origin", own.clone())]).await.expect("s");
    assert_eq!(status(r), 401);
    let r = get(vec![("cookie", format!("kh_session_{port}={}", token.expose())), ("origin", own.clone())]).await;
    assert_eq!(status(r.expect("s")), 401, "the control token is not a session");
    let r = get(vec![("origin", own.clone())]).await.expect("s");
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["kind"], "unauthorized");
    assert!(body["message"].as_str().expect("message").contains("keyhaven dashboard"), "{body}");

    // A change with the cookie: JSON and the page's Origin, like the UI's fetch.
    let put = engine
        .http
        .put(engine.url("/api/retention"))
        .header("cookie", &pair)
        .header("origin", &own)
        .header("content-type", "application/json")
        .body(r#"{"days": 9}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(put.status(), 200);
    let form = engine
        .http
        .put(engine.url("/api/retention"))
        .header("cookie", &pair)
        .header("origin", &own)
        .header("content-type", "text/plain")
        .body(r#"{"days": 1}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(form.status(), 415, "JSON only, with a cookie too");
    let (_, v) = engine.control(reqwest::Method::GET, "/api/retention", None).await;
    assert!(v.contains("\"days\":9"), "the bearer token still works: {v}");
    engine.stop().await;
}

#[tokio::test]
async fn keyhaven_dashboard_gets_a_link_from_the_running_engine() {
    let mock = MockUpstream::start().await;
    let (engine, token) = engine_with_ui(&mock).await;
    let addr = engine.handle.addr;
    let link = tokio::task::spawn_blocking(move || host::request_dashboard_link(addr, &token))
        .await
        .expect("task")
        .expect("a link");
    assert_eq!(open(&link).await.0, 303, "{link}");
    let wrong = ControlToken::from_value(&"0".repeat(64));
    let refused = tokio::task::spawn_blocking(move || host::request_dashboard_link(addr, &wrong)).await.expect("task");
    let msg = refused.expect_err("a wrong token gets no link").to_string();
    assert!(msg.contains("401"), "{msg}");
    // The banner prints a link, never the token.
    let banner = host::banner(&engine.handle, 3, true, engine.dir.path());
    let token = ControlToken::load_or_create(engine.dir.path()).expect("token");
    assert!(!banner.contains(token.expose()), "{banner}");
    let printed = banner.split_whitespace().find(|w| w.contains("/auth?nonce=")).expect("a link in the banner");
    assert_eq!(open(printed).await.0, 303, "{banner}");
    engine.stop().await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let t = ControlToken::from_value(&"0".repeat(64));
    let down = tokio::task::spawn_blocking(move || host::request_dashboard_link(free, &t)).await.expect("task");
    let msg = down.expect_err("nothing listens").to_string();
    assert!(msg.contains("not running"), "{msg}");
}

/// Issue 14 §6: the engine refuses a non-loopback gateway address unless `allow_remote` and
/// client tokens are both on, and a non-loopback proxy address always; nothing is bound then.
#[tokio::test]
async fn the_engine_refuses_to_listen_beyond_loopback() {
    let start = |server: &'static str, listen: &'static str, proxy: &'static str| async move {
        let dir = tempfile::tempdir().expect("dir");
        let file = load_str("t.toml", &format!("[server]\n{server}\n[proxy]\nenabled = false\n")).expect("config");
        let config = EngineConfig {
            config_path: None,
            database_path: dir.path().join("keyhaven.db"),
            file,
            listen: Some(listen.parse().expect("addr")),
            ca_dir: dir.path().join("ca"),
            proxy_listen: Some(proxy.parse().expect("addr")),
            upstream_overrides: Default::default(),
        };
        let secrets = Secrets::new(Arc::new(MemoryKeyring::default()), Arc::new(|_| None));
        let r = Engine::start(config, secrets).await;
        let db = dir.path().join("keyhaven.db").exists();
        (r, db)
    };
    for (server, listen, proxy) in [
        ("", "0.0.0.0:0", "127.0.0.1:0"),
        ("allow_remote = true", "0.0.0.0:0", "127.0.0.1:0"),
        ("require_client_token = true", "0.0.0.0:0", "127.0.0.1:0"),
        ("allow_remote = true\nrequire_client_token = true", "127.0.0.1:0", "0.0.0.0:0"),
    ] {
        let (r, db) = start(server, listen, proxy).await;
        let err = r.expect_err("refused");
        assert_eq!(err.kind(), "listen", "{server} {listen} {proxy}: {err}");
        assert!(!db, "refused before anything was opened");
    }
    let (r, _) = start("allow_remote = true\nrequire_client_token = true", "0.0.0.0:0", "127.0.0.1:0").await;
    let engine = r.expect("allowed with both");
    assert!(engine.local_addr().ip().is_unspecified());
    // Gateway calls from other machines name this machine's address: any Host reaches the token
    // gate (401 without a token, not 403); the control API keeps the exact hosts.
    let port = engine.local_addr().port();
    let http = reqwest::Client::new();
    let models = http
        .get(format!("http://127.0.0.1:{port}/v1/models"))
        .header("host", format!("keyhaven.lan:{port}"))
        .send()
        .await
        .expect("send");
    assert_eq!(models.status(), 401, "the client token is what counts beyond loopback");
    let api = http
        .get(format!("http://127.0.0.1:{port}/api/status"))
        .header("host", format!("keyhaven.lan:{port}"))
        .send()
        .await
        .expect("send");
    assert_eq!(api.status(), 403, "the control API keeps its exact hosts");
    engine.shutdown(std::time::Duration::from_secs(5)).await;
}

/// A machine without an OS keyring (the Secret Service is unreachable, as on a headless server).
struct NoKeyring;

impl keyhaven::secrets::Keyring for NoKeyring {
    fn get(&self, _: &str) -> Result<Option<secrecy::SecretString>, keyhaven::secrets::SecretError> {
        Err(keyhaven::secrets::SecretError::Unavailable("DBus error: Unable to autolaunch a dbus-daemon".into()))
    }
    fn set(&self, _: &str, _: &secrecy::SecretString) -> Result<(), keyhaven::secrets::SecretError> {
        Err(keyhaven::secrets::SecretError::Unavailable("DBus error: Unable to autolaunch a dbus-daemon".into()))
    }
    fn delete(&self, _: &str) -> Result<bool, keyhaven::secrets::SecretError> {
        Err(keyhaven::secrets::SecretError::Unavailable("DBus error: Unable to autolaunch a dbus-daemon".into()))
    }
}

/// Issue 14 §8: without a keyring the Clients page's shell exports work (the token goes to a
/// 0600 file), and a key that needs the keyring gets words on what to do, never the D-Bus error.
#[tokio::test]
async fn without_a_keyring_the_dashboard_says_what_to_do() {
    let mock = MockUpstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let file = load_str("t.toml", &config_text(&mock.url(), "")).expect("config");
    let extras = EngineExtras {
        local_offset_s: None,
        setup: Some(keyhaven::setup::SetupEnv {
            home: dir.path().join("home"),
            platform: keyhaven::setup::Platform::Linux,
            appdata: None,
            data_dir: dir.path().to_path_buf(),
            gateway_url: "http://127.0.0.1:4937".into(),
            proxy_url: "http://127.0.0.1:4938".into(),
        }),
        ..EngineExtras::default()
    };
    let config = EngineConfig {
        config_path: None,
        database_path: dir.path().join("keyhaven.db"),
        file,
        listen: Some("127.0.0.1:0".parse().expect("addr")),
        ca_dir: dir.path().join("ca"),
        proxy_listen: Some("127.0.0.1:0".parse().expect("addr")),
        upstream_overrides: Default::default(),
    };
    let secrets = Secrets::new(Arc::new(NoKeyring), Arc::new(|_| None));
    let engine = Engine::start_with(config, secrets, extras).await.expect("starts without a keyring");
    let base = format!("http://{}", engine.local_addr());
    let token = ControlToken::load_or_create(dir.path()).expect("token");
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str, body: Option<&str>| {
        let mut req = http.request(method, format!("{base}{path}")).bearer_auth(token.expose());
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_owned());
        }
        req.send()
    };

    let env = call(reqwest::Method::GET, "/api/clients/env", None).await.expect("send");
    assert_eq!(env.status(), 200, "the shell exports load without a keyring");
    let routed = call(reqwest::Method::POST, "/api/clients/env/route", Some("{}")).await.expect("send");
    assert_eq!(routed.status(), 200);
    let v: Value = routed.json().await.expect("json");
    assert_eq!(v["tokenIssued"], true, "{v}");
    let file = dir.path().join("client-tokens").join("env");
    let stored = std::fs::read_to_string(&file).expect("the token's 0600 file");
    assert!(v["exports"].as_str().expect("exports").contains(&stored), "{v}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).expect("meta").permissions().mode() & 0o777, 0o600);
    }

    let key = call(reqwest::Method::PUT, "/api/providers/oa/key", Some(r#"{"value": "sk-test-1234567890"}"#))
        .await
        .expect("send");
    assert_eq!(key.status(), 503);
    let v: Value = key.json().await.expect("json");
    assert_eq!(v["kind"], "keyring_unavailable", "{v}");
    let message = v["message"].as_str().expect("message");
    assert!(!message.contains("DBus") && !message.contains("dbus-daemon"), "no raw D-Bus error: {message}");
    assert!(message.contains("env:") && message.contains("no OS keyring"), "says what to do: {message}");
    engine.shutdown(std::time::Duration::from_secs(5)).await;
}
