//! What a host binary (`keyhaven`, `keyhaven-app`) knows about its machine, and the start-up
//! steps both binaries share: default paths, the first-run config, the environment parts of the
//! engine ([`EngineExtras`]) and the "listening on" banner.
//!
//! The engine reads no environment variable and no platform directory: each binary fills a
//! [`Host`] from the real environment in a few lines and passes it in; tests build one by hand.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::app::{EngineExtras, EngineHandle};
use crate::config::{self, EngineConfig, FileConfig};
use crate::control::logs::LogRing;
use crate::control::token::ControlToken;
use crate::proxy::trust::{SystemRunner, TrustEnv, TrustOs};
use crate::setup::{Platform, SetupEnv};

/// The machine, as the binary found it.
#[derive(Debug, Clone, Default)]
pub struct Host {
    /// The user's home directory.
    pub home: Option<PathBuf>,
    /// Keyhaven's per-user config directory (e.g. `~/.config/keyhaven`).
    pub config_dir: Option<PathBuf>,
    /// Keyhaven's per-user data directory (e.g. `~/.local/share/keyhaven`).
    pub data_dir: Option<PathBuf>,
    /// `%APPDATA%` (Windows).
    pub appdata: Option<PathBuf>,
    pub temp_dir: PathBuf,
    pub cwd: PathBuf,
    /// The system's UTC offset in seconds (budget periods; `None`: unknown, UTC is used).
    pub local_offset_s: Option<i32>,
}

/// Where this install keeps its files.
#[derive(Debug, Clone)]
pub struct Paths {
    pub config: PathBuf,
    pub data: PathBuf,
    pub database: PathBuf,
    pub ca_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot find a home directory; pass --config and --data-dir")]
    NoHome,
    #[error("cannot {op} {}: {source}", path.display())]
    Io { op: &'static str, path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(
        "Keyhaven is not running at http://{addr} ({reason}); start it (`keyhaven serve` or the app) and run `keyhaven dashboard` again"
    )]
    NotRunning { addr: std::net::SocketAddr, reason: String },
    #[error("the engine at http://{addr} refused a dashboard link: {reason}")]
    LinkRefused { addr: std::net::SocketAddr, reason: String },
}

/// Where a client on this machine reaches a listener: an unspecified address (`0.0.0.0`, `::`)
/// on IPv4 loopback.
pub fn loopback(mut addr: std::net::SocketAddr) -> std::net::SocketAddr {
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    addr
}

/// Asks a running engine for a one-time dashboard link (`POST /api/session/nonce` with the
/// control token, which only the user can read): how `keyhaven dashboard` opens the dashboard of
/// an engine in another process. Blocking; one [`control_request`].
pub fn request_dashboard_link(listen: std::net::SocketAddr, token: &ControlToken) -> Result<String, HostError> {
    let addr = loopback(listen);
    let (status, json) = control_request(listen, token, "POST", "/api/session/nonce", Some(&serde_json::json!({})))?;
    let refused = |reason: String| HostError::LinkRefused { addr, reason };
    if status != 200 {
        let message = json["message"].as_str().unwrap_or("no message");
        return Err(refused(format!("HTTP {status}: {message}")));
    }
    json["url"].as_str().map(str::to_owned).ok_or_else(|| refused("the answer has no url".into()))
}

/// One control API request to a running engine with the control token (plain HTTP/1.1 on
/// loopback, 10 s timeout): the status and the JSON body. `NotRunning` when
/// nothing answers.
pub fn control_request(
    listen: std::net::SocketAddr,
    token: &ControlToken,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Result<(u16, serde_json::Value), HostError> {
    use std::io::Read;
    let addr = loopback(listen);
    let down = |e: std::io::Error| HostError::NotRunning { addr, reason: e.to_string() };
    let timeout = std::time::Duration::from_secs(10);
    let mut tcp = std::net::TcpStream::connect_timeout(&addr, timeout).map_err(down)?;
    tcp.set_read_timeout(Some(timeout)).map_err(down)?;
    tcp.set_write_timeout(Some(timeout)).map_err(down)?;
    let body = body.map(serde_json::Value::to_string).unwrap_or_default();
    let kind = if body.is_empty() { "" } else { "Content-Type: application/json\r\n" };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n{kind}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        token.expose(),
        body.len()
    );
    tcp.write_all(request.as_bytes()).map_err(down)?;
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).map_err(down)?;
    let text = String::from_utf8_lossy(&raw);
    let refused = |reason: String| HostError::LinkRefused { addr, reason };
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| refused("no HTTP answer".into()))?;
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| refused("no HTTP status".into()))?;
    Ok((status, serde_json::from_str(body.trim()).unwrap_or_default()))
}

impl Host {
    /// The config file and data directory: the overrides if given, else the platform defaults.
    pub fn paths(&self, config: Option<PathBuf>, data: Option<PathBuf>) -> Result<Paths, HostError> {
        let config = match (config, &self.config_dir) {
            (Some(p), _) => p,
            (None, Some(d)) => d.join("config.toml"),
            (None, None) => return Err(HostError::NoHome),
        };
        let data = match (data, &self.data_dir) {
            (Some(p), _) => p,
            (None, Some(d)) => d.clone(),
            (None, None) => return Err(HostError::NoHome),
        };
        Ok(Paths { config, database: data.join("keyhaven.db"), ca_dir: data.join("ca"), data })
    }

