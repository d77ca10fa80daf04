//! Unit tests of trust-store handling: golden command lines for every OS, the output parsers,
//! and install/uninstall against fixture roots (Debian and p11-kit layouts, a temp NSS db), with
//! stateful fakes standing in for macOS `security` and Windows `certutil`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use time::OffsetDateTime;

use crate::proxy::allowlist::InterceptList;
use crate::proxy::ca::{CaPaths, LocalCa};
use crate::proxy::trust::{
    Cmd, CmdOutput, CommandRunner, LinuxLayout, Outcome, RootRef, StoreReport, SystemRunner, TrustEnv, TrustOs,
    install, linux_refresh_command, macos_add_command, macos_delete_command, macos_find_command, macos_parse_hashes,
    nss_add_command, nss_db, nss_delete_command, nss_parse_list, status, uninstall, windows_add_command,
    windows_delete_command, windows_find_command, windows_parse_hashes,
};
use crate::secrets::MemoryKeyring;

fn root_ref(path: &str) -> RootRef {
    RootRef {
        pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
        path: PathBuf::from(path),
        nickname: "Keyhaven Local CA 1a2b3c4d".into(),
        sha1: "0123456789ABCDEF0123456789ABCDEF01234567".into(),
    }
}

#[test]
fn macos_command_lines_are_exact() {
    let home = Path::new("/Users/ana");
    let root = root_ref("/Users/ana/Library/Application Support/keyhaven/ca/keyhaven-ca.pem");
    assert_eq!(
        macos_add_command(home, &root).to_string(),
        "security add-trusted-cert -r trustRoot -p ssl -k /Users/ana/Library/Keychains/login.keychain-db \"/Users/ana/Library/Application Support/keyhaven/ca/keyhaven-ca.pem\""
    );
    assert_eq!(
        macos_find_command(home).to_string(),
        "security find-certificate -a -Z -c \"Keyhaven Local CA\" /Users/ana/Library/Keychains/login.keychain-db"
    );
    assert_eq!(
        macos_delete_command(home, &root.sha1).to_string(),
        "security delete-certificate -Z 0123456789ABCDEF0123456789ABCDEF01234567 -t /Users/ana/Library/Keychains/login.keychain-db"
    );
    assert_eq!(
        macos_add_command(home, &root).args,
        [
            "add-trusted-cert",
            "-r",
            "trustRoot",
            "-p",
            "ssl",
            "-k",
            "/Users/ana/Library/Keychains/login.keychain-db",
            "/Users/ana/Library/Application Support/keyhaven/ca/keyhaven-ca.pem"
        ]
    );
}

#[test]
fn windows_command_lines_are_exact() {
    let root = root_ref(r"C:\Users\ana\AppData\Roaming\keyhaven\data\ca\keyhaven-ca.pem");
    assert_eq!(
        windows_add_command(&root).to_string(),
        r"certutil -user -addstore Root C:\Users\ana\AppData\Roaming\keyhaven\data\ca\keyhaven-ca.pem"
    );
    assert_eq!(windows_find_command().to_string(), "certutil -user -store Root \"Keyhaven Local CA\"");
    assert_eq!(
        windows_delete_command(&root.sha1).to_string(),
        "certutil -user -delstore Root 0123456789ABCDEF0123456789ABCDEF01234567"
    );
}

#[test]
fn linux_and_nss_command_lines_are_exact() {
    let root = Path::new("/");
    assert_eq!(
        linux_refresh_command(LinuxLayout::Debian, root, true).to_string(),
        "update-ca-certificates --fresh --certsconf /etc/ca-certificates.conf --certsdir /usr/share/ca-certificates --localcertsdir /usr/local/share/ca-certificates --etccertsdir /etc/ssl/certs --hooksdir /etc/ca-certificates/update.d"
    );
    assert_eq!(linux_refresh_command(LinuxLayout::Fedora, root, false).to_string(), "update-ca-trust extract");
    assert_eq!(linux_refresh_command(LinuxLayout::Arch, root, false).to_string(), "trust extract-compat");
    let db = nss_db(Path::new("/home/ana"));
    assert_eq!(db, "sql:/home/ana/.pki/nssdb");
    let r = root_ref("/home/ana/.local/share/keyhaven/ca/keyhaven-ca.pem");
    assert_eq!(
        nss_add_command(&db, &r).to_string(),
        "certutil -d sql:/home/ana/.pki/nssdb -A -t \"C,,\" -n \"Keyhaven Local CA 1a2b3c4d\" -i /home/ana/.local/share/keyhaven/ca/keyhaven-ca.pem"
    );
    assert_eq!(
        nss_delete_command(&db, "Keyhaven Local CA 1a2b3c4d").to_string(),
        "certutil -d sql:/home/ana/.pki/nssdb -D -n \"Keyhaven Local CA 1a2b3c4d\""
    );
}

