//! Agent transcripts as shared data: a transcript [`Entry`] (a message with a stable id, so
//! appends are idempotent), the run records the agent loop writes ([`RunStart`], [`RunFinish`],
//! [`ToolRoundRecord`]) and what reads give back ([`StoredMessage`], [`RunRecord`]).
//!
//! Stored messages are the canonical [`Message`] as JSON; that JSON must stay readable by every
//! later build (add fields with defaults, never rename).

use serde::{Deserialize, Serialize};

use crate::model::{ErrorInfo, Message, Usage};

/// One transcript message with its id. The id is what makes an append idempotent: appending an
/// id the transcript already holds changes nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub id: String,
    pub message: Message,
}

impl Entry {
    pub fn new(id: impl Into<String>, message: Message) -> Entry {
        Entry { id: id.into(), message }
    }
}

/// Where a run stands, as stored. `Running` rows left behind by an earlier process become
/// `Interrupted` at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Completed,
    Canceled,
    /// The provider failed (recorded as context; the run ended).
    ProviderError,
    /// An internal failure (projection, persistence, a step limit).
    Failed,
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Canceled => "canceled",
            RunStatus::ProviderError => "provider_error",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        Some(match s {
            "running" => RunStatus::Running,
            "completed" => RunStatus::Completed,
            "canceled" => RunStatus::Canceled,
            "provider_error" => RunStatus::ProviderError,
            "failed" => RunStatus::Failed,
            "interrupted" => RunStatus::Interrupted,
            _ => return None,
        })
    }
}

/// A run begins (the conversation row is created if it does not exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStart {
    pub id: String,
    pub conversation_id: String,
    pub client: String,
    pub model: String,
    pub started_ms: i64,
}

/// A run ended: written exactly once per run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFinish {
    pub id: String,
    pub finished_ms: i64,
    pub status: RunStatus,
    pub error: Option<ErrorInfo>,
    pub steps: u32,
    pub usage: Usage,
}

/// One tool round of a run (every call of one model step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRoundRecord {
    pub run_id: String,
    pub step: u32,
    pub started_ms: i64,
    pub finished_ms: i64,
    pub calls: u32,
    /// Calls whose result is an error (failed, timed out, interrupted, panicked).
    pub failed: u32,
    /// `completed` or `interrupted`.
    pub status: String,
}

/// A transcript message as stored: its position and the run that appended it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    pub seq: u64,
    pub run_id: Option<String>,
    pub entry: Entry,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: String,
    pub conversation_id: String,
    pub model: String,
    pub status: RunStatus,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    pub steps: u32,
    pub usage: Usage,
    pub error_kind: Option<String>,
}
