//! Client setup against fixture home directories (never the real home): routing and undo for
//! Cursor, Claude Code and Codex CLI, byte-exact preservation of comments and formatting,
//! backups, the state file across a "restart", concurrent edits, read-only files, dry runs and
//! idempotence.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use tempfile::TempDir;

use keyhaven::secrets::{Keyring, MemoryKeyring};
use keyhaven::setup::{
    self, Client, ClientTokens, Platform, SetupEnv, SetupOptions, config_path, detect, plan_route, plan_undo,
};

/// A fixture: a home directory, a Keyhaven data directory and a keyring that outlives
/// "restarts" (the OS keyring does).
struct Fixture {
    _dir: TempDir,
    root: PathBuf,
    env: SetupEnv,
    keyring: Arc<MemoryKeyring>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::on(Platform::Linux)
    }

    fn on(platform: Platform) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        let env = SetupEnv {
            home: root.join("home"),
            platform,
            appdata: Some(root.join("home").join("AppData").join("Roaming")),
            data_dir: root.join("data"),
            gateway_url: "http://127.0.0.1:4937".into(),
            proxy_url: "http://127.0.0.1:4938".into(),
        };
        std::fs::create_dir_all(&env.home).expect("home");
        Fixture { _dir: dir, root, env, keyring: Arc::new(MemoryKeyring::default()) }
    }

    fn tokens(&self) -> ClientTokens {
        ClientTokens::new(self.keyring.clone(), &self.env.data_dir)
    }

    fn path(&self, client: Client) -> PathBuf {
        config_path(&self.env, client).expect("config path")
    }

    fn write(&self, client: Client, text: &str) -> PathBuf {
        let path = self.path(client);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write fixture");
        path
    }

    fn read(&self, client: Client) -> String {
        std::fs::read_to_string(self.path(client)).expect("read")
    }

    fn route(&self, client: Client, opts: &SetupOptions) -> setup::Outcome {
        setup::route(&self.env, client, opts, &self.tokens()).expect("route")
    }

    fn undo(&self, client: Client) -> setup::Outcome {
        setup::undo(&self.env, client, &self.tokens()).expect("undo")
    }

    fn token(&self, client: Client) -> String {
        self.keyring
            .get(&setup::keyring_entry(client.as_str()))
            .expect("keyring")
            .expect("token stored")
            .expose_secret()
            .to_owned()
    }

    /// Every file under the fixture with the SHA-256 of its content.
    fn tree(&self) -> BTreeMap<PathBuf, String> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
            let Ok(entries) = std::fs::read_dir(dir) else { return };
            for e in entries {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    out.insert(p.clone(), "dir".into());
                    walk(&p, out);
                } else {
                    let bytes = std::fs::read(&p).expect("read");
                    out.insert(p, hex::encode(Sha256::digest(bytes)));
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.root, &mut out);
        out
    }

    fn backups(&self, client: Client) -> Vec<PathBuf> {
        let path = self.path(client);
        let dir = path.parent().expect("parent");
        let prefix = format!("{}.keyhaven-backup-", path.file_name().expect("name").to_string_lossy());
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        entries
            .map(|e| e.expect("entry").path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
            .collect()
    }

    fn state(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.env.data_dir.join("setup-state.json")).expect("state file");
        serde_json::from_str(&text).expect("state json")
    }
}

const CURSOR_SETTINGS: &str = r#"// Cursor user settings
{
    "editor.fontSize": 14, // my font
    /* block
       comment */
    "http.proxy": "http://corp:3128",
    "workbench.colorTheme":"Default Dark+",
    "files.exclude": {
        "**/.git": true,
    },
}
"#;

const CURSOR_ROUTED: &str = r#"// Cursor user settings
{
    "editor.fontSize": 14, // my font
    /* block
       comment */
    "http.proxy": "http://127.0.0.1:4938",
    "workbench.colorTheme":"Default Dark+",
    "files.exclude": {
        "**/.git": true,
    },
    "http.proxySupport": "on",
    "http.experimental.systemCertificatesV2": true,
}
"#;

