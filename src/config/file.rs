//! The `config.toml` format and its validation.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::config::ConfigError;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The time zone budget periods follow: `"local"` (default: the system's offset, passed in by
    /// the binary), `"UTC"`, or a fixed offset such as `"+02:00"`. A top-level key (before any
    /// table in the file).
    #[serde(default)]
    pub time_zone: Option<String>,
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
    #[serde(default)]
    pub proxy: ProxyConfig,
    /// Model groups: a request for the group tries its models in order.
    #[serde(default)]
    pub groups: Vec<GroupConfig>,
    #[serde(default)]
    pub routing: RoutingConfig,
    #[serde(default)]
    pub agent: AgentConfig,
    #[serde(default)]
    pub cursor: CursorConfig,
    /// `[cursor_tab]`: Cursor Tab served with one of the user's FIM models.
    #[serde(default)]
    pub cursor_tab: CursorTabConfig,
    #[serde(default)]
    pub setup: SetupConfig,
    #[serde(default)]
    pub web: WebConfig,
    /// Spending limits (`[[budgets]]`).
    #[serde(default)]
    pub budgets: Vec<BudgetConfig>,
}

/// A budget's period, in the configured time zone: from midnight (the day, Monday for a week,
/// the 1st for a month) to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetPeriod {
    Day,
    Week,
    #[default]
    Month,
}

impl BudgetPeriod {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::Day => "day",
            BudgetPeriod::Week => "week",
            BudgetPeriod::Month => "month",
        }
    }
}

/// What happens to new calls once a budget is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetAction {
    /// 429 `budget_exceeded` in the caller's dialect.
    #[default]
    Refuse,
    /// New conversations go to `downgrade_to`; conversations under way keep their model.
    Downgrade,
}

impl BudgetAction {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetAction::Refuse => "refuse",
            BudgetAction::Downgrade => "downgrade",
        }
    }
}

/// `[[budgets]]`: a spending limit over a period for everything, or for one client, provider,
/// or model or group (at most one of `client`, `provider`, `model`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    pub name: Spanned<String>,
    /// A client's name as calls record it (`cursor`, `claude-code`, `codex`, a client token's name).
    #[serde(default)]
    pub client: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    /// A model (name or alias) or a group.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub period: BudgetPeriod,
    /// USD.
    pub limit_usd: f64,
    /// The warning threshold, percent of the limit (1 to 100).
    #[serde(default = "default_soft_percent")]
    pub soft_percent: u8,
    #[serde(default)]
    pub on_limit: BudgetAction,
    /// The cheaper model or group new conversations go to (`on_limit = "downgrade"`).
    #[serde(default)]
    pub downgrade_to: Option<String>,
}

fn default_soft_percent() -> u8 {
    80
}

impl BudgetConfig {
    pub fn name(&self) -> &str {
        self.name.get_ref()
    }

    /// The limit in micro-USD (the ledger's unit).
    pub fn limit_micros(&self) -> u64 {
        (self.limit_usd * 1_000_000.0).round().max(0.0) as u64
    }
}

