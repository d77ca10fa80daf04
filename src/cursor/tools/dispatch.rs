//! [`CursorTools`]: the `run::ToolHost` of the Cursor front end. One function per tool kind turns
//! the model's arguments into exec requests and tool cards and the client's replies into the text
//! the model sees.
//!
//! Card order per call (call id = `exec_id` = `tool_call_id` in the args = the model's call id):
//! read-only tools send the exec, then `tool_call_started`; the others `tool_call_started`, then
//! the exec; every call ends with `tool_call_completed` carrying arguments and result — also when
//! the exec failed, timed out or the arguments were invalid. Writes and edits are shown as edit
//! cards with before/after content, lines added and removed and a unified diff; they read the
//! file first through a hidden `read_args` exec (the before content) and then write it.

use std::sync::Arc;

use base64::Engine as _;
use futures::future::BoxFuture;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::cursor::blobs::BlobReader;
use crate::cursor::protocol::agent::{
    self, delete_result, edit_result, exec_client_message, exec_server_message, glob_tool_result, grep_result,
    grep_union_result, ls_result, mcp_content, mcp_result, mcp_tool_result, read_result, read_success,
    read_tool_result, shell_result, shell_stream, tool_call, write_result,
};
use crate::cursor::protocol::events;
use crate::cursor::tools::catalog::{Catalog, ToolKind};
use crate::cursor::tools::edit::{self, EditSummary};
use crate::cursor::tools::exec::{ExecChannel, ExecError, ExecEvent};
use crate::cursor::tools::interact::{self, ModeCell};
use crate::cursor::tools::json;
use crate::cursor::tools::query::QueryChannel;
use crate::cursor::tools::todos::TodoList;
use crate::cursor::transport::Output;
use crate::model::{ImageSource, Part};
use crate::run::{ToolCall, ToolContext, ToolHost, ToolOutput};
use crate::search::{PageFetcher, SearchProvider};

/// The most characters of one tool result the model sees.
const MAX_RESULT_CHARS: usize = 60_000;
/// The most characters of shell output kept per stream.
const MAX_SHELL_CHARS: usize = 200_000;

/// The id tying a step's cards to its model call.
pub fn model_call_id(run_id: &str, step: u32) -> String {
    format!("{run_id}:{step}")
}

/// Executes the catalog's tools through the client.
#[derive(Debug)]
pub struct CursorTools {
    pub catalog: Arc<Catalog>,
    pub exec: Arc<ExecChannel>,
    pub output: Arc<Output>,
    /// The workspace root relative paths resolve against (the client's first workspace path).
    pub workspace: Option<String>,
    /// The conversation's todo list (server-side).
    pub todos: Arc<TodoList>,
    /// Approval requests to the UI.
    pub queries: Arc<QueryChannel>,
    /// The web search provider, if one is configured.
    pub search: Option<Arc<dyn SearchProvider>>,
    /// Fetches pages server-side after the user's approval; `None`: the editor fetches them.
    pub fetcher: Option<Arc<dyn PageFetcher>>,
    /// The run's agent mode (changed by an approved `switch_mode`).
    pub mode: Arc<ModeCell>,
    /// Reads blobs exec results name (a large read delivered as `output_blob_id`).
    pub blobs: Option<BlobReader>,
    /// Where the editor writes terminal output (`RequestContextEnv.terminals_folder`), if known.
    pub terminals_folder: Option<String>,
}

/// One call being executed.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) id: &'a str,
    pub(crate) mcid: &'a str,
}

fn cap(mut s: String, max: usize) -> String {
    if let Some((i, _)) = s.char_indices().nth(max) {
        s.truncate(i);
        s.push_str("\n[output truncated]");
    }
    s
}

fn args<T: DeserializeOwned>(call: &ToolCall) -> Result<T, ToolOutput> {
    serde_json::from_value(call.input.clone())
        .map_err(|e| ToolOutput::error(format!("Invalid arguments for {}: {e}", call.name)))
}

fn to_i32(v: Option<i64>) -> Option<i32> {
    v.map(|v| i32::try_from(v.max(0)).unwrap_or(i32::MAX))
}

#[derive(Deserialize)]
struct ReadIn {
    path: String,
    offset: Option<i64>,
    limit: Option<i64>,
}

#[derive(Deserialize)]
struct WriteIn {
    path: String,
    contents: String,
}

