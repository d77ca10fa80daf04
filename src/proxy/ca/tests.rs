//! Unit tests of the local CA: parameters of issued certificates (CA-4), custody, leaves, cache.

use std::sync::Arc;

use secrecy::SecretString;
use time::{Duration, OffsetDateTime};
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::X509Certificate;

use crate::proxy::allowlist::InterceptList;
use crate::proxy::ca::{BACKDATE, CaOrigin, CaPaths, KEYRING_ENTRY, KeyLocation, LEAF_CACHE_CAP, LocalCa, remove_root};
use crate::secrets::{Keyring, MemoryKeyring, SecretError};

fn intercept() -> InterceptList {
    InterceptList::new(["cursor.sh", "cursor.com"])
}

fn parse(der: &[u8]) -> X509Certificate<'_> {
    x509_parser::parse_x509_certificate(der).expect("certificate parses").1
}

fn new_ca() -> (tempfile::TempDir, MemoryKeyring, LocalCa) {
    let dir = tempfile::tempdir().expect("tempdir");
    let keyring = MemoryKeyring::default();
    let ca = LocalCa::create(&CaPaths::new(dir.path()), &keyring, &intercept(), OffsetDateTime::now_utc()).expect("ca");
    (dir, keyring, ca)
}

fn ski(cert: &X509Certificate<'_>) -> Option<Vec<u8>> {
    cert.extensions().iter().find_map(|e| match e.parsed_extension() {
        ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0.to_vec()),
        _ => None,
    })
}

#[test]
fn root_has_the_design_bar_parameters() {
    let (_dir, _keyring, ca) = new_ca();
    let cert = parse(ca.cert_der().as_ref());
    let bc = cert.basic_constraints().expect("bc").expect("present").value;
    assert!(bc.ca);
    assert_eq!(bc.path_len_constraint, Some(0));
    let ku = cert.key_usage().expect("ku").expect("present").value;
    assert!(ku.key_cert_sign() && ku.crl_sign() && !ku.digital_signature());
    assert!(ski(&cert).is_some(), "the root has an SKI");
    let nc = cert.name_constraints().expect("nc").expect("present");
    assert!(nc.critical, "the name constraint is critical");
    let permitted: Vec<String> = nc
        .value
        .permitted_subtrees
        .iter()
        .flatten()
        .filter_map(|s| match s.base {
            GeneralName::DNSName(d) => Some(d.to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(permitted, ["cursor.com", "cursor.sh"]);
    let excluded = nc.value.excluded_subtrees.as_ref().expect("excluded").len();
    assert_eq!(excluded, 2, "every IPv4 and IPv6 address is excluded");
    assert!(cert.raw_serial().len() >= 8, "serial has at least 64 bits");
    assert!(cert.subject().to_string().contains("Keyhaven Local CA "));
    let nb = cert.validity().not_before.timestamp();
    let now = OffsetDateTime::now_utc().unix_timestamp();
    assert!(nb <= now && nb >= now - 2 * 86_400, "explicit, slightly backdated notBefore");
    assert!(cert.validity().not_after.timestamp() < now + 4 * 366 * 86_400, "never the 4096 default");
}

#[test]
fn leaves_have_san_aki_eku_and_short_validity() {
    let (_dir, _keyring, ca) = new_ca();
    let root = parse(ca.cert_der().as_ref());
    let root_ski = ski(&root).expect("root ski");
    let now = OffsetDateTime::now_utc();
    let mut leaf_keys = Vec::new();
    for host in ["api2.cursor.sh", "cursor.com", "API2.Cursor.SH."] {
        let leaf = ca.issue_leaf(host, now).expect("leaf");
        let cert = parse(leaf.cert_der.as_ref());
        let san = cert.subject_alternative_name().expect("san").expect("present");
        let names: Vec<_> = san.value.general_names.iter().collect();
        assert_eq!(names.len(), 1);
        assert!(matches!(names[0], GeneralName::DNSName(d) if *d == host.trim_end_matches('.').to_ascii_lowercase()));
        let aki = cert.extensions().iter().find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(a) => a.key_identifier.as_ref().map(|k| k.0.to_vec()),
            _ => None,
        });
        assert_eq!(aki.as_deref(), Some(root_ski.as_slice()), "AKI equals the root's SKI");
        assert!(cert.extended_key_usage().expect("eku").expect("present").value.server_auth);
        let ku = cert.key_usage().expect("ku").expect("present").value;
        assert!(ku.digital_signature() && !ku.key_cert_sign());
        assert!(!cert.is_ca());
        let nb = cert.validity().not_before.timestamp();
        let na = cert.validity().not_after.timestamp();
        assert!(na - nb <= 397 * 86_400, "at most 397 days");
        assert!(nb <= now.unix_timestamp() && nb >= (now - Duration::hours(48)).unix_timestamp());
        assert_eq!(nb, (now - BACKDATE).unix_timestamp());
        assert_ne!(cert.public_key().raw, root.public_key().raw, "never the CA key");
        leaf_keys.push(cert.public_key().raw.to_vec());
    }
    leaf_keys.dedup();
    assert_eq!(leaf_keys.len(), 3, "a fresh key per leaf");
}

#[test]
fn leaves_are_refused_off_the_allowlist() {
    let (_dir, _keyring, ca) = new_ca();
    let now = OffsetDateTime::now_utc();
    for host in ["example.com", "evilcursor.sh", "cursor.sh.evil.com", "127.0.0.1", "cursor.shx", "*.cursor.sh", ""] {
        assert_eq!(ca.issue_leaf(host, now).expect_err(host).kind(), "ca_host_not_allowed", "{host}");
        assert!(ca.certified_key(host, now).is_err());
    }
}

#[test]
fn leaf_cache_is_bounded_and_reused() {
    let (_dir, _keyring, ca) = new_ca();
    let now = OffsetDateTime::now_utc();
    let a = ca.certified_key("api2.cursor.sh", now).expect("leaf");
    let b = ca.certified_key("api2.cursor.sh", now).expect("leaf");
    assert!(Arc::ptr_eq(&a, &b), "a cached leaf is reused");
    for i in 0..LEAF_CACHE_CAP + 20 {
        ca.certified_key(&format!("h{i}.cursor.sh"), now).expect("leaf");
    }
    assert_eq!(ca.cached_leaves(), LEAF_CACHE_CAP);
    // Near expiry, a leaf is re-minted.
    let later = now + Duration::days(crate::proxy::ca::LEAF_VALIDITY_DAYS);
    let c = ca.certified_key("h0x.cursor.sh", now).expect("leaf");
    let d = ca.certified_key("h0x.cursor.sh", later).expect("leaf");
    assert!(!Arc::ptr_eq(&c, &d));
}

#[test]
fn root_key_goes_to_the_keyring_and_reloads() {
    let (dir, keyring, ca) = new_ca();
    assert_eq!(ca.key_location(), &KeyLocation::Keyring);
    assert!(keyring.get(KEYRING_ENTRY).expect("get").is_some());
    let paths = CaPaths::new(dir.path());
    assert!(!paths.key_file().exists(), "no key file when a keyring exists");
    let (again, origin) =
        LocalCa::load_or_create(&paths, &keyring, &intercept(), OffsetDateTime::now_utc()).expect("load");
    assert_eq!(origin, CaOrigin::Loaded);
    assert_eq!(again.fingerprint_sha256(), ca.fingerprint_sha256());
    // Leaves from the reloaded CA chain to the same root (same SKI/AKI).
    again.issue_leaf("api2.cursor.sh", OffsetDateTime::now_utc()).expect("leaf");
}

/// A machine without a keyring.
struct NoKeyring;

impl Keyring for NoKeyring {
    fn get(&self, _: &str) -> Result<Option<SecretString>, SecretError> {
        Err(SecretError::Unavailable("no secret service".into()))
    }
    fn set(&self, _: &str, _: &SecretString) -> Result<(), SecretError> {
        Err(SecretError::Unavailable("no secret service".into()))
    }
    fn delete(&self, _: &str) -> Result<bool, SecretError> {
        Err(SecretError::Unavailable("no secret service".into()))
    }
}

#[test]
fn without_a_keyring_the_key_is_a_0600_file_in_a_0700_dir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = CaPaths::new(dir.path().join("ca"));
    let now = OffsetDateTime::now_utc();
    let ca = LocalCa::create(&paths, &NoKeyring, &intercept(), now).expect("ca");
    assert_eq!(ca.key_location(), &KeyLocation::File(paths.key_file()));
    assert!(ca.key_location().to_string().contains("no OS keyring"), "the fallback is said plainly");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&paths.key_file()), 0o600);
        assert_eq!(mode(&paths.key_dir()), 0o700);
    }
    let again = LocalCa::load(&paths, &NoKeyring, &intercept(), now).expect("load").expect("present");
    assert_eq!(again.fingerprint_sha256(), ca.fingerprint_sha256());
    remove_root(&paths, &NoKeyring).expect("remove");
    assert!(!paths.key_file().exists() && !paths.cert().exists());
}

