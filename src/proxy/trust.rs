//! Installing the local root into the trust stores Cursor reads, per OS, and removing it again.
//!
//! | OS | Stores |
//! |---|---|
//! | Linux | the system bundle (Debian `update-ca-certificates`, or the p11-kit layouts of Fedora and Arch) **and** the user NSS database `~/.pki/nssdb` (Chromium) through `certutil` |
//! | macOS | the login keychain with user trust settings (`security add-trusted-cert`) |
//! | Windows | the CurrentUser Root store (`certutil -user`) |
//!
//! Every path comes from [`TrustEnv`] (filesystem root and home), so tests run against a fixture
//! directory, never the machine's store. Command lines are built by pure functions
//! (`*_command(s)`), which the golden tests pin. Install and uninstall are idempotent, uninstall
//! removes every Keyhaven root (old ones from before a rotation too), and each store reports its own
//! outcome, with a clear message when a tool or a permission is missing.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::proxy::ca::{CaError, ROOT_CN_PREFIX};

/// Which OS's stores to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustOs {
    Linux,
    MacOs,
    Windows,
}

impl TrustOs {
    pub fn current() -> TrustOs {
        if cfg!(target_os = "macos") {
            TrustOs::MacOs
        } else if cfg!(windows) {
            TrustOs::Windows
        } else {
            TrustOs::Linux
        }
    }
}

/// One command line: a program and its arguments, never passed through a shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd {
    pub program: String,
    pub args: Vec<String>,
}

impl Cmd {
    pub fn new<I, S>(program: &str, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Cmd { program: program.to_owned(), args: args.into_iter().map(Into::into).collect() }
    }
}

impl fmt::Display for Cmd {
    /// Shell-like, for messages and golden tests: arguments with spaces or quotes are quoted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.program)?;
        for a in &self.args {
            if a.is_empty() || a.contains([' ', '"', '\'', ',']) {
                write!(f, " \"{}\"", a.replace('"', "\\\""))?;
            } else {
                write!(f, " {a}")?;
            }
        }
        Ok(())
    }
}

/// What a command printed and how it ended.
#[derive(Debug, Clone, Default)]
pub struct CmdOutput {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs commands. [`SystemRunner`] in production; tests record or redirect.
pub trait CommandRunner: Send + Sync {
    /// `Err` with `NotFound` when the program does not exist.
    fn run(&self, cmd: &Cmd) -> std::io::Result<CmdOutput>;
}

/// Runs commands with `std::process::Command`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemRunner;

impl CommandRunner for SystemRunner {
    fn run(&self, cmd: &Cmd) -> std::io::Result<CmdOutput> {
        let out = std::process::Command::new(&cmd.program).args(&cmd.args).output()?;
        Ok(CmdOutput {
            success: out.status.success(),
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// Where the trust stores are. Production: `root = "/"`, `home` = the user's home.
#[derive(Clone)]
pub struct TrustEnv {
    pub os: TrustOs,
    pub root: PathBuf,
    pub home: PathBuf,
    pub runner: Arc<dyn CommandRunner>,
}

impl fmt::Debug for TrustEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustEnv").field("os", &self.os).field("root", &self.root).field("home", &self.home).finish()
    }
}

/// The root being installed: its PEM, a file holding it, and its identity.
#[derive(Debug, Clone)]
pub struct RootRef {
    pub pem: String,
    pub path: PathBuf,
    /// The certificate's common name, unique per root ("Keyhaven Local CA 1a2b3c4d").
    pub nickname: String,
    /// Uppercase hex SHA-1 thumbprint.
    pub sha1: String,
}

/// The Linux system store layouts, picked by the first anchor directory that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinuxLayout {
    /// Debian, Ubuntu: `/usr/local/share/ca-certificates/*.crt` + `update-ca-certificates`.
    Debian,
    /// Fedora, RHEL (p11-kit): `/etc/pki/ca-trust/source/anchors` + `update-ca-trust extract`.
    Fedora,
    /// Arch (p11-kit): `/etc/ca-certificates/trust-source/anchors` + `trust extract-compat`.
    Arch,
}

impl LinuxLayout {
    pub const ALL: [LinuxLayout; 3] = [LinuxLayout::Debian, LinuxLayout::Fedora, LinuxLayout::Arch];