#[derive(Deserialize)]
struct EditIn {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

#[derive(Deserialize)]
struct ShellIn {
    command: String,
    working_directory: Option<String>,
    timeout_ms: Option<i64>,
}

#[derive(Deserialize)]
struct GrepIn {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    output_mode: Option<String>,
    case_insensitive: Option<bool>,
    context: Option<i64>,
    head_limit: Option<i64>,
}

#[derive(Deserialize)]
struct GlobIn {
    glob_pattern: String,
    target_directory: Option<String>,
}

#[derive(Deserialize)]
struct LsIn {
    path: String,
    #[serde(default)]
    ignore: Vec<String>,
}

#[derive(Deserialize)]
struct PathIn {
    path: String,
}

enum Change {
    Replace(String),
    Edit { old: String, new: String, all: bool },
}

impl ToolHost for CursorTools {
    fn execute<'a>(&'a self, call: ToolCall, ctx: ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let mcid = model_call_id(&ctx.run_id, ctx.step);
            let c = Call { id: &call.id, mcid: &mcid };
            let Some(kind) = self.catalog.kind(&call.name) else {
                return ToolOutput::error(format!("There is no tool named `{}`.", call.name));
            };
            let mode = self.mode.get();
            if !kind.any_mode() && !self.catalog.offers_all(mode) {
                return ToolOutput::error(format!(
                    "{} is not available in {} mode (the user approved that mode); stay read-only or call \
                     switch_mode to ask for agent mode.",
                    call.name,
                    interact::mode_id(mode)
                ));
            }
            let out = match kind {
                ToolKind::Read => match args::<ReadIn>(&call) {
                    Ok(a) => self.read(c, a).await,
                    Err(e) => e,
                },
                ToolKind::Write => match args::<WriteIn>(&call) {
                    Ok(a) => self.write(c, &a.path, Change::Replace(a.contents)).await,
                    Err(e) => e,
                },
                ToolKind::Edit => match args::<EditIn>(&call) {
                    Ok(a) => {
                        self.write(
                            c,
                            &a.path,
                            Change::Edit { old: a.old_string, new: a.new_string, all: a.replace_all },
                        )
                        .await
                    }
                    Err(e) => e,
                },
                ToolKind::Shell => match args::<ShellIn>(&call) {
                    Ok(a) => self.shell(c, a).await,
                    Err(e) => e,
                },
                ToolKind::Grep => match args::<GrepIn>(&call) {
                    Ok(a) => self.grep(c, a).await,
                    Err(e) => e,
                },
                ToolKind::Glob => match args::<GlobIn>(&call) {
                    Ok(a) => self.glob(c, a).await,
                    Err(e) => e,
                },
                ToolKind::Ls => match args::<LsIn>(&call) {
                    Ok(a) => self.ls(c, a).await,
                    Err(e) => e,
                },
                ToolKind::Delete => match args::<PathIn>(&call) {
                    Ok(a) => self.delete(c, a).await,
                    Err(e) => e,
                },
                ToolKind::Todos => match args(&call) {
                    Ok(a) => self.todos_tool(c, a),
                    Err(e) => e,
                },
                ToolKind::Diagnostics => match args(&call) {
                    Ok(a) => self.diagnostics(c, a).await,
                    Err(e) => e,
                },
                ToolKind::Fetch => match args(&call) {
                    Ok(a) => self.fetch(c, a).await,
                    Err(e) => e,
                },
                ToolKind::WebSearch => match args(&call) {
                    Ok(a) => self.web_search(c, a).await,
                    Err(e) => e,
                },
                ToolKind::WebFetch => match args(&call) {
                    Ok(a) => self.web_fetch(c, a).await,
                    Err(e) => e,
                },
                ToolKind::AskQuestion => match args(&call) {
                    Ok(a) => self.ask_question(c, a).await,
                    Err(e) => e,
                },
                ToolKind::CreatePlan => match args(&call) {
                    Ok(a) => self.create_plan(c, a).await,
                    Err(e) => e,
                },
                ToolKind::SwitchMode => match args(&call) {
                    Ok(a) => self.switch_mode(c, a).await,
                    Err(e) => e,
                },
                ToolKind::Mcp(i) => self.mcp(c, i, &call).await,
            };
            ToolOutput { content: out.content.into_iter().map(cap_part).collect(), is_error: out.is_error }
        })
    }
}

/// A card: the tool's case plus, for 3.x builds, the call id on the card itself
/// (`ToolCall.tool_call_id`, the same id as the update's `call_id` and the exec's `exec_id`).
pub(crate) fn card(id: &str, tool: tool_call::Tool) -> agent::ToolCall {
    agent::ToolCall { tool: Some(tool), tool_call_id: Some(id.to_owned()) }
}

fn cap_part(p: Part) -> Part {
    match p {
        Part::Text { text, cache } => Part::Text { text: cap(text, MAX_RESULT_CHARS), cache },
        other => other,
    }
}

impl CursorTools {
    pub(crate) fn emit(&self, m: &agent::AgentServerMessage) {
        self.output.publish(events::frame(m, false));
    }

    pub(crate) fn started(&self, c: Call<'_>, tool: tool_call::Tool) {
        self.emit(&events::tool_call_started(c.id, card(c.id, tool), c.mcid));
    }

    pub(crate) fn completed(&self, c: Call<'_>, tool: tool_call::Tool) {
        self.emit(&events::tool_call_completed(c.id, card(c.id, tool), c.mcid));
    }

    /// A path as the client should see it: absolute paths unchanged, relative ones under the
    /// workspace root (when known).
    pub(crate) fn resolve(&self, p: &str) -> String {
        let p = p.trim();
        let b = p.as_bytes();
        let absolute =
            p.starts_with('/') || p.starts_with('\\') || (b.len() > 2 && b[1] == b':' && matches!(b[2], b'/' | b'\\'));
        match &self.workspace {
            Some(root) if !absolute => {
                let rel = p.trim_start_matches("./");
                if rel.is_empty() || rel == "." {
                    root.clone()
                } else {
                    format!("{}/{rel}", root.trim_end_matches(['/', '\\']))
                }
            }
            _ => p.to_owned(),
        }
    }

