//! Configuration as a value. The file format (`config.toml`), its validation with messages that
//! name the file, line and field, and [`EngineConfig`], the value the engine is started with.
//!
//! Invariant: nothing here reads the environment or global paths; the binary resolves paths and
//! passes them in.

mod file;

pub use file::{
    AgentConfig, BRAVE_DEFAULT_URL, BRAVE_KEY_NAME, BudgetAction, BudgetConfig, BudgetPeriod, CURSOR_DOMAINS,
    CursorConfig, CursorHttp2, CursorRoute, CursorTabConfig, FileConfig, FimDialect, FimFlag, GroupConfig, KeyRef,
    LINGMA_DEFAULT_TIMEOUT, LingmaOptions, LingmaTransport, ModelCapabilities, ModelConfig, ModelTimeouts,
    PriceOverride, ProviderConfig, ProviderKind, ProxyConfig, RetryConfig, RoutingConfig, RoutingMode, ServerConfig,
    SessionMode, SetupConfig, Synchronous, TAB_OFFICIAL, TimeoutConfig, ToolsMode, WEB_FETCH_MAX_BYTES_LIMIT,
    WebConfig, WebFetch, WebSearch, check_listen, is_cursor_domain, load_str, parse_time_zone,
};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything the engine needs to start. Built by `main.rs` (or a test) and passed in.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Where the config file lives (for messages only; the content is in `file`).
    pub config_path: Option<PathBuf>,
    /// The SQLite database file.
    pub database_path: PathBuf,
    pub file: FileConfig,
    /// Overrides `file.server.listen` (tests bind port 0).
    pub listen: Option<SocketAddr>,
    /// Where the local CA's certificate (and, without an OS keyring, its key) lives.
    pub ca_dir: PathBuf,
    /// Overrides `file.proxy.listen` (tests bind port 0).
    pub proxy_listen: Option<SocketAddr>,
    /// Tests only: where intercepted hosts are really reached, and extra roots to trust there.
    pub upstream_overrides: UpstreamOverrides,
}

/// Test-only redirection of the proxy's upstream connections. Empty in production.
#[derive(Debug, Clone, Default)]
pub struct UpstreamOverrides {
    /// Host name (lowercase) to the address actually dialled; TLS still verifies the host name.
    pub hosts: HashMap<String, SocketAddr>,
    /// DER certificates trusted as roots in addition to the web PKI roots.
    pub extra_roots_der: Vec<Vec<u8>>,
}

impl EngineConfig {
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen.unwrap_or(self.file.server.listen)
    }

    pub fn proxy_listen_addr(&self) -> SocketAddr {
        self.proxy_listen.unwrap_or(self.file.proxy.listen)
    }
}

/// The example configuration written on first run, every line commented out.
pub const TEMPLATE: &str = include_str!("template.toml");

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}:{line}:{column}: {message}")]
    Invalid { file: String, line: usize, column: usize, message: String },
    #[error("{file}: {message}")]
    Semantic { file: String, message: String },
}

impl ConfigError {
    pub fn kind(&self) -> &'static str {
        match self {
            ConfigError::Invalid { .. } => "config_invalid",
            ConfigError::Semantic { .. } => "config_semantic",
        }
    }
}

#[cfg(test)]
mod tests;