/// Parses `time_zone`: `None` for `"local"` (or unset), else the fixed offset in seconds east of UTC.
pub fn parse_time_zone(tz: Option<&str>) -> Result<Option<i32>, String> {
    let Some(tz) = tz.map(str::trim) else { return Ok(None) };
    if tz.eq_ignore_ascii_case("local") || tz.is_empty() {
        return Ok(None);
    }
    if tz.eq_ignore_ascii_case("utc") || tz == "Z" {
        return Ok(Some(0));
    }
    let bad = || {
        format!(
            "time_zone: `{tz}` is not \"local\", \"UTC\" or an offset such as \"+02:00\" (named zones are not supported)"
        )
    };
    let (sign, rest) = match tz.as_bytes().first() {
        Some(b'+') => (1, &tz[1..]),
        Some(b'-') => (-1, &tz[1..]),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let (h, m): (i32, i32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if !(0..=14).contains(&h) || !(0..60).contains(&m) {
        return Err(bad());
    }
    Ok(Some(sign * (h * 3600 + m * 60)))
}

/// `[web]`: the agent's web tools (`web_search`, `fetch_url`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfig {
    /// Who answers `web_search`: `none` (the model is told web search is unavailable), `brave`
    /// (the Brave Search API, with a key) or `searxng` (a SearXNG instance, no key).
    pub search: WebSearch,
    /// The search provider's base URL. Defaults to Brave's public endpoint; required for SearXNG.
    pub search_url: Option<String>,
    /// Where the Brave Search API key is (`keyring:NAME` or `env:VAR`); never the key itself.
    /// Unset: the keyring entry [`BRAVE_KEY_NAME`].
    pub key: Option<KeyRef>,
    /// Who fetches a page for `fetch_url` once the user approves: `keyhaven` or `editor`.
    pub fetch: WebFetch,
    /// The most bytes of one page Keyhaven reads; longer pages are cut and marked truncated.
    pub fetch_max_bytes: u64,
    /// Milliseconds one search or fetch may take (connect included).
    pub timeout: u64,
}

/// The keyring entry the Brave Search API key is kept under when `[web] key` is unset.
pub const BRAVE_KEY_NAME: &str = "brave-search";
/// Brave Search's public API endpoint.
pub const BRAVE_DEFAULT_URL: &str = "https://api.search.brave.com";
/// The largest `fetch_max_bytes` the config accepts (64 MiB).
pub const WEB_FETCH_MAX_BYTES_LIMIT: u64 = 64 * 1024 * 1024;

impl Default for WebConfig {
    fn default() -> WebConfig {
        WebConfig {
            search: WebSearch::None,
            search_url: None,
            key: None,
            fetch: WebFetch::Keyhaven,
            fetch_max_bytes: 2 * 1024 * 1024,
            timeout: 20_000,
        }
    }
}

impl WebConfig {
    /// The search provider's base URL without a trailing slash (`None` for `none`, or for
    /// SearXNG without a URL, which validation refuses).
    pub fn search_base_url(&self) -> Option<String> {
        let given = self.search_url.as_deref().map(|u| u.trim_end_matches('/').to_owned()).filter(|u| !u.is_empty());
        match self.search {
            WebSearch::None => None,
            WebSearch::Brave => Some(given.unwrap_or_else(|| BRAVE_DEFAULT_URL.to_owned())),
            WebSearch::Searxng => given,
        }
    }

    /// Where the Brave key is read from.
    pub fn key_ref(&self) -> KeyRef {
        self.key.clone().unwrap_or_else(|| KeyRef::Keyring(BRAVE_KEY_NAME.to_owned()))
    }
}

/// `[web] search`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebSearch {
    #[default]
    None,
    Brave,
    Searxng,
}

impl WebSearch {
    pub fn as_str(self) -> &'static str {
        match self {
            WebSearch::None => "none",
            WebSearch::Brave => "brave",
            WebSearch::Searxng => "searxng",
        }
    }
}

/// `[web] fetch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebFetch {
    /// Keyhaven fetches the page after the user's approval and gives the model readable text.
    #[default]
    Keyhaven,
    /// The Cursor editor fetches the page (through its exec channel).
    Editor,
}

impl WebFetch {
    pub fn as_str(self) -> &'static str {
        match self {
            WebFetch::Keyhaven => "keyhaven",
            WebFetch::Editor => "editor",
        }
    }
}

/// `[setup]`: how Keyhaven treats the clients it routed (`keyhaven setup`, the Clients page).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SetupConfig {
    /// When Keyhaven stops (tray Stop or Quit, or a signal to `keyhaven serve`), put every routed
    /// client's config back, so no client is left pointing at a port nobody listens on.
    pub restore_on_stop: bool,
}

impl FileConfig {
    /// Fills the machine-specific defaults of every `lingma` provider that leaves them unset
    /// (`main.rs` passes the assistant's cache file under the home directory, the system temp
    /// directory and the current directory; the engine reads none of them itself).
    pub fn fill_lingma_defaults(
        &mut self,
        info_file: &std::path::Path,
        temp_dir: &std::path::Path,
        cwd: &std::path::Path,
    ) {
        for p in self.providers.iter_mut().filter(|p| p.kind == ProviderKind::Lingma) {
            p.info_file.get_or_insert_with(|| info_file.to_path_buf());
            p.temp_dir.get_or_insert_with(|| temp_dir.to_path_buf());
            p.cwd.get_or_insert_with(|| cwd.to_path_buf());
        }
    }
}

/// How intercepted Cursor calls are served. Switchable at runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoutingMode {
    /// Keyhaven answers the calls it implements itself; the rest go to the official service.
    Local,
    /// Every call goes to the official service unchanged.
    Upstream,
    /// Per call: local for the models Keyhaven serves, upstream for the rest.
    #[default]
    Hybrid,
}

impl RoutingMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RoutingMode::Local => "local",
            RoutingMode::Upstream => "upstream",
            RoutingMode::Hybrid => "hybrid",
        }
    }
}

/// The domains Keyhaven may decrypt: Cursor's. An intercept entry must be one of them or below
/// one (so never a public suffix such as `com` or `co.uk`, nor another site).
pub const CURSOR_DOMAINS: [&str; 2] = ["cursor.sh", "cursor.com"];