    fn root_or(&self, p: Option<&str>) -> String {
        match p {
            Some(p) if !p.trim().is_empty() => self.resolve(p),
            _ => self.workspace.clone().unwrap_or_default(),
        }
    }

    async fn read(&self, c: Call<'_>, a: ReadIn) -> ToolOutput {
        let path = self.resolve(&a.path);
        let offset = to_i32(a.offset);
        let limit = a.limit.map(|l| u32::try_from(l.max(0)).unwrap_or(u32::MAX));
        let card_args =
            agent::ReadToolArgs { path: path.clone(), offset, limit: to_i32(a.limit), include_line_numbers: None };
        let exec = self.exec.start(
            c.id,
            exec_server_message::Message::ReadArgs(agent::ReadArgs {
                path: path.clone(),
                tool_call_id: c.id.to_owned(),
                offset,
                limit,
            }),
        );
        self.started(
            c,
            tool_call::Tool::ReadToolCall(agent::ReadToolCall { args: Some(card_args.clone()), result: None }),
        );
        let (result, out) = match exec.result().await {
            Ok(exec_client_message::Message::ReadResult(r)) => match r.result {
                Some(read_result::Result::Success(s)) => {
                    let content = match self.read_output(&s).await {
                        Ok(t) => t,
                        Err(e) => format!("[the editor delivered the file as a blob Keyhaven could not read: {e}]"),
                    };
                    let text = if content.is_empty() {
                        format!("{path} is empty.")
                    } else if s.truncated {
                        format!("{content}\n[the editor truncated the file; read a range with offset and limit]")
                    } else {
                        content.clone()
                    };
                    let card = agent::ReadToolResult {
                        result: Some(read_tool_result::Result::Success(agent::ReadToolSuccess {
                            output: Some(agent::read_tool_success::Output::Content(content.clone())),
                            is_empty: content.is_empty(),
                            exceeded_limit: s.truncated,
                            total_lines: s.total_lines,
                            file_size: s.file_size,
                            path: path.clone(),
                        })),
                    };
                    (card, ToolOutput::text(text))
                }
                other => {
                    let msg = read_failure(&path, other);
                    (read_error(&msg), ToolOutput::error(msg))
                }
            },
            Ok(_) => {
                let msg = format!("Reading {path} failed: the editor answered with another kind of result.");
                (read_error(&msg), ToolOutput::error(msg))
            }
            Err(e) => {
                let msg = format!("Reading {path} failed: {e}.");
                (read_error(&msg), ToolOutput::error(msg))
            }
        };
        self.completed(
            c,
            tool_call::Tool::ReadToolCall(agent::ReadToolCall { args: Some(card_args), result: Some(result) }),
        );
        out
    }

    /// A read's text: inline, or from the blob `output_blob_id` names (docs/cursor-wire.md §4.8).
    async fn read_output(&self, s: &agent::ReadSuccess) -> Result<String, String> {
        if let Some(id) = s.output_blob_id.as_deref().filter(|id| !id.is_empty()) {
            let Some(reader) = &self.blobs else { return Err("no blob channel".to_owned()) };
            return reader.read(id).await.map(|b| String::from_utf8_lossy(&b).into_owned()).map_err(|e| e.to_string());
        }
        Ok(match &s.output {
            Some(read_success::Output::Content(t)) => t.clone(),
            Some(read_success::Output::Data(b)) => String::from_utf8_lossy(b).into_owned(),
            None => String::new(),
        })
    }

    /// The file's current text for an edit: `None` when it does not exist.
    async fn read_before(&self, c: Call<'_>, path: &str) -> Result<Option<String>, String> {
        let exec = self.exec.start(
            c.id,
            exec_server_message::Message::ReadArgs(agent::ReadArgs {
                path: path.to_owned(),
                tool_call_id: c.id.to_owned(),
                offset: None,
                limit: None,
            }),
        );
        match exec.result().await {
            Ok(exec_client_message::Message::ReadResult(r)) => match r.result {
                Some(read_result::Result::Success(s)) if s.truncated => {
                    Err(format!("{path} is too large to edit through the editor"))
                }
                Some(read_result::Result::Success(s)) => match self.read_output(&s).await {
                    Ok(t) => Ok(Some(t)),
                    Err(e) => Err(format!("Reading {path} failed: {e}")),
                },
                Some(read_result::Result::FileNotFound(_)) => Ok(None),
                other => Err(read_failure(path, other)),
            },
            Ok(_) => Err(format!("Reading {path} failed: the editor answered with another kind of result.")),
            Err(e) => Err(format!("Reading {path} failed: {e}.")),
        }
    }

