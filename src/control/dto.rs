//! The plain data the UI sees: every argument and answer of [`ControlService`](crate::control::ControlService).
//!
//! POD types with serde (`camelCase` on the wire) and, in test builds, `ts_rs::TS`, from which
//! `ui/src/ipc/bindings.gen.ts` is generated (see `control/bindings.rs`). Nothing here is a type
//! from `dialect` or `store`, and no type can carry a provider key out: keys go in through
//! [`KeyInput`] (which is `Deserialize` only and redacts its `Debug`) and come back only as
//! [`KeyInfo`] (`hasKey` and the key's name). Times are Unix milliseconds (UTC); money is integer
//! micro-dollars plus a float in dollars for display.

use serde::{Deserialize, Serialize};

/// An error as the UI receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// A stable, low-cardinality label: `not_found`, `invalid`, `conflict`, `unavailable`,
    /// `keyring`, `store`, `io`, `ca`, `setup`, `internal`.
    pub kind: String,
    pub message: String,
}

/// The engine at a glance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct EngineStatus {
    pub version: String,
    pub uptime_ms: u64,
    /// E.g. `http://127.0.0.1:4937`; OpenAI clients use `{gatewayUrl}/v1`.
    pub gateway_url: String,
    /// The intercepting proxy's address, when it runs.
    pub proxy_addr: Option<String>,
    pub model_count: u32,
    pub provider_count: u32,
    /// Call records dropped because the store's write queue was full, since start.
    pub recorder_drops: u64,
    pub config_path: Option<String>,
    pub data_dir: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub enum ProviderKind {
    #[serde(rename = "openai")]
    Openai,
    #[serde(rename = "anthropic")]
    Anthropic,
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
    /// The local Tongyi Lingma assistant over IPC (its options are edited in the config file).
    #[serde(rename = "lingma")]
    Lingma,
}

/// Where a provider's key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum KeySource {
    /// The OS keyring, under `name`.
    Keyring,
    /// An environment variable of the engine process.
    Env,
}

/// A provider's key, without the key: where it is and whether it is there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct KeyInfo {
    pub source: KeySource,
    /// The keyring entry or environment variable name (never the value).
    pub name: String,
    pub has_key: bool,
}

/// Which key a provider uses (in inputs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct KeyRefInput {
    pub source: KeySource,
    pub name: String,
}

/// A new key value, write-only. It is never serialized back and its `Debug` is redacted.
#[derive(Clone, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct KeyInput {
    pub value: String,
}

impl std::fmt::Debug for KeyInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyInput { value: [REDACTED] }")
    }
}

/// Routing health of a provider (cooldowns after failures).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ProviderHealth {
    pub cooling_down: bool,
    pub cooldown_remaining_ms: u64,
    pub recent_failures: u32,
    pub last_error: Option<String>,
    pub total_failures: u64,
    pub total_successes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Provider {
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: String,
    pub key: Option<KeyInfo>,
    pub reasoning_content: Option<bool>,
    pub max_completion_tokens: Option<bool>,
    pub model_count: u32,
    pub health: Option<ProviderHealth>,
}

/// A provider to create, or the new state of one to edit (renaming is allowed when no model
/// uses the old name).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ProviderInput {
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: String,
    pub key: Option<KeyRefInput>,
    pub reasoning_content: Option<bool>,
    pub max_completion_tokens: Option<bool>,
    /// A new key value, write-only (stored in the keyring, bound to `base_url`'s origin). Required
    /// when an edit moves a provider with a key to another origin: a stored key is only ever
    /// sent to the origin it was stored for. Never serialized back; `Debug` redacts it.
    #[serde(default, skip_serializing)]
    #[cfg_attr(test, ts(optional))]
    pub key_value: Option<String>,
}

impl std::fmt::Debug for ProviderInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderInput")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("key", &self.key)
            .field("reasoning_content", &self.reasoning_content)
            .field("max_completion_tokens", &self.max_completion_tokens)
            .field("key_value", &self.key_value.as_ref().map(|_| "[REDACTED]"))
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub tools: bool,
    pub vision: bool,
    pub thinking: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum ToolsMode {
    Native,
    Emulated,
    Auto,
}