#[test]
fn cursor_is_routed_with_comments_kept_and_restored_byte_identical() {
    let fx = Fixture::new();
    fx.write(Client::Cursor, CURSOR_SETTINGS);
    let out = fx.route(Client::Cursor, &SetupOptions::default());
    assert!(out.changed);
    assert_eq!(fx.read(Client::Cursor), CURSOR_ROUTED);
    let backup = out.backup.expect("backup made");
    assert!(backup.to_string_lossy().contains("settings.json.keyhaven-backup-"), "{}", backup.display());
    assert_eq!(std::fs::read_to_string(&backup).expect("backup"), CURSOR_SETTINGS);
    // Only settings.json and its backup exist under Cursor's folder: no other file is touched.
    let user_dir = fx.path(Client::Cursor).parent().expect("dir").to_path_buf();
    assert_eq!(std::fs::read_dir(&user_dir).expect("dir").count(), 2);

    let state = fx.state();
    let entry = &state["clients"]["cursor"];
    assert_eq!(entry["keys"][0]["path"], serde_json::json!(["http.proxy"]));
    assert_eq!(entry["keys"][0]["previous"], serde_json::json!("http://corp:3128"));
    assert_eq!(entry["keys"][1]["previous"], serde_json::Value::Null);

    let d = detect(&fx.env, Client::Cursor).expect("detect");
    assert!(d.installed && d.routed && d.recorded);

    let out = fx.undo(Client::Cursor);
    assert!(out.changed);
    assert_eq!(fx.read(Client::Cursor), CURSOR_SETTINGS);
    assert!(!backup.exists(), "a backup put back whole is removed");
    assert!(fx.state()["clients"].get("cursor").is_none());
    let d = detect(&fx.env, Client::Cursor).expect("detect");
    assert!(d.installed && !d.routed && !d.recorded);
}

#[test]
fn cursor_disable_http2_is_an_option_and_dropping_it_restores_the_key() {
    let fx = Fixture::on(Platform::Windows);
    let path = fx.write(Client::Cursor, "{\n  \"cursor.general.disableHttp2\": false\n}\n");
    assert!(path.starts_with(fx.env.appdata.as_ref().expect("appdata")));
    fx.route(Client::Cursor, &SetupOptions { disable_http2: true, ..SetupOptions::default() });
    assert!(fx.read(Client::Cursor).contains("\"cursor.general.disableHttp2\": true"));
    fx.route(Client::Cursor, &SetupOptions::default());
    assert!(fx.read(Client::Cursor).contains("\"cursor.general.disableHttp2\": false"));
    assert_eq!(fx.backups(Client::Cursor).len(), 1);
    fx.undo(Client::Cursor);
    assert_eq!(fx.read(Client::Cursor), "{\n  \"cursor.general.disableHttp2\": false\n}\n");
}

#[test]
fn cursor_path_follows_the_platform() {
    let mac = Fixture::on(Platform::MacOs);
    assert!(mac.path(Client::Cursor).ends_with("Library/Application Support/Cursor/User/settings.json"));
    let linux = Fixture::new();
    assert!(linux.path(Client::Cursor).ends_with(".config/Cursor/User/settings.json"));
    let mut win = Fixture::on(Platform::Windows);
    win.env.appdata = None;
    assert_eq!(config_path(&win.env, Client::Cursor).expect_err("no appdata").kind(), "setup_no_appdata");
}

const CLAUDE_SETTINGS: &str = r#"{
  "permissions": { "allow": ["Bash(ls:*)"] },
  "env": {
    "DISABLE_TELEMETRY": "1",
  },
  // unknown keys stay
  "x-custom": [1, 2, 3],
}
"#;