    async fn write(&self, c: Call<'_>, raw_path: &str, change: Change) -> ToolOutput {
        let path = self.resolve(raw_path);
        let stream_content = match &change {
            Change::Replace(s) => s.clone(),
            Change::Edit { new, .. } => new.clone(),
        };
        let card_args = agent::EditArgs { path: path.clone(), stream_content: Some(stream_content) };
        let card = |result| {
            tool_call::Tool::EditToolCall(agent::EditToolCall { args: Some(card_args.clone()), result: Some(result) })
        };
        self.started(
            c,
            tool_call::Tool::EditToolCall(agent::EditToolCall { args: Some(card_args.clone()), result: None }),
        );
        let fail = |result: edit_result::Result, msg: String| {
            self.completed(c, card(agent::EditResult { result: Some(result) }));
            ToolOutput::error(msg)
        };
        let edit_error = |msg: String| {
            fail(
                edit_result::Result::Error(agent::EditError {
                    path: path.clone(),
                    error: msg.clone(),
                    model_visible_error: Some(msg.clone()),
                }),
                msg,
            )
        };
        let before = match self.read_before(c, &path).await {
            Ok(b) => b,
            Err(e) => return edit_error(e),
        };
        let after = match (change, &before) {
            (Change::Replace(s), _) => s,
            (Change::Edit { old, new, .. }, None) if old.is_empty() => new,
            (Change::Edit { .. }, None) => {
                return fail(
                    edit_result::Result::FileNotFound(agent::PathOnly { path: path.clone() }),
                    format!("{path} does not exist. To create it, use an empty old_string."),
                );
            }
            (Change::Edit { old, new, all }, Some(text)) => match edit::replace(text, &old, &new, all) {
                Ok(after) => after,
                Err(e) => return edit_error(format!("Cannot edit {path}: {e}.")),
            },
        };
        let exec = self.exec.start(
            c.id,
            exec_server_message::Message::WriteArgs(agent::WriteArgs {
                path: path.clone(),
                file_text: after.clone(),
                tool_call_id: c.id.to_owned(),
                return_file_content_after_write: true,
            }),
        );
        match exec.result().await {
            Ok(exec_client_message::Message::WriteResult(w)) => match w.result {
                Some(write_result::Result::Success(s)) => {
                    let after = s.file_content_after_write.unwrap_or(after);
                    let created = before.is_none();
                    let before = before.unwrap_or_default();
                    let EditSummary { lines_added, lines_removed, diff } = edit::summarize(&path, &before, &after);
                    self.completed(
                        c,
                        card(agent::EditResult {
                            result: Some(edit_result::Result::Success(agent::EditSuccess {
                                path: path.clone(),
                                lines_added,
                                lines_removed,
                                diff_string: diff,
                                before_full_file_content: before,
                                after_full_file_content: after,
                                message: None,
                            })),
                        }),
                    );
                    if created {
                        ToolOutput::text(format!("Created {path} ({lines_added} lines)."))
                    } else {
                        ToolOutput::text(format!("Updated {path} (+{lines_added} -{lines_removed} lines)."))
                    }
                }
                Some(write_result::Result::Rejected(r)) => fail(
                    edit_result::Result::Rejected(agent::PathReason { path: path.clone(), reason: r.reason.clone() }),
                    format!("The user rejected the change to {path}{}", reason_suffix(&r.reason)),
                ),
                Some(write_result::Result::PermissionDenied(p)) => fail(
                    edit_result::Result::WritePermissionDenied(agent::PathOnly { path: path.clone() }),
                    format!("No permission to write {path}{}", reason_suffix(&p.error)),
                ),
                Some(write_result::Result::NoSpace(_)) => edit_error(format!("Writing {path} failed: no space left.")),
                Some(write_result::Result::Error(e)) => edit_error(format!("Writing {path} failed: {}.", e.error)),
                None => edit_error(format!("Writing {path} failed: the editor sent an empty result.")),
            },
            Ok(_) => edit_error(format!("Writing {path} failed: the editor answered with another kind of result.")),
            Err(e) => edit_error(format!("Writing {path} failed: {e}.")),
        }
    }

