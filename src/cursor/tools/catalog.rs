//! The tool catalog: the one place the tools the model sees are defined (name, description, JSON
//! Schema), plus the MCP tools of the run request, and which card each tool shows as.
//!
//! The list is deterministic for a given mode and MCP set (built-in tools first, in a fixed
//! order, then MCP tools in request order), so the tools part of the prompt stays byte-identical
//! across steps and turns and provider prompt caches keep hitting.
//!
//! Modes: `agent` (and unspecified) get every tool; the other modes (ask, plan, …), and any mode
//! value this build does not know ([`mode_from_wire`]: a newer editor's custom mode), only the
//! read-only ones (read, grep, glob, ls, diagnostics, fetch), the todo list, web search and the
//! tools that ask the user (ask_question, create_plan, switch_mode), without MCP tools. The list
//! of a run never changes; after an approved `switch_mode` the dispatcher refuses the tools the
//! new mode does not allow (`interact`).

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
    /// `fetch_url` fetched by Keyhaven after the user's approval (when a fetcher is installed;
    /// otherwise `fetch_url` is [`ToolKind::Fetch`], fetched by the editor).
    WebFetch,
    /// Interaction tools: the user answers in the editor.
    AskQuestion,
    CreatePlan,
    SwitchMode,
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
        self.read_only()
            || matches!(
                self,
                ToolKind::Todos
                    | ToolKind::WebSearch
                    | ToolKind::WebFetch
                    | ToolKind::AskQuestion
                    | ToolKind::CreatePlan
                    | ToolKind::SwitchMode
            )
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
pub const ASK_QUESTION: &str = "ask_question";
pub const CREATE_PLAN: &str = "create_plan";
pub const SWITCH_MODE: &str = "switch_mode";

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
            "Fetch a web page (http or https) and return its content as text. The user may be asked to approve.",
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
        (
            ToolKind::AskQuestion,
            ASK_QUESTION,
            "Ask the user one or more multiple-choice questions when a decision is theirs to make (scope, \
             trade-offs, preferences). The user picks options in the editor; you get their choices. Do not ask \
             what you can find out with the other tools.",
            json!({"type": "object", "properties": {
                "title": {"type": "string", "description": "A short heading for the questions."},
                "questions": {"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "string"},
                    "prompt": {"type": "string", "description": "The question."},
                    "options": {"type": "array", "minItems": 2, "items": {"type": "object", "properties": {
                        "id": {"type": "string"},
                        "label": {"type": "string"}
                    }, "required": ["label"]}},
                    "allow_multiple": {"type": "boolean", "description": "The user may pick several options."}
                }, "required": ["prompt", "options"]}}
            }, "required": ["questions"]}),
        ),
        (
            ToolKind::CreatePlan,
            CREATE_PLAN,
            "Present an implementation plan for the user to review before you change anything (mainly in plan \
             mode). The user accepts or declines it in the editor; an accepted plan's todos become the todo list.",
            json!({"type": "object", "properties": {
                "name": {"type": "string", "description": "A short title."},
                "overview": {"type": "string", "description": "One or two sentences."},
                "plan": {"type": "string", "description": "The plan in Markdown: files, steps, risks."},
                "todos": {"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "string"},
                    "content": {"type": "string"}
                }, "required": ["content"]}}
            }, "required": ["name", "plan"]}),
        ),
        (
            ToolKind::SwitchMode,
            SWITCH_MODE,
            "Ask the user to switch the agent mode: `agent` (may edit files and run commands), `ask` (read-only \
             answers), `plan` (read-only, ends with a plan), `debug`. The user approves or declines.",
            json!({"type": "object", "properties": {
                "target_mode": {"type": "string", "enum": ["agent", "ask", "plan", "debug"]},
                "explanation": {"type": "string", "description": "Why the switch helps, shown to the user."}
            }, "required": ["target_mode"]}),
        ),
    ]
}

/// The mode an `AgentMode` wire value names. A value this build does not know (Cursor 3.x's
/// `AGENT_MODE_CUSTOM = 8`, whose tools are the user's choice, or anything newer) is treated as
/// ask, the narrowest tool set: an unknown mode never gets the write and shell tools.
pub fn mode_from_wire(value: i32) -> AgentMode {
    AgentMode::try_from(value).unwrap_or(AgentMode::Ask)
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
    /// `fetch_url` is fetched by the editor; see [`Catalog::with_server_fetch`].
    pub fn build(mode: AgentMode, mcp: &[McpToolDefinition]) -> Catalog {
        Catalog::with_server_fetch(mode, mcp, false)
    }

    /// Like [`Catalog::build`]; with `server_fetch`, `fetch_url` is fetched by Keyhaven after the
    /// user's approval (the definition the model sees is the same either way).
    pub fn with_server_fetch(mode: AgentMode, mcp: &[McpToolDefinition], server_fetch: bool) -> Catalog {
        let full = Catalog::offers_all_in(mode);
        let mut c = Catalog::default();
        for (kind, name, description, schema) in builtins() {
            if !full && !kind.any_mode() {
                continue;
            }
            let kind = if kind == ToolKind::Fetch && server_fetch { ToolKind::WebFetch } else { kind };
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

    /// Whether `mode` gets every tool (agent mode) or only the read-only and interaction ones.
    fn offers_all_in(mode: AgentMode) -> bool {
        matches!(mode, AgentMode::Agent | AgentMode::Unspecified)
    }

    /// Whether `mode` allows every tool (for the mode check of each call).
    pub fn offers_all(&self, mode: AgentMode) -> bool {
        Catalog::offers_all_in(mode)
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

    /// The catalog without the tools named `names` (e.g. web search the user turned off).
    pub fn without(mut self, names: &[&str]) -> Catalog {
        self.defs.retain(|d| !names.contains(&d.name.as_str()));
        for n in names {
            self.kinds.remove(*n);
        }
        self
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
            ToolKind::WebFetch => tool_call::Tool::WebFetchToolCall(agent::WebFetchToolCall::default()),
            ToolKind::AskQuestion => tool_call::Tool::AskQuestionToolCall(agent::AskQuestionToolCall::default()),
            ToolKind::CreatePlan => tool_call::Tool::CreatePlanToolCall(agent::CreatePlanToolCall::default()),
            ToolKind::SwitchMode => tool_call::Tool::SwitchModeToolCall(agent::SwitchModeToolCall::default()),
            ToolKind::Mcp(_) => tool_call::Tool::McpToolCall(agent::McpToolCall::default()),
        };
        Some(agent::ToolCall { tool: Some(tool), tool_call_id: None })
    }
}