    /// The anchor directory, relative to the filesystem root.
    pub fn anchor_dir(self) -> &'static str {
        match self {
            LinuxLayout::Debian => "usr/local/share/ca-certificates",
            LinuxLayout::Fedora => "etc/pki/ca-trust/source/anchors",
            LinuxLayout::Arch => "etc/ca-certificates/trust-source/anchors",
        }
    }

    /// Our anchor's file name (fixed, so a reinstall overwrites instead of adding a copy).
    pub fn file_name(self) -> &'static str {
        match self {
            LinuxLayout::Debian => "keyhaven-local-ca.crt",
            LinuxLayout::Fedora | LinuxLayout::Arch => "keyhaven-local-ca.pem",
        }
    }

    pub fn detect(root: &Path) -> Option<LinuxLayout> {
        LinuxLayout::ALL.into_iter().find(|l| root.join(l.anchor_dir()).is_dir())
    }
}

/// The command that regenerates the system bundle after an anchor was added or removed. For
/// Debian every directory is passed explicitly, so a fixture root works like `/`; `fresh` also
/// clears links to removed anchors.
pub fn linux_refresh_command(layout: LinuxLayout, root: &Path, fresh: bool) -> Cmd {
    let p = |rel: &str| root.join(rel).display().to_string();
    match layout {
        LinuxLayout::Debian => {
            let mut args = Vec::new();
            if fresh {
                args.push("--fresh".to_owned());
            }
            for (flag, rel) in [
                ("--certsconf", "etc/ca-certificates.conf"),
                ("--certsdir", "usr/share/ca-certificates"),
                ("--localcertsdir", "usr/local/share/ca-certificates"),
                ("--etccertsdir", "etc/ssl/certs"),
                ("--hooksdir", "etc/ca-certificates/update.d"),
            ] {
                args.push(flag.to_owned());
                args.push(p(rel));
            }
            Cmd::new("update-ca-certificates", args)
        }
        LinuxLayout::Fedora => Cmd::new("update-ca-trust", ["extract"]),
        LinuxLayout::Arch => Cmd::new("trust", ["extract-compat"]),
    }
}

/// The user NSS database Chromium reads.
pub fn nss_db(home: &Path) -> String {
    format!("sql:{}", home.join(".pki").join("nssdb").display())
}

pub fn nss_create_command(db: &str) -> Cmd {
    Cmd::new("certutil", ["-d", db, "-N", "--empty-password"])
}

pub fn nss_list_command(db: &str) -> Cmd {
    Cmd::new("certutil", ["-d", db, "-L"])
}

pub fn nss_add_command(db: &str, root: &RootRef) -> Cmd {
    Cmd::new(
        "certutil",
        ["-d", db, "-A", "-t", "C,,", "-n", root.nickname.as_str(), "-i", &root.path.display().to_string()],
    )
}

pub fn nss_delete_command(db: &str, nickname: &str) -> Cmd {
    Cmd::new("certutil", ["-d", db, "-D", "-n", nickname])
}

/// Keyhaven nicknames in `certutil -L` output.
pub fn nss_parse_list(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with(ROOT_CN_PREFIX))
        // The trust attributes ("C,,") are the last column; the nickname may contain spaces.
        .map(|l| l.trim_end().rsplit_once(char::is_whitespace).map_or(l, |(n, _)| n).trim_end().to_owned())
        .collect()
}

pub fn macos_keychain(home: &Path) -> PathBuf {
    home.join("Library").join("Keychains").join("login.keychain-db")
}

/// Lists Keyhaven roots in the login keychain with their hashes.
pub fn macos_find_command(home: &Path) -> Cmd {
    Cmd::new(
        "security",
        ["find-certificate", "-a", "-Z", "-c", ROOT_CN_PREFIX, &macos_keychain(home).display().to_string()],
    )
}

/// Adds the root to the login keychain with user-level trust for SSL (no admin prompt).
pub fn macos_add_command(home: &Path, root: &RootRef) -> Cmd {
    Cmd::new(
        "security",
        [
            "add-trusted-cert",
            "-r",
            "trustRoot",
            "-p",
            "ssl",
            "-k",
            &macos_keychain(home).display().to_string(),
            &root.path.display().to_string(),
        ],
    )
}