#[test]
fn rotation_replaces_the_root_and_removes_the_old_key() {
    let (dir, keyring, old) = new_ca();
    let paths = CaPaths::new(dir.path());
    remove_root(&paths, &keyring).expect("remove");
    assert!(keyring.get(KEYRING_ENTRY).expect("get").is_none());
    assert!(LocalCa::load(&paths, &keyring, &intercept(), OffsetDateTime::now_utc()).expect("load").is_none());
    let new = LocalCa::create(&paths, &keyring, &intercept(), OffsetDateTime::now_utc()).expect("create");
    assert_ne!(new.fingerprint_sha256(), old.fingerprint_sha256());
}

#[test]
fn load_refuses_a_root_for_another_intercept_list_or_without_its_key() {
    let (dir, keyring, _ca) = new_ca();
    let paths = CaPaths::new(dir.path());
    let now = OffsetDateTime::now_utc();
    let other = InterceptList::new(["cursor.sh"]);
    let err = LocalCa::load(&paths, &keyring, &other, now).expect_err("constraints differ");
    assert_eq!(err.kind(), "ca_constraints_changed");
    keyring.delete(KEYRING_ENTRY).expect("delete");
    let err = LocalCa::load(&paths, &keyring, &intercept(), now).expect_err("key gone");
    assert_eq!(err.kind(), "ca_key_missing");
    let err = LocalCa::load(&CaPaths::new(dir.path()), &keyring, &intercept(), now + Duration::days(3 * 365));
    assert!(err.is_err());
}
