//! Unit tests of the control service's pure parts: bindings freshness, percentiles, windows,
//! config edits that keep comments, the token file and the log ring.

use std::path::Path;

use crate::config::{FileConfig, load_str};
use crate::control::dto;
use crate::control::edit::ConfigFile;
use crate::control::logs::LogRing;
use crate::control::token::ControlToken;
use crate::control::usage::{percentile, window};
use crate::control::{ControlError, bindings};
use crate::pricing::PriceTable;
use crate::store::LATENCY_BOUNDS_MS;

#[test]
fn bindings_are_fresh() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(bindings::PATH);
    let want = bindings::render();
    if std::env::var_os("UPDATE_BINDINGS").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, &want).expect("write bindings");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is stale; regenerate it with `UPDATE_BINDINGS=1 cargo test --lib control::tests::bindings_are_fresh`",
        bindings::PATH
    );
}

#[test]
fn percentiles_are_bucket_upper_bounds() {
    let mut counts = vec![0u64; LATENCY_BOUNDS_MS.len() + 1];
    assert_eq!(percentile(&counts, 0.5), None);
    counts[0] = 50; // <= 50 ms
    counts[3] = 45; // <= 300 ms
    counts[LATENCY_BOUNDS_MS.len()] = 5; // slower than the last bound
    assert_eq!(percentile(&counts, 0.5), Some(50));
    assert_eq!(percentile(&counts, 0.51), Some(300));
    assert_eq!(percentile(&counts, 0.95), Some(300));
    assert_eq!(percentile(&counts, 0.99), Some(1_800_001));
}

#[test]
fn windows_end_today_and_are_clamped() {
    let today = time::macros::date!(2026 - 03 - 01);
    assert_eq!(window(today, 1), ("2026-03-01".to_owned(), "2026-03-01".to_owned()));
    assert_eq!(window(today, 2), ("2026-02-28".to_owned(), "2026-03-01".to_owned()));
    assert_eq!(window(today, 100_000).0, "2025-03-01");
}

const COMMENTED: &str = r#"# My Keyhaven config. Keep this comment.

[server]
listen = "127.0.0.1:4937"   # my port
retention_days = 30 # a month

[[providers]]
# The main one.
name = "oa"
kind = "openai"
base_url = "https://example.test/v1"   # trailing comment survives
key = "keyring:oa"

[[models]]
name = "m1"      # keep me
provider = "oa"
upstream = "gpt-4o-mini"
"#;

fn provider(name: &str) -> dto::ProviderInput {
    dto::ProviderInput {
        name: name.into(),
        kind: dto::ProviderKind::Anthropic,
        base_url: "https://anthropic.test/v1".into(),
        key: Some(dto::KeyRefInput { source: dto::KeySource::Keyring, name: "an".into() }),
        reasoning_content: None,
        max_completion_tokens: None,
        key_value: None,
    }
}

async fn edit(
    cf: &ConfigFile,
    f: impl FnOnce(&mut toml_edit::DocumentMut, &FileConfig) -> Result<(), ControlError> + Send + 'static,
) -> Result<FileConfig, ControlError> {
    let prices = PriceTable::builtin().expect("prices");
    let _guard = cf.lock.lock().await;
    cf.edit(FileConfig::default(), prices, crate::secrets::Secrets::empty(), f).await.map(|(file, _)| file)
}