/// Deletes a certificate by SHA-1 hash, with its user trust settings (`-t`).
pub fn macos_delete_command(home: &Path, sha1: &str) -> Cmd {
    Cmd::new("security", ["delete-certificate", "-Z", sha1, "-t", &macos_keychain(home).display().to_string()])
}

/// SHA-1 hashes in `security find-certificate -Z` output.
pub fn macos_parse_hashes(stdout: &str) -> Vec<String> {
    stdout.lines().filter_map(|l| l.trim().strip_prefix("SHA-1 hash:")).map(|h| h.trim().to_ascii_uppercase()).collect()
}

pub fn windows_find_command() -> Cmd {
    Cmd::new("certutil", ["-user", "-store", "Root", ROOT_CN_PREFIX])
}

pub fn windows_add_command(root: &RootRef) -> Cmd {
    Cmd::new("certutil", ["-user", "-addstore", "Root", &root.path.display().to_string()])
}

pub fn windows_delete_command(sha1: &str) -> Cmd {
    Cmd::new("certutil", ["-user", "-delstore", "Root", sha1])
}

/// SHA-1 thumbprints in `certutil -store` output ("Cert Hash(sha1): 12 ab …" or "12ab…").
pub fn windows_parse_hashes(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Cert Hash(sha1):"))
        .map(|h| h.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_ascii_uppercase())
        .collect()
}

/// One store's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Installed,
    AlreadyInstalled,
    /// Copies removed (0 when there were none).
    Removed(usize),
    Present,
    Absent,
    /// Another Keyhaven root (from before a rotation) is there, not this one.
    Stale,
    Skipped(String),
    Failed(String),
}

impl Outcome {
    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Failed(_))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Installed => f.write_str("installed"),
            Outcome::AlreadyInstalled => f.write_str("already installed"),
            Outcome::Removed(n) => write!(f, "removed {n} cop{}", if *n == 1 { "y" } else { "ies" }),
            Outcome::Present => f.write_str("trusted"),
            Outcome::Absent => f.write_str("not installed"),
            Outcome::Stale => f.write_str("an older Keyhaven root is installed, not the current one"),
            Outcome::Skipped(why) => write!(f, "skipped: {why}"),
            Outcome::Failed(why) => write!(f, "FAILED: {why}"),
        }
    }
}

/// Each store's name and result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreReport {
    pub store: String,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Install,
    Uninstall,
    Status,
}

/// Installs `root` in every store of `env.os`. A failing store does not stop the others.
pub fn install(env: &TrustEnv, root: &RootRef) -> Vec<StoreReport> {
    run_all(env, Some(root), Action::Install)
}

/// Removes every Keyhaven root from every store of `env.os`.
pub fn uninstall(env: &TrustEnv) -> Vec<StoreReport> {
    run_all(env, None, Action::Uninstall)
}

/// Whether `root` is installed in each store.
pub fn status(env: &TrustEnv, root: &RootRef) -> Vec<StoreReport> {
    run_all(env, Some(root), Action::Status)
}

/// The message shown after an install: Cursor reads its roots once, at start.
pub const RESTART_HINT: &str =
    "Restart Cursor (quit it fully) so it reads the new root: it loads trusted certificates only at start-up.";

fn run_all(env: &TrustEnv, root: Option<&RootRef>, action: Action) -> Vec<StoreReport> {
    let report = |store: &str, r: Result<Outcome, CaError>| StoreReport {
        store: store.to_owned(),
        outcome: r.unwrap_or_else(|e| Outcome::Failed(e.to_string())),
    };
    match env.os {
        TrustOs::Linux => vec![
            report("system bundle", linux_system(env, root, action)),
            report("NSS user database", nss(env, root, action)),
        ],
        TrustOs::MacOs => vec![report("login keychain", macos(env, root, action))],
        TrustOs::Windows => vec![report("CurrentUser Root", windows(env, root, action))],
    }
}

