//! The local root CA: generation with safe parameters, key custody, and per-host leaves.
//!
//! Design bars (docs/security-reliability.md §1.5):
//! - The root is name-constrained (critical extension) to the [`InterceptList`], which is also the
//!   allowlist the proxy decrypts, so a leaked key cannot impersonate any other site.
//! - Root: random 128-bit serial, `pathlen:0`, key usage `keyCertSign|cRLSign`, an SKI, a unique
//!   subject, explicit validity. Leaves: SAN, AKI, EKU serverAuth, key usage digitalSignature,
//!   at most 397 days (we use [`LEAF_VALIDITY_DAYS`]), backdated one hour, a fresh key each, minted
//!   only for allowlisted names and never copied from an upstream certificate, kept in a bounded
//!   cache.
//! - Custody: the root key lives in the OS keyring (entry [`KEYRING_ENTRY`]). Where no keyring
//!   exists, it is a 0600 file in a 0700 directory ([`KeyLocation::File`]), and callers say so.
//!   The certificate (public) is a PEM file in the CA directory. While the proxy runs, the root key
//!   is held in process memory to sign leaves (the root has `pathlen:0`, so there is no
//!   intermediate to delegate to).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use rustls::crypto::ring::sign::any_ecdsa_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use secrecy::{ExposeSecret, SecretString};
use sha2::Digest;
use time::{Duration, OffsetDateTime};

use crate::proxy::allowlist::InterceptList;
use crate::secrets::{Keyring, SecretError};

/// The keyring entry (service `keyhaven`) holding the root key as PKCS#8 PEM.
pub const KEYRING_ENTRY: &str = "local-ca-root-key";
/// The root certificate, in the CA directory.
pub const CERT_FILE: &str = "keyhaven-ca.pem";
/// The fallback key location, below the CA directory: a 0700 directory holding a 0600 file.
pub const KEY_DIR: &str = "private";
pub const KEY_FILE: &str = "keyhaven-ca-key.pem";
/// The subject organisation of every Keyhaven root; trust-store code finds old roots by it.
pub const ROOT_ORG: &str = "Keyhaven";
/// The common-name prefix of every Keyhaven root.
pub const ROOT_CN_PREFIX: &str = "Keyhaven Local CA";
pub const ROOT_VALIDITY_DAYS: i64 = 3 * 365;
pub const LEAF_VALIDITY_DAYS: i64 = 90;
/// How far validity starts in the past, for clients with a slow clock.
pub const BACKDATE: Duration = Duration::hours(1);
/// Leaves kept in memory; the oldest is evicted.
pub const LEAF_CACHE_CAP: usize = 128;
/// A root this close to expiry is refused at load ("run `keyhaven ca rotate`").
pub const ROOT_MIN_REMAINING: Duration = Duration::days(14);

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot generate a certificate: {0}")]
    Generate(String),
    #[error("the local CA at {path} is unreadable ({reason}); run `keyhaven ca rotate` to replace it")]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "the local CA certificate exists at {0} but its private key is in neither the OS keyring nor the key file; run `keyhaven ca rotate`"
    )]
    KeyMissing(PathBuf),
    #[error(
        "the local CA is constrained to [{have}] but [proxy] intercept is [{want}]; run `keyhaven ca rotate` to issue a root for the new list"
    )]
    ConstraintsChanged { have: String, want: String },
    #[error("the local CA expires on {0}; run `keyhaven ca rotate`")]
    Expiring(String),
    #[error("`{0}` is not on the intercept list; no certificate is issued for it")]
    NotAllowed(String),
    #[error(transparent)]
    Keyring(#[from] SecretError),
    #[error("`{tool}` was not found: {hint}")]
    ToolMissing { tool: String, hint: String },
    #[error("permission denied writing {path}: {hint}")]
    Permission { path: PathBuf, hint: String },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command { command: String, status: String, stderr: String },
    #[error("{0}")]
    Unsupported(String),
}

