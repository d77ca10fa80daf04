//! The tool catalog: the one place the tools the model sees are defined (name, description, JSON
//! Schema), plus the MCP tools of the run request, and which card each tool shows as.
//!
//! The list is deterministic for a given mode and MCP set (built-in tools first, in a fixed
//! order, then MCP tools in request order), so the tools part of the prompt stays byte-identical
//! across steps and turns and provider prompt caches keep hitting.
//!
//! Modes: `agent` (and unspecified) get every tool; the other modes (ask, plan, …) only the
//! read-only ones (read, grep, glob, ls, diagnostics, fetch) and the todo list, without MCP
//! tools.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::cursor::protocol::agent::{self, AgentMode, McpToolDefinition, tool_call};
use crate::cursor::tools::json;
use crate::model::ToolDef;

/// What a tool does on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    Read,
    Write,
    Edit,
    Shell,
    Grep,
    Glob,
    Ls,
    Delete,
    /// Server-side todo list (no exec).
    Todos,
    Diagnostics,
    Fetch,
    /// Server-side search after the user's approval.
    WebSearch,
    /// Index into [`Catalog::mcp`].
    Mcp(usize),
}

impl ToolKind {
    /// Read-only tools send their exec before `tool_call_started` (the order the real server
    /// uses); the others announce the card first.
    pub fn read_only(self) -> bool {
        matches!(
            self,
            ToolKind::Read | ToolKind::Grep | ToolKind::Glob | ToolKind::Ls | ToolKind::Diagnostics | ToolKind::Fetch
        )
    }

    /// Offered in every mode (ask, plan, …), not only in agent mode.
    pub fn any_mode(self) -> bool {
        self.read_only() || matches!(self, ToolKind::Todos | ToolKind::WebSearch)
    }
}

pub const READ: &str = "read_file";
pub const WRITE: &str = "write_file";
pub const EDIT: &str = "edit_file";
pub const SHELL: &str = "run_terminal_cmd";
pub const GREP: &str = "grep";
pub const GLOB: &str = "glob_file_search";
pub const LS: &str = "list_dir";
pub const DELETE: &str = "delete_file";
pub const TODOS: &str = "todo_write";
pub const DIAGNOSTICS: &str = "read_lints";
pub const FETCH: &str = "fetch_url";
pub const WEB_SEARCH: &str = "web_search";

fn builtins() -> Vec<(ToolKind, &'static str, &'static str, Value)> {
    vec![
        (
            ToolKind::Read,
            READ,
            "Read a file of the workspace. Returns its text. For large files, read a range with `offset` (first \
             line, 1-based) and `limit` (number of lines).",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root or absolute."},
                "offset": {"type": "integer", "description": "First line to read (1-based)."},
                "limit": {"type": "integer", "description": "Number of lines to read."}
            }, "required": ["path"]}),
        ),
        (
            ToolKind::Write,
            WRITE,
            "Create a file or replace its whole content. Prefer edit_file for changes to an existing file.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root or absolute."},
                "contents": {"type": "string", "description": "The complete new content of the file."}
            }, "required": ["path", "contents"]}),
        ),
        (
            ToolKind::Edit,
            EDIT,
            "Edit a file by replacing an exact string. `old_string` must match the file exactly (whitespace \
             included) and be unique unless `replace_all` is set. With an empty `old_string`, creates a new file \
             containing `new_string`.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root or absolute."},
                "old_string": {"type": "string", "description": "The exact text to replace."},
                "new_string": {"type": "string", "description": "The replacement text."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence."}
            }, "required": ["path", "old_string", "new_string"]}),
        ),
        (
            ToolKind::Shell,
            SHELL,
            "Run a shell command in the user's terminal and return its exit code and output. The user may \
             reject the command.",
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The command line to run."},
                "working_directory": {"type": "string", "description": "Directory to run in; defaults to the workspace root."},
                "timeout_ms": {"type": "integer", "description": "Stop the command after this many milliseconds."}
            }, "required": ["command"]}),
        ),
        (
            ToolKind::Grep,
            GREP,
            "Search file contents with a regular expression (ripgrep syntax).",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "The regular expression."},
                "path": {"type": "string", "description": "File or directory to search; defaults to the workspace root."},
                "glob": {"type": "string", "description": "Only search files matching this glob, e.g. `*.rs`."},
                "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"],
                                "description": "Matching lines (default), file names, or counts per file."},
                "case_insensitive": {"type": "boolean"},
                "context": {"type": "integer", "description": "Lines of context around each match."},
                "head_limit": {"type": "integer", "description": "Return at most this many results."}
            }, "required": ["pattern"]}),
        ),
        (
            ToolKind::Glob,
            GLOB,
            "Find files by name with a glob pattern, e.g. `**/*.rs`.",
            json!({"type": "object", "properties": {
                "glob_pattern": {"type": "string", "description": "The glob pattern."},
                "target_directory": {"type": "string", "description": "Directory to search; defaults to the workspace root."}
            }, "required": ["glob_pattern"]}),
        ),
        (
            ToolKind::Ls,
            LS,
            "List a directory of the workspace as a tree.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Directory path, relative to the workspace root or absolute."},
                "ignore": {"type": "array", "items": {"type": "string"}, "description": "Glob patterns to leave out."}
            }, "required": ["path"]}),
        ),
        (
            ToolKind::Delete,
            DELETE,
            "Delete a file of the workspace.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root or absolute."}
            }, "required": ["path"]}),
        ),
        (
            ToolKind::Todos,
            TODOS,
            "Keep a todo list for multi-step work; the user sees it. Send every item with `merge: false` to \
             replace the list, or only changed items with `merge: true` (matched by id).",
            json!({"type": "object", "properties": {
                "todos": {"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "string"},
                    "content": {"type": "string", "description": "What to do."},
                    "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]},
                    "dependencies": {"type": "array", "items": {"type": "string"}, "description": "Ids this item waits for."}
                }, "required": ["id"]}},
                "merge": {"type": "boolean", "description": "Update items by id instead of replacing the list."}
            }, "required": ["todos"]}),
        ),
        (
            ToolKind::Diagnostics,
            DIAGNOSTICS,
            "Read the editor's diagnostics (errors, warnings from linters and language servers) for a file.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root or absolute."}
            }, "required": ["path"]}),
        ),
        (
            ToolKind::Fetch,
            FETCH,
            "Fetch a URL through the user's editor and return its content.",
            json!({"type": "object", "properties": {
                "url": {"type": "string", "description": "The http(s) URL."}
            }, "required": ["url"]}),
        ),
        (
            ToolKind::WebSearch,
            WEB_SEARCH,
            "Search the web (the user approves each search). Returns titles, URLs and snippets.",
            json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "The search terms."}
            }, "required": ["query"]}),
        ),
    ]
}

