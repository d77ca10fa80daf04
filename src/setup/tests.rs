//! Unit tests of the setup module: format-preserving edits, value hashing, tokens and exports.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use expect_test::expect;
use secrecy::ExposeSecret;
use serde_json::json;

use crate::secrets::MemoryKeyring;
use crate::setup::doc::{Doc, Edit, Format, value_hash};
use crate::setup::{ClientTokens, Platform, SetupEnv, env_exports, env_unsets, generate_token};

fn k(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

fn set(path: &[&str], v: serde_json::Value) -> Edit {
    Edit { path: k(path), value: Some(v) }
}

fn edit(format: Format, text: &str, edits: &[Edit]) -> String {
    let file = Path::new("fixture");
    let mut doc = Doc::parse(format, file, text).expect("parses");
    doc.apply(file, edits).expect("applies");
    doc.render()
}

const CURSOR_JSONC: &str = r#"// Cursor user settings
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

#[test]
fn jsonc_edit_keeps_comments_order_and_trailing_commas() {
    let out = edit(
        Format::Jsonc,
        CURSOR_JSONC,
        &[
            set(&["http.proxy"], json!("http://127.0.0.1:4938")),
            set(&["http.proxySupport"], json!("on")),
            set(&["http.experimental.systemCertificatesV2"], json!(true)),
        ],
    );
    expect![[r#"
        // Cursor user settings
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
    "#]]
    .assert_eq(&out);
}

#[test]
fn jsonc_nested_object_is_created_and_removed_again() {
    let text = "{\n  \"theme\": \"dark\" // keep\n}\n";
    let file = Path::new("fixture");
    let mut doc = Doc::parse(Format::Jsonc, file, text).expect("parses");
    let created =
        doc.apply(file, &[set(&["env", "ANTHROPIC_BASE_URL"], json!("http://127.0.0.1:4937"))]).expect("applies");
    assert_eq!(created, vec![k(&["env"])]);
    expect![[r#"
        {
          "theme": "dark", // keep
          "env": {
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:4937"
          }
        }
    "#]]
    .assert_eq(&doc.render());
    doc.apply(file, &[Edit { path: k(&["env", "ANTHROPIC_BASE_URL"]), value: None }]).expect("removes");
    doc.remove_if_empty(file, &k(&["env"])).expect("removes env");
    assert_eq!(doc.render(), text);
}

#[test]
fn jsonc_empty_file_becomes_an_object() {
    let out = edit(Format::Jsonc, "", &[set(&["a"], json!(1))]);
    expect![[r#"
        {
          "a": 1
        }
    "#]]
    .assert_eq(&out);
}

#[test]
fn jsonc_non_object_root_and_non_object_parent_are_refused() {
    let file = Path::new("fixture");
    let err = Doc::parse(Format::Jsonc, file, "[1, 2]").expect_err("refused");
    assert_eq!(err.kind(), "setup_unexpected_shape");
    let mut doc = Doc::parse(Format::Jsonc, file, r#"{"env": "oops"}"#).expect("parses");
    let err = doc.apply(file, &[set(&["env", "X"], json!("y"))]).expect_err("refused");
    assert_eq!(err.kind(), "setup_unexpected_shape");
    assert_eq!(doc.render(), r#"{"env": "oops"}"#);
}

#[test]
fn invalid_jsonc_is_a_parse_error() {
    let err = Doc::parse(Format::Jsonc, Path::new("f"), "{ \"a\": }").expect_err("refused");
    assert_eq!(err.kind(), "setup_parse");
}

const CODEX_TOML: &str = r#"# Codex config
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

#[test]
fn toml_edit_keeps_comments_order_and_formatting() {
    let out = edit(
        Format::Toml,
        CODEX_TOML,
        &[
            set(&["model"], json!("claude-sonnet")),
            set(&["model_provider"], json!("keyhaven")),
            set(
                &["model_providers", "keyhaven"],
                json!({
                    "name": "Keyhaven",
                    "base_url": "http://127.0.0.1:4937/v1",
                    "wire_api": "responses",
                    "http_headers": { "Authorization": "Bearer kh-x" },
                }),
            ),
        ],
    );
    expect![[r##"
        # Codex config
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
        http_headers = { Authorization = "Bearer kh-x" }

        # MCP servers
        [mcp_servers.foo]
        command = "npx"
        args = [ "-y", "foo" ]
    "##]]
    .assert_eq(&out);
}

#[test]
fn toml_values_read_back_as_json() {
    let file = Path::new("f");
    let doc = Doc::parse(Format::Toml, file, CODEX_TOML).expect("parses");
    assert_eq!(doc.get(file, &k(&["model"])).expect("reads"), Some(json!("o3")));
    assert_eq!(
        doc.get(file, &k(&["model_providers", "other"])).expect("reads"),
        Some(json!({"name": "Other", "base_url": "https://example.com/v1"}))
    );
    assert_eq!(doc.get(file, &k(&["nope", "x"])).expect("reads"), None);
}

#[test]
fn edit_to_the_same_value_changes_no_byte() {
    let out = edit(Format::Toml, CODEX_TOML, &[set(&["model"], json!("o3"))]);
    assert_eq!(out, CODEX_TOML);
    let out = edit(Format::Jsonc, CURSOR_JSONC, &[set(&["http.proxy"], json!("http://corp:3128"))]);
    assert_eq!(out, CURSOR_JSONC);
}

#[test]
fn value_hash_ignores_key_order() {
    assert_eq!(value_hash(&json!({"a": 1, "b": [true, "x"]})), value_hash(&json!({"b": [true, "x"], "a": 1})));
    assert_ne!(value_hash(&json!("1")), value_hash(&json!(1)));
}

#[test]
fn tokens_are_prefixed_random_and_map_back_to_their_client() {
    let a = generate_token();
    let b = generate_token();
    assert!(a.expose_secret().starts_with("kh-"));
    assert_eq!(a.expose_secret().len(), 3 + 64, "256 bits in hex");
    assert_ne!(a.expose_secret(), b.expose_secret());

    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = ClientTokens::new(Arc::new(MemoryKeyring::default()), dir.path());
    let codex = tokens.issue("codex").expect("issues");
    let again = tokens.issue("codex").expect("reuses");
    assert_eq!(codex.expose_secret(), again.expose_secret());
    let claude = tokens.issue("claude-code").expect("issues");
    assert_eq!(tokens.client_for_token(codex.expose_secret()).as_deref(), Some("codex"));
    assert_eq!(tokens.client_for_token(claude.expose_secret()).as_deref(), Some("claude-code"));
    assert_eq!(tokens.client_for_token("kh-0000"), None);
    assert_eq!(tokens.clients().expect("lists"), vec!["claude-code".to_owned(), "codex".to_owned()]);
    let registry = std::fs::read_to_string(dir.path().join("client-tokens.json")).expect("registry");
    assert!(!registry.contains(codex.expose_secret()), "the registry holds names only");
    assert!(tokens.revoke("codex").expect("revokes"));
    assert_eq!(tokens.client_for_token(codex.expose_secret()), None);
    assert_eq!(tokens.clients().expect("lists"), vec!["claude-code".to_owned()]);
}

fn env(platform: Platform) -> SetupEnv {
    SetupEnv {
        home: PathBuf::from("/home/u"),
        platform,
        appdata: None,
        data_dir: PathBuf::from("/data"),
        gateway_url: "http://127.0.0.1:4937/".into(),
        proxy_url: "http://127.0.0.1:4938".into(),
    }
}

#[test]
fn env_exports_per_shell() {
    expect![[r#"
        export OPENAI_BASE_URL='http://127.0.0.1:4937/v1'
        export OPENAI_API_KEY='kh-abc'
        export ANTHROPIC_BASE_URL='http://127.0.0.1:4937'
        export ANTHROPIC_AUTH_TOKEN='kh-abc'
    "#]]
    .assert_eq(&env_exports(&env(Platform::Linux), "kh-abc"));
    expect![[r#"
        $env:OPENAI_BASE_URL = 'http://127.0.0.1:4937/v1'
        $env:OPENAI_API_KEY = 'kh-abc'
        $env:ANTHROPIC_BASE_URL = 'http://127.0.0.1:4937'
        $env:ANTHROPIC_AUTH_TOKEN = 'kh-abc'
    "#]]
    .assert_eq(&env_exports(&env(Platform::Windows), "kh-abc"));
    expect![[r#"
        unset OPENAI_BASE_URL OPENAI_API_KEY ANTHROPIC_BASE_URL ANTHROPIC_AUTH_TOKEN
    "#]]
    .assert_eq(&env_unsets(&env(Platform::MacOs)));
}

/// A machine without an OS keyring (every call answers `Unavailable`, as the Secret Service
/// does when no D-Bus session can be reached).
struct NoKeyring;

impl crate::secrets::Keyring for NoKeyring {
    fn get(&self, _: &str) -> Result<Option<secrecy::SecretString>, crate::secrets::SecretError> {
        Err(crate::secrets::SecretError::Unavailable("DBus error: Unable to autolaunch a dbus-daemon".into()))
    }
    fn set(&self, _: &str, _: &secrecy::SecretString) -> Result<(), crate::secrets::SecretError> {
        Err(crate::secrets::SecretError::Unavailable("DBus error: Unable to autolaunch a dbus-daemon".into()))
    }
    fn delete(&self, _: &str) -> Result<bool, crate::secrets::SecretError> {
        Err(crate::secrets::SecretError::Unavailable("DBus error: Unable to autolaunch a dbus-daemon".into()))
    }
}

/// Issue 14 §8: without a keyring, client tokens live in 0600 files in a 0700 directory, like
/// the CA key; with one, no file exists.
#[test]
fn client_tokens_fall_back_to_private_files_without_a_keyring() {
    use crate::setup::TokenLocation;
    let dir = tempfile::tempdir().expect("dir");
    let tokens = ClientTokens::new(Arc::new(NoKeyring), dir.path());
    assert!(tokens.get("env").expect("get").is_none());
    let t = tokens.issue("env").expect("issued without a keyring");
    let file = dir.path().join("client-tokens").join("env");
    assert_eq!(std::fs::read_to_string(&file).expect("token file"), t.expose_secret());
    assert_eq!(tokens.location("env").expect("location"), Some(TokenLocation::File(file.clone())));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600, "the token file is the user's only");
        assert_eq!(mode(&dir.path().join("client-tokens")), 0o700);
    }
    assert_eq!(tokens.issue("env").expect("again").expose_secret(), t.expose_secret(), "the same token again");
    assert_eq!(tokens.client_for_token(t.expose_secret()).as_deref(), Some("env"), "the gateway finds it");
    assert_eq!(tokens.client_for_token("kh-0000").as_deref(), None);
    assert!(tokens.revoke("env").expect("revoke"));
    assert!(!file.exists(), "revoked tokens leave no file");
    assert!(tokens.get("env").expect("get").is_none());
    assert!(tokens.issue("../escape").is_err(), "a client name is never a path");

    // With a keyring: no file; a token written to a file earlier is still found, and storing it
    // again moves it into the keyring (one copy).
    let keyring = Arc::new(MemoryKeyring::default());
    let old = ClientTokens::new(Arc::new(NoKeyring), dir.path()).issue("codex").expect("file token");
    let tokens = ClientTokens::new(keyring, dir.path());
    assert_eq!(
        tokens.get("codex").expect("get").map(|t| t.expose_secret().to_owned()),
        Some(old.expose_secret().to_owned())
    );
    tokens.store("codex", &old).expect("store");
    assert_eq!(tokens.location("codex").expect("location"), Some(TokenLocation::Keyring));
    assert!(!dir.path().join("client-tokens").join("codex").exists(), "moved into the keyring");
    tokens.issue("cursor").expect("issue");
    assert!(!dir.path().join("client-tokens").join("cursor").exists(), "a keyring keeps it; no file");
}