/// USD per million tokens, as decimal strings (e.g. `"3"`, `"0.30"`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct PriceInput {
    pub input: Option<String>,
    pub output: Option<String>,
    pub cache_read: Option<String>,
    pub cache_write: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Model {
    /// The stable id (clients may ask for it instead of the name).
    pub id: String,
    pub name: String,
    pub aliases: Vec<String>,
    pub provider: String,
    pub upstream: String,
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u32>,
    pub capabilities: Capabilities,
    pub tools: ToolsMode,
    /// A price is known (shipped table or override), so calls get a cost.
    pub priced: bool,
    /// The per-model override in the config file, if any.
    pub price: Option<PriceInput>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ModelInput {
    pub name: String,
    pub aliases: Vec<String>,
    pub provider: String,
    pub upstream: String,
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u32>,
    /// `null` keeps the default (tools and vision on, thinking off).
    pub capabilities: Option<Capabilities>,
    /// `null` keeps the default (`native`).
    pub tools: Option<ToolsMode>,
    pub price: Option<PriceInput>,
}

/// The result of a connection test: a 1-token chat call through the gateway, recorded in the
/// history like any call (client `keyhaven-control`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ConnectionTest {
    pub ok: bool,
    pub model: String,
    pub provider: String,
    pub latency_ms: u64,
    /// The error kind when the test failed (`auth`, `rate_limited`, `upstream`, `connect`, ...).
    pub error_kind: Option<String>,
    /// A message for people, without secrets.
    pub message: String,
    /// The call's id in the history.
    pub call_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum RoutingMode {
    Local,
    Upstream,
    Hybrid,
}

/// Where Cursor agent runs with one configured model go in `hybrid` mode (`local` and
/// `upstream` modes ignore it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum CursorRoute {
    /// Keyhaven runs the turn with the model's provider.
    Local,
    /// The run goes to Cursor's own servers (the model's name must be one Cursor knows).
    Upstream,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ModelRoute {
    pub model: String,
    pub route: CursorRoute,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Routing {
    pub mode: RoutingMode,
    /// Whether the intercepting proxy runs (the mode is kept in the config file either way).
    pub proxy_running: bool,
    /// Each configured model's route in hybrid mode, in config order.
    pub models: Vec<ModelRoute>,
    /// Who answers Cursor Tab.
    pub tab: TabRouting,
}

/// Cursor Tab: Cursor's own service (`model: null`) or one of the user's FIM models.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct TabRouting {
    /// The FIM model that answers Tab; `null` for Cursor's official Tab.
    pub model: Option<String>,
    /// The configured FIM models (`[[models]] fim`), in config order.
    pub fim_models: Vec<String>,
}

/// `PUT /api/routing/tab`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct TabInput {
    /// A FIM model's name, or `null` for Cursor's official Tab.
    pub model: Option<String>,
}

/// `PUT /api/routing/models/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ModelRouteInput {
    pub route: CursorRoute,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct RoutingInput {
    pub mode: RoutingMode,
}

