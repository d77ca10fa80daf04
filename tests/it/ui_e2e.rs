//! The web UI end to end in a real Chromium (Debian's `/usr/bin/chromium`, driven by
//! `playwright-core` from `tests/e2e`, which never downloads a browser), against a real engine on
//! port 0 serving the built UI (`ui/dist`), a mock upstream and a fixture home directory.
//!
//! - `ui_walkthrough_in_chromium` runs `tests/e2e/ui.mjs`: add a provider and a model through the
//!   forms (validation first), store a key (never shown again), edit the model, send
//!   `/v1/chat/completions` and `/v1/messages` (with a Claude Code session id) from Node, see the
//!   calls in Calls, list their session and filter by it, and see them in the
//!   Overview's splits and charts, switch the routing mode, see the CA status and install it into
//!   a fixture keychain, route Claude Code and Cursor from the Clients page (preview first),
//!   restore Claude Code, copy the generic exports, and screenshot every page in light and dark
//!   (`target/e2e-artifacts/`). Rust then checks the config file, the proxy's mode, the call
//!   rows and the fixture files on disk.
//! - `hostile_page_cannot_read_or_change_anything` runs `tests/e2e/hostile.mjs` (PX-10): a page
//!   from another origin (`evil.example` on a second local server, `localhost` on another port,
//!   and a DNS-rebinding name that resolves to 127.0.0.1 on the engine's own port) tries fetch
//!   (simple, `no-cors` and preflighted), `text/plain` form POSTs with a JSON body, `img` and
//!   `script` against the control API, the UI and the gateway, via `127.0.0.1`, `localhost`,
//!   `0.0.0.0` and `[::1]`. The page must read nothing; Rust checks that nothing changed.
//!
//! Missing tools (node, Chromium, `npm ci --prefix tests/e2e`, the built UI) skip with a message,
//! unless `KEYHAVEN_REQUIRE_TOOLS` is set (CI), where they fail. `KEYHAVEN_CHROMIUM` overrides the
//! browser path.

use crate::support::skip::skip;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keyhaven::app::EngineExtras;
use keyhaven::config::RoutingMode;
use keyhaven::control::dto;
use keyhaven::control::token::ControlToken;
use keyhaven::proxy::trust::{TrustEnv, TrustOs};
use keyhaven::secrets::MemoryKeyring;
use keyhaven::setup::{Platform, SetupEnv};

use crate::control::FakeKeychain;
use crate::support::fixtures::{Case, request, upstream_sse};
use crate::support::{Client, MockUpstream, Reply, TestEngine, Up, config_text};

