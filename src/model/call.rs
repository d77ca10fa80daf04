//! The call record: what the engine writes for every gateway call, before the first upstream byte
//! ([`CallStart`]) and on every exit path ([`CallFinish`]).

use serde::{Deserialize, Serialize};

use crate::model::Usage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    InFlight,
    Ok,
    Error,
    Canceled,
    Interrupted,
}

impl CallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::InFlight => "in_flight",
            CallStatus::Ok => "ok",
            CallStatus::Error => "error",
            CallStatus::Canceled => "canceled",
            CallStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<CallStatus> {
        Some(match s {
            "in_flight" => CallStatus::InFlight,
            "ok" => CallStatus::Ok,
            "error" => CallStatus::Error,
            "canceled" => CallStatus::Canceled,
            "interrupted" => CallStatus::Interrupted,
            _ => return None,
        })
    }
}

/// Where a call's usage (and so its cost) came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostSource {
    /// The provider's own usage report.
    Reported,
    /// No report: counted locally with the model's own tokenizer, on a complete answer.
    Computed,
    /// No report: counted with an approximating tokenizer (another vendor's, calibrated), or on
    /// an answer that did not complete (canceled, cut, interrupted).
    Estimated,
}

impl CostSource {
    pub const ALL: [CostSource; 3] = [CostSource::Reported, CostSource::Computed, CostSource::Estimated];

    pub fn as_str(self) -> &'static str {
        match self {
            CostSource::Reported => "reported",
            CostSource::Computed => "computed",
            CostSource::Estimated => "estimated",
        }
    }

    pub fn parse(s: &str) -> Option<CostSource> {
        Some(match s {
            "reported" => CostSource::Reported,
            "computed" => CostSource::Computed,
            "estimated" => CostSource::Estimated,
            _ => return None,
        })
    }
}

/// Written as an in-flight row before the first upstream byte.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallStart {
    /// Keyhaven's request id (also the `x-request-id` response header).
    pub id: String,
    pub started_ms: i64,
    /// `openai_chat`, `anthropic`, ...
    pub dialect: String,
    /// The client, from its User-Agent (or its client token name).
    pub client: String,
    /// The model name the client asked for.
    pub model: String,
    /// The configured model's stable id, when the name resolved.
    pub model_id: Option<String>,
    pub provider: Option<String>,
    pub upstream_model: Option<String>,
    pub stream: bool,
    /// The request body, redacted and capped; `None` when body capture is off.
    pub request_body: Option<String>,
    /// The front end's conversation, when it has one (e.g. Cursor's conversation id).
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// The front end's request the call served (e.g. a Cursor agent stream's request id).
    #[serde(default)]
    pub request_id: Option<String>,
    /// The client's own session (Claude Code's `X-Claude-Code-Session-Id`, Codex's `session_id`).
    #[serde(default)]
    pub session_id: Option<String>,
    /// The cheaper model or group a budget sent this call to (`model` is what the client asked
    /// for; `model_id`, `provider`, `upstream_model` are what served it).
    #[serde(default)]
    pub budget_downgrade: Option<String>,
}

/// Spend of calls started since some time, one row per client, provider and model (the budgets'
/// seed from the ledger).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpendRow {
    pub client: String,
    pub provider: Option<String>,
    /// The model or group the call was routed as: its budget downgrade, else what the client asked for.
    pub model: String,
    pub model_id: Option<String>,
    pub cost_micros: u64,
}

/// How far a budget's spend has gone: past its soft threshold or at its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertLevel {
    Soft,
    Hard,
}

impl AlertLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertLevel::Soft => "soft",
            AlertLevel::Hard => "hard",
        }
    }

    pub fn parse(s: &str) -> Option<AlertLevel> {
        match s {
            "soft" => Some(AlertLevel::Soft),
            "hard" => Some(AlertLevel::Hard),
            _ => None,
        }
    }
}

/// A budget crossed a level in a period (raised once per budget, period and level; remembered
/// in the ledger so a restart does not raise it again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetAlert {
    pub budget: String,
    pub level: AlertLevel,
    pub period_start_ms: i64,
    pub reset_ms: i64,
    /// Spend (finished calls and estimates in flight) when it was raised.
    pub spent_micros: u64,
    pub limit_micros: u64,
    pub at_ms: i64,
}

/// Finalises a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallFinish {
    pub id: String,
    pub finished_ms: i64,
    pub status: CallStatus,
    pub http_status: Option<u16>,
    pub usage: Usage,
    /// True when the provider's final usage never arrived and `usage` is partial or estimated.
    pub usage_estimated: bool,
    /// Cost in micro-units of the price table's currency (USD): 1_000_000 = $1.
    pub cost_micros: Option<i64>,
    pub price_version: Option<String>,
    /// Where `usage` came from; `None` when the provider never accepted the call (nothing was
    /// billed, there is nothing to count) or for rows that are not billed (token counts).
    #[serde(default)]
    pub cost_source: Option<CostSource>,
    pub ttft_ms: Option<i64>,
    pub total_ms: i64,
    pub retries: u32,
    pub error_kind: Option<String>,
    pub error_message: Option<String>,
    /// Captured bodies (redacted, capped), written with the finish so a call costs two writes.
    pub request_body: Option<String>,
    pub response_body: Option<String>,
    /// The model that served the call (for a group: the one that answered, or the last one
    /// tried). `None` keeps what the start recorded.
    pub model_id: Option<String>,
    pub provider: Option<String>,
    pub upstream_model: Option<String>,
    /// What Keyhaven changed about the call that the user should know (e.g. server tools the
    /// upstream cannot run, left out of the request), short and human-readable.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The reasoning that came before some tool calls of one provider's answer (the gateway's
/// `provider::memory`, persisted so a restart does not forget it). `parts` is the canonical
/// reasoning parts as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasoningRecord {
    pub tool_call_ids: Vec<String>,
    pub provider: String,
    pub parts: String,
    pub created_ms: i64,
}