fn run(env: &TrustEnv, cmd: &Cmd, hint: &str) -> Result<CmdOutput, CaError> {
    match env.runner.run(cmd) {
        Ok(out) => Ok(out),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(CaError::ToolMissing { tool: cmd.program.clone(), hint: hint.to_owned() })
        }
        Err(e) => {
            Err(CaError::Command { command: cmd.to_string(), status: "not started".into(), stderr: e.to_string() })
        }
    }
}

fn run_ok(env: &TrustEnv, cmd: &Cmd, hint: &str) -> Result<CmdOutput, CaError> {
    let out = run(env, cmd, hint)?;
    if !out.success {
        return Err(CaError::Command {
            command: cmd.to_string(),
            status: out.code.map_or("killed".into(), |c| format!("exit {c}")),
            stderr: out.stderr.trim().to_owned(),
        });
    }
    Ok(out)
}

fn permission(path: &Path, e: std::io::Error) -> CaError {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        CaError::Permission {
            path: path.to_owned(),
            hint: "the system trust store needs root: run `sudo keyhaven ca install` (or uninstall)".into(),
        }
    } else {
        CaError::Io { path: path.to_owned(), source: e }
    }
}

fn linux_system(env: &TrustEnv, root: Option<&RootRef>, action: Action) -> Result<Outcome, CaError> {
    let Some(layout) = LinuxLayout::detect(&env.root) else {
        return Ok(Outcome::Skipped(format!(
            "no known CA anchor directory under {} (looked for {})",
            env.root.display(),
            LinuxLayout::ALL.map(LinuxLayout::anchor_dir).join(", ")
        )));
    };
    let file = env.root.join(layout.anchor_dir()).join(layout.file_name());
    let hint = match layout {
        LinuxLayout::Debian => "install the `ca-certificates` package",
        LinuxLayout::Fedora => "install the `ca-certificates` package (update-ca-trust)",
        LinuxLayout::Arch => "install `p11-kit` (trust)",
    };
    let current = std::fs::read_to_string(&file).ok();
    match (action, root) {
        (Action::Status, Some(root)) => Ok(match current {
            Some(pem) if pem.trim() == root.pem.trim() => Outcome::Present,
            Some(_) => Outcome::Stale,
            None => Outcome::Absent,
        }),
        (Action::Install, Some(root)) => {
            if current.as_deref().map(str::trim) == Some(root.pem.trim()) {
                return Ok(Outcome::AlreadyInstalled);
            }
            std::fs::write(&file, root.pem.as_bytes()).map_err(|e| permission(&file, e))?;
            run_ok(env, &linux_refresh_command(layout, &env.root, current.is_some()), hint)?;
            Ok(Outcome::Installed)
        }
        (Action::Uninstall, _) => {
            let mut removed = 0;
            for l in LinuxLayout::ALL {
                let f = env.root.join(l.anchor_dir()).join(l.file_name());
                if f.exists() {
                    std::fs::remove_file(&f).map_err(|e| permission(&f, e))?;
                    removed += 1;
                }
            }
            if removed > 0 {
                run_ok(env, &linux_refresh_command(layout, &env.root, true), hint)?;
            }
            Ok(Outcome::Removed(removed))
        }
        (_, None) => Err(CaError::Unsupported("no root given".into())),
    }
}

const NSS_HINT: &str = "install `libnss3-tools` (Debian/Ubuntu) or `nss-tools` (Fedora) so Chromium trusts the root";