    async fn shell(&self, c: Call<'_>, a: ShellIn) -> ToolOutput {
        let working_directory = self.root_or(a.working_directory.as_deref());
        let args = agent::ShellArgs {
            command: a.command.clone(),
            working_directory: working_directory.clone(),
            timeout: to_i32(a.timeout_ms).unwrap_or(0),
            tool_call_id: c.id.to_owned(),
            is_background: false,
            description: None,
        };
        let card = |result: Option<agent::ShellResult>| {
            tool_call::Tool::ShellToolCall(agent::ShellToolCall { args: Some(args.clone()), result, description: None })
        };
        self.started(c, card(None));
        let mut exec = self.exec.start(c.id, exec_server_message::Message::ShellStreamArgs(args.clone()));
        let (mut stdout, mut stderr) = (String::new(), String::new());
        let cmd = a.command.clone();
        let wd = working_directory.clone();
        let spawn_error = |error: String| {
            shell_result::Result::SpawnError(agent::ShellSpawnError {
                command: cmd.clone(),
                working_directory: wd.clone(),
                error,
            })
        };
        let mut backgrounded: Option<agent::ShellStreamBackgrounded> = None;
        let result = loop {
            match exec.next().await {
                Ok(ExecEvent::Message(exec_client_message::Message::ShellStream(s))) => match s.event {
                    Some(shell_stream::Event::Stdout(d)) => {
                        self.emit(&events::shell_delta(c.id, false, &d.data, c.mcid));
                        push_capped(&mut stdout, &d.data);
                    }
                    Some(shell_stream::Event::Stderr(d)) => {
                        self.emit(&events::shell_delta(c.id, true, &d.data, c.mcid));
                        push_capped(&mut stderr, &d.data);
                    }
                    Some(shell_stream::Event::Exit(x)) => {
                        exec.finish();
                        let code = i32::try_from(x.code).unwrap_or(i32::MAX);
                        break if code == 0 && !x.aborted {
                            shell_result::Result::Success(agent::ShellSuccess {
                                command: a.command.clone(),
                                working_directory: working_directory.clone(),
                                exit_code: code,
                                stdout: stdout.clone(),
                                stderr: stderr.clone(),
                                ..Default::default()
                            })
                        } else {
                            shell_result::Result::Failure(agent::ShellFailure {
                                command: a.command.clone(),
                                working_directory: working_directory.clone(),
                                exit_code: code,
                                stdout: stdout.clone(),
                                stderr: stderr.clone(),
                                aborted: x.aborted,
                                ..Default::default()
                            })
                        };
                    }
                    Some(shell_stream::Event::Rejected(r)) => {
                        exec.finish();
                        break shell_result::Result::Rejected(r);
                    }
                    Some(shell_stream::Event::PermissionDenied(p)) => {
                        exec.finish();
                        break shell_result::Result::PermissionDenied(p);
                    }
                    // The command keeps running in the background: a running command, not a
                    // failure; the exec is done from here (no abort).
                    Some(shell_stream::Event::Backgrounded(b)) => {
                        exec.finish();
                        backgrounded = Some(b);
                        break shell_result::Result::Success(agent::ShellSuccess {
                            command: a.command.clone(),
                            working_directory: working_directory.clone(),
                            stdout: stdout.clone(),
                            stderr: stderr.clone(),
                            ..Default::default()
                        });
                    }
                    Some(shell_stream::Event::Start(_)) | None => {}
                },
                // A client that answers a shell exec unstreamed.
                Ok(ExecEvent::Message(exec_client_message::Message::ShellResult(r))) => {
                    exec.finish();
                    match r.result {
                        Some(r) => break r,
                        None => break spawn_error("the editor sent an empty result".into()),
                    }
                }
                Ok(ExecEvent::Message(_)) => {}
                Ok(ExecEvent::Closed) => {
                    exec.finish();
                    break spawn_error("the editor closed the command without an exit status".into());
                }
                Err(ExecError::Timeout(secs)) => {
                    break shell_result::Result::Timeout(agent::ShellTimeout {
                        command: a.command.clone(),
                        working_directory: working_directory.clone(),
                        timeout_ms: i32::try_from(secs.saturating_mul(1000)).unwrap_or(i32::MAX),
                    });
                }
                Err(e) => break spawn_error(e.to_string()),
            }
        };
        // An unfinished exec (timeout) is aborted on the client here.
        drop(exec);
        let folder = self.terminals_folder.clone().filter(|f| !f.is_empty());
        let out = match &backgrounded {
            Some(b) => background_text(&stdout, &stderr, b, folder.as_deref()),
            None => shell_text(&result, &stdout, &stderr),
        };
        let shell = match &backgrounded {
            Some(b) => agent::ShellResult {
                result: Some(result),
                is_background: Some(true),
                terminals_folder: folder,
                pid: b.pid,
            },
            None => agent::ShellResult { result: Some(result), is_background: None, terminals_folder: None, pid: None },
        };
        self.completed(c, card(Some(shell)));
        out
    }

    async fn grep_exec(
        &self,
        c: Call<'_>,
        args: agent::GrepArgs,
        card: impl Fn(Option<&agent::GrepResult>) -> tool_call::Tool,
    ) -> Result<agent::GrepSuccess, String> {
        let exec = self.exec.start(c.id, exec_server_message::Message::GrepArgs(args));
        self.started(c, card(None));
        let r = match exec.result().await {
            Ok(exec_client_message::Message::GrepResult(r)) => r,
            Ok(_) => agent::GrepResult {
                result: Some(grep_result::Result::Error(agent::GrepError {
                    error: "the editor answered with another kind of result".into(),
                })),
            },
            Err(e) => agent::GrepResult {
                result: Some(grep_result::Result::Error(agent::GrepError { error: e.to_string() })),
            },
        };
        self.completed(c, card(Some(&r)));
        match r.result {
            Some(grep_result::Result::Success(s)) => Ok(s),
            Some(grep_result::Result::Error(e)) => Err(e.error),
            None => Err("the editor sent an empty result".into()),
        }
    }

    async fn grep(&self, c: Call<'_>, a: GrepIn) -> ToolOutput {
        let args = agent::GrepArgs {
            pattern: a.pattern.clone(),
            path: Some(self.root_or(a.path.as_deref())),
            glob: a.glob,
            output_mode: a.output_mode,
            context: to_i32(a.context),
            case_insensitive: a.case_insensitive,
            head_limit: to_i32(a.head_limit),
            tool_call_id: c.id.to_owned(),
            ..Default::default()
        };
        let card_args = args.clone();
        let card = move |r: Option<&agent::GrepResult>| {
            tool_call::Tool::GrepToolCall(agent::GrepToolCall { args: Some(card_args.clone()), result: r.cloned() })
        };
        match self.grep_exec(c, args, card).await {
            Ok(s) => ToolOutput::text(render_grep(&s)),
            Err(e) => ToolOutput::error(format!("grep failed: {e}")),
        }
    }