impl CaError {
    pub fn kind(&self) -> &'static str {
        match self {
            CaError::Io { .. } => "ca_io",
            CaError::Generate(_) => "ca_generate",
            CaError::Corrupt { .. } => "ca_corrupt",
            CaError::KeyMissing(_) => "ca_key_missing",
            CaError::ConstraintsChanged { .. } => "ca_constraints_changed",
            CaError::Expiring(_) => "ca_expiring",
            CaError::NotAllowed(_) => "ca_host_not_allowed",
            CaError::Keyring(e) => e.kind(),
            CaError::ToolMissing { .. } => "trust_tool_missing",
            CaError::Permission { .. } => "trust_permission",
            CaError::Command { .. } => "trust_command",
            CaError::Unsupported(_) => "trust_unsupported",
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::Io { path: path.to_owned(), source }
}

fn gen_err(e: rcgen::Error) -> CaError {
    CaError::Generate(e.to_string())
}

/// Where the root key is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyLocation {
    /// The OS keyring, entry [`KEYRING_ENTRY`] of service `keyhaven`.
    Keyring,
    /// No keyring on this machine: a 0600 file in a 0700 directory.
    File(PathBuf),
}

impl fmt::Display for KeyLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyLocation::Keyring => write!(f, "the OS keyring (service `keyhaven`, entry `{KEYRING_ENTRY}`)"),
            KeyLocation::File(p) => write!(
                f,
                "the file {} (mode 0600; this machine has no OS keyring, so the key is on disk — the name constraint limits a leak to the intercepted domains)",
                p.display()
            ),
        }
    }
}

/// The CA's files below one directory.
#[derive(Debug, Clone)]
pub struct CaPaths {
    pub dir: PathBuf,
}

impl CaPaths {
    pub fn new(dir: impl Into<PathBuf>) -> CaPaths {
        CaPaths { dir: dir.into() }
    }

    pub fn cert(&self) -> PathBuf {
        self.dir.join(CERT_FILE)
    }

    pub fn key_dir(&self) -> PathBuf {
        self.dir.join(KEY_DIR)
    }

    pub fn key_file(&self) -> PathBuf {
        self.key_dir().join(KEY_FILE)
    }
}

/// A freshly generated root: its certificate and key. Pure; nothing is stored.
pub struct GeneratedRoot {
    pub cert_pem: String,
    pub key: KeyPair,
}

/// Generates a name-constrained root for `intercept`, valid from `now - BACKDATE`.
pub fn generate_root(intercept: &InterceptList, now: OffsetDateTime) -> Result<GeneratedRoot, CaError> {
    let key = KeyPair::generate().map_err(gen_err)?;
    let params = root_params(intercept, now, random_serial())?;
    let cert = params.self_signed(&key).map_err(gen_err)?;
    Ok(GeneratedRoot { cert_pem: cert.pem(), key })
}

/// The root's parameters. Exposed so tests can build an otherwise identical unconstrained
/// control root.
pub fn root_params(
    intercept: &InterceptList,
    now: OffsetDateTime,
    serial: [u8; 16],
) -> Result<CertificateParams, CaError> {
    if intercept.domains().is_empty() {
        return Err(CaError::Generate("the intercept list is empty".into()));
    }
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("{ROOT_CN_PREFIX} {}", hex::encode(&serial[..4])));
    dn.push(DnType::OrganizationName, ROOT_ORG);
    params.distinguished_name = dn;
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.name_constraints = Some(intercept.name_constraints());
    params.not_before = now - BACKDATE;
    params.not_after = now + Duration::days(ROOT_VALIDITY_DAYS);
    Ok(params)
}

/// 16 random bytes, positive as a DER INTEGER and never starting with a zero byte (so the
/// serial keeps all 128 bits).
pub fn random_serial() -> [u8; 16] {
    let mut serial: [u8; 16] = rand::random();
    serial[0] = (serial[0] & 0x7f).max(1);
    serial
}