/// One trust store's state for the local root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum TrustState {
    Installed,
    AlreadyInstalled,
    Removed,
    Present,
    Absent,
    /// An older Keyhaven root (from before a rotation) is there, not the current one.
    Stale,
    Skipped,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct TrustStore {
    pub store: String,
    pub state: TrustState,
    /// The human-readable outcome (`removed 2 copies`, `FAILED: certutil not found`, ...).
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CaStatus {
    /// A root exists (it is created on first proxy start or by install).
    pub exists: bool,
    pub fingerprint_sha256: Option<String>,
    /// RFC 3339.
    pub not_after: Option<String>,
    /// The domains the root is name-constrained to.
    pub intercept: Vec<String>,
    /// `keyring` or `file`.
    pub key_location: Option<String>,
    pub stores: Vec<TrustStore>,
}

/// What an install, uninstall or rotation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CaChange {
    pub status: CaStatus,
    /// The per-store results of this action.
    pub stores: Vec<TrustStore>,
    /// False when a store failed.
    pub ok: bool,
    /// Things to do next (restart Cursor; restart Keyhaven after a rotation).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum UsageGroupBy {
    Day,
    Model,
    Provider,
    Client,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct UsageQuery {
    /// The last `days` UTC days, today included (1..=366).
    pub days: u32,
    /// With `days = 1`: today since midnight in the budgets' time zone (`time_zone`), read from
    /// the calls, instead of the UTC day (the Overview's "Today").
    #[serde(default)]
    #[cfg_attr(test, ts(optional))]
    pub local_today: Option<bool>,
    pub group_by: UsageGroupBy,
}

/// Latency percentiles of `totalMs`, from a bucketed histogram: each value is the upper bound of
/// the bucket the percentile falls in (`null` without data; above 30 min reads as 1 800 001).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Latency {
    pub p50_ms: Option<u64>,
    pub p95_ms: Option<u64>,
    pub p99_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct UsageStats {
    pub calls: u64,
    pub errors: u64,
    /// errors / calls (0 without calls).
    pub error_rate: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    /// cacheRead / (input + cacheRead + cacheWrite) (0 without input).
    pub cache_hit_rate: f64,
    pub cost_micros: i64,
    pub cost_usd: f64,
    pub avg_latency_ms: f64,
    pub latency: Latency,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct UsageGroupRow {
    /// The day (`YYYY-MM-DD`), model, provider or client (`""` when unknown).
    pub key: String,
    pub stats: UsageStats,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    /// First and last day of the window (`YYYY-MM-DD`, UTC; with `localToday`, in that zone).
    pub since: String,
    pub until: String,
    /// The zone the days are in: `UTC`, or with `localToday` the budgets' zone (`UTC+02:00`,
    /// `local time, UTC+01:00`).
    pub time_zone: String,
    pub group_by: UsageGroupBy,
    pub totals: UsageStats,
    pub rows: Vec<UsageGroupRow>,
    /// Calls and cost by cost source (reported, computed, estimated; always all three), over
    /// the calls retention kept.
    pub cost_sources: Vec<CostSourceShare>,
}

/// Usage per day, split by model, provider or client (tokens and cost over time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct UsageSeriesQuery {
    /// The last `days` UTC days, today included (1..=366).
    pub days: u32,
    /// `model`, `provider` or `client` (`day` is refused: every point is a day already).
    pub split_by: UsageGroupBy,
}

/// One day of one series.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct UsagePoint {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// The model, provider or client (`""` when unknown).
    pub key: String,
    pub calls: u64,
    pub errors: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_micros: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct UsageSeries {
    /// First and last day of the window (`YYYY-MM-DD`, UTC).
    pub since: String,
    pub until: String,
    pub split_by: UsageGroupBy,
    /// Only (day, key) pairs with calls, ordered by day, then key.
    pub points: Vec<UsagePoint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum CallStatus {
    InFlight,
    Ok,
    Error,
    Canceled,
    Interrupted,
}

/// Where a model's price comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum PriceSource {
    /// The shipped price table (its version is the report's).
    Table,
    /// `[[models]] price` in the config.
    Config,
    /// No price: its calls have no cost.
    None,
}

/// USD per million tokens, exact decimals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ModelPriceAmounts {
    pub input: String,
    pub output: String,
    pub cache_read: String,
    pub cache_write: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ModelPrice {
    pub name: String,
    pub provider: String,
    pub upstream: String,
    pub source: PriceSource,
    pub per_mtok: Option<ModelPriceAmounts>,
    /// The version recorded on the rows priced now: the table's, or the override's
    /// (`override-<UTC time>` when set with `keyhaven prices set` or the Prices page).
    pub version: Option<String>,
    pub note: Option<String>,
}

/// `PUT /api/prices/{model}`: a model's prices, USD per million tokens as decimal strings (the
/// cache prices default to the table's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriceOverrideInput {
    pub input: String,
    pub output: String,
    #[serde(default)]
    pub cache_read: Option<String>,
    #[serde(default)]
    pub cache_write: Option<String>,
}

/// `GET /api/prices`: the price table in use and each configured model's effective price.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct PriceReport {
    /// The price table's version (recorded on every priced call row).
    pub version: String,
    pub currency: String,
    pub models: Vec<ModelPrice>,
}