#[test]
fn store_listings_parse() {
    let mac = "keychain: \"/Users/ana/Library/Keychains/login.keychain-db\"\nSHA-256 hash: AB\nSHA-1 hash: 0123456789abcdef0123456789abcdef01234567\nversion: 512\n";
    assert_eq!(macos_parse_hashes(mac), ["0123456789ABCDEF0123456789ABCDEF01234567"]);
    let win = "Root \"Trusted Root Certification Authorities\"\n================ Certificate 0 ================\nSerial Number: 1a\nCert Hash(sha1): 01 23 45 67 89 ab cd ef 01 23 45 67 89 ab cd ef 01 23 45 67\nCertUtil: -store command completed successfully.\n";
    assert_eq!(windows_parse_hashes(win), ["0123456789ABCDEF0123456789ABCDEF01234567"]);
    let nss = "\nCertificate Nickname                                         Trust Attributes\n                                                             SSL,S/MIME,JAR/XPI\n\nKeyhaven Local CA 1a2b3c4d                                   C,,  \nOther CA                                                     C,,  \n";
    assert_eq!(nss_parse_list(nss), ["Keyhaven Local CA 1a2b3c4d"]);
}

/// A stateful stand-in for `security` (macOS) and `certutil -user` (Windows).
#[derive(Default)]
struct FakeStore {
    hashes: Mutex<BTreeSet<String>>,
    log: Mutex<Vec<String>>,
    sha1_of_added: String,
}

impl CommandRunner for FakeStore {
    fn run(&self, cmd: &Cmd) -> std::io::Result<CmdOutput> {
        self.log.lock().expect("log").push(cmd.to_string());
        let mut hashes = self.hashes.lock().expect("hashes");
        let verb = cmd.args.iter().find(|a| !a.starts_with('-')).cloned().unwrap_or_default();
        let ok = |stdout: String| Ok(CmdOutput { success: true, code: Some(0), stdout, stderr: String::new() });
        match verb.as_str() {
            "find-certificate" => ok(hashes.iter().map(|h| format!("SHA-1 hash: {h}\n")).collect()),
            "add-trusted-cert" => {
                hashes.insert(self.sha1_of_added.clone());
                ok(String::new())
            }
            "delete-certificate" => {
                let h = cmd.args.iter().skip_while(|a| *a != "-Z").nth(1).cloned().unwrap_or_default();
                hashes.remove(&h);
                ok(String::new())
            }
            _ if cmd.args.contains(&"-store".to_owned()) => {
                ok(hashes.iter().map(|h| format!("Cert Hash(sha1): {}\n", h.to_ascii_lowercase())).collect())
            }
            _ if cmd.args.contains(&"-addstore".to_owned()) => {
                hashes.insert(self.sha1_of_added.clone());
                ok(String::new())
            }
            _ if cmd.args.contains(&"-delstore".to_owned()) => {
                hashes.remove(cmd.args.last().map_or("", String::as_str));
                ok(String::new())
            }
            _ => Err(std::io::Error::new(std::io::ErrorKind::NotFound, "unknown")),
        }
    }
}

fn outcomes(reports: &[StoreReport]) -> Vec<Outcome> {
    reports.iter().map(|r| r.outcome.clone()).collect()
}