/// A leaf for `host`, signed by `issuer`, with a fresh key. `host` must already be allowlisted.
pub fn leaf_params(host: &str, now: OffsetDateTime) -> Result<CertificateParams, CaError> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, host);
    params.distinguished_name = dn;
    params.subject_alt_names =
        vec![SanType::DnsName(host.to_owned().try_into().map_err(|e: rcgen::Error| CaError::Generate(e.to_string()))?)];
    params.serial_number = Some(SerialNumber::from_slice(&random_serial()));
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - BACKDATE;
    params.not_after = now + Duration::days(LEAF_VALIDITY_DAYS);
    Ok(params)
}

/// An issued leaf: its certificate and its own (fresh) private key.
pub struct Leaf {
    pub cert_der: CertificateDer<'static>,
    pub key_der: PrivatePkcs8KeyDer<'static>,
    pub not_after: OffsetDateTime,
}

impl fmt::Debug for Leaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leaf").field("not_after", &self.not_after).finish_non_exhaustive()
    }
}

struct LeafCache {
    map: HashMap<String, (Arc<CertifiedKey>, OffsetDateTime)>,
    order: VecDeque<String>,
}

/// The loaded root: signs leaves for allowlisted hosts.
pub struct LocalCa {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
    intercept: InterceptList,
    key_location: KeyLocation,
    not_after: OffsetDateTime,
    leaves: Mutex<LeafCache>,
}

impl fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalCa")
            .field("fingerprint", &self.fingerprint_sha256())
            .field("intercept", &self.intercept)
            .field("key_location", &self.key_location)
            .finish_non_exhaustive()
    }
}

/// What [`LocalCa::load_or_create`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaOrigin {
    Loaded,
    Created,
}