    async fn glob(&self, c: Call<'_>, a: GlobIn) -> ToolOutput {
        let dir = self.root_or(a.target_directory.as_deref());
        let args = agent::GrepArgs {
            pattern: String::new(),
            path: Some(dir.clone()),
            glob: Some(a.glob_pattern.clone()),
            output_mode: Some("files_with_matches".into()),
            tool_call_id: c.id.to_owned(),
            ..Default::default()
        };
        let glob_args =
            agent::GlobToolArgs { target_directory: a.target_directory.clone(), glob_pattern: a.glob_pattern.clone() };
        let (pattern, path) = (a.glob_pattern.clone(), dir.clone());
        let card = move |r: Option<&agent::GrepResult>| {
            let result = r.map(|r| agent::GlobToolResult {
                result: Some(match &r.result {
                    Some(grep_result::Result::Success(s)) => {
                        let files = grep_files(s);
                        glob_tool_result::Result::Success(agent::GlobToolSuccess {
                            pattern: pattern.clone(),
                            path: path.clone(),
                            total_files: i32::try_from(files.len()).unwrap_or(i32::MAX),
                            files,
                            ..Default::default()
                        })
                    }
                    Some(grep_result::Result::Error(e)) => glob_tool_result::Result::Error(e.clone()),
                    None => glob_tool_result::Result::Error(agent::GrepError { error: "empty result".into() }),
                }),
            });
            tool_call::Tool::GlobToolCall(agent::GlobToolCall { args: Some(glob_args.clone()), result })
        };
        match self.grep_exec(c, args, card).await {
            Ok(s) => {
                let files = grep_files(&s);
                if files.is_empty() {
                    ToolOutput::text(format!("No files match {} under {dir}.", a.glob_pattern))
                } else {
                    ToolOutput::text(files.join("\n"))
                }
            }
            Err(e) => ToolOutput::error(format!("File search failed: {e}")),
        }
    }

    async fn ls(&self, c: Call<'_>, a: LsIn) -> ToolOutput {
        let args = agent::LsArgs { path: self.resolve(&a.path), ignore: a.ignore, tool_call_id: c.id.to_owned() };
        let card = |result| tool_call::Tool::LsToolCall(agent::LsToolCall { args: Some(args.clone()), result });
        let exec = self.exec.start(c.id, exec_server_message::Message::LsArgs(args.clone()));
        self.started(c, card(None));
        let r = match exec.result().await {
            Ok(exec_client_message::Message::LsResult(r)) => r,
            Ok(_) => ls_error(&args.path, "the editor answered with another kind of result"),
            Err(e) => ls_error(&args.path, &e.to_string()),
        };
        let out = match &r.result {
            Some(ls_result::Result::Success(s)) | Some(ls_result::Result::Timeout(s)) => {
                let mut text = String::new();
                if let Some(root) = &s.directory_tree_root {
                    render_tree(root, 0, &mut text);
                }
                if matches!(r.result, Some(ls_result::Result::Timeout(_))) {
                    text.push_str("[the listing timed out; it is incomplete]\n");
                }
                ToolOutput::text(text)
            }
            Some(ls_result::Result::Error(e)) => {
                ToolOutput::error(format!("Listing {} failed: {}", args.path, e.error))
            }
            Some(ls_result::Result::Rejected(r)) => {
                ToolOutput::error(format!("Listing {} was rejected{}", args.path, reason_suffix(&r.reason)))
            }
            None => ToolOutput::error(format!("Listing {} failed: empty result", args.path)),
        };
        self.completed(c, card(Some(r)));
        out
    }

    async fn delete(&self, c: Call<'_>, a: PathIn) -> ToolOutput {
        let path = self.resolve(&a.path);
        let args = agent::DeleteArgs { path: path.clone(), tool_call_id: c.id.to_owned() };
        let card = |result| tool_call::Tool::DeleteToolCall(agent::DeleteToolCall { args: Some(args.clone()), result });
        self.started(c, card(None));
        let exec = self.exec.start(c.id, exec_server_message::Message::DeleteArgs(args.clone()));
        let error = |msg: String| agent::DeleteResult {
            result: Some(delete_result::Result::Error(agent::PathError { path: path.clone(), error: msg })),
        };
        let r = match exec.result().await {
            Ok(exec_client_message::Message::DeleteResult(r)) => r,
            Ok(_) => error("the editor answered with another kind of result".into()),
            Err(e) => error(e.to_string()),
        };
        let out = match &r.result {
            Some(delete_result::Result::Success(_)) => ToolOutput::text(format!("Deleted {path}.")),
            Some(delete_result::Result::FileNotFound(_)) => ToolOutput::error(format!("{path} does not exist.")),
            Some(delete_result::Result::NotFile(_)) => ToolOutput::error(format!("{path} is not a file.")),
            Some(delete_result::Result::PermissionDenied(_)) => {
                ToolOutput::error(format!("No permission to delete {path}."))
            }
            Some(delete_result::Result::FileBusy(_)) => ToolOutput::error(format!("{path} is busy.")),
            Some(delete_result::Result::Rejected(r)) => {
                ToolOutput::error(format!("The user rejected deleting {path}{}", reason_suffix(&r.reason)))
            }
            Some(delete_result::Result::Error(e)) => ToolOutput::error(format!("Deleting {path} failed: {}", e.error)),
            None => ToolOutput::error(format!("Deleting {path} failed: empty result")),
        };
        self.completed(c, card(Some(r)));
        out
    }