#[tokio::test]
async fn config_edits_keep_comments_and_untouched_formatting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, COMMENTED).expect("write");
    let cf = ConfigFile::new(Some(path.clone()));

    let file = edit(&cf, |doc, _| {
        crate::control::edit::add_provider(doc, &provider("an"));
        Ok(())
    })
    .await
    .expect("add");
    assert_eq!(file.providers.len(), 2);
    // Edit the model: only `upstream` changes; its line keeps the comment, others stay verbatim.
    edit(&cf, |doc, _| {
        let m = dto::ModelInput {
            name: "m1".into(),
            aliases: vec![],
            provider: "oa".into(),
            upstream: "gpt-4.1-mini".into(),
            context_window: None,
            max_output_tokens: None,
            capabilities: None,
            tools: None,
            price: None,
        };
        crate::control::edit::update_model(doc, "m1", &m)
    })
    .await
    .expect("update");
    let text = std::fs::read_to_string(&path).expect("read");
    for line in [
        "# My Keyhaven config. Keep this comment.",
        "listen = \"127.0.0.1:4937\"   # my port",
        "retention_days = 30 # a month",
        "# The main one.",
        "base_url = \"https://example.test/v1\"   # trailing comment survives",
        "name = \"m1\"      # keep me",
        "upstream = \"gpt-4.1-mini\"",
    ] {
        assert!(text.contains(line), "lost {line:?} in:\n{text}");
    }
    assert!(load_str("t", &text).is_ok());
    assert!(!dir.path().read_dir().expect("ls").flatten().any(|e| e.file_name().to_string_lossy().ends_with(".tmp")));
}

#[tokio::test]
async fn an_invalid_edit_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, COMMENTED).expect("write");
    let cf = ConfigFile::new(Some(path.clone()));
    // A model on a provider that does not exist.
    let err = edit(&cf, |doc, _| {
        let m = dto::ModelInput {
            name: "m2".into(),
            aliases: vec![],
            provider: "nope".into(),
            upstream: "x".into(),
            context_window: None,
            max_output_tokens: None,
            capabilities: None,
            tools: None,
            price: None,
        };
        crate::control::edit::add_model(doc, &m);
        Ok(())
    })
    .await
    .expect_err("refused");
    assert_eq!(err.kind(), "invalid");
    assert!(err.to_string().contains("nope"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).expect("read"), COMMENTED);
    let none = ConfigFile::new(None);
    assert_eq!(edit(&none, |_, _| Ok(())).await.expect_err("no file").kind(), "unavailable");
}

#[test]
fn the_control_token_is_random_private_and_stable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = ControlToken::load_or_create(dir.path()).expect("create");
    assert_eq!(a.expose().len(), 64, "256 bits in hex");
    let b = ControlToken::load_or_create(dir.path()).expect("load");
    assert_eq!(a.expose(), b.expose());
    assert!(a.verify(b.expose()));
    assert!(!a.verify(""));
    assert!(!a.verify(&a.expose()[..63]));
    assert!(!format!("{a:?}").contains(a.expose()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(ControlToken::path(dir.path())).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let other = tempfile::tempdir().expect("tempdir");
    assert_ne!(ControlToken::load_or_create(other.path()).expect("create").expose(), a.expose());
}

#[tokio::test]
async fn the_log_ring_is_bounded_and_feeds_subscribers() {
    use tracing_subscriber::layer::SubscriberExt;
    let ring = LogRing::new(3);
    let mut rx = ring.subscribe();
    let subscriber = tracing_subscriber::registry().with(ring.layer());
    tracing::subscriber::with_default(subscriber, || {
        for i in 0..5 {
            tracing::info!(n = i, "line {i}");
        }
    });
    let tail = ring.tail(10);
    assert_eq!(tail.len(), 3);
    assert_eq!(tail[0].message, "line 2 n=2");
    assert_eq!(tail[2].level, "INFO");
    assert_eq!(ring.tail(1)[0].seq, 5);
    assert_eq!(ring.after(4, 10).len(), 1);
    assert_eq!(rx.recv().await.expect("live").message, "line 0 n=0");
}

#[test]
fn errors_serialise_as_kind_and_message_and_key_input_hides_the_key() {
    let e = ControlError::NotFound("no model named `x`".into());
    let json = serde_json::to_value(&e).expect("json");
    assert_eq!(json, serde_json::json!({ "kind": "not_found", "message": "no model named `x`" }));
    let k: dto::KeyInput = serde_json::from_str(r#"{"value":"sk-secret-123"}"#).expect("parse");
    assert!(!format!("{k:?}").contains("sk-secret"));
}

#[test]
fn the_ca_keys_entry_is_never_a_provider_key() {
    assert!(crate::secrets::RESERVED_ENTRIES.contains(&crate::proxy::ca::KEYRING_ENTRY));
}