impl LocalCa {
    /// Builds a CA from a certificate and its key, checking that they belong together and that the
    /// certificate's name constraints equal `intercept`.
    pub fn from_parts(
        cert_pem: &str,
        key: KeyPair,
        intercept: &InterceptList,
        key_location: KeyLocation,
        now: OffsetDateTime,
        cert_path: &Path,
    ) -> Result<LocalCa, CaError> {
        let corrupt = |reason: String| CaError::Corrupt { path: cert_path.to_owned(), reason };
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| corrupt(format!("no CERTIFICATE block: {e}")))?;
        let info = inspect(&cert_der).map_err(corrupt)?;
        if info.spki != key.subject_public_key_info() {
            return Err(corrupt("the key does not belong to the certificate".into()));
        }
        if info.permitted_dns != intercept.domains() {
            return Err(CaError::ConstraintsChanged {
                have: info.permitted_dns.join(", "),
                want: intercept.domains().join(", "),
            });
        }
        if info.not_after < now + ROOT_MIN_REMAINING {
            return Err(CaError::Expiring(info.not_after.date().to_string()));
        }
        let issuer = Issuer::from_ca_cert_der(&cert_der, key).map_err(|e| corrupt(e.to_string()))?;
        Ok(LocalCa {
            cert_pem: cert_pem.to_owned(),
            cert_der,
            issuer,
            intercept: intercept.clone(),
            key_location,
            not_after: info.not_after,
            leaves: Mutex::new(LeafCache { map: HashMap::new(), order: VecDeque::new() }),
        })
    }

    /// Loads the CA from `paths` (certificate) and the keyring or key file. `Ok(None)` when no
    /// certificate exists yet. Blocking: may talk to the OS keyring.
    pub fn load(
        paths: &CaPaths,
        keyring: &dyn Keyring,
        intercept: &InterceptList,
        now: OffsetDateTime,
    ) -> Result<Option<LocalCa>, CaError> {
        let cert_path = paths.cert();
        let cert_pem = match std::fs::read_to_string(&cert_path) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CaError::Io { path: cert_path, source: e }),
        };
        let (key_pem, location) = read_key(paths, keyring)?.ok_or_else(|| CaError::KeyMissing(cert_path.clone()))?;
        let key = KeyPair::from_pem(key_pem.expose_secret())
            .map_err(|e| CaError::Corrupt { path: cert_path.clone(), reason: format!("key: {e}") })?;
        LocalCa::from_parts(&cert_pem, key, intercept, location, now, &cert_path).map(Some)
    }

    /// Loads the CA, or generates and stores a new one when none exists.
    pub fn load_or_create(
        paths: &CaPaths,
        keyring: &dyn Keyring,
        intercept: &InterceptList,
        now: OffsetDateTime,
    ) -> Result<(LocalCa, CaOrigin), CaError> {
        if let Some(ca) = LocalCa::load(paths, keyring, intercept, now)? {
            return Ok((ca, CaOrigin::Loaded));
        }
        Ok((LocalCa::create(paths, keyring, intercept, now)?, CaOrigin::Created))
    }

    /// Generates a new root and stores it, replacing whatever is there.
    pub fn create(
        paths: &CaPaths,
        keyring: &dyn Keyring,
        intercept: &InterceptList,
        now: OffsetDateTime,
    ) -> Result<LocalCa, CaError> {
        let root = generate_root(intercept, now)?;
        let location = store_key(paths, keyring, &SecretString::from(root.key.serialize_pem()))?;
        std::fs::create_dir_all(&paths.dir).map_err(io(&paths.dir))?;
        write_atomic(&paths.cert(), root.cert_pem.as_bytes(), 0o644)?;
        LocalCa::from_parts(&root.cert_pem, root.key, intercept, location, now, &paths.cert())
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    pub fn key_location(&self) -> &KeyLocation {
        &self.key_location
    }

    pub fn intercept(&self) -> &InterceptList {
        &self.intercept
    }

    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// Lowercase hex SHA-256 of the certificate DER.
    pub fn fingerprint_sha256(&self) -> String {
        hex::encode(sha2::Sha256::digest(self.cert_der.as_ref()))
    }

    /// Uppercase hex SHA-1 of the certificate DER (the "thumbprint" Windows and `security` use).
    pub fn fingerprint_sha1(&self) -> String {
        hex::encode_upper(sha1::Sha1::digest(self.cert_der.as_ref()))
    }

    /// Issues a leaf for `host` (uncached). Refuses hosts off the intercept list.
    pub fn issue_leaf(&self, host: &str, now: OffsetDateTime) -> Result<Leaf, CaError> {
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        if !self.intercept.matches(&host) {
            return Err(CaError::NotAllowed(host));
        }
        let params = leaf_params(&host, now)?;
        let key = KeyPair::generate().map_err(gen_err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(gen_err)?;
        Ok(Leaf {
            cert_der: cert.der().clone(),
            key_der: PrivatePkcs8KeyDer::from(key.serialize_der()),
            not_after: params.not_after,
        })
    }

    /// A rustls certificate for `host`, from the bounded cache or freshly issued.
    pub fn certified_key(&self, host: &str, now: OffsetDateTime) -> Result<Arc<CertifiedKey>, CaError> {
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        let mut cache = self.leaves.lock().map_err(|_| CaError::Generate("leaf cache poisoned".into()))?;
        if let Some((ck, not_after)) = cache.map.get(&host)
            && *not_after > now + Duration::days(1)
        {
            return Ok(ck.clone());
        }
        let leaf = self.issue_leaf(&host, now)?;
        let signer =
            any_ecdsa_type(&PrivateKeyDer::Pkcs8(leaf.key_der)).map_err(|e| CaError::Generate(e.to_string()))?;
        let ck = Arc::new(CertifiedKey::new(vec![leaf.cert_der], signer));
        if cache.map.insert(host.clone(), (ck.clone(), leaf.not_after)).is_none() {
            cache.order.push_back(host);
        }
        while cache.order.len() > LEAF_CACHE_CAP {
            if let Some(old) = cache.order.pop_front() {
                cache.map.remove(&old);
            }
        }
        Ok(ck)
    }

    /// Number of cached leaves (tests).
    pub fn cached_leaves(&self) -> usize {
        self.leaves.lock().map(|c| c.map.len()).unwrap_or(0)
    }
}

/// Deletes the root's key from the keyring and the key file, and the certificate. Idempotent.
pub fn remove_root(paths: &CaPaths, keyring: &dyn Keyring) -> Result<(), CaError> {
    match keyring.delete(KEYRING_ENTRY) {
        Ok(_) | Err(SecretError::Unavailable(_)) => {}
        Err(e) => return Err(e.into()),
    }
    for p in [paths.key_file(), paths.cert()] {
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(CaError::Io { path: p, source: e }),
        }
    }
    Ok(())
}