    /// The machine-specific defaults of `lingma` providers: the assistant's cache file
    /// (`~/.config/Lingma/SharedClientCache/.info.json`; under `%APPDATA%` on Windows), the temp
    /// directory for images and the current directory as the sessions' working directory.
    pub fn fill_lingma_defaults(&self, file: &mut FileConfig) {
        let base = self
            .appdata
            .clone()
            .filter(|_| cfg!(windows))
            .or_else(|| self.home.as_ref().map(|h| h.join(".config")))
            .unwrap_or_default();
        let info = base.join("Lingma").join("SharedClientCache").join(".info.json");
        file.fill_lingma_defaults(&info, &self.temp_dir, &self.cwd);
    }

    /// The OS trust stores of this machine.
    pub fn trust_env(&self) -> Option<TrustEnv> {
        Some(TrustEnv {
            os: TrustOs::current(),
            root: PathBuf::from("/"),
            home: self.home.clone()?,
            runner: Arc::new(SystemRunner),
        })
    }

    /// The user's home, platform and Keyhaven's endpoints, for client setup.
    pub fn setup_env(&self, paths: &Paths, file: Option<&FileConfig>, proxy_url: &str) -> Option<SetupEnv> {
        let platform = if cfg!(windows) {
            Platform::Windows
        } else if cfg!(target_os = "macos") {
            Platform::MacOs
        } else {
            Platform::Linux
        };
        let appdata = self.appdata.clone().or_else(|| cfg!(windows).then(|| self.config_dir.clone()).flatten());
        let mut listen = file.map_or_else(|| config::ServerConfig::default().listen, |f| f.server.listen);
        if listen.ip().is_unspecified() {
            listen.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        Some(SetupEnv {
            home: self.home.clone()?,
            platform,
            appdata,
            data_dir: paths.data.clone(),
            gateway_url: format!("http://{listen}"),
            proxy_url: proxy_url.to_owned(),
        })
    }

    /// Everything `serve` needs: makes Keyhaven's own config folder owner-only, loads (or on first
    /// run writes, 0600) the config file, fills the machine defaults and builds the engine's
    /// environment parts.
    pub fn serve_config(
        &self,
        paths: &Paths,
        logs: Option<LogRing>,
        out: &mut impl Write,
    ) -> Result<(EngineConfig, EngineExtras), HostError> {
        // Keyhaven's own config folder is the owner's only; a folder the user named with
        // `--config` is theirs to manage (the config file itself is restricted by the engine).
        if let Some(dir) = self.config_dir.as_deref().filter(|d| paths.config.parent() == Some(*d)) {
            crate::perms::private_dir(dir).map_err(|source| HostError::Io {
                op: "restrict",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let mut file = load_config(&paths.config, out)?;
        self.fill_lingma_defaults(&mut file);
        let extras = EngineExtras {
            local_offset_s: self.local_offset_s,
            trust: self.trust_env(),
            setup: self.setup_env(paths, Some(&file), &format!("http://{}", file.proxy.listen)),
            logs,
        };
        let config = EngineConfig {
            config_path: Some(paths.config.clone()),
            database_path: paths.database.clone(),
            file,
            listen: None,
            ca_dir: paths.ca_dir.clone(),
            proxy_listen: None,
            upstream_overrides: config::UpstreamOverrides::default(),
        };
        Ok((config, extras))
    }
}

/// Loads the config; on first run writes the commented template and says what to do next.
pub fn load_config(path: &Path, out: &mut impl Write) -> Result<FileConfig, HostError> {
    let io = |op, source| HostError::Io { op, path: path.to_path_buf(), source };
    if !path.exists() {
        if let Some(dir) = path.parent() {
            crate::perms::create_dirs(dir).map_err(|e| io("create the folder of", e))?;
        }
        write_private(path, config::TEMPLATE).map_err(|e| io("write", e))?;
        let _ = writeln!(
            out,
            "No configuration yet: wrote an example to {}.\nAdd a provider and a model there, store its key with `keyhaven key set NAME`, and restart.",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path).map_err(|e| io("read", e))?;
    Ok(config::load_str(&path.display().to_string(), &text)?)
}

/// Writes a new file that only its owner can read (0600 on Unix).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, crate::perms::FILE_MODE);
    opts.open(path)?.write_all(text.as_bytes())
}

/// What a started engine prints: its endpoints, the dashboard and where the control token is.
/// With a UI, a one-time dashboard link (single use, one minute; never the token itself).
pub fn banner(handle: &EngineHandle, models: usize, ui: bool, data_dir: &Path) -> String {
    let addr = handle.addr;
    let mut s = format!("Keyhaven is listening on http://{addr} ({models} models).\n");
    s.push_str(&format!("  OpenAI:    OPENAI_BASE_URL=http://{addr}/v1\n"));
    s.push_str(&format!("  Anthropic: ANTHROPIC_BASE_URL=http://{addr}\n"));
    if let Some(proxy) = &handle.proxy {
        s.push_str(&format!(
            "  Cursor:    HTTPS proxy http://{} (mode {}; trust the CA with `keyhaven ca install`)\n",
            proxy.addr,
            proxy.mode.get().as_str()
        ));
    }
    if ui {
        s.push_str(&format!(
            "  Dashboard: {}\n             (one-time link, valid for a minute; `keyhaven dashboard` prints a new one)\n",
            handle.dashboard_link()
        ));
    }
    s.push_str(&format!(
        "  Control:   http://{addr}/api/ (Authorization: Bearer <the token in {}>)\n",
        ControlToken::path(data_dir).display()
    ));
    s
}
