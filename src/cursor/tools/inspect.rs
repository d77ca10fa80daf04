//! The diagnostics and fetch tools: both are client execs (`diagnostics_args`, `fetch_args`,
//! docs/cursor-wire.md §4.8) shown as `read_lints_tool_call` and `fetch_tool_call` cards. Both
//! only read, so they send the exec before `tool_call_started` like read, grep and ls. The
//! read_lints card has its own shapes (`ReadLintsToolArgs{paths}`, `ReadLintsToolSuccess{repeated
//! FileDiagnostics}`, docs/cursor-wire.md §6.6): the exec result is converted, never reused, or
//! the IDE fails to decode the whole server message.

use prost::Message;
use serde::Deserialize;

use crate::cursor::protocol::agent::{
    self, diagnostics_result, exec_client_message, exec_server_message, fetch_result, read_lints_tool_result, tool_call,
};
use crate::cursor::tools::dispatch::{Call, CursorTools};
use crate::run::ToolOutput;

#[derive(Deserialize)]
pub(crate) struct DiagnosticsIn {
    path: String,
}

#[derive(Deserialize)]
pub(crate) struct FetchIn {
    pub(crate) url: String,
}

fn severity(s: i32) -> &'static str {
    match s {
        1 => "error",
        2 => "warning",
        3 => "info",
        4 => "hint",
        _ => "diagnostic",
    }
}

impl CursorTools {
    pub(crate) async fn diagnostics(&self, c: Call<'_>, a: DiagnosticsIn) -> ToolOutput {
        let path = self.resolve(&a.path);
        let args = agent::DiagnosticsArgs { path: path.clone(), tool_call_id: c.id.to_owned() };
        let card_args = agent::ReadLintsToolArgs { paths: vec![path.clone()] };
        let card = |result| {
            tool_call::Tool::ReadLintsToolCall(agent::ReadLintsToolCall { args: Some(card_args.clone()), result })
        };
        let exec = self.exec.start(c.id, exec_server_message::Message::DiagnosticsArgs(args.clone()));
        self.started(c, card(None));
        let error = |msg: String| agent::DiagnosticsResult {
            result: Some(diagnostics_result::Result::Error(agent::PathError { path: path.clone(), error: msg })),
        };
        let r = match exec.result().await {
            Ok(exec_client_message::Message::DiagnosticsResult(r)) => r,
            Ok(_) => error("the editor answered with another kind of result".into()),
            Err(e) => error(e.to_string()),
        };
        let out = match &r.result {
            Some(diagnostics_result::Result::Success(s)) if s.diagnostics.is_empty() => {
                ToolOutput::text(format!("No diagnostics in {path}."))
            }
            Some(diagnostics_result::Result::Success(s)) => {
                let mut text = format!("{} diagnostics in {path}:\n", s.diagnostics.len());
                for d in &s.diagnostics {
                    let source = if d.source.is_empty() { String::new() } else { format!(" [{}]", d.source) };
                    let stale = if d.is_stale { " (stale)" } else { "" };
                    let at = range(&d.range)
                        .and_then(|r| r.start)
                        .map(|p| format!(" at {}:{}", p.line + 1, p.column + 1))
                        .unwrap_or_default();
                    text.push_str(&format!("- {}{source}{at}: {}{stale}\n", severity(d.severity), d.message));
                }
                ToolOutput::text(text)
            }
            Some(diagnostics_result::Result::FileNotFound(_)) => ToolOutput::error(format!("{path} does not exist.")),
            Some(diagnostics_result::Result::PermissionDenied(_)) => {
                ToolOutput::error(format!("No permission to read diagnostics of {path}."))
            }
            Some(diagnostics_result::Result::Rejected(r)) => {
                ToolOutput::error(format!("Reading diagnostics of {path} was rejected: {}", r.reason))
            }
            Some(diagnostics_result::Result::Error(e)) => {
                ToolOutput::error(format!("Reading diagnostics of {path} failed: {}", e.error))
            }
            None => ToolOutput::error(format!("Reading diagnostics of {path} failed: empty result")),
        };
        self.completed(c, card(Some(lints_card_result(&path, &r, &out))));
        out
    }

    pub(crate) async fn fetch(&self, c: Call<'_>, a: FetchIn) -> ToolOutput {
        let args = agent::FetchArgs { url: a.url.clone(), tool_call_id: c.id.to_owned() };
        let card = |result| tool_call::Tool::FetchToolCall(agent::FetchToolCall { args: Some(args.clone()), result });
        let exec = self.exec.start(c.id, exec_server_message::Message::FetchArgs(args.clone()));
        self.started(c, card(None));
        let error = |msg: String| agent::FetchResult {
            result: Some(fetch_result::Result::Error(agent::FetchError { url: a.url.clone(), error: msg })),
        };
        let r = match exec.result().await {
            Ok(exec_client_message::Message::FetchResult(r)) => r,
            Ok(_) => error("the editor answered with another kind of result".into()),
            Err(e) => error(e.to_string()),
        };
        let out = match &r.result {
            Some(fetch_result::Result::Success(s)) => {
                ToolOutput::text(format!("{} ({}, HTTP {}):\n{}", s.url, s.content_type, s.status_code, s.content))
            }
            Some(fetch_result::Result::Error(e)) => {
                ToolOutput::error(format!("Fetching {} failed: {}", e.url, e.error))
            }
            None => ToolOutput::error(format!("Fetching {} failed: empty result", a.url)),
        };
        self.completed(c, card(Some(r)));
        out
    }
}

/// The exec's `range` bytes as a `Range`, when they decode as one.
fn range(bytes: &[u8]) -> Option<agent::Range> {
    if bytes.is_empty() {
        return None;
    }
    agent::Range::decode(bytes).ok()
}

/// The read_lints card's result, converted from the diagnostics exec result: a success becomes
/// one `FileDiagnostics`; every failure becomes `error{error_message}` with the text the model got.
pub(crate) fn lints_card_result(
    path: &str,
    r: &agent::DiagnosticsResult,
    out: &ToolOutput,
) -> agent::ReadLintsToolResult {
    let result = match &r.result {
        Some(diagnostics_result::Result::Success(s)) => {
            let diagnostics: Vec<agent::DiagnosticItem> = s
                .diagnostics
                .iter()
                .map(|d| agent::DiagnosticItem {
                    severity: d.severity,
                    range: range(&d.range),
                    message: d.message.clone(),
                    source: d.source.clone(),
                    code: String::from_utf8_lossy(&d.code).into_owned(),
                    is_stale: d.is_stale,
                })
                .collect();
            let count = i32::try_from(diagnostics.len()).unwrap_or(i32::MAX);
            let file_path = if s.path.is_empty() { path.to_owned() } else { s.path.clone() };
            read_lints_tool_result::Result::Success(agent::ReadLintsToolSuccess {
                file_diagnostics: vec![agent::FileDiagnostics {
                    path: file_path,
                    diagnostics,
                    diagnostics_count: count,
                }],
                total_files: 1,
                total_diagnostics: count,
            })
        }
        _ => read_lints_tool_result::Result::Error(agent::ReadLintsToolError { error_message: out.joined_text() }),
    };
    agent::ReadLintsToolResult { result: Some(result) }
}
