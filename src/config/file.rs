//! The `config.toml` format and its validation.

use std::collections::HashSet;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::config::ConfigError;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub timeouts: TimeoutConfig,
    #[serde(default)]
    pub retry: RetryConfig,
    #[serde(default)]
    pub providers: Vec<ProviderConfig>,
    #[serde(default)]
    pub models: Vec<ModelConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub capture_bodies: bool,
    pub body_capture_limit: usize,
    pub max_request_bytes: usize,
    pub retention_days: u32,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 4937)),
            capture_bodies: true,
            body_capture_limit: 64 * 1024,
            max_request_bytes: 32 * 1024 * 1024,
            retention_days: 30,
        }
    }
}

/// Timeouts in milliseconds. First byte and idle are per attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutConfig {
    pub connect: u64,
    pub first_byte: u64,
    pub idle: u64,
    pub total: u64,
}

impl Default for TimeoutConfig {
    fn default() -> TimeoutConfig {
        TimeoutConfig { connect: 10_000, first_byte: 120_000, idle: 300_000, total: 1_800_000 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    pub max_retries: u32,
    /// The longest `Retry-After` (ms) Keyhaven waits out itself.
    pub max_retry_after: u64,
    /// First backoff step (ms) when the upstream gives no `Retry-After`.
    pub base_backoff: u64,
}

impl Default for RetryConfig {
    fn default() -> RetryConfig {
        RetryConfig { max_retries: 2, max_retry_after: 60_000, base_backoff: 500 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// OpenAI Chat Completions and every compatible vendor.
    Openai,
    Anthropic,
    /// The OpenAI Responses API (`POST {base_url}/responses`).
    #[serde(rename = "openai-responses", alias = "openai_responses")]
    OpenaiResponses,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenaiResponses => "openai-responses",
        }
    }

    /// The vendor whose section of the price table applies: both OpenAI APIs bill alike.
    pub fn price_vendor(self) -> &'static str {
        match self {
            ProviderKind::Openai | ProviderKind::OpenaiResponses => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }
}

/// Where a provider's key comes from. Never the key itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum KeyRef {
    /// An entry in the OS keyring, set with `keyhaven key set NAME`.
    Keyring(String),
    /// An environment variable of the `keyhaven` process (headless servers).
    Env(String),
}

impl KeyRef {
    /// The name that goes into a model's stable id.
    pub fn name(&self) -> &str {
        match self {
            KeyRef::Keyring(n) | KeyRef::Env(n) => n,
        }
    }
}

impl std::fmt::Display for KeyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyRef::Keyring(n) => write!(f, "keyring:{n}"),
            KeyRef::Env(n) => write!(f, "env:{n}"),
        }
    }
}

impl<'de> Deserialize<'de> for KeyRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<KeyRef, D::Error> {
        let s = String::deserialize(d)?;
        let bad = || {
            serde::de::Error::custom(
                "expected \"keyring:NAME\" or \"env:VARIABLE\" (keys themselves never go in the config file)",
            )
        };
        let (scheme, name) = s.split_once(':').ok_or_else(bad)?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)) {
            return Err(bad());
        }
        match scheme {
            "keyring" => Ok(KeyRef::Keyring(name.to_owned())),
            "env" => Ok(KeyRef::Env(name.to_owned())),
            _ => Err(bad()),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub name: Spanned<String>,
    pub kind: ProviderKind,
    pub base_url: Spanned<String>,
    #[serde(default)]
    pub key: Option<KeyRef>,
    /// OpenAI kind only: send assistant reasoning back as `reasoning_content`. Defaults to true
    /// for every vendor except api.openai.com.
    #[serde(default)]
    pub reasoning_content: Option<bool>,
    /// OpenAI kind only: use `max_completion_tokens` instead of `max_tokens`. Defaults to true for
    /// api.openai.com.
    #[serde(default)]
    pub max_completion_tokens: Option<bool>,
}

impl ProviderConfig {
    pub fn name(&self) -> &str {
        self.name.get_ref()
    }

    /// The base URL without a trailing slash.
    pub fn base_url(&self) -> &str {
        self.base_url.get_ref().trim_end_matches('/')
    }

    pub fn is_openai_itself(&self) -> bool {
        self.base_url().contains("://api.openai.com")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolsMode {
    #[default]
    Native,
    Emulated,
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelCapabilities {
    pub tools: bool,
    pub vision: bool,
    pub thinking: bool,
}

impl Default for ModelCapabilities {
    fn default() -> ModelCapabilities {
        ModelCapabilities { tools: true, vision: true, thinking: false }
    }
}

/// Per-model price override, USD per million tokens as decimal strings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceOverride {
    pub input: Option<String>,
    pub output: Option<String>,
    pub cache_read: Option<String>,
    pub cache_write: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The display name, which is also what clients ask for.
    pub name: Spanned<String>,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub provider: Spanned<String>,
    /// The provider's model id.
    pub upstream: String,
    #[serde(default)]
    pub context_window: Option<u64>,
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    #[serde(default)]
    pub capabilities: ModelCapabilities,
    #[serde(default)]
    pub tools: ToolsMode,
    #[serde(default)]
    pub price: Option<PriceOverride>,
}

impl ModelConfig {
    pub fn name(&self) -> &str {
        self.name.get_ref()
    }
}

/// Parses and validates a config file's text. `file` names it in messages.
pub fn load_str(file: &str, text: &str) -> Result<FileConfig, ConfigError> {
    let config: FileConfig = toml::from_str(text).map_err(|err| {
        let (line, column) = err.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
        ConfigError::Invalid { file: file.to_owned(), line, column, message: err.message().trim().to_owned() }
    })?;
    validate(file, text, &config)?;
    Ok(config)
}

fn validate(file: &str, text: &str, config: &FileConfig) -> Result<(), ConfigError> {
    let at = |span: std::ops::Range<usize>, message: String| {
        let (line, column) = line_col(text, span.start);
        ConfigError::Invalid { file: file.to_owned(), line, column, message }
    };
    let mut providers = HashSet::new();
    for p in &config.providers {
        if p.name().is_empty() {
            return Err(at(p.name.span(), "providers.name: must not be empty".into()));
        }
        if !providers.insert(p.name()) {
            return Err(at(p.name.span(), format!("providers.name: duplicate provider `{}`", p.name())));
        }
        let url = p.base_url();
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() <= "https://".len() {
            return Err(at(p.base_url.span(), format!("providers.base_url: `{url}` is not an http(s) URL")));
        }
    }
    let mut names = HashSet::new();
    for m in &config.models {
        if !providers.contains(m.provider.get_ref().as_str()) {
            let known: Vec<_> = providers.iter().copied().collect();
            return Err(at(
                m.provider.span(),
                format!("models.provider: no provider named `{}` (known: {})", m.provider.get_ref(), known.join(", ")),
            ));
        }
        if m.name().is_empty() {
            return Err(at(m.name.span(), "models.name: must not be empty".into()));
        }
        for n in std::iter::once(m.name()).chain(m.aliases.iter().map(String::as_str)) {
            if !names.insert(n) {
                return Err(at(m.name.span(), format!("models: the name or alias `{n}` is used twice")));
            }
        }
    }
    let t = &config.timeouts;
    if t.connect == 0 || t.first_byte == 0 || t.total == 0 {
        return Err(ConfigError::Semantic { file: file.to_owned(), message: "timeouts: values must be > 0".into() });
    }
    Ok(())
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}