fn nss(env: &TrustEnv, root: Option<&RootRef>, action: Action) -> Result<Outcome, CaError> {
    let dir = env.home.join(".pki").join("nssdb");
    let db = nss_db(&env.home);
    let exists = dir.join("cert9.db").exists();
    let listed = |env: &TrustEnv| -> Result<Vec<String>, CaError> {
        Ok(nss_parse_list(&run_ok(env, &nss_list_command(&db), NSS_HINT)?.stdout))
    };
    match (action, root) {
        (Action::Status, Some(root)) => {
            if !exists {
                return Ok(Outcome::Absent);
            }
            let names = match listed(env) {
                Err(CaError::ToolMissing { .. }) => return Ok(Outcome::Skipped(NSS_HINT.into())),
                r => r?,
            };
            Ok(if names.contains(&root.nickname) {
                Outcome::Present
            } else if names.is_empty() {
                Outcome::Absent
            } else {
                Outcome::Stale
            })
        }
        (Action::Install, Some(root)) => {
            if !exists {
                std::fs::create_dir_all(&dir).map_err(|e| permission(&dir, e))?;
                match run_ok(env, &nss_create_command(&db), NSS_HINT) {
                    Err(CaError::ToolMissing { .. }) => return Ok(Outcome::Skipped(NSS_HINT.into())),
                    r => r?,
                };
            }
            let names = match listed(env) {
                Err(CaError::ToolMissing { .. }) => return Ok(Outcome::Skipped(NSS_HINT.into())),
                r => r?,
            };
            if names.contains(&root.nickname) {
                return Ok(Outcome::AlreadyInstalled);
            }
            run_ok(env, &nss_add_command(&db, root), NSS_HINT)?;
            Ok(Outcome::Installed)
        }
        (Action::Uninstall, _) => {
            if !exists {
                return Ok(Outcome::Removed(0));
            }
            let names = match listed(env) {
                Err(CaError::ToolMissing { .. }) => return Ok(Outcome::Skipped(NSS_HINT.into())),
                r => r?,
            };
            for n in &names {
                run_ok(env, &nss_delete_command(&db, n), NSS_HINT)?;
            }
            Ok(Outcome::Removed(names.len()))
        }
        (_, None) => Err(CaError::Unsupported("no root given".into())),
    }
}

const MAC_HINT: &str = "`security` ships with macOS; run Keyhaven as the logged-in user";

fn macos(env: &TrustEnv, root: Option<&RootRef>, action: Action) -> Result<Outcome, CaError> {
    let found = |env: &TrustEnv| -> Result<Vec<String>, CaError> {
        // `find-certificate` exits non-zero when nothing matches.
        let out = run(env, &macos_find_command(&env.home), MAC_HINT)?;
        Ok(macos_parse_hashes(&out.stdout))
    };
    match (action, root) {
        (Action::Status, Some(root)) => {
            let hashes = found(env)?;
            Ok(if hashes.contains(&root.sha1) {
                Outcome::Present
            } else if hashes.is_empty() {
                Outcome::Absent
            } else {
                Outcome::Stale
            })
        }
        (Action::Install, Some(root)) => {
            if found(env)?.contains(&root.sha1) {
                return Ok(Outcome::AlreadyInstalled);
            }
            run_ok(env, &macos_add_command(&env.home, root), MAC_HINT)?;
            Ok(Outcome::Installed)
        }
        (Action::Uninstall, _) => {
            let hashes = found(env)?;
            for h in &hashes {
                run_ok(env, &macos_delete_command(&env.home, h), MAC_HINT)?;
            }
            Ok(Outcome::Removed(hashes.len()))
        }
        (_, None) => Err(CaError::Unsupported("no root given".into())),
    }
}

const WIN_HINT: &str = "`certutil.exe` ships with Windows (System32)";

fn windows(env: &TrustEnv, root: Option<&RootRef>, action: Action) -> Result<Outcome, CaError> {
    let found = |env: &TrustEnv| -> Result<Vec<String>, CaError> {
        let out = run(env, &windows_find_command(), WIN_HINT)?;
        Ok(windows_parse_hashes(&out.stdout))
    };
    match (action, root) {
        (Action::Status, Some(root)) => {
            let hashes = found(env)?;
            Ok(if hashes.contains(&root.sha1) {
                Outcome::Present
            } else if hashes.is_empty() {
                Outcome::Absent
            } else {
                Outcome::Stale
            })
        }
        (Action::Install, Some(root)) => {
            if found(env)?.contains(&root.sha1) {
                return Ok(Outcome::AlreadyInstalled);
            }
            run_ok(env, &windows_add_command(root), WIN_HINT)?;
            Ok(Outcome::Installed)
        }
        (Action::Uninstall, _) => {
            let hashes = found(env)?;
            for h in &hashes {
                run_ok(env, &windows_delete_command(h), WIN_HINT)?;
            }
            Ok(Outcome::Removed(hashes.len()))
        }
        (_, None) => Err(CaError::Unsupported("no root given".into())),
    }
}

#[cfg(test)]
mod tests;