/// How long one script may run before it is killed (a hang guard, not an assertion on speed).
const DEADLINE: Duration = Duration::from_secs(300);
/// A provider key typed into the UI's key form; it must never come back.
const UI_KEY: &str = "sk-ui-e2e-canary-5f4e3d2c1b0a";
const CLAUDE_SETTINGS: &str = "{\n  // my Claude Code settings\n  \"theme\": \"dark\"\n}\n";
const CURSOR_SETTINGS: &str = "{\n  // Cursor user settings\n  \"editor.fontSize\": 14\n}\n";
const PROXY_URL: &str = "http://127.0.0.1:4938";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Tools {
    node: PathBuf,
    chromium: PathBuf,
    dist: PathBuf,
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The tools the browser tests need, or `None` (skip) with the reason printed.
fn tools() -> Option<Tools> {
    let chromium =
        std::env::var_os("KEYHAVEN_CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    let dist = root().join("ui/dist");
    let mut missing = Vec::new();
    let node = on_path("node");
    if node.is_none() {
        missing.push("node (apt-get install nodejs)".to_owned());
    }
    if !chromium.is_file() {
        missing
            .push(format!("Chromium at {} (apt-get install chromium, or set KEYHAVEN_CHROMIUM)", chromium.display()));
    }
    if !root().join("tests/e2e/node_modules/playwright-core/package.json").is_file() {
        missing.push("playwright-core (npm ci --prefix tests/e2e)".to_owned());
    }
    if !dist.join("index.html").is_file() {
        missing.push("the built UI (npm ci --prefix ui && npm --prefix ui run build)".to_owned());
    }
    if missing.is_empty() {
        return node.map(|node| Tools { node, chromium, dist });
    }
    let what = missing.join(", ");
    assert!(
        std::env::var_os("KEYHAVEN_REQUIRE_TOOLS").is_none(),
        "the browser end-to-end test needs {what} (KEYHAVEN_REQUIRE_TOOLS is set)"
    );
    skip(&format!("browser end-to-end test: missing {what}; set KEYHAVEN_REQUIRE_TOOLS to make this fatal"));
    None
}

/// `target/e2e-artifacts/<name>`, emptied.
fn artifacts(name: &str) -> PathBuf {
    let target =
        Path::new(env!("CARGO_TARGET_TMPDIR")).parent().map_or_else(|| root().join("target"), Path::to_path_buf);
    let dir = target.join("e2e-artifacts").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("artifacts dir");
    dir
}

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `node tests/e2e/<script>` with only the given environment (plus PATH and a throwaway
/// HOME), output kept in the artifacts dir. Blocking.
fn run_script(tools: &Tools, script: &str, out: &Path, env: &[(&str, String)]) -> Run {
    let home = tempfile::tempdir().expect("browser home");
    let stdout_path = out.join(format!("{script}.stdout"));
    let stderr_path = out.join(format!("{script}.stderr"));
    let mut cmd = Command::new(&tools.node);
    cmd.arg(root().join("tests/e2e").join(script))
        .current_dir(root().join("tests/e2e"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("KH_CHROMIUM", &tools.chromium)
        .env("KH_ARTIFACTS", out)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("node starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for node") {
            break Some(status);
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    Run { ok: status.is_some_and(|s| s.success()), stdout: read(&stdout_path), stderr: read(&stderr_path) }
}

/// A data dir with the fixture home (Claude Code and Cursor installed, Codex not) and the
/// engine's extras: a fake macOS keychain as the only trust store and client setup in that home.
fn fixture(dir: &Path) -> (PathBuf, EngineExtras, Arc<FakeKeychain>) {
    let home = dir.join("home");
    std::fs::create_dir_all(home.join(".claude")).expect("claude dir");
    std::fs::write(home.join(".claude/settings.json"), CLAUDE_SETTINGS).expect("claude settings");
    std::fs::create_dir_all(home.join(".config/Cursor/User")).expect("cursor dir");
    std::fs::write(home.join(".config/Cursor/User/settings.json"), CURSOR_SETTINGS).expect("cursor settings");
    let keychain = Arc::new(FakeKeychain::default());
    let extras = EngineExtras {
        local_offset_s: None,
        trust: Some(TrustEnv {
            os: TrustOs::MacOs,
            root: dir.join("fsroot"),
            home: home.clone(),
            runner: keychain.clone(),
        }),
        setup: Some(SetupEnv {
            home: home.clone(),
            platform: Platform::Linux,
            appdata: None,
            data_dir: dir.to_path_buf(),
            gateway_url: "http://127.0.0.1:4937".into(),
            proxy_url: PROXY_URL.into(),
        }),
        logs: None,
    };
    (home, extras, keychain)
}

fn ui_dir_line(tools: &Tools) -> String {
    format!("ui_dir = {:?}", tools.dist.display().to_string())
}

#[tokio::test]
async fn ui_walkthrough_in_chromium() {
    let Some(tools) = tools() else { return };
    let out = artifacts("ui");
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Cache)));
    let dir = tempfile::tempdir().expect("tempdir");
    let (home, extras, keychain) = fixture(dir.path());
    // No providers or models: the UI adds them.
    let config = format!(
        "# Keyhaven end-to-end config; this comment must survive.\n[server]\nlisten = \"127.0.0.1:0\"\n{}\n\n[retry]\nbase_backoff = 10\n",
        ui_dir_line(&tools)
    );
    let engine = TestEngine::start_full(dir, &config, Arc::new(MemoryKeyring::default()), true, extras).await;
    let token = ControlToken::load_or_create(engine.dir.path()).expect("token");
    let env = vec![
        ("KH_URL", engine.base.clone()),
        ("KH_LINK", engine.handle.dashboard_link()),
        ("KH_TOKEN", token.expose().to_owned()),
        ("KH_MOCK_URL", mock.url()),
        ("KH_KEY", UI_KEY.to_owned()),
    ];
    let t = tools_clone(&tools);
    let out2 = out.clone();
    let run = tokio::task::spawn_blocking(move || run_script(&t, "ui.mjs", &out2, &env)).await.expect("join");
    assert!(
        run.ok,
        "ui.mjs failed (artifacts in {}):\n--- stdout\n{}\n--- stderr\n{}",
        out.display(),
        run.stdout,
        run.stderr
    );
    assert!(run.stdout.contains("E2E OK"), "{}", run.stdout);
    assert!(!run.stdout.contains(UI_KEY) && !run.stderr.contains(UI_KEY), "the key never comes back");

    // The config file: the provider and model the forms made, the edit, the routing mode, the
    // comment, and never the key.
    let text = std::fs::read_to_string(engine.dir.path().join("config.toml")).expect("config");
    assert!(text.starts_with("# Keyhaven end-to-end config; this comment must survive."), "{text}");
    assert!(text.contains("name = \"mock\"") && text.contains(&format!("base_url = \"{}/v1\"", mock.url())), "{text}");
    assert!(text.contains("name = \"e2e-model\"") && text.contains("aliases = [\"e2e-alias\"]"), "{text}");
    assert!(text.contains("mode = \"upstream\""), "{text}");
    assert!(!text.contains(UI_KEY), "keys never go into the config file");
    assert!(text.contains("[[budgets]]\nname = \"e2e-monthly\""), "the budget from the Budgets page: {text}");
    assert_eq!(engine.handle.proxy.as_ref().expect("proxy").mode.get(), RoutingMode::Upstream);
    // The key typed into the form reached the upstream.
    let auth: Vec<String> = mock
        .seen()
        .iter()
        .filter_map(|s| s.headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned))
        .collect();
    assert!(auth.iter().any(|a| a == &format!("Bearer {UI_KEY}")), "{auth:?}");

    // The calls the script made: both inbound dialects, on the UI-made model.
    let calls = engine.wait_calls(3).await;
    let dialects: Vec<&str> = calls
        .iter()
        .filter(|c| c.summary.model == "e2e-model" || c.summary.model == "e2e-alias")
        .map(|c| c.summary.dialect.as_str())
        .collect();
    assert!(dialects.contains(&"openai_chat") && dialects.contains(&"anthropic"), "{dialects:?}");

    // Client setup on disk: Claude Code restored byte for byte, Cursor routed with a backup.
    assert_eq!(std::fs::read_to_string(home.join(".claude/settings.json")).expect("claude"), CLAUDE_SETTINGS);
    let cursor = std::fs::read_to_string(home.join(".config/Cursor/User/settings.json")).expect("cursor");
    assert!(
        cursor.contains(&format!("\"http.proxy\": \"{PROXY_URL}\"")) && cursor.contains("// Cursor user settings"),
        "{cursor}"
    );
    let backups = std::fs::read_dir(home.join(".config/Cursor/User"))
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("keyhaven-backup"))
        .count();
    assert_eq!(backups, 1);
    assert!(!home.join(".codex").exists(), "an undetected client was left alone");
    // The CA page's Install reached the (fake) keychain.
    assert_eq!(keychain.hashes.lock().expect("hashes").len(), 1);

    // Screenshots of every page, light and dark.
    for page in ["overview", "providers", "clients", "routing", "calls", "ca", "settings", "logs"] {
        for scheme in ["light", "dark"] {
            let shot = out.join(format!("{page}-{scheme}.png"));
            let len = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
            assert!(len > 1000, "{} missing or empty", shot.display());
        }
    }
    engine.stop().await;
}

fn tools_clone(t: &Tools) -> Tools {
    Tools { node: t.node.clone(), chromium: t.chromium.clone(), dist: t.dist.clone() }
}

/// Everything a hostile page could try to change, or read to leak.
#[derive(Debug, PartialEq)]
struct Snapshot {
    config: String,
    calls: u64,
    providers: Vec<String>,
    models: Vec<String>,
    routing: RoutingMode,
    retention: u32,
    claude: Vec<u8>,
    cursor: Vec<u8>,
    setup_state: bool,
    client_tokens: bool,
    ca: Option<String>,
    keychain: usize,
}

async fn snapshot(engine: &TestEngine, home: &Path, keychain: &FakeKeychain) -> Snapshot {
    let ctl = engine.handle.control();
    let _ = engine.handle.store.flush().await;
    Snapshot {
        config: std::fs::read_to_string(engine.dir.path().join("config.toml")).expect("config"),
        calls: engine.handle.store.count_calls().await.expect("count"),
        providers: ctl.providers().await.expect("providers").into_iter().map(|p| p.name).collect(),
        models: ctl.models().await.expect("models").into_iter().map(|m| m.name).collect(),
        routing: engine.handle.proxy.as_ref().expect("proxy").mode.get(),
        retention: ctl.retention().await.expect("retention").days,
        claude: std::fs::read(home.join(".claude/settings.json")).expect("claude"),
        cursor: std::fs::read(home.join(".config/Cursor/User/settings.json")).expect("cursor"),
        setup_state: engine.dir.path().join("setup-state.json").exists(),
        client_tokens: engine.dir.path().join("client-tokens.json").exists(),
        ca: ctl.ca_status().await.expect("ca").fingerprint_sha256,
        keychain: keychain.hashes.lock().expect("hashes").len(),
    }
}

#[tokio::test]
async fn hostile_page_cannot_read_or_change_anything() {
    let Some(tools) = tools() else { return };
    let out = artifacts("hostile");
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let dir = tempfile::tempdir().expect("tempdir");
    let (home, extras, keychain) = fixture(dir.path());
    let config = config_text(&mock.url(), &ui_dir_line(&tools));
    let engine = TestEngine::start_full(dir, &config, Arc::new(MemoryKeyring::default()), true, extras).await;
    // One real call, so there is history to delete or read.
    let r = engine.post(Client::Openai, &request(Client::Openai, "oa-model", false, Case::Text)).await;
    assert_eq!(r.status(), 200);
    let call_id = engine.wait_calls(1).await[0].summary.id.clone();
    let seen_before = mock.seen().len();
    let before = snapshot(&engine, &home, &keychain).await;
    let token = ControlToken::load_or_create(engine.dir.path()).expect("token");

    let env = vec![
        ("KH_URL", engine.base.clone()),
        ("KH_LINK", engine.handle.dashboard_link()),
        ("KH_TOKEN", token.expose().to_owned()),
        ("KH_CALL_ID", call_id.clone()),
    ];
    let t = tools_clone(&tools);
    let out2 = out.clone();
    let run = tokio::task::spawn_blocking(move || run_script(&t, "hostile.mjs", &out2, &env)).await.expect("join");
    assert!(
        run.ok,
        "hostile.mjs failed (artifacts in {}):\n--- stdout\n{}\n--- stderr\n{}",
        out.display(),
        run.stdout,
        run.stderr
    );
    assert!(run.stdout.contains("HOSTILE OK"), "{}", run.stdout);

    // Nothing changed: config, history, routing, retention, client files, CA, keychain; and the
    // gateway forwarded nothing upstream.
    let after = snapshot(&engine, &home, &keychain).await;
    assert_eq!(after, before, "a hostile page changed something");
    assert_eq!(mock.seen().len(), seen_before, "no hostile request reached the upstream");
    let detail = engine.handle.control().call(&call_id).await.expect("the call is still there");
    assert_eq!(detail.summary.status, dto::CallStatus::Ok);
    engine.stop().await;
}