fn read_key(paths: &CaPaths, keyring: &dyn Keyring) -> Result<Option<(SecretString, KeyLocation)>, CaError> {
    match keyring.get(KEYRING_ENTRY) {
        Ok(Some(v)) => return Ok(Some((v, KeyLocation::Keyring))),
        Ok(None) | Err(SecretError::Unavailable(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let path = paths.key_file();
    match std::fs::read_to_string(&path) {
        Ok(s) => Ok(Some((SecretString::from(s), KeyLocation::File(path)))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CaError::Io { path, source: e }),
    }
}

/// Stores the key in the keyring; falls back to the key file only when the keyring is
/// unavailable or does not keep what it was given. The other location is cleared, so exactly
/// one copy exists.
fn store_key(paths: &CaPaths, keyring: &dyn Keyring, pem: &SecretString) -> Result<KeyLocation, CaError> {
    let in_keyring = match keyring.set(KEYRING_ENTRY, pem) {
        Ok(()) => keyring.get(KEYRING_ENTRY).ok().flatten().is_some_and(|v| v.expose_secret() == pem.expose_secret()),
        Err(SecretError::Unavailable(e)) => {
            tracing::warn!(error = %e, "no OS keyring: the local CA key goes to a 0600 file");
            false
        }
        Err(e) => return Err(e.into()),
    };
    let file = paths.key_file();
    if in_keyring {
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(CaError::Io { path: file, source: e }),
        }
        return Ok(KeyLocation::Keyring);
    }
    let _ = keyring.delete(KEYRING_ENTRY);
    let dir = paths.key_dir();
    create_private_dir(&dir)?;
    write_atomic(&file, pem.expose_secret().as_bytes(), 0o600)?;
    Ok(KeyLocation::File(file))
}

fn create_private_dir(dir: &Path) -> Result<(), CaError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
    }
    Ok(())
}

/// Writes `bytes` to a temporary file created with `mode`, then renames it over `path`.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CaError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut f = options.open(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// What the CA code checks in a stored root.
pub(crate) struct RootInfo {
    spki: Vec<u8>,
    permitted_dns: Vec<String>,
    not_after: OffsetDateTime,
}

fn inspect(der: &CertificateDer<'_>) -> Result<RootInfo, String> {
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).map_err(|e| e.to_string())?;
    let mut permitted_dns = Vec::new();
    for ext in cert.extensions() {
        if let ParsedExtension::NameConstraints(nc) = ext.parsed_extension() {
            for sub in nc.permitted_subtrees.iter().flatten() {
                if let GeneralName::DNSName(d) = sub.base {
                    permitted_dns.push(d.to_owned());
                }
            }
        }
    }
    permitted_dns.sort();
    let not_after = OffsetDateTime::from_unix_timestamp(cert.validity().not_after.timestamp())
        .map_err(|e| format!("notAfter: {e}"))?;
    Ok(RootInfo { spki: cert.public_key().raw.to_vec(), permitted_dns, not_after })
}

/// Picks the leaf for the ClientHello's SNI; refuses names off the intercept list.
#[derive(Debug)]
pub struct LeafResolver {
    pub ca: Arc<LocalCa>,
}

impl ResolvesServerCert for LeafResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let sni = hello.server_name()?;
        match self.ca.certified_key(sni, OffsetDateTime::now_utc()) {
            Ok(ck) => Some(ck),
            Err(e) => {
                tracing::debug!(sni, error = %e, "no leaf for this name");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