#[test]
fn macos_and_windows_flows_are_idempotent_and_uninstall_everything() {
    for os in [TrustOs::MacOs, TrustOs::Windows] {
        let root = root_ref("/tmp/keyhaven-ca.pem");
        let fake = Arc::new(FakeStore { sha1_of_added: root.sha1.clone(), ..FakeStore::default() });
        fake.hashes.lock().expect("h").insert("AAAA000000000000000000000000000000000000".into()); // an older root
        let env = TrustEnv { os, root: "/".into(), home: "/Users/ana".into(), runner: fake.clone() };
        assert_eq!(outcomes(&status(&env, &root)), [Outcome::Stale]);
        assert_eq!(outcomes(&install(&env, &root)), [Outcome::Installed]);
        assert_eq!(outcomes(&install(&env, &root)), [Outcome::AlreadyInstalled]);
        assert_eq!(outcomes(&status(&env, &root)), [Outcome::Present]);
        assert_eq!(outcomes(&uninstall(&env)), [Outcome::Removed(2)], "{os:?}: the old root goes too");
        assert!(fake.hashes.lock().expect("h").is_empty());
        assert_eq!(outcomes(&uninstall(&env)), [Outcome::Removed(0)]);
        assert_eq!(outcomes(&status(&env, &root)), [Outcome::Absent]);
    }
}

#[test]
fn a_missing_tool_is_a_clear_failure() {
    struct Missing;
    impl CommandRunner for Missing {
        fn run(&self, _: &Cmd) -> std::io::Result<CmdOutput> {
            Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"))
        }
    }
    let env = TrustEnv { os: TrustOs::MacOs, root: "/".into(), home: "/Users/ana".into(), runner: Arc::new(Missing) };
    let r = install(&env, &root_ref("/tmp/ca.pem"));
    assert!(matches!(&r[0].outcome, Outcome::Failed(m) if m.contains("`security` was not found")), "{r:?}");
}

/// Records commands; runs the real `update-ca-certificates` and `certutil` when asked.
struct Recorder {
    log: Mutex<Vec<Cmd>>,
    real: bool,
}

impl CommandRunner for Recorder {
    fn run(&self, cmd: &Cmd) -> std::io::Result<CmdOutput> {
        self.log.lock().expect("log").push(cmd.clone());
        if self.real {
            return SystemRunner.run(cmd);
        }
        Ok(CmdOutput { success: true, code: Some(0), ..CmdOutput::default() })
    }
}

fn real_root(dir: &Path) -> RootRef {
    let ca = LocalCa::create(
        &CaPaths::new(dir.join("ca")),
        &MemoryKeyring::default(),
        &InterceptList::new(["cursor.sh", "cursor.com"]),
        OffsetDateTime::now_utc(),
    )
    .expect("ca");
    RootRef {
        pem: ca.cert_pem().to_owned(),
        path: CaPaths::new(dir.join("ca")).cert(),
        nickname: format!("Keyhaven Local CA {}", &ca.fingerprint_sha256()[..8]),
        sha1: ca.fingerprint_sha1(),
    }
}

#[test]
fn p11kit_layout_install_and_uninstall() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = dir.path().join("root");
    std::fs::create_dir_all(fs.join("etc/pki/ca-trust/source/anchors")).expect("mkdir");
    let root = real_root(dir.path());
    let rec = Arc::new(Recorder { log: Mutex::default(), real: false });
    let env = TrustEnv { os: TrustOs::Linux, root: fs.clone(), home: dir.path().join("nohome"), runner: rec.clone() };
    assert_eq!(LinuxLayout::detect(&fs), Some(LinuxLayout::Fedora));
    assert_eq!(install(&env, &root)[0].outcome, Outcome::Installed);
    assert_eq!(install(&env, &root)[0].outcome, Outcome::AlreadyInstalled);
    let anchor = fs.join("etc/pki/ca-trust/source/anchors/keyhaven-local-ca.pem");
    assert_eq!(std::fs::read_to_string(&anchor).expect("anchor"), root.pem);
    assert_eq!(uninstall(&env)[0].outcome, Outcome::Removed(1));
    assert!(!anchor.exists());
    let log: Vec<String> = rec.log.lock().expect("log").iter().map(ToString::to_string).collect();
    assert_eq!(log.iter().filter(|c| *c == "update-ca-trust extract").count(), 2, "{log:?}");
    // An Arch layout uses `trust extract-compat`.
    let arch = dir.path().join("arch");
    std::fs::create_dir_all(arch.join("etc/ca-certificates/trust-source/anchors")).expect("mkdir");
    assert_eq!(LinuxLayout::detect(&arch), Some(LinuxLayout::Arch));
    // No known layout: skipped, with the reason.
    let bare = TrustEnv { root: dir.path().join("bare"), ..env };
    assert!(matches!(&install(&bare, &root)[0].outcome, Outcome::Skipped(m) if m.contains("anchor directory")));
}