#[test]
fn claude_code_is_routed_with_a_token_and_restored_byte_identical() {
    let fx = Fixture::new();
    fx.write(Client::ClaudeCode, CLAUDE_SETTINGS);
    let opts = SetupOptions {
        model: Some("sonnet".into()),
        small_model: Some("haiku".into()),
        disable_http2: false,
        tool_search: false,
    };
    fx.route(Client::ClaudeCode, &opts);
    let token = fx.token(Client::ClaudeCode);
    assert!(token.starts_with("kh-") && token.len() >= 3 + 32, "at least 128 bits");
    let expected = CLAUDE_SETTINGS.replace(
        "    \"DISABLE_TELEMETRY\": \"1\",\n",
        &format!(
            "    \"DISABLE_TELEMETRY\": \"1\",\n    \"ANTHROPIC_BASE_URL\": \"http://127.0.0.1:4937\",\n    \"ANTHROPIC_AUTH_TOKEN\": \"{token}\",\n    \"ANTHROPIC_MODEL\": \"sonnet\",\n    \"ANTHROPIC_SMALL_FAST_MODEL\": \"haiku\",\n"
        ),
    );
    assert_eq!(fx.read(Client::ClaudeCode), expected);
    assert_eq!(fx.tokens().client_for_token(&token).as_deref(), Some("claude-code"));
    let state = std::fs::read_to_string(fx.env.data_dir.join("setup-state.json")).expect("state");
    assert!(!state.contains(&token), "the state file keeps hashes of written values, not the token");

    fx.undo(Client::ClaudeCode);
    assert_eq!(fx.read(Client::ClaudeCode), CLAUDE_SETTINGS);
    assert_eq!(fx.tokens().client_for_token(&token), None, "undo revokes the client's token");
}

const CODEX_CONFIG: &str = r#"# Codex config
model = "o3"   # my favourite
approval_policy="on-request"

[model_providers.other]
name = "Other"
base_url = "https://example.com/v1"

# MCP servers
[mcp_servers.foo]
command = "npx"
args = [ "-y", "foo" ]
"#;

const CODEX_ROUTED: &str = r#"# Codex config
model = "claude-sonnet"   # my favourite
approval_policy="on-request"
model_provider = "keyhaven"

[model_providers.other]
name = "Other"
base_url = "https://example.com/v1"

[model_providers.keyhaven]
name = "Keyhaven"
base_url = "http://127.0.0.1:4937/v1"
wire_api = "responses"
http_headers = { Authorization = "Bearer TOKEN" }

# MCP servers
[mcp_servers.foo]
command = "npx"
args = [ "-y", "foo" ]
"#;

#[test]
fn codex_is_routed_preserving_the_toml_and_restored_byte_identical() {
    let fx = Fixture::new();
    fx.write(Client::Codex, CODEX_CONFIG);
    fx.route(Client::Codex, &SetupOptions { model: Some("claude-sonnet".into()), ..SetupOptions::default() });
    let token = fx.token(Client::Codex);
    assert_eq!(fx.read(Client::Codex), CODEX_ROUTED.replace("TOKEN", &token));
    assert!(detect(&fx.env, Client::Codex).expect("detect").routed);
    fx.undo(Client::Codex);
    assert_eq!(fx.read(Client::Codex), CODEX_CONFIG);
    assert!(fx.backups(Client::Codex).is_empty());
}

#[test]
fn missing_files_and_directories_are_created_and_undo_removes_the_files() {
    let fx = Fixture::new();
    for client in Client::ALL {
        assert!(!detect(&fx.env, client).expect("detect").installed);
        let out = fx.route(client, &SetupOptions::default());
        assert!(out.changed);
        assert_eq!(out.backup, None, "nothing to back up");
        assert!(detect(&fx.env, client).expect("detect").routed);
    }
    assert_eq!(
        fx.read(Client::Cursor),
        "{\n  \"http.proxy\": \"http://127.0.0.1:4938\",\n  \"http.proxySupport\": \"on\",\n  \"http.experimental.systemCertificatesV2\": true\n}\n"
    );
    let token = fx.token(Client::ClaudeCode);
    assert_eq!(
        fx.read(Client::ClaudeCode),
        format!(
            "{{\n  \"env\": {{\n    \"ANTHROPIC_BASE_URL\": \"http://127.0.0.1:4937\",\n    \"ANTHROPIC_AUTH_TOKEN\": \"{token}\"\n  }}\n}}\n"
        )
    );
    let token = fx.token(Client::Codex);
    assert_eq!(
        fx.read(Client::Codex),
        format!(
            "model_provider = \"keyhaven\"\n\n[model_providers.keyhaven]\nname = \"Keyhaven\"\nbase_url = \"http://127.0.0.1:4937/v1\"\nwire_api = \"responses\"\nhttp_headers = {{ Authorization = \"Bearer {token}\" }}\n"
        )
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(fx.path(Client::ClaudeCode)).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "a new file holding a token is owner-only");
    }
    for client in Client::ALL {
        fx.undo(client);
        assert!(!fx.path(client).exists(), "{client}: a file Keyhaven created is removed again");
    }
}