/// Whether `domain` (lowercase, no port, no trailing dot) is one of [`CURSOR_DOMAINS`] or a
/// subdomain of one, on a label boundary (`api2.cursor.sh` yes, `evilcursor.sh` no).
pub fn is_cursor_domain(domain: &str) -> bool {
    CURSOR_DOMAINS
        .iter()
        .any(|c| domain == *c || domain.strip_suffix(c).is_some_and(|p| p.len() > 1 && p.ends_with('.')))
}

/// The `[proxy]` table: the HTTPS proxy Cursor is pointed at.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    pub enabled: bool,
    pub listen: SocketAddr,
    /// Domains whose traffic is decrypted (each with every subdomain; a leading `*.` means the
    /// same). Only Cursor's domains and their subdomains are accepted ([`is_cursor_domain`]). The
    /// same list becomes the local CA's name constraints.
    pub intercept: Vec<String>,
    pub mode: RoutingMode,
}

impl Default for ProxyConfig {
    fn default() -> ProxyConfig {
        ProxyConfig {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 4938)),
            intercept: vec!["cursor.sh".to_owned(), "cursor.com".to_owned()],
            mode: RoutingMode::default(),
        }
    }
}

/// The `[agent]` table: limits of the agent loop behind Cursor.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// The most model calls one agent turn may make.
    pub max_steps: u32,
    /// Milliseconds the editor may stay silent on one tool request (no result, output or
    /// heartbeat) before the request is aborted and the model told it timed out.
    pub exec_timeout: u64,
    /// Milliseconds the editor may take to acknowledge a checkpoint's blobs; after that the
    /// checkpoint is skipped (and the rest of the turn's checkpoints with it).
    pub blob_ack_timeout: u64,
    /// Milliseconds a run keeps going after its last RunSSE reader disconnected (a re-subscriber
    /// gets the replay); then it is canceled like a stop.
    pub detach_grace: u64,
    /// Compact a conversation (summarize it through the model) when the latest prompt used this
    /// percentage of the model's `context_window`; 0 compacts only on Cursor's summarize action.
    pub compact_at: u64,
    /// Milliseconds the user may take to answer a question, plan, mode switch or approval in the
    /// editor; after that the model is told nobody answered (an editor that never answers cannot
    /// hold a turn forever).
    pub question_timeout: u64,
}

impl Default for AgentConfig {
    fn default() -> AgentConfig {
        AgentConfig {
            max_steps: 50,
            exec_timeout: 300_000,
            blob_ack_timeout: 10_000,
            detach_grace: 180_000,
            compact_at: 80,
            question_timeout: 900_000,
        }
    }
}

/// Where a Cursor agent run with a configured model goes in `hybrid` mode (`[[models]] cursor`).
/// `local` and `upstream` modes ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CursorRoute {
    /// Keyhaven runs the turn with the model's provider.
    #[default]
    Local,
    /// The run goes to Cursor's official service unchanged (the model's name must be one Cursor
    /// knows).
    Upstream,
}

impl CursorRoute {
    pub fn as_str(self) -> &'static str {
        match self {
            CursorRoute::Local => "local",
            CursorRoute::Upstream => "upstream",
        }
    }
}

/// The transport knob Keyhaven may change in the official `GetServerConfig` answer
/// (`http2_config`, docs/cursor-wire.md §1.2). Everything else in that answer is passed through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CursorHttp2 {
    /// Leave the official value (Keyhaven serves both the h2 `Run` stream and RunSSE).
    #[default]
    Official,
    /// `FORCE_ALL_DISABLED`: HTTP/1.1 with RunSSE + BidiAppend.
    Disabled,
    /// `FORCE_ALL_ENABLED`.
    Enabled,
    /// `FORCE_BIDI_DISABLED`: h2, but RunSSE + BidiAppend instead of the bidi `Run` stream.
    BidiDisabled,
    /// `FORCE_BIDI_ENABLED`.
    BidiEnabled,
}

/// The `[cursor]` table: the Cursor agent backend's timing and transport knobs (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CursorConfig {
    /// How long an agent stream waits for its run request (BidiAppend seqno 0) before it ends
    /// with a `deadline_exceeded` error.
    pub first_message_wait: u64,
    /// How long a gap in BidiAppend seqnos may stay open before it is skipped.
    pub gap_wait: u64,
    /// How long a finished run stays registered (late appends get 200, RunSSE re-subscribers get
    /// the replay).
    pub linger: u64,
    /// Server heartbeat on an idle agent stream.
    pub heartbeat: u64,
    /// `GetServerConfig`'s `http2_config`.
    pub http2: CursorHttp2,
    /// The update guard: self-test each new Cursor version, pass a failing one through to
    /// Cursor's servers until Retry.
    pub update_guard: bool,
}