/// Where a call's usage and cost came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum CostSource {
    /// The provider's usage report.
    Reported,
    /// Counted locally with the model's own tokenizer (a complete answer without a report).
    Computed,
    /// Counted with an approximating tokenizer, or for an answer that never completed.
    Estimated,
}

/// The calls and cost of one cost source over a usage window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CostSourceShare {
    pub source: CostSource,
    pub calls: u64,
    pub cost_micros: i64,
}

/// `GET /api/calls/export` and `/api/usage/export`: a CSV or JSON download.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ExportQuery {
    /// `csv` (the default) or `json`.
    #[serde(default)]
    pub format: Option<String>,
    /// A UTC day (`2026-11-30`) or an RFC 3339 time; calls from the first one ever when absent.
    #[serde(default)]
    pub since: Option<String>,
    /// A UTC day (through its end) or an RFC 3339 time (exclusive); now when absent.
    #[serde(default)]
    pub until: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CallQuery {
    /// Page size (0 = 100; at most 1000).
    pub limit: u32,
    pub offset: u32,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub client: Option<String>,
    pub status: Option<CallStatus>,
    pub since_ms: Option<i64>,
    /// Only the calls of this conversation (e.g. a Cursor conversation id).
    pub conversation: Option<String>,
    /// Only the calls of this client session (Claude Code, Codex).
    pub session: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CallSummary {
    pub id: String,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    pub status: CallStatus,
    /// The inbound dialect (`openai_chat`, `anthropic`, `openai_responses`, ...).
    pub dialect: String,
    pub client: String,
    pub model: String,
    pub model_id: Option<String>,
    pub provider: Option<String>,
    pub upstream_model: Option<String>,
    pub stream: bool,
    pub http_status: Option<u16>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    pub usage_estimated: bool,
    pub cost_micros: Option<i64>,
    pub ttft_ms: Option<i64>,
    pub total_ms: Option<i64>,
    pub retries: u32,
    pub error_kind: Option<String>,
    pub error_message: Option<String>,
    /// The front end's conversation (e.g. Cursor's conversation id), when it has one.
    pub conversation_id: Option<String>,
    /// The front end's request the call served (e.g. a Cursor agent stream's request id).
    pub request_id: Option<String>,
    /// The client's own session (Claude Code's `X-Claude-Code-Session-Id`, Codex's `session_id`).
    pub session_id: Option<String>,
    /// The cheaper model or group a budget sent the call to (`model` is what the client asked for).
    pub budget_downgrade: Option<String>,
    /// Where the usage and cost came from (`null`: in flight, or nothing to count).
    pub cost_source: Option<CostSource>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionQuery {
    /// Sessions with a call in the last `days` UTC days, today included (1..=366).
    pub days: u32,
    /// At most this many sessions (0 = 100; at most 1000).
    #[serde(default)]
    pub limit: u32,
}

/// One client session's calls, summed (`GET /api/usage/sessions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub session_id: String,
    /// The client of the session's latest call.
    pub client: String,
    pub calls: u64,
    pub errors: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_micros: i64,
    pub first_ms: i64,
    pub last_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionList {
    /// Most recently active first.
    pub sessions: Vec<SessionSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CallPage {
    pub calls: Vec<CallSummary>,
    pub offset: u32,
    pub limit: u32,
    /// More rows match after this page.
    pub has_more: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CallDetail {
    pub summary: CallSummary,
    /// The captured request body (redacted, capped), when capture is on.
    pub request_body: Option<String>,
    /// The canonical JSON answer.
    pub response_body: Option<String>,
    pub price_version: Option<String>,
    /// What Keyhaven changed about the call that the user should know (e.g. a server tool the
    /// upstream cannot run, left out of the request); empty when nothing.
    #[serde(default)]
    pub notes: Vec<String>,
    /// For a Cursor agent call: the context blocks of its run's user message (what the user
    /// attached), in prompt order; empty otherwise.
    pub context_blocks: Vec<ContextBlock>,
}

/// One block of context that went into a Cursor run's prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ContextBlock {
    /// `file`, `selection`, `terminal`, `rule`, `image`, …
    pub kind: String,
    /// The path, URL or name it came from (may be empty).
    pub source: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Deleted {
    pub deleted: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Retention {
    /// Calls older than this many days are deleted (hourly, and right after a change); 0 keeps
    /// everything. Usage statistics are kept regardless.
    pub days: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct RetentionApplied {
    pub days: u32,
    /// Calls deleted right away under the new setting.
    pub pruned: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum SetupClient {
    Cursor,
    ClaudeCode,
    Codex,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ClientSetup {
    pub client: SetupClient,
    pub display_name: String,
    pub config_path: String,
    /// The client's config folder exists.
    pub installed: bool,
    /// The client's config points at Keyhaven.
    pub routed: bool,
    /// Keyhaven recorded its change, so undo can restore the original.
    pub recorded: bool,
    pub restart_hint: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct RouteOptions {
    pub model: Option<String>,
    pub small_model: Option<String>,
    pub disable_http2: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SetupResult {
    pub client: SetupClient,
    pub path: String,
    pub changed: bool,
    pub backup: Option<String>,
    pub notes: Vec<String>,
    pub restart_hint: String,
}

/// What routing or restoring a client would do, without doing it (a dry run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SetupPreview {
    pub client: SetupClient,
    /// The config file the change is made to.
    pub path: String,
    /// Whether the file would change.
    pub changes_file: bool,
    /// The change as a unified diff (the client token redacted); empty when the file stays.
    pub diff: String,
    pub notes: Vec<String>,
    pub restart_hint: String,
}

/// One environment variable of the generic client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

/// The generic client: shell lines that point OpenAI- and Anthropic-compatible tools at the
/// gateway. `GET` answers with the token redacted; only the explicit `POST …/env/route` (which
/// issues the token when there is none) carries it, for the user to paste into a shell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct EnvSetup {
    /// A client token for `env` exists.
    pub token_issued: bool,
    /// `sh` (POSIX `export`) or `powershell`.
    pub shell: String,
    pub vars: Vec<EnvVar>,
    /// The lines that set [`vars`](Self::vars).
    pub exports: String,
    /// The lines that clear them.
    pub unsets: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    /// Increasing per process; pass the last one seen as `after` to poll for newer lines.
    pub seq: u64,
    pub ts_ms: i64,
    /// `ERROR`, `WARN`, `INFO`, `DEBUG` or `TRACE`.
    pub level: String,
    pub target: String,
    /// The message and its fields, formatted as `message key=value ...`.
    pub message: String,
}

/// Engine settings kept in the config file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    /// Gateway listen address (restart).
    pub listen: String,
    /// Proxy listen address (restart).
    pub proxy_listen: String,
    /// Run the intercepting proxy (restart).
    pub proxy_enabled: bool,
    /// Where the database, CA and control token live. Set on the command line
    /// (`--data-dir`), not in the config file: read-only here.
    pub data_dir: String,
    /// Keep request and response bodies in the history (restart).
    pub capture_bodies: bool,
    /// Bytes kept per body (restart).
    pub body_capture_limit: u64,
    /// Live.
    pub retention_days: u32,
    /// The web UI directory served at `/` (restart).
    pub ui_dir: Option<String>,
    /// Put every routed client back when Keyhaven stops (live; `[setup] restore_on_stop`).
    pub restore_on_stop: bool,
}

/// Fields to change; `null` leaves a field as it is.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
/// `[server] ui_dir` is not here: the directory served without a token at `/` is set in the
/// config file only (through the API it could point the static server at any directory), and an
/// unknown field such as `uiDir` is refused.
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsInput {
    pub listen: Option<String>,
    pub proxy_listen: Option<String>,
    pub proxy_enabled: Option<bool>,
    pub capture_bodies: Option<bool>,
    pub body_capture_limit: Option<u64>,
    pub retention_days: Option<u32>,
    pub restore_on_stop: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SettingsApplied {
    pub settings: Settings,
    /// The changed settings that take effect only after Keyhaven restarts (camelCase names).
    pub restart_required: Vec<String>,
}

/// `[web] search`: who answers the agent's `web_search` tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum WebSearchKind {
    /// No provider: the model is told web search is unavailable.
    None,
    /// The Brave Search API (needs a key).
    Brave,
    /// A SearXNG instance (needs its URL, no key).
    Searxng,
}

/// `[web] fetch`: who fetches a page for `fetch_url` once the user approves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum WebFetchMode {
    /// Keyhaven fetches and gives the model readable text.
    Keyhaven,
    /// The Cursor editor fetches.
    Editor,
}

/// The web tools' settings (`[web]`). The Brave key is write-only: only whether it is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct WebSettings {
    pub search: WebSearchKind,
    /// The configured base URL (`null`: the provider's default, if it has one).
    pub search_url: Option<String>,
    /// The URL searches actually go to (Brave's public endpoint when `searchUrl` is unset).
    pub effective_search_url: Option<String>,
    pub fetch: WebFetchMode,
    pub fetch_max_bytes: u64,
    pub timeout_ms: u64,
    /// Where the Brave key is and whether it is there.
    pub key: KeyInfo,
    /// The file differs from what the running engine uses: the change applies at the next start
    /// (the key applies at once).
    pub restart_required: bool,
}

/// Fields to change; `null` leaves a field as it is. `searchUrl: ""` removes the URL.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct WebSettingsInput {
    pub search: Option<WebSearchKind>,
    pub search_url: Option<String>,
    pub fetch: Option<WebFetchMode>,
    pub fetch_max_bytes: Option<u64>,
    pub timeout_ms: Option<u64>,
}

/// `POST /api/web/test`: one query through the configured provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct WebTestInput {
    pub query: String,
}

/// What the test search found, or why it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct WebTestResult {
    pub ok: bool,
    pub hits: u32,
    /// The first result's title, when there is one.
    pub first_title: Option<String>,
    pub latency_ms: u64,
    pub message: String,
}

/// The engine's lifecycle state, as the tray app's supervisor sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum EngineState {
    Starting,
    Running,
    Stopping,
    Stopped,
    /// The last start failed (the reason is in `AppStatus::error`).
    Error,
}

/// The tray app's view of the engine (`GET /api/app`, only through the app's own window).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    pub state: EngineState,
    /// Why the last start failed.
    pub error: Option<String>,
    /// The gateway's base URL while running, e.g. `http://127.0.0.1:4937`.
    pub gateway_url: Option<String>,
    /// Whether the app starts when the user logs in; `null` where the host cannot tell.
    pub start_on_login: Option<bool>,
    /// What the last stop did: clients restored, failures, tasks that outlived the grace period.
    pub last_stop: Option<StopReport>,
}