#[cfg(unix)]
#[test]
fn file_permissions_are_kept() {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    let path = fx.write(Client::Cursor, "{}\n");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    fx.route(Client::Cursor, &SetupOptions::default());
    assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o640);
}

#[cfg(unix)]
#[test]
fn read_only_file_is_refused_and_nothing_is_written() {
    // Keyhaven checks the permission bits itself, so this holds for root too (root would
    // otherwise write through 0444).
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    let path = fx.write(Client::Cursor, CURSOR_SETTINGS);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    let before = fx.tree();
    let err = setup::route(&fx.env, Client::Cursor, &SetupOptions::default(), &fx.tokens()).expect_err("refused");
    assert_eq!(err.kind(), "setup_read_only");
    assert!(err.to_string().contains("read-only"), "{err}");
    assert_eq!(fx.tree(), before, "no backup, no state, no temp file");
}

#[test]
fn a_target_that_cannot_be_written_fails_cleanly() {
    // Works as root too: a directory where the config file should be cannot be read or replaced.
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.path(Client::ClaudeCode)).expect("dir in the way");
    let before = fx.tree();
    let err = setup::route(&fx.env, Client::ClaudeCode, &SetupOptions::default(), &fx.tokens()).expect_err("fails");
    assert_eq!(err.kind(), "setup_io", "{err}");
    assert_eq!(fx.tree(), before);
}

#[test]
fn invalid_config_is_refused_without_changes() {
    let fx = Fixture::new();
    fx.write(Client::ClaudeCode, "{ \"env\": ");
    let before = fx.tree();
    let err = setup::route(&fx.env, Client::ClaudeCode, &SetupOptions::default(), &fx.tokens()).expect_err("fails");
    assert_eq!(err.kind(), "setup_parse");
    assert_eq!(fx.tree(), before);
}

#[test]
fn a_concurrent_edit_aborts_the_write() {
    let fx = Fixture::new();
    fx.write(Client::Cursor, CURSOR_SETTINGS);
    let plan = plan_route(&fx.env, Client::Cursor, &SetupOptions::default(), &fx.tokens()).expect("plan");
    // Cursor (or the user) saves the file between Keyhaven's read and its write.
    let edited = CURSOR_SETTINGS.replace("14", "15");
    fx.write(Client::Cursor, &edited);
    let err = plan.apply(&fx.env, &fx.tokens()).expect_err("aborted");
    assert_eq!(err.kind(), "setup_concurrent_edit");
    assert!(err.to_string().contains("changed while Keyhaven was editing it"), "{err}");
    assert_eq!(fx.read(Client::Cursor), edited, "the other writer's content stays");
    assert!(fx.backups(Client::Cursor).is_empty(), "the backup of the failed attempt is removed");
    assert!(fx.state()["clients"].get("cursor").is_none(), "the state is rolled back");
    // A fresh attempt goes through.
    fx.route(Client::Cursor, &SetupOptions::default());
    assert!(detect(&fx.env, Client::Cursor).expect("detect").routed);
}