impl Default for CursorConfig {
    fn default() -> CursorConfig {
        CursorConfig {
            first_message_wait: 30_000,
            gap_wait: 30_000,
            linger: 30_000,
            heartbeat: 5_000,
            http2: CursorHttp2::Official,
            update_guard: true,
        }
    }
}

/// `[cursor_tab]`: who answers Cursor Tab (`AiService/StreamCpp`). The default is Cursor's own
/// service; naming a FIM model (`[[models]] fim`) makes Keyhaven answer it locally.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CursorTabConfig {
    /// `"official"` (default) or the name of a FIM model.
    pub model: String,
    /// Budget of the text before the cursor, in (estimated) tokens.
    pub prefix_tokens: u32,
    /// Budget of the text after the cursor, in (estimated) tokens.
    pub suffix_tokens: u32,
    /// `max_tokens` for a single-line suggestion (typing in the middle of a line).
    pub line_tokens: u32,
    /// `max_tokens` for a multi-line suggestion (a new or empty line).
    pub block_tokens: u32,
    /// The longest a suggestion may take, provider call included (ms). The IDE drops streams
    /// older than about 4 s.
    pub timeout: u64,
}

/// The value of `[cursor_tab] model` that leaves Tab to Cursor.
pub const TAB_OFFICIAL: &str = "official";

impl Default for CursorTabConfig {
    fn default() -> CursorTabConfig {
        CursorTabConfig {
            model: TAB_OFFICIAL.to_owned(),
            prefix_tokens: 1536,
            suffix_tokens: 512,
            line_tokens: 64,
            block_tokens: 256,
            timeout: 3500,
        }
    }
}

impl CursorTabConfig {
    /// The FIM model that answers Tab, or `None` for Cursor's own service.
    pub fn local_model(&self) -> Option<&str> {
        let m = self.model.trim();
        (!m.is_empty() && m != TAB_OFFICIAL).then_some(m)
    }
}

/// A fill-in-the-middle wire dialect (`[[models]] fim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FimDialect {
    /// OpenAI-compatible legacy completions: `POST {base_url}/completions` with `prompt` and
    /// `suffix` (DeepSeek's `https://api.deepseek.com/beta`, vLLM, LM Studio, SiliconFlow).
    Completions,
    /// Mistral Codestral: `POST {base_url}/fim/completions`.
    Codestral,
    /// Ollama: `POST {base_url}/api/generate` with `suffix`.
    Ollama,
}

impl FimDialect {
    pub fn as_str(self) -> &'static str {
        match self {
            FimDialect::Completions => "completions",
            FimDialect::Codestral => "codestral",
            FimDialect::Ollama => "ollama",
        }
    }
}

/// `[[models]] fim`: `true` (the OpenAI-compatible completions dialect), `false`, or a dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum FimFlag {
    On(bool),
    Dialect(FimDialect),
}

/// `[[groups]]`: a name clients ask for, and the models it falls back through, in order.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    pub name: Spanned<String>,
    /// Model names or aliases.
    pub models: Vec<String>,
}

impl GroupConfig {
    pub fn name(&self) -> &str {
        self.name.get_ref()
    }
}

/// `[routing]`: the per-provider cooldown. After `cooldown_failures` failed attempts (connect
/// errors, 429, 5xx) within `cooldown_window` ms, groups skip the provider for `cooldown` ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingConfig {
    pub cooldown_failures: u32,
    pub cooldown_window: u64,
    pub cooldown: u64,
}

impl Default for RoutingConfig {
    fn default() -> RoutingConfig {
        RoutingConfig { cooldown_failures: 3, cooldown_window: 60_000, cooldown: 30_000 }
    }
}

/// Per-model timeout overrides (ms); unset fields keep `[timeouts]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelTimeouts {
    pub first_byte: Option<u64>,
    pub idle: Option<u64>,
    pub total: Option<u64>,
}

