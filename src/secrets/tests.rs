//! Key resolution tests. `os_keyring_round_trip` needs a real Secret Service (run under
//! `dbus-run-session` with an unlocked gnome-keyring, as `.ci/run` does); without one it is
//! skipped with a message, but the backend check below always runs.

use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};

use crate::config::KeyRef;
use crate::secrets::{EntryState, Keyring, MemoryKeyring, OsKeyring, RESERVED_ENTRIES, SecretError, Secrets, redact};

#[test]
fn keyring_backend_persists() {
    // Building keyring without a platform store silently uses its in-memory mock; that would
    // lose every key at exit.
    let persistence = keyring::default::default_credential_builder().persistence();
    assert!(
        matches!(persistence, keyring::credential::CredentialPersistence::UntilDelete),
        "keyring default store does not persist; build keyring with a platform store"
    );
}

const ORIGIN: &str = "https://api.example.com";

#[test]
fn resolves_keyring_and_env_and_caches() {
    let kr = Arc::new(MemoryKeyring::default());
    let secrets = Secrets::new(kr.clone(), Arc::new(|v| (v == "E").then(|| "sk-env".to_owned())));
    secrets.store("a", "https://api.example.com/v1", &SecretString::from("sk-aaaa")).expect("store");
    let a = secrets.resolve(&KeyRef::Keyring("a".into()), ORIGIN).expect("a");
    assert_eq!(a.for_url("https://api.example.com/v1/messages").expect("same origin").expose_secret(), "sk-aaaa");
    kr.delete("a").expect("delete");
    assert!(secrets.resolve(&KeyRef::Keyring("a".into()), ORIGIN).is_ok(), "cached");
    secrets.clear_cache();
    let err = secrets.resolve(&KeyRef::Keyring("a".into()), ORIGIN).expect_err("must fail");
    assert!(matches!(err, SecretError::MissingKeyring(_)));
    assert!(err.to_string().contains("keyhaven key set a"));
    assert!(matches!(secrets.resolve(&KeyRef::Env("NOPE".into()), ORIGIN), Err(SecretError::MissingEnv(_))));
}

#[test]
fn keyring_values_are_envelopes_with_the_origin() {
    let kr = Arc::new(MemoryKeyring::default());
    let secrets = Secrets::new(kr.clone(), Arc::new(|_| None));
    secrets.store("a", "https://API.Example.com:443/v1/", &SecretString::from("sk-aaaa")).expect("store");
    let raw = kr.get("a").expect("get").expect("present");
    let v: serde_json::Value = serde_json::from_str(raw.expose_secret()).expect("json");
    assert_eq!(v, serde_json::json!({"keyhaven_key": 1, "origin": "https://api.example.com", "key": "sk-aaaa"}));
}

#[test]
fn a_bound_key_goes_to_its_origin_only() {
    let kr = Arc::new(MemoryKeyring::default());
    let secrets = Secrets::new(kr, Arc::new(|_| None));
    secrets.store("a", ORIGIN, &SecretString::from("sk-aaaa")).expect("store");
    let key = secrets.resolve(&KeyRef::Keyring("a".into()), "http://127.0.0.1:9").expect("resolves");
    assert!(key.for_url("https://api.example.com/anything?x=1").is_ok());
    for other in [
        "http://api.example.com/v1",
        "https://api.example.com:8443/v1",
        "https://evil.example.com/v1",
        "https://api.example.com.evil.test/v1",
        "http://127.0.0.1:9/v1",
        "lingma://local",
        "not a url",
    ] {
        let err = key.for_url(other).expect_err(other);
        assert_eq!(err.kind(), "key_origin", "{other}");
        assert!(!err.to_string().contains("sk-aaaa"));
    }
}

