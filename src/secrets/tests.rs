//! Key resolution tests. `os_keyring_round_trip` needs a real Secret Service (run under
//! `dbus-run-session` with an unlocked gnome-keyring, as `.ci/run` does); without one it is
//! skipped with a message, but the backend check below always runs.

use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};

use crate::config::KeyRef;
use crate::secrets::{Keyring, MemoryKeyring, OsKeyring, SecretError, Secrets, redact};

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

#[test]
fn resolves_keyring_and_env_and_caches() {
    let kr = Arc::new(MemoryKeyring::default());
    kr.set("a", &SecretString::from("sk-aaaa")).expect("set");
    let secrets = Secrets::new(kr.clone(), Arc::new(|v| (v == "E").then(|| "sk-env".to_owned())));
    assert_eq!(secrets.resolve(&KeyRef::Keyring("a".into())).expect("a").expose_secret(), "sk-aaaa");
    assert_eq!(secrets.resolve(&KeyRef::Env("E".into())).expect("env").expose_secret(), "sk-env");
    kr.delete("a").expect("delete");
    assert!(secrets.resolve(&KeyRef::Keyring("a".into())).is_ok(), "cached");
    secrets.clear_cache();
    let err = secrets.resolve(&KeyRef::Keyring("a".into())).expect_err("must fail");
    assert!(matches!(err, SecretError::MissingKeyring(_)));
    assert!(err.to_string().contains("keyhaven key set a"));
    assert!(matches!(secrets.resolve(&KeyRef::Env("NOPE".into())), Err(SecretError::MissingEnv(_))));
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