/// What a stop did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct StopReport {
    /// Every call and task finished within the grace period.
    pub drained: bool,
    /// Display names of the clients whose config was put back.
    pub restored: Vec<String>,
    /// Clients that could not be put back, with the reason.
    pub notes: Vec<String>,
}

/// `PUT /api/app`: app settings that live outside the config file.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct AppInput {
    pub start_on_login: Option<bool>,
}

/// One control call answered in-process (the Tauri IPC transport): the HTTP status the same
/// call would get from `/api/` and its JSON body (`null` for 204).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct IpcReply {
    pub status: u16,
    #[cfg_attr(test, ts(type = "unknown"))]
    pub body: serde_json::Value,
}

/// `GET /api/doctor` and `keyhaven doctor`: what works and what to do about what does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct DoctorReport {
    /// No check failed (warnings allowed).
    pub ok: bool,
    pub checks: Vec<DoctorCheck>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct DoctorCheck {
    /// `keyring`, `ports`, `ca`, `clients`, `providers` or `cursor`.
    pub area: String,
    /// What was checked, e.g. `Provider anthropic answers with its key`.
    pub title: String,
    pub status: DoctorStatus,
    /// What was found.
    pub detail: String,
    /// What to do, for a warning or a failure.
    pub fix: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum DoctorStatus {
    Ok,
    Warn,
    Fail,
    /// Not applicable here (e.g. a client that is not installed).
    Skip,
}

/// What a budget limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum BudgetScope {
    All,
    Client,
    Provider,
    /// A model or a group.
    Model,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum BudgetPeriod {
    Day,
    Week,
    Month,
}

/// What a spent budget does to new calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum BudgetAction {
    Refuse,
    Downgrade,
}