/// The tools of one run.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    defs: Vec<ToolDef>,
    kinds: HashMap<String, ToolKind>,
    mcp: Vec<McpToolDefinition>,
}

/// A function name every provider accepts: `[A-Za-z0-9_-]`, at most 64 characters.
fn function_name(name: &str) -> String {
    let mut s: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    s.truncate(64);
    if s.is_empty() { "mcp_tool".to_owned() } else { s }
}

impl Catalog {
    /// The tools for `mode`, plus `mcp` (agent mode only; duplicates by name are dropped).
    pub fn build(mode: AgentMode, mcp: &[McpToolDefinition]) -> Catalog {
        let full = matches!(mode, AgentMode::Agent | AgentMode::Unspecified);
        let mut c = Catalog::default();
        for (kind, name, description, schema) in builtins() {
            if !full && !kind.any_mode() {
                continue;
            }
            c.kinds.insert(name.to_owned(), kind);
            c.defs.push(ToolDef {
                name: name.to_owned(),
                description: Some(description.to_owned()),
                parameters: schema,
                cache: None,
            });
        }
        if !full {
            return c;
        }
        for def in mcp {
            let mut name = function_name(&def.name);
            if c.kinds.contains_key(&name) {
                name = function_name(&format!("mcp_{name}"));
            }
            if c.kinds.contains_key(&name) {
                continue;
            }
            let schema = def.input_schema.as_ref().map(json::to_json).filter(Value::is_object);
            c.kinds.insert(name.clone(), ToolKind::Mcp(c.mcp.len()));
            c.mcp.push(def.clone());
            c.defs.push(ToolDef {
                name,
                description: (!def.description.is_empty()).then(|| def.description.clone()),
                parameters: schema.unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                cache: None,
            });
        }
        c
    }

    pub fn defs(&self) -> &[ToolDef] {
        &self.defs
    }

    pub fn kind(&self, name: &str) -> Option<ToolKind> {
        self.kinds.get(name).copied()
    }

    pub fn mcp(&self, index: usize) -> Option<&McpToolDefinition> {
        self.mcp.get(index)
    }

    /// The card case of a tool with empty arguments (for `partial_tool_call`).
    pub fn skeleton(&self, name: &str) -> Option<agent::ToolCall> {
        let tool = match self.kind(name)? {
            ToolKind::Read => tool_call::Tool::ReadToolCall(agent::ReadToolCall::default()),
            ToolKind::Write | ToolKind::Edit => tool_call::Tool::EditToolCall(agent::EditToolCall::default()),
            ToolKind::Shell => tool_call::Tool::ShellToolCall(agent::ShellToolCall::default()),
            ToolKind::Grep => tool_call::Tool::GrepToolCall(agent::GrepToolCall::default()),
            ToolKind::Glob => tool_call::Tool::GlobToolCall(agent::GlobToolCall::default()),
            ToolKind::Ls => tool_call::Tool::LsToolCall(agent::LsToolCall::default()),
            ToolKind::Delete => tool_call::Tool::DeleteToolCall(agent::DeleteToolCall::default()),
            ToolKind::Todos => tool_call::Tool::UpdateTodosToolCall(agent::UpdateTodosToolCall::default()),
            ToolKind::Diagnostics => tool_call::Tool::ReadLintsToolCall(agent::ReadLintsToolCall::default()),
            ToolKind::Fetch => tool_call::Tool::FetchToolCall(agent::FetchToolCall::default()),
            ToolKind::WebSearch => tool_call::Tool::WebSearchToolCall(agent::WebSearchToolCall::default()),
            ToolKind::Mcp(_) => tool_call::Tool::McpToolCall(agent::McpToolCall::default()),
        };
        Some(agent::ToolCall { tool: Some(tool) })
    }
}