#[test]
fn undo_works_after_a_restart_from_the_state_on_disk() {
    let fx = Fixture::new();
    fx.write(Client::Codex, CODEX_CONFIG);
    fx.write(Client::ClaudeCode, CLAUDE_SETTINGS);
    fx.route(Client::Codex, &SetupOptions::default());
    fx.route(Client::ClaudeCode, &SetupOptions::default());
    // A new process: a fresh SetupEnv and ClientTokens; only the disk and the keyring remain.
    let env = SetupEnv { ..fx.env.clone() };
    let tokens = ClientTokens::new(fx.keyring.clone(), &env.data_dir);
    assert!(detect(&env, Client::Codex).expect("detect").recorded);
    setup::undo(&env, Client::Codex, &tokens).expect("undo codex");
    setup::undo(&env, Client::ClaudeCode, &tokens).expect("undo claude");
    assert_eq!(fx.read(Client::Codex), CODEX_CONFIG);
    assert_eq!(fx.read(Client::ClaudeCode), CLAUDE_SETTINGS);
    assert!(tokens.clients().expect("clients").is_empty());
}

#[test]
fn undo_after_user_edits_removes_only_keyhavens_keys() {
    let fx = Fixture::new();
    let original = "{\n  // mine\n  \"env\": {\n    \"ANTHROPIC_BASE_URL\": \"https://corp.example\"\n  }\n}\n";
    fx.write(Client::ClaudeCode, original);
    fx.route(Client::ClaudeCode, &SetupOptions { model: Some("sonnet".into()), ..SetupOptions::default() });
    // The user edits the file afterwards: a new key of their own and a new value for one of
    // Keyhaven's keys.
    let routed = fx.read(Client::ClaudeCode);
    let edited = routed
        .replace("\"ANTHROPIC_MODEL\": \"sonnet\"", "\"ANTHROPIC_MODEL\": \"opus\"")
        .replace("  // mine\n", "  // mine\n  \"theme\": \"dark\",\n");
    assert_ne!(edited, routed);
    fx.write(Client::ClaudeCode, &edited);
    let out = fx.undo(Client::ClaudeCode);
    assert_eq!(
        fx.read(Client::ClaudeCode),
        "{\n  // mine\n  \"theme\": \"dark\",\n  \"env\": {\n    \"ANTHROPIC_BASE_URL\": \"https://corp.example\",\n    \"ANTHROPIC_MODEL\": \"opus\"\n  }\n}\n"
    );
    assert!(out.notes.iter().any(|n| n.contains("ANTHROPIC_MODEL")), "{:?}", out.notes);
    let backup = out.backup.expect("backup kept after a partial undo");
    assert_eq!(std::fs::read_to_string(backup).expect("backup"), original);
}

#[test]
fn undo_after_edits_removes_keyhavens_codex_entries_only() {
    let fx = Fixture::new();
    fx.write(Client::Codex, CODEX_CONFIG);
    fx.route(Client::Codex, &SetupOptions { model: Some("claude-sonnet".into()), ..SetupOptions::default() });
    let edited = fx.read(Client::Codex).replace("approval_policy=\"on-request\"", "approval_policy=\"never\"");
    fx.write(Client::Codex, &edited);
    fx.undo(Client::Codex);
    assert_eq!(
        fx.read(Client::Codex),
        CODEX_CONFIG.replace("approval_policy=\"on-request\"", "approval_policy=\"never\"")
    );
}