/// `ok` below the soft threshold, `warning` at or above it, `exceeded` at the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum BudgetLevel {
    Ok,
    Warning,
    Exceeded,
}

/// A budget and its spend this period (`GET /api/budgets`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    pub name: String,
    pub scope: BudgetScope,
    /// The client, provider, or model or group (none for `all`).
    pub target: Option<String>,
    pub period: BudgetPeriod,
    pub limit_usd: f64,
    pub soft_percent: u8,
    pub on_limit: BudgetAction,
    pub downgrade_to: Option<String>,
    /// Finished calls this period plus estimates of calls in flight.
    pub spent_micros: u64,
    pub spent_usd: f64,
    /// Of `spentMicros`, the estimates of calls in flight.
    pub in_flight_micros: u64,
    /// Whole percent of the limit (may exceed 100).
    pub percent: u32,
    pub level: BudgetLevel,
    pub period_start_ms: i64,
    /// When the period ends and the spend starts again from zero.
    pub reset_ms: i64,
}

/// `GET /api/budgets`: every budget, today's spend, and the budget nearest its limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct BudgetReport {
    pub budgets: Vec<Budget>,
    /// Everything spent today (in the budgets' time zone), finished calls only.
    pub today_micros: u64,
    pub today_usd: f64,
    /// The name of the budget with the highest percent, if any.
    pub nearest: Option<String>,
    /// The zone budgets follow: seconds east of UTC.
    pub utc_offset_s: i32,
    /// The config's `time_zone` (`local` when unset).
    pub time_zone: String,
    /// Alerts this engine raised (a budget reached its soft threshold or its limit), newest last:
    /// each once per budget, period and level. The tray shows each as a desktop notification.
    pub alerts: Vec<BudgetAlert>,
}