#[test]
fn a_legacy_entry_is_bound_on_first_use() {
    let kr = Arc::new(MemoryKeyring::default());
    kr.set("old", &SecretString::from("sk-legacy")).expect("set");
    let secrets = Secrets::new(kr.clone(), Arc::new(|_| None));
    assert_eq!(secrets.entry_state("old").expect("state"), EntryState::Unbound);
    let key = secrets.resolve(&KeyRef::Keyring("old".into()), "https://first.example/v1").expect("resolves");
    assert!(key.for_url("https://first.example/v1/chat/completions").is_ok());
    assert_eq!(secrets.entry_state("old").expect("state"), EntryState::Bound("https://first.example".into()));
    secrets.clear_cache();
    let again = secrets.resolve(&KeyRef::Keyring("old".into()), "https://second.example").expect("resolves");
    assert!(again.for_url("https://second.example/v1").is_err(), "the first use decided");
    assert_eq!(again.redaction().expose_secret(), "sk-legacy");
}

#[test]
fn env_keys_go_to_the_origins_the_start_config_pairs_them_with() {
    let file = crate::config::load_str(
        "t.toml",
        r#"
[[providers]]
name = "a"
kind = "openai"
base_url = "https://api.example.com/v1"
key = "env:E"
"#,
    )
    .expect("config");
    let base = Secrets::new(Arc::new(MemoryKeyring::default()), Arc::new(|v| (v == "E").then(|| "sk-env".into())));
    let unbound = base.resolve(&KeyRef::Env("E".into()), ORIGIN).expect("resolves");
    assert!(unbound.for_url(ORIGIN).is_err(), "without a start-up config an env key goes nowhere");
    let secrets = base.with_env_origins(&file);
    let key = secrets.resolve(&KeyRef::Env("E".into()), ORIGIN).expect("resolves");
    assert_eq!(key.for_url("https://api.example.com/v1/chat").expect("paired").expose_secret(), "sk-env");
    let err = key.for_url("https://evil.example/v1").expect_err("not paired");
    assert!(matches!(err, SecretError::EnvNotBound { .. }));
}

#[test]
fn reserved_entries_are_never_keys() {
    let kr = Arc::new(MemoryKeyring::default());
    kr.set(RESERVED_ENTRIES[0], &SecretString::from("-----BEGIN PRIVATE KEY-----")).expect("set");
    let secrets = Secrets::new(kr, Arc::new(|_| None));
    let err = secrets.resolve(&KeyRef::Keyring(RESERVED_ENTRIES[0].into()), ORIGIN).expect_err("reserved");
    assert!(matches!(err, SecretError::Reserved(_)));
    assert!(secrets.store(RESERVED_ENTRIES[0], ORIGIN, &SecretString::from("x")).is_err());
}

#[test]
fn secrets_never_debug_print() {
    let s = SecretString::from("sk-canary-123456");
    assert!(!format!("{s:?}").contains("canary"));
}

#[test]
fn redact_replaces_every_occurrence() {
    let s = SecretString::from("sk-canary-123456");
    assert_eq!(redact("a sk-canary-123456 b sk-canary-123456", &[&s]), "a [REDACTED] b [REDACTED]");
}

#[test]
fn os_keyring_round_trip() {
    let name = format!("keyhaven-test-{}", std::process::id());
    let kr = OsKeyring;
    match kr.set(&name, &SecretString::from("sk-roundtrip-é")) {
        Ok(()) => {}
        Err(SecretError::Unavailable(why)) => {
            // No Secret Service on this machine; CI runs this test under one (see .ci/run).
            assert!(std::env::var_os("KEYHAVEN_REQUIRE_KEYRING").is_none(), "keyring required but unavailable: {why}");
            return;
        }
        Err(e) => panic!("{e}"),
    }
    assert_eq!(kr.get(&name).expect("get").expect("present").expose_secret(), "sk-roundtrip-é");
    assert!(kr.delete(&name).expect("delete"));
    assert!(kr.get(&name).expect("get").is_none());
    assert!(!kr.delete(&name).expect("delete again"));
}