#[test]
fn dry_run_changes_nothing_and_shows_the_diff() {
    let fx = Fixture::new();
    fx.write(Client::ClaudeCode, CLAUDE_SETTINGS);
    let before = fx.tree();
    let plan = plan_route(&fx.env, Client::ClaudeCode, &SetupOptions::default(), &fx.tokens()).expect("plan");
    let diff = plan.diff();
    assert!(diff.contains("+    \"ANTHROPIC_BASE_URL\": \"http://127.0.0.1:4937\","), "{diff}");
    assert!(diff.contains("+    \"ANTHROPIC_AUTH_TOKEN\": \"[REDACTED]\","), "the token is not printed: {diff}");
    let file = fx.path(Client::ClaudeCode).display().to_string();
    assert!(diff.starts_with(&format!("--- {file}\n+++ {file}\n@@ ")), "{diff}");
    drop(plan);
    assert_eq!(fx.tree(), before, "a dry run writes nothing");
    assert!(fx.tokens().clients().expect("clients").is_empty(), "and stores no token");

    fx.route(Client::ClaudeCode, &SetupOptions::default());
    let before = fx.tree();
    let undo = plan_undo(&fx.env, Client::ClaudeCode, &fx.tokens()).expect("plan undo");
    assert!(undo.diff().contains("-    \"ANTHROPIC_AUTH_TOKEN\": \"[REDACTED]\","), "{}", undo.diff());
    drop(undo);
    assert_eq!(fx.tree(), before);
}

#[test]
fn routing_twice_changes_nothing_the_second_time() {
    let fx = Fixture::new();
    fx.write(Client::Cursor, CURSOR_SETTINGS);
    fx.write(Client::Codex, CODEX_CONFIG);
    for client in [Client::Cursor, Client::Codex] {
        fx.route(client, &SetupOptions::default());
        let once = fx.tree();
        let plan = plan_route(&fx.env, client, &SetupOptions::default(), &fx.tokens()).expect("plan");
        assert!(plan.is_noop() && plan.diff().is_empty());
        let out = plan.apply(&fx.env, &fx.tokens()).expect("apply");
        assert!(!out.changed);
        assert_eq!(fx.tree(), once, "{client}: no second backup, no rewrite");
        assert_eq!(fx.backups(client).len(), 1);
    }
    fx.undo(Client::Cursor);
    fx.undo(Client::Codex);
    assert_eq!(fx.read(Client::Cursor), CURSOR_SETTINGS);
    assert_eq!(fx.read(Client::Codex), CODEX_CONFIG);
}

#[test]
fn rerouting_over_user_edits_keeps_them_on_undo() {
    let fx = Fixture::new();
    fx.write(Client::Cursor, CURSOR_SETTINGS);
    fx.route(Client::Cursor, &SetupOptions::default());
    let edited = fx.read(Client::Cursor).replace("14", "16");
    fx.write(Client::Cursor, &edited);
    // Routing again with a new option writes over the user's edit; the original backup stays
    // the only one, and undo must not throw the edit away.
    fx.route(Client::Cursor, &SetupOptions { disable_http2: true, ..SetupOptions::default() });
    assert_eq!(fx.backups(Client::Cursor).len(), 1);
    fx.undo(Client::Cursor);
    assert_eq!(fx.read(Client::Cursor), CURSOR_SETTINGS.replace("14", "16"));
}

#[cfg(unix)]
#[test]
fn a_symlinked_config_is_edited_through_the_link() {
    let fx = Fixture::new();
    let real = fx.root.join("dotfiles").join("settings.json");
    std::fs::create_dir_all(real.parent().expect("parent")).expect("mkdir");
    std::fs::write(&real, CLAUDE_SETTINGS).expect("write");
    let link = fx.path(Client::ClaudeCode);
    std::fs::create_dir_all(link.parent().expect("parent")).expect("mkdir");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    fx.route(Client::ClaudeCode, &SetupOptions::default());
    assert!(std::fs::symlink_metadata(&link).expect("meta").file_type().is_symlink(), "the link stays a link");
    assert!(std::fs::read_to_string(&real).expect("real").contains("ANTHROPIC_BASE_URL"));
    fx.undo(Client::ClaudeCode);
    assert_eq!(std::fs::read_to_string(&real).expect("real"), CLAUDE_SETTINGS);
}

#[test]
fn undo_without_a_record_is_refused() {
    let fx = Fixture::new();
    let err = setup::undo(&fx.env, Client::Codex, &fx.tokens()).expect_err("refused");
    assert_eq!(err.kind(), "setup_not_routed");
}