impl TimeoutConfig {
    /// These timeouts with a model's overrides applied.
    pub fn with(self, o: &ModelTimeouts) -> TimeoutConfig {
        TimeoutConfig {
            connect: self.connect,
            first_byte: o.first_byte.unwrap_or(self.first_byte),
            idle: o.idle.unwrap_or(self.idle),
            total: o.total.unwrap_or(self.total),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Record every call in the database (usage, cost, history). Off only for measurements or
    /// strict privacy; nothing is then written.
    pub record_calls: bool,
    /// Refuse gateway calls without a client token issued by `keyhaven setup`.
    pub require_client_token: bool,
    /// Let `listen` be a non-loopback address (other machines reach the gateway). Needs
    /// `require_client_token = true` too; without both, such an address is refused.
    pub allow_remote: bool,
    /// How durable the call ledger is. `normal` (the default): each call's start and finish are
    /// written to the OS (the call journal, then SQLite) before the client sees them, so a crash
    /// or `kill -9` of Keyhaven loses no call whose response head was sent; a power loss or OS
    /// crash may lose the last moments of calls (never the database). `full`: no journal, and the
    /// in-flight row's SQLite commit is fsynced before the client sees a byte (power-loss
    /// durable, at the cost of one fsync per call on the request path).
    pub synchronous: Synchronous,
    /// The ledger's write-ahead log is emptied when it grows past this many MiB (the writer waits
    /// for that one checkpoint; smaller checkpoints run beside it all the time).
    pub max_wal_mb: u32,
    pub capture_bodies: bool,
    pub body_capture_limit: usize,
    pub max_request_bytes: usize,
    pub retention_days: u32,
    /// The built web UI (`ui/dist`), served at `/` on the gateway listener as it is (no credential
    /// in it; `keyhaven dashboard` gives a one-time link). Unset or missing: no UI is served (the
    /// control API under `/api/` still is).
    pub ui_dir: Option<std::path::PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 4937)),
            record_calls: true,
            require_client_token: false,
            allow_remote: false,
            synchronous: Synchronous::Normal,
            max_wal_mb: 64,
            capture_bodies: true,
            body_capture_limit: 64 * 1024,
            max_request_bytes: 32 * 1024 * 1024,
            retention_days: 30,
            ui_dir: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Synchronous {
    Full,
    #[default]
    Normal,
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
    /// The local Tongyi Lingma IDE assistant's backend process (JSON-RPC over WebSocket or a
    /// Windows named pipe); no base URL, no key.
    Lingma,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenaiResponses => "openai-responses",
            ProviderKind::Lingma => "lingma",
        }
    }

    /// The vendor whose section of the price table applies: both OpenAI APIs bill alike.
    pub fn price_vendor(self) -> &'static str {
        match self {
            ProviderKind::Openai | ProviderKind::OpenaiResponses => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Lingma => "lingma",
        }
    }
}

/// Where a provider's key comes from. Never the key itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
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
    /// Required for every kind but `lingma`.
    #[serde(default)]
    pub base_url: Option<Spanned<String>>,
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
    /// Lingma kind only: the assistant's `SharedClientCache/.info.json` (its WebSocket port and
    /// pipe name). `keyhaven serve` fills in `~/.config/Lingma/SharedClientCache/.info.json`.
    #[serde(default)]
    pub info_file: Option<PathBuf>,
    /// Lingma kind only: `auto` (WebSocket on macOS/Linux, named pipe on Windows),
    /// `websocket` or `pipe`.
    #[serde(default)]
    pub transport: Option<LingmaTransport>,
    /// Lingma kind only: a fixed WebSocket URL instead of the port from `info_file`.
    #[serde(default)]
    pub ws_url: Option<String>,
    /// Lingma kind only: a fixed named pipe (`\\.\pipe\lingma-…`) instead of discovery.
    #[serde(default)]
    pub pipe: Option<String>,
    /// Lingma kind only: `reuse`, `fresh` or `auto` (default).
    #[serde(default)]
    pub session_mode: Option<SessionMode>,
    /// Lingma kind only: requests that may wait while one runs (default 0: reject with 429).
    #[serde(default)]
    pub queue: Option<u32>,
    /// Lingma kind only: extra model ids (`upstream` name → Lingma's id), over the shipped table.
    #[serde(default)]
    pub model_map: BTreeMap<String, String>,
    /// Lingma kind only: the longest one request may take, in ms (default 120000).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Lingma kind only: the working directory sessions are opened in (`keyhaven serve` fills in
    /// its current directory).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Lingma kind only: where images are written for the assistant to read (private files,
    /// removed after the call; `keyhaven serve` fills in the system temp directory).
    #[serde(default)]
    pub temp_dir: Option<PathBuf>,
}

/// How Keyhaven reaches the Lingma backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LingmaTransport {
    /// WebSocket on macOS and Linux, the named pipe on Windows.
    #[default]
    Auto,
    #[serde(alias = "ws")]
    Websocket,
    Pipe,
}

/// Which Lingma session a request runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// One sticky session keeps the context; only the latest user message is sent.
    Reuse,
    /// A temporary session per request with the whole transcript, deleted afterwards.
    Fresh,
    /// `reuse` for single-turn requests, `fresh` when there is a system prompt or history.
    #[default]
    Auto,
}

