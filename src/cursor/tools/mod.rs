//! The agent's tools on Cursor's wire (docs/cursor-backend.md §2.3 "cursor/tools", §6):
//!
//! - [`catalog`]: the one list of tool definitions the model sees (names, descriptions, JSON
//!   Schemas), plus the MCP tools of the run request, and each tool's card case.
//! - [`exec`]: the exec channel: `exec_server_message` requests with per-run ids, results routed
//!   back by id, `stream_close` / `throw` / `heartbeat` control, a silence timeout, and
//!   `exec_server_control_message.abort` for every exec abandoned (cancel, timeout, drop).
//! - [`dispatch`]: [`dispatch::CursorTools`], the `run::ToolHost` for Cursor: one function per tool
//!   kind turning the model's arguments into execs and tool cards (`tool_call_started`,
//!   `tool_call_completed`, call id = exec id = the model's tool call id) and the result text the
//!   model sees.
//! - [`edit`]: before/after, lines added and removed, and the unified diff of an edit card.
//! - [`todos`]: the conversation's server-side todo list and the `todo_write` tool.
//! - [`inspect`]: the diagnostics (`read_lints`) and fetch (`fetch_url`) exec tools.
//! - [`query`]: interaction queries (approval requests to the UI) and their responses by id.
//! - [`interact`]: the tools that ask the user: `ask_question`, `create_plan`, `switch_mode`
//!   (and the run's [`interact::ModeCell`]).
//! - [`web`]: `web_search` and server-side `fetch_url` (the user approves, then a `crate::search`
//!   provider or fetcher does the work).
//! - [`stream`]: the new file text of a streaming `write_file` call, for the edit card.
//! - [`json`]: JSON ↔ `google.protobuf.Value` (MCP arguments and schemas).

pub mod catalog;
pub mod dispatch;
pub mod edit;
pub mod exec;
pub mod inspect;
pub mod interact;
pub mod json;
pub mod query;
pub mod stream;
pub mod todos;
pub mod web;

#[cfg(test)]
mod tests;