    async fn mcp(&self, c: Call<'_>, index: usize, call: &ToolCall) -> ToolOutput {
        let Some(def) = self.catalog.mcp(index) else {
            return ToolOutput::error(format!("There is no tool named `{}`.", call.name));
        };
        let fields = match &call.input {
            serde_json::Value::Object(o) => json::object_fields(o),
            _ => return ToolOutput::error(format!("Invalid arguments for {}: expected a JSON object", call.name)),
        };
        let args = agent::McpArgs {
            name: def.name.clone(),
            args: fields,
            tool_call_id: c.id.to_owned(),
            provider_identifier: def.provider_identifier.clone(),
            tool_name: if def.tool_name.is_empty() { def.name.clone() } else { def.tool_name.clone() },
        };
        let card = |result| tool_call::Tool::McpToolCall(agent::McpToolCall { args: Some(args.clone()), result });
        self.started(c, card(None));
        let exec = self.exec.start(c.id, exec_server_message::Message::McpArgs(args.clone()));
        let (card_result, out) = match exec.result().await {
            Ok(exec_client_message::Message::McpResult(r)) => mcp_outcome(&def.name, r),
            Ok(_) => mcp_error(&def.name, "the editor answered with another kind of result"),
            Err(e) => mcp_error(&def.name, &e.to_string()),
        };
        self.completed(c, card(Some(card_result)));
        out
    }
}

fn reason_suffix(reason: &str) -> String {
    if reason.trim().is_empty() { ".".to_owned() } else { format!(": {reason}.") }
}

fn read_error(msg: &str) -> agent::ReadToolResult {
    agent::ReadToolResult {
        result: Some(read_tool_result::Result::Error(agent::ReadToolError { error_message: msg.to_owned() })),
    }
}

fn read_failure(path: &str, r: Option<read_result::Result>) -> String {
    match r {
        Some(read_result::Result::FileNotFound(_)) => format!("{path} does not exist."),
        Some(read_result::Result::PermissionDenied(_)) => format!("No permission to read {path}."),
        Some(read_result::Result::Rejected(r)) => format!("Reading {path} was rejected{}", reason_suffix(&r.reason)),
        Some(read_result::Result::InvalidFile(r)) => format!("{path} cannot be read{}", reason_suffix(&r.reason)),
        Some(read_result::Result::Error(e)) => format!("Reading {path} failed: {}.", e.error),
        Some(read_result::Result::Success(_)) | None => format!("Reading {path} failed: empty result."),
    }
}

fn push_capped(buf: &mut String, data: &str) {
    if buf.len() < MAX_SHELL_CHARS {
        buf.push_str(data);
    }
}

/// What the model learns about a command the editor moved to the background.
/// What the model learns of a command the editor moved to the background: it still runs, in
/// which terminal, and where its later output can be read (the editor writes each terminal's
/// output to a file in its terminals folder).
fn background_text(
    stdout: &str,
    stderr: &str,
    b: &agent::ShellStreamBackgrounded,
    terminals_folder: Option<&str>,
) -> ToolOutput {
    let mut s = String::from(
        "The command is still running in the background (the editor moved it there); it has not failed.\n",
    );
    if b.shell_id != 0 || b.pid.is_some() {
        s.push_str(&format!("It runs in terminal {}", b.shell_id));
        if let Some(pid) = b.pid {
            s.push_str(&format!(" (process {pid})"));
        }
        s.push_str(".\n");
    }
    if let Some(folder) = terminals_folder {
        s.push_str(&format!(
            "Its later output goes to the terminal's file in {folder}: list that folder with list_dir and read the \
             file with read_file to see how it is doing.\n"
        ));
    }
    if !stdout.is_empty() {
        s.push_str(&format!("stdout so far:\n{stdout}\n"));
    }
    if !stderr.is_empty() {
        s.push_str(&format!("stderr so far:\n{stderr}\n"));
    }
    ToolOutput::text(s)
}

fn shell_text(result: &shell_result::Result, stdout: &str, stderr: &str) -> ToolOutput {
    let output = |code: i32| {
        let mut s = format!("Exit code: {code}\n");
        if !stdout.is_empty() {
            s.push_str(&format!("stdout:\n{stdout}\n"));
        }
        if !stderr.is_empty() {
            s.push_str(&format!("stderr:\n{stderr}\n"));
        }
        s
    };
    match result {
        shell_result::Result::Success(s) => ToolOutput::text(output(s.exit_code)),
        shell_result::Result::Failure(f) => {
            let mut text = output(f.exit_code);
            if f.aborted {
                text.push_str("The command was aborted.\n");
            }
            ToolOutput { content: vec![Part::text(text)], is_error: true }
        }
        shell_result::Result::Timeout(t) => {
            ToolOutput::error(format!("The command timed out after {} ms.\n{}", t.timeout_ms, output(-1)))
        }
        shell_result::Result::Rejected(r) => {
            ToolOutput::error(format!("The user rejected the command{}", reason_suffix(&r.reason)))
        }
        shell_result::Result::SpawnError(e) => ToolOutput::error(format!("The command could not run: {}.", e.error)),
        shell_result::Result::PermissionDenied(_) => ToolOutput::error("The command is not permitted.".to_owned()),
    }
}