/// A lingma provider's settings, with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LingmaOptions {
    pub info_file: Option<PathBuf>,
    pub transport: LingmaTransport,
    pub ws_url: Option<String>,
    pub pipe: Option<String>,
    pub session_mode: SessionMode,
    pub queue: u32,
    pub model_map: BTreeMap<String, String>,
    /// Milliseconds.
    pub timeout: u64,
    pub cwd: Option<PathBuf>,
    pub temp_dir: Option<PathBuf>,
}

/// The default Lingma request timeout (ms).
pub const LINGMA_DEFAULT_TIMEOUT: u64 = 120_000;

impl ProviderConfig {
    pub fn name(&self) -> &str {
        self.name.get_ref()
    }

    /// The base URL without a trailing slash; `lingma://local` for the Lingma kind.
    pub fn base_url(&self) -> &str {
        match &self.base_url {
            Some(u) => u.get_ref().trim_end_matches('/'),
            None if self.kind == ProviderKind::Lingma => "lingma://local",
            None => "",
        }
    }

    /// The Lingma settings with defaults (meaningful for the Lingma kind only).
    pub fn lingma_options(&self) -> LingmaOptions {
        LingmaOptions {
            info_file: self.info_file.clone(),
            transport: self.transport.unwrap_or_default(),
            ws_url: self.ws_url.clone(),
            pipe: self.pipe.clone(),
            session_mode: self.session_mode.unwrap_or_default(),
            queue: self.queue.unwrap_or(0),
            model_map: self.model_map.clone(),
            timeout: self.timeout.unwrap_or(LINGMA_DEFAULT_TIMEOUT),
            cwd: self.cwd.clone(),
            temp_dir: self.temp_dir.clone(),
        }
    }

    /// Whether any Lingma-only field is set.
    fn has_lingma_fields(&self) -> bool {
        self.info_file.is_some()
            || self.transport.is_some()
            || self.ws_url.is_some()
            || self.pipe.is_some()
            || self.session_mode.is_some()
            || self.queue.is_some()
            || !self.model_map.is_empty()
            || self.timeout.is_some()
            || self.cwd.is_some()
            || self.temp_dir.is_some()
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
    /// The version recorded on the rows priced with it (`keyhaven prices set` and the Prices page
    /// write `override-<UTC time>`); without one, `config-<digest of the prices>`.
    pub version: Option<String>,
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
    #[serde(default)]
    pub timeouts: ModelTimeouts,
    /// In `hybrid` mode: whether Cursor runs with this model are served locally or upstream.
    #[serde(default)]
    pub cursor: CursorRoute,
    /// A fill-in-the-middle model (Cursor Tab): `true` or its dialect.
    #[serde(default)]
    pub fim: Option<FimFlag>,
}

impl ModelConfig {
    pub fn name(&self) -> &str {
        self.name.get_ref()
    }