/// A token issued by setup names the client in the call history, and a gateway that requires
/// tokens refuses calls without one.
#[tokio::test]
async fn client_tokens_name_the_client_and_can_be_required() {
    use std::sync::Arc;

    use crate::support::fixtures::{Case, request, upstream_sse};
    use crate::support::{Client as Dialect, MockUpstream, Reply, TestEngine, Up, config_text};
    use keyhaven::secrets::MemoryKeyring;
    use secrecy::ExposeSecret;

    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Anthropic, Case::Text)));
    let dir = tempfile::tempdir().expect("dir");
    let keyring = Arc::new(MemoryKeyring::default());
    let tokens = keyhaven::setup::ClientTokens::new(keyring.clone(), dir.path());
    let token = tokens.issue("claude-code").expect("issue");
    let config = config_text(&mock.url(), "require_client_token = true");
    let engine = TestEngine::start_with_keyring(dir, &config, keyring).await;
    let body = request(Dialect::Anthropic, "an-model", false, Case::Text);

    let refused = engine.post(Dialect::Anthropic, &body).await;
    assert_eq!(refused.status(), 401);
    let wrong = engine
        .http
        .post(engine.url("/v1/messages"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer kh-not-a-real-token")
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(wrong.status(), 401);
    let ok = engine
        .http
        .post(engine.url("/v1/messages"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", token.expose_secret()))
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(ok.status(), 200);
    let row = engine.only_call().await;
    assert_eq!(row.summary.client, "claude-code");
    assert_eq!(mock.seen().len(), 1, "refused calls never reached the upstream");

    // Every /v1 route checks the token (issue 14 §5): the token count calls the provider and the
    // model list names what the user pays for.
    let count_body = serde_json::json!({"model": "an-model", "messages": [{"role": "user", "content": "hi"}]});
    let bearer = format!("Bearer {}", token.expose_secret());
    for (path, auth) in [("/v1/messages/count_tokens", None), ("/v1/messages/count_tokens", Some("Bearer kh-nope"))] {
        let mut req = engine.http.post(engine.url(path)).header("content-type", "application/json").json(&count_body);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.expect("send");
        assert_eq!(resp.status(), 401, "{path} {auth:?}");
        let v: serde_json::Value = resp.json().await.expect("json");
        assert_eq!(v["type"], "error", "Anthropic's error shape: {v}");
        assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    }
    for anthropic in [false, true] {
        let mut req = engine.http.get(engine.url("/v1/models"));
        if anthropic {
            req = req.header("anthropic-version", "2023-06-01");
        }
        let resp = req.send().await.expect("send");
        assert_eq!(resp.status(), 401, "/v1/models without a token (anthropic-version: {anthropic})");
    }
    let models = engine.http.get(engine.url("/v1/models")).header("authorization", &bearer).send().await.expect("send");
    assert_eq!(models.status(), 200);
    let v: serde_json::Value = models.json().await.expect("json");
    assert!(v["data"].as_array().expect("list").iter().any(|m| m["id"] == "an-model"), "{v}");
    let keyed = engine
        .http
        .get(engine.url("/v1/models"))
        .header("x-api-key", token.expose_secret())
        .send()
        .await
        .expect("send");
    assert_eq!(keyed.status(), 200, "x-api-key carries the token too");
    let health = engine.http.get(engine.url("/health")).send().await.expect("send");
    assert_eq!(health.status(), 200, "/health needs no token");
    assert_eq!(mock.seen().len(), 1, "no refused call reached the upstream");
    engine.stop().await;
}

/// A config with a real Anthropic provider, an Anthropic-shaped proxy, an OpenAI provider and a
/// group led by the real Anthropic model.
const TOOL_SEARCH_CONFIG: &str = r#"
[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "https://api.anthropic.com/v1"
key = "env:ANTHROPIC_API_KEY"

[[providers]]
name = "proxy"
kind = "anthropic"
base_url = "https://anthropic.corp.example/v1"
key = "env:PROXY_KEY"

[[providers]]
name = "openai"
kind = "openai"
base_url = "https://api.openai.com/v1"
key = "env:OPENAI_API_KEY"

[[models]]
name = "sonnet"
aliases = ["claude-sonnet"]
provider = "anthropic"
upstream = "claude-sonnet-4-5"

[[models]]
name = "proxied"
provider = "proxy"
upstream = "claude-sonnet-4-5"

[[models]]
name = "gpt"
provider = "openai"
upstream = "gpt-5"

[[groups]]
name = "smart"
models = ["sonnet", "gpt"]

[[groups]]
name = "cheap"
models = ["gpt", "sonnet"]
"#;

#[test]
fn tool_search_only_behind_a_real_anthropic_endpoint() {
    let config = keyhaven::config::load_str("tool-search.toml", TOOL_SEARCH_CONFIG).expect("config");
    for (model, want) in [
        ("sonnet", true),
        ("claude-sonnet", true),
        ("smart", true),
        ("proxied", false),
        ("gpt", false),
        ("cheap", false),
        ("unknown", false),
    ] {
        assert_eq!(setup::serves_on_anthropic(&config, model), want, "{model}");
    }
    // Look-alike origins are not Anthropic's.
    for base in
        ["http://api.anthropic.com/v1", "https://api.anthropic.com.evil.example/v1", "https://x.api.anthropic.com"]
    {
        let text = TOOL_SEARCH_CONFIG.replace("https://api.anthropic.com/v1", base);
        let config = keyhaven::config::load_str("tool-search.toml", &text).expect("config");
        assert!(!setup::serves_on_anthropic(&config, "sonnet"), "{base}");
    }
}

#[test]
fn claude_code_tool_search_is_set_and_restored_exactly() {
    let fx = Fixture::new();
    fx.write(Client::ClaudeCode, CLAUDE_SETTINGS);
    let opts = SetupOptions { model: Some("sonnet".into()), tool_search: true, ..SetupOptions::default() };
    fx.route(Client::ClaudeCode, &opts);
    let token = fx.token(Client::ClaudeCode);
    let expected = CLAUDE_SETTINGS.replace(
        "    \"DISABLE_TELEMETRY\": \"1\",\n",
        &format!(
            "    \"DISABLE_TELEMETRY\": \"1\",\n    \"ANTHROPIC_BASE_URL\": \"http://127.0.0.1:4937\",\n    \"ANTHROPIC_AUTH_TOKEN\": \"{token}\",\n    \"ANTHROPIC_MODEL\": \"sonnet\",\n    \"ENABLE_TOOL_SEARCH\": \"true\",\n"
        ),
    );
    assert_eq!(fx.read(Client::ClaudeCode), expected);

    // Routed again to a model elsewhere: the key goes, the rest stays.
    let opts = SetupOptions { model: Some("gpt".into()), tool_search: false, ..SetupOptions::default() };
    fx.route(Client::ClaudeCode, &opts);
    let routed = fx.read(Client::ClaudeCode);
    assert!(!routed.contains("ENABLE_TOOL_SEARCH"), "{routed}");
    assert!(routed.contains("\"ANTHROPIC_MODEL\": \"gpt\""), "{routed}");

    fx.undo(Client::ClaudeCode);
    assert_eq!(fx.read(Client::ClaudeCode), CLAUDE_SETTINGS);

    // A value the user had before comes back on undo.
    let own = CLAUDE_SETTINGS.replace(
        "    \"DISABLE_TELEMETRY\": \"1\",\n",
        "    \"DISABLE_TELEMETRY\": \"1\",\n    \"ENABLE_TOOL_SEARCH\": \"false\",\n",
    );
    fx.write(Client::ClaudeCode, &own);
    let opts = SetupOptions { model: Some("sonnet".into()), tool_search: true, ..SetupOptions::default() };
    fx.route(Client::ClaudeCode, &opts);
    assert!(fx.read(Client::ClaudeCode).contains("\"ENABLE_TOOL_SEARCH\": \"true\""));
    fx.undo(Client::ClaudeCode);
    assert_eq!(fx.read(Client::ClaudeCode), own);
}