/// Every file a grep success names, sorted, once.
fn grep_files(s: &agent::GrepSuccess) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for union in s.workspace_results.values() {
        match &union.result {
            Some(grep_union_result::Result::Files(f)) => files.extend(f.files.iter().cloned()),
            Some(grep_union_result::Result::Count(c)) => files.extend(c.counts.iter().map(|c| c.file.clone())),
            Some(grep_union_result::Result::Content(c)) => files.extend(c.matches.iter().map(|m| m.file.clone())),
            None => {}
        }
    }
    files.sort();
    files.dedup();
    files
}

fn render_grep(s: &agent::GrepSuccess) -> String {
    let mut keys: Vec<&String> = s.workspace_results.keys().collect();
    keys.sort();
    let mut out = String::new();
    for key in keys {
        match &s.workspace_results[key].result {
            Some(grep_union_result::Result::Content(c)) => {
                for file in &c.matches {
                    for m in &file.matches {
                        let sep = if m.is_context_line { '-' } else { ':' };
                        out.push_str(&format!("{}{sep}{}{sep}{}\n", file.file, m.line_number, m.content));
                    }
                }
            }
            Some(grep_union_result::Result::Files(f)) => {
                for file in &f.files {
                    out.push_str(file);
                    out.push('\n');
                }
            }
            Some(grep_union_result::Result::Count(c)) => {
                for n in &c.counts {
                    out.push_str(&format!("{}:{}\n", n.file, n.count));
                }
            }
            None => {}
        }
    }
    if out.is_empty() { "No matches.".to_owned() } else { out }
}

fn ls_error(path: &str, msg: &str) -> agent::LsResult {
    agent::LsResult {
        result: Some(ls_result::Result::Error(agent::PathError { path: path.to_owned(), error: msg.to_owned() })),
    }
}

fn render_tree(node: &agent::LsDirectoryTreeNode, depth: usize, out: &mut String) {
    let indent = "  ".repeat(depth);
    let name = if depth == 0 {
        node.abs_path.clone()
    } else {
        node.abs_path.rsplit(['/', '\\']).next().unwrap_or(&node.abs_path).to_owned()
    };
    out.push_str(&format!("{indent}- {}/\n", name.trim_end_matches(['/', '\\'])));
    for d in &node.children_dirs {
        render_tree(d, depth + 1, out);
    }
    for f in &node.children_files {
        out.push_str(&format!("{indent}  - {}\n", f.name));
    }
}

fn mcp_error(name: &str, msg: &str) -> (agent::McpToolResult, ToolOutput) {
    (
        agent::McpToolResult {
            result: Some(mcp_tool_result::Result::Error(agent::McpError { error: msg.to_owned() })),
        },
        ToolOutput::error(format!("The MCP tool {name} failed: {msg}")),
    )
}

fn mcp_outcome(name: &str, r: agent::McpResult) -> (agent::McpToolResult, ToolOutput) {
    match r.result {
        Some(mcp_result::Result::Success(s)) => {
            let content: Vec<Part> = s
                .content
                .iter()
                .filter_map(|c| match &c.content {
                    Some(mcp_content::Content::Text(t)) => Some(Part::text(t.text.clone())),
                    Some(mcp_content::Content::Image(i)) => Some(Part::Image {
                        source: ImageSource::Base64 {
                            media_type: i.mime_type.clone(),
                            data: base64::engine::general_purpose::STANDARD.encode(&i.data),
                        },
                        cache: None,
                    }),
                    None => None,
                })
                .collect();
            let content = if content.is_empty() { vec![Part::text("(no content)")] } else { content };
            let out = ToolOutput { content, is_error: s.is_error };
            (agent::McpToolResult { result: Some(mcp_tool_result::Result::Success(s)) }, out)
        }
        Some(mcp_result::Result::Error(e)) => mcp_error(name, &e.error),
        Some(mcp_result::Result::Rejected(r)) => (
            agent::McpToolResult { result: Some(mcp_tool_result::Result::Rejected(r.clone())) },
            ToolOutput::error(format!("The user rejected the MCP tool {name}{}", reason_suffix(&r.reason))),
        ),
        Some(mcp_result::Result::PermissionDenied(p)) => (
            agent::McpToolResult { result: Some(mcp_tool_result::Result::PermissionDenied(p)) },
            ToolOutput::error(format!("The MCP tool {name} is not permitted.")),
        ),
        Some(mcp_result::Result::ToolNotFound(t)) => {
            mcp_error(name, &format!("the editor does not know it (available: {})", t.available_tools.join(", ")))
        }
        // The card has no such case (docs/cursor-wire.md §4.7): an error card naming the servers.
        Some(mcp_result::Result::ServerNotFound(n)) => {
            let available =
                if n.available_servers.is_empty() { "none".to_owned() } else { n.available_servers.join(", ") };
            mcp_error(
                name,
                &format!("the MCP server {} is not connected in the editor (connected servers: {available})", n.name),
            )
        }
        // An approval-only answer: the user approved, the editor ran nothing.
        Some(mcp_result::Result::Approved(_)) => (
            agent::McpToolResult {
                result: Some(mcp_tool_result::Result::Success(agent::McpSuccess {
                    content: Vec::new(),
                    is_error: false,
                })),
            },
            ToolOutput::error(format!(
                "The user approved the MCP tool {name}, but the editor returned no result; call it again if the \
                 result is needed."
            )),
        ),
        None => mcp_error(name, "empty result"),
    }
}