/// `soft`: the spend reached the soft threshold; `hard`: it reached the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum BudgetAlertLevel {
    Soft,
    Hard,
}

/// A budget alert (see [`BudgetReport::alerts`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct BudgetAlert {
    pub budget: String,
    pub level: BudgetAlertLevel,
    /// Finished calls plus estimates in flight when it was raised.
    pub spent_usd: f64,
    pub limit_usd: f64,
    /// Whole percent of the limit when it was raised.
    pub percent: u32,
    /// What happens at the limit (`refuse` or `downgrade`), when the budget still exists.
    pub on_limit: Option<BudgetAction>,
    pub period_start_ms: i64,
    pub reset_ms: i64,
    pub at_ms: i64,
}

/// `POST /api/budgets`, `PUT /api/budgets/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetInput {
    pub name: String,
    pub scope: BudgetScope,
    #[serde(default)]
    pub target: Option<String>,
    pub period: BudgetPeriod,
    pub limit_usd: f64,
    #[serde(default)]
    pub soft_percent: Option<u8>,
    pub on_limit: BudgetAction,
    #[serde(default)]
    pub downgrade_to: Option<String>,
}

/// Where a Cursor version's self-test stands (the update guard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum CursorTestStatus {
    /// Not tested yet (a test a shutdown interrupted runs when the version is next seen).
    Untested,
    Running,
    Passed,
    /// Keyhaven passes this version's requests through to Cursor's servers until Retry.
    Failed,
}

/// A Cursor version the proxy has seen and its self-test (`GET /api/cursor/versions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CursorVersion {
    /// The IDE's `x-cursor-client-version`, e.g. `3.16.2`.
    pub version: String,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    pub status: CursorTestStatus,
    /// The step that failed: `model_list`, `text_turn` or `tool_round`.
    pub failed_step: Option<String>,
    /// What the failed step saw.
    pub detail: Option<String>,
    /// When the last self-test ended (or started, while it runs).
    pub tested_ms: Option<i64>,
    /// The one line the tray shows for a failed version, e.g. "Cursor 3.16.2: self-test failed
    /// — using Cursor's servers".
    pub notice: Option<String>,
}

/// `GET /api/cursor/versions`: every version seen, the most recently seen first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CursorGuardReport {
    /// `false` when the proxy does not run (no guard).
    pub available: bool,
    pub versions: Vec<CursorVersion>,
}