    /// The model's FIM dialect, when it is a FIM model.
    pub fn fim_dialect(&self) -> Option<FimDialect> {
        match self.fim? {
            FimFlag::On(true) => Some(FimDialect::Completions),
            FimFlag::On(false) => None,
            FimFlag::Dialect(d) => Some(d),
        }
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
        if p.kind == ProviderKind::Lingma {
            if p.timeout == Some(0) {
                return Err(at(p.name.span(), format!("providers.timeout: `{}` must be > 0", p.name())));
            }
            if let Some(u) = &p.ws_url
                && !u.starts_with("ws://")
            {
                return Err(at(p.name.span(), format!("providers.ws_url: `{u}` is not a ws:// URL")));
            }
            continue;
        }
        if p.has_lingma_fields() {
            return Err(at(
                p.name.span(),
                format!("providers: `{}` sets Lingma-only fields but is not kind = \"lingma\"", p.name()),
            ));
        }
        let Some(base_url) = &p.base_url else {
            return Err(at(p.name.span(), format!("providers.base_url: `{}` needs a base_url", p.name())));
        };
        let url = p.base_url();
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() <= "https://".len() {
            return Err(at(base_url.span(), format!("providers.base_url: `{url}` is not an http(s) URL")));
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
        if m.fim_dialect().is_some()
            && config.providers.iter().any(|p| p.name() == m.provider.get_ref() && p.kind != ProviderKind::Openai)
        {
            return Err(at(
                m.name.span(),
                format!("models.fim: `{}` is a FIM model; its provider must be of kind \"openai\"", m.name()),
            ));
        }
        for n in std::iter::once(m.name()).chain(m.aliases.iter().map(String::as_str)) {
            if !names.insert(n) {
                return Err(at(m.name.span(), format!("models: the name or alias `{n}` is used twice")));
            }
        }
    }
    for entry in &config.proxy.intercept {
        let d = entry.strip_prefix("*.").unwrap_or(entry);
        if !d.contains('*') && !is_cursor_domain(&d.to_ascii_lowercase()) {
            return Err(ConfigError::Semantic {
                file: file.to_owned(),
                message: format!(
                    "proxy.intercept: `{entry}` is not one of Cursor's domains: only cursor.sh, cursor.com and their \
                     subdomains can be decrypted (the local CA is limited to what this list names)"
                ),
            });
        }
        let ok = !d.is_empty()
            && d.len() <= 253
            && d.contains('.')
            && d.split('.')
                .all(|l| !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
            && d.parse::<std::net::IpAddr>().is_err();
        if !ok || d.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(ConfigError::Semantic {
                file: file.to_owned(),
                message: format!("proxy.intercept: `{d}` is not a lowercase DNS domain such as \"cursor.sh\""),
            });
        }
    }
    if let Some(tab) = config.cursor_tab.local_model() {
        match config.models.iter().find(|m| m.name() == tab || m.aliases.iter().any(|a| a == tab)) {
            None => {
                return Err(ConfigError::Semantic {
                    file: file.to_owned(),
                    message: format!("cursor_tab.model: no model named `{tab}` (\"official\" or a FIM model)"),
                });
            }
            Some(m) if m.fim_dialect().is_none() => {
                return Err(ConfigError::Semantic {
                    file: file.to_owned(),
                    message: format!("cursor_tab.model: `{tab}` is not a FIM model (set `fim = true` on it)"),
                });
            }
            Some(_) => {}
        }
    }
    let t = &config.cursor_tab;
    if [t.prefix_tokens, t.line_tokens, t.block_tokens].contains(&0) || t.timeout == 0 {
        return Err(ConfigError::Semantic {
            file: file.to_owned(),
            message: "cursor_tab: prefix_tokens, line_tokens, block_tokens and timeout must be > 0".into(),
        });
    }
    for m in &config.models {
        let o = &m.timeouts;
        if [o.first_byte, o.idle, o.total].contains(&Some(0)) {
            return Err(at(m.name.span(), format!("models.timeouts: values of `{}` must be > 0", m.name())));
        }
    }
    for g in &config.groups {
        if g.name().is_empty() {
            return Err(at(g.name.span(), "groups.name: must not be empty".into()));
        }
        if !names.insert(g.name()) {
            return Err(at(
                g.name.span(),
                format!("groups: the name `{}` is already a model, alias or group", g.name()),
            ));
        }
        if g.models.is_empty() {
            return Err(at(g.name.span(), format!("groups: `{}` lists no models", g.name())));
        }
        for member in &g.models {
            let known = config.models.iter().any(|m| m.name() == member || m.aliases.contains(member));
            if !known {
                return Err(at(g.name.span(), format!("groups: `{}` names an unknown model `{member}`", g.name())));
            }
        }
    }
    let r = &config.routing;
    if r.cooldown_failures == 0 || r.cooldown_window == 0 {
        return Err(ConfigError::Semantic {
            file: file.to_owned(),
            message: "routing: cooldown_failures and cooldown_window must be > 0".into(),
        });
    }
    let c = &config.cursor;
    if c.first_message_wait == 0 || c.gap_wait == 0 || c.heartbeat == 0 {
        return Err(ConfigError::Semantic {
            file: file.to_owned(),
            message: "cursor: first_message_wait, gap_wait and heartbeat must be > 0".into(),
        });
    }
    validate_web(file, &config.web)?;
    validate_budgets(config, &names).map_err(|(span, message)| match span {
        Some(span) => at(span, message),
        None => ConfigError::Semantic { file: file.to_owned(), message },
    })?;
    check_listen(&config.server, config.server.listen, config.proxy.listen)
        .map_err(|message| ConfigError::Semantic { file: file.to_owned(), message })?;
    let t = &config.timeouts;
    if t.connect == 0 || t.first_byte == 0 || t.total == 0 {
        return Err(ConfigError::Semantic { file: file.to_owned(), message: "timeouts: values must be > 0".into() });
    }
    Ok(())
}

/// `[[budgets]]` and `time_zone`. `names` holds every model name, alias and group.
fn validate_budgets(
    config: &FileConfig,
    names: &HashSet<&str>,
) -> Result<(), (Option<std::ops::Range<usize>>, String)> {
    parse_time_zone(config.time_zone.as_deref()).map_err(|m| (None, m))?;
    let mut seen = HashSet::new();
    for b in &config.budgets {
        let span = Some(b.name.span());
        let n = b.name();
        if n.trim().is_empty() {
            return Err((span, "budgets.name: must not be empty".into()));
        }
        if !seen.insert(n) {
            return Err((span, format!("budgets.name: duplicate budget `{n}`")));
        }
        let scopes = [b.client.is_some(), b.provider.is_some(), b.model.is_some()].iter().filter(|s| **s).count();
        if scopes > 1 {
            return Err((span, format!("budgets: `{n}` sets more than one of client, provider and model (pick one)")));
        }
        if b.client.as_deref().is_some_and(|c| c.trim().is_empty()) {
            return Err((span, format!("budgets.client: `{n}` names an empty client")));
        }
        if let Some(p) = &b.provider
            && !config.providers.iter().any(|x| x.name() == p)
        {
            return Err((span, format!("budgets.provider: `{n}` names an unknown provider `{p}`")));
        }
        if let Some(m) = &b.model
            && !names.contains(m.as_str())
        {
            return Err((span, format!("budgets.model: `{n}` names an unknown model or group `{m}`")));
        }
        if !b.limit_usd.is_finite() || b.limit_usd <= 0.0 || b.limit_usd > 1e9 {
            return Err((span, format!("budgets.limit_usd: `{n}` needs a limit above 0 (USD)")));
        }
        if !(1..=100).contains(&b.soft_percent) {
            return Err((span, format!("budgets.soft_percent: `{n}` needs a value from 1 to 100")));
        }
        match (b.on_limit, &b.downgrade_to) {
            (BudgetAction::Downgrade, None) => {
                return Err((
                    span,
                    format!("budgets.downgrade_to: `{n}` has on_limit = \"downgrade\" but no downgrade_to"),
                ));
            }
            (BudgetAction::Downgrade, Some(t)) if !names.contains(t.as_str()) => {
                return Err((span, format!("budgets.downgrade_to: `{n}` names an unknown model or group `{t}`")));
            }
            (BudgetAction::Downgrade, Some(t)) if b.model.as_deref() == Some(t.as_str()) => {
                return Err((span, format!("budgets.downgrade_to: `{n}` downgrades `{t}` to itself")));
            }
            (BudgetAction::Refuse, Some(_)) => {
                return Err((span, format!("budgets.downgrade_to: `{n}` sets downgrade_to but on_limit = \"refuse\"")));
            }
            _ => {}
        }
    }
    Ok(())
}

fn validate_web(file: &str, web: &WebConfig) -> Result<(), ConfigError> {
    let bad = |message: String| ConfigError::Semantic { file: file.to_owned(), message };
    if let Some(url) = &web.search_url {
        let u = url.trim_end_matches('/');
        if !(u.starts_with("http://") || u.starts_with("https://")) || u.len() <= "https://".len() {
            return Err(bad(format!("web.search_url: `{url}` is not an http(s) URL")));
        }
    }
    if web.search == WebSearch::Searxng && web.search_url.is_none() {
        return Err(bad("web.search_url: search = \"searxng\" needs the instance's URL".into()));
    }
    if web.fetch_max_bytes == 0 || web.fetch_max_bytes > WEB_FETCH_MAX_BYTES_LIMIT {
        return Err(bad("web.fetch_max_bytes: must be between 1 and 67108864 (64 MiB)".into()));
    }
    if web.timeout == 0 {
        return Err(bad("web.timeout: must be > 0".into()));
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

/// Where Keyhaven may listen (issue 14 §6): the gateway on loopback, or elsewhere only with
/// `allow_remote = true` and `require_client_token = true` (non-browser clients set any `Host`
/// they like, so the LAN could otherwise spend the user's money); the proxy on loopback, always
/// (it decrypts Cursor's traffic with a CA only this machine trusts). Checked when the file is
/// loaded and again by `Engine::start` on the addresses it actually binds.
pub fn check_listen(server: &ServerConfig, gateway: SocketAddr, proxy: SocketAddr) -> Result<(), String> {
    let remote_ok = server.allow_remote && server.require_client_token;
    if !(gateway.ip().is_loopback() || remote_ok) {
        return Err(format!(
            "server.listen: `{gateway}` is not a loopback address; other machines could call the gateway. \
             Listen on 127.0.0.1, or set both allow_remote = true and require_client_token = true in [server]"
        ));
    }
    if !proxy.ip().is_loopback() {
        return Err(format!(
            "proxy.listen: `{proxy}` is not a loopback address; the proxy listens on this machine only"
        ));
    }
    Ok(())
}
