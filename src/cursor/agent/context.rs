//! The user's context (docs/cursor-wire.md §6.1–§6.2): what the user attached to a message
//! (`UserMessage.selected_context`) and the rules that apply to it become the content of the
//! turn's user message.
//!
//! - **Blocks.** Each attachment is one text part, a clearly delimited block:
//!   `<attached source="KIND" path="…" lines="A-B">` … `</attached>` (attribute values escaped,
//!   the body verbatim, at most [`MAX_BLOCK_CHARS`] characters). The user's own text is the last
//!   part. Kinds: `file`, `selection`, `terminal`, `terminal_selection`, `folder`, `link`, `rule`,
//!   `command`, `docs`, `console_log`, `context`, `commit`, `git_diff`, `past_chat`, `document`,
//!   `skill`, `subagent`, `image` (an image the model cannot see).
//! - **Files** sent with a path only are read through a `read_args` exec (like the agent's own
//!   reads; no card). A file that cannot be read becomes a block saying so.
//! - **Dedup.** A block whose exact text an earlier message of the transcript holds is replaced by
//!   a short block saying it is unchanged since it was attached earlier; the same block twice in
//!   one message is sent once.
//! - **Blobs.** `text_blob_id` / `rich_text_blob_id` (a long prompt moved out of band), images and
//!   documents named by blob id, and extra entries by blob id come from `pre_fetched_blobs` or
//!   the client's KV store before the prompt is built. These blobs are the client's own (ids not
//!   verified, unlike checkpoint blobs); one that cannot be read becomes a note, not a failure.
//! - **Images** reach a vision model as `Part::Image` (base64, the media type from `mime_type`
//!   or sniffed from the bytes); a model without vision gets a block saying an image was attached
//!   and could not be shown, and the user gets a notice.
//! - **Rules** (`CursorRule.type`): `global` (and rules without a type) and `non_file_rules` go
//!   into the system prompt ([`super::prompt`]); `agent_fetched` rules are listed there by
//!   description and path, for the model to read when one applies; `manually_attached` rules of
//!   the request context and rules attached by hand (`selected_context.cursor_rules`) are blocks
//!   of this message; `file_globbed` rules are blocks when a file matching one of their globs is
//!   in play (attached to this message, or a path the transcript's tool calls used).
//!
//! Everything is part of the transcript message, so it is counted against the context window
//! like any other message (the provider's usage drives compaction) and kept in checkpoints.

use std::collections::HashSet;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::Value;

use crate::cursor::checkpoint::recovery::Source;
use crate::cursor::protocol::agent::{
    self, cursor_rule_type, exec_client_message, exec_server_message, extra_context_entry, read_result, read_success,
    selected_document, selected_image,
};
use crate::cursor::tools::exec::ExecChannel;
use crate::model::{Entry, ImageSource, Part};
use crate::store::ContextBlock;

/// The longest block body (characters); longer ones are cut with a note.
pub const MAX_BLOCK_CHARS: usize = 100_000;

/// Where attachments are read from.
pub struct Io<'a> {
    pub blobs: &'a Source<'a>,
    pub exec: &'a Arc<ExecChannel>,
    /// Exec ids of context reads are `<run_id>:ctx<n>`.
    pub run_id: &'a str,
    /// The workspace root (relative paths are shown and matched against it).
    pub workspace: Option<&'a str>,
}

/// The user message's content and what the user should be told.
#[derive(Debug, Default)]
pub struct Attached {
    pub parts: Vec<Part>,
    /// Notices for the user (shown as server-notice text).
    pub notices: Vec<String>,
    /// What each block is, where it came from and its size, in prompt order (the Calls page).
    pub blocks: Vec<ContextBlock>,
}

fn unescape(v: &str) -> String {
    v.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

/// The kind and origin of a block from its header (`<attached source="KIND" path="…" …>`): the
/// origin is its `path`, else `url`, `name`, `title`, `sha`, `scope` or `producer`.
pub fn describe(block: &str) -> ContextBlock {
    let head = block.lines().next().unwrap_or_default();
    let attr = |k: &str| {
        let key = format!(" {k}=\"");
        head.find(&key).and_then(|i| head[i + key.len()..].split_once('"')).map(|(v, _)| unescape(v))
    };
    let source = ["path", "url", "name", "title", "sha", "scope", "producer"]
        .into_iter()
        .find_map(|k| attr(k).filter(|v| !v.is_empty()))
        .unwrap_or_default();
    ContextBlock {
        kind: attr("source").unwrap_or_default(),
        source,
        bytes: u64::try_from(block.len()).unwrap_or(u64::MAX),
    }
}

fn esc(v: &str) -> String {
    v.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;").replace('>', "&gt;")
}

fn cut(mut s: String) -> String {
    if let Some((i, _)) = s.char_indices().nth(MAX_BLOCK_CHARS) {
        s.truncate(i);
        s.push_str("\n[truncated by Keyhaven]");
    }
    s
}

/// One block: `<attached source="…" k="v"…>\nbody\n</attached>`.
pub fn block(source: &str, attrs: &[(&str, String)], body: &str) -> String {
    let mut s = format!("<attached source=\"{}\"", esc(source));
    for (k, v) in attrs.iter().filter(|(_, v)| !v.is_empty()) {
        s.push_str(&format!(" {k}=\"{}\"", esc(v)));
    }
    s.push_str(">\n");
    let body = cut(body.trim_end_matches('\n').to_owned());
    if !body.is_empty() {
        s.push_str(&body);
        s.push('\n');
    }
    s.push_str("</attached>");
    s
}

fn range_attr(r: Option<&agent::Range>) -> String {
    let Some(r) = r else { return String::new() };
    match (r.start.as_ref(), r.end.as_ref()) {
        (Some(a), Some(b)) if a.line == b.line => a.line.to_string(),
        (Some(a), Some(b)) => format!("{}-{}", a.line, b.line),
        (Some(a), None) => a.line.to_string(),
        _ => String::new(),
    }
}

/// A path as the model sees it: the relative path when the client sent one, else the path.
fn shown_path(path: &str, relative: Option<&str>) -> String {
    relative.filter(|r| !r.is_empty()).unwrap_or(path).to_owned()
}

fn rule_type(r: &agent::CursorRule) -> &'static str {
    match r.r#type.as_ref().and_then(|t| t.r#type.as_ref()) {
        None | Some(cursor_rule_type::Type::Global(_)) => "global",
        Some(cursor_rule_type::Type::FileGlobbed(_)) => "file_globbed",
        Some(cursor_rule_type::Type::AgentFetched(_)) => "agent_fetched",
        Some(cursor_rule_type::Type::ManuallyAttached(_)) => "manually_attached",
    }
}

fn rule_block(r: &agent::CursorRule) -> String {
    block("rule", &[("path", r.full_path.clone()), ("type", rule_type(r).to_owned())], r.content.trim())
}

/// The media type of an image: the client's, else sniffed from the first bytes.
fn image_type(mime: &str, data: &[u8]) -> String {
    if mime.starts_with("image/") {
        return mime.to_owned();
    }
    match data {
        [0x89, b'P', b'N', b'G', ..] => "image/png",
        [0xff, 0xd8, 0xff, ..] => "image/jpeg",
        [b'G', b'I', b'F', b'8', ..] => "image/gif",
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => "image/webp",
        _ => "image/png",
    }
    .to_owned()
}

/// Matches `path` against a rule glob (`*`, `**`, `?`, `{a,b}`). A glob without `/` also matches
/// the file name alone.
pub fn glob_matches(glob: &str, path: &str) -> bool {
    let glob = glob.trim().trim_start_matches("./");
    if glob.is_empty() {
        return false;
    }
    let path = path.trim_start_matches("./");
    let name = path.rsplit('/').next().unwrap_or(path);
    expand(glob).iter().any(|g| {
        let g = g.as_bytes();
        wild(g, path.as_bytes()) || (!g.contains(&b'/') && wild(g, name.as_bytes()))
    })
}

fn expand(glob: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (glob.find('{'), glob.find('}')) else { return vec![glob.to_owned()] };
    if close < open {
        return vec![glob.to_owned()];
    }
    glob[open + 1..close]
        .split(',')
        .flat_map(|alt| expand(&format!("{}{alt}{}", &glob[..open], &glob[close + 1..])))
        .collect()
}

fn wild(p: &[u8], s: &[u8]) -> bool {
    match p {
        [] => s.is_empty(),
        [b'*', b'*', b'/', rest @ ..] => {
            wild(rest, s) || s.iter().enumerate().any(|(i, c)| *c == b'/' && wild(rest, &s[i + 1..]))
        }
        [b'*', b'*', rest @ ..] => (0..=s.len()).any(|i| wild(rest, &s[i..])),
        [b'*', rest @ ..] => (0..=s.len()).take_while(|i| *i == 0 || s[i - 1] != b'/').any(|i| wild(rest, &s[i..])),
        [b'?', rest @ ..] => matches!(s, [c, tail @ ..] if *c != b'/' && wild(rest, tail)),
        [c, rest @ ..] => matches!(s, [d, tail @ ..] if d == c && wild(rest, tail)),
    }
}

/// A path relative to the workspace root (unchanged when outside it).
fn relative<'p>(path: &'p str, workspace: Option<&str>) -> &'p str {
    let path = path.strip_prefix("file://").unwrap_or(path);
    match workspace {
        Some(w) => path.strip_prefix(w.trim_end_matches('/')).map_or(path, |r| r.trim_start_matches('/')),
        None => path,
    }
}

/// The paths the transcript's tool calls used (`path` arguments).
fn transcript_paths(earlier: &[Entry]) -> Vec<String> {
    earlier
        .iter()
        .flat_map(|e| &e.message.content)
        .filter_map(|p| match p {
            Part::ToolUse { input, .. } => input.get("path").and_then(Value::as_str).map(str::to_owned),
            _ => None,
        })
        .collect()
}

impl Io<'_> {
    async fn read_file(&self, n: usize, path: &str) -> Result<String, String> {
        let exec = self.exec.start(
            &format!("{}:ctx{n}", self.run_id),
            exec_server_message::Message::ReadArgs(agent::ReadArgs {
                path: path.to_owned(),
                tool_call_id: format!("{}:ctx{n}", self.run_id),
                offset: None,
                limit: None,
            }),
        );
        match exec.result().await {
            Ok(exec_client_message::Message::ReadResult(r)) => match r.result {
                Some(read_result::Result::Success(s)) => {
                    if let Some(id) = s.output_blob_id.as_deref().filter(|id| !id.is_empty()) {
                        return self
                            .blobs
                            .content(id)
                            .await
                            .map(|b| String::from_utf8_lossy(&b).into_owned())
                            .map_err(|e| e.to_string());
                    }
                    Ok(match s.output {
                        Some(read_success::Output::Content(t)) => t,
                        Some(read_success::Output::Data(b)) => String::from_utf8_lossy(&b).into_owned(),
                        None => String::new(),
                    })
                }
                Some(read_result::Result::FileNotFound(_)) => Err("the file does not exist".to_owned()),
                Some(read_result::Result::PermissionDenied(_)) => Err("no permission to read it".to_owned()),
                Some(read_result::Result::Rejected(r)) => Err(format!("the editor refused: {}", r.reason)),
                Some(read_result::Result::InvalidFile(r)) => Err(format!("not a readable file: {}", r.reason)),
                Some(read_result::Result::Error(e)) => Err(e.error),
                None => Err("the editor sent an empty result".to_owned()),
            },
            Ok(_) => Err("the editor answered with another kind of result".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn blob_text(&self, id: &[u8]) -> Result<String, String> {
        self.blobs.content(id).await.map(|b| String::from_utf8_lossy(&b).into_owned()).map_err(|e| e.to_string())
    }
}

/// The user's text: `text`, else the blob `text_blob_id` names, else `rich_text` (or its blob).
pub async fn user_text(user: &agent::UserMessage, io: &Io<'_>, notices: &mut Vec<String>) -> String {
    if !user.text.is_empty() {
        return user.text.clone();
    }
    for id in [&user.text_blob_id, &user.rich_text_blob_id].into_iter().flatten().filter(|id| !id.is_empty()) {
        match io.blob_text(id).await {
            Ok(t) if !t.is_empty() => return t,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the message text blob could not be read");
                notices.push(format!("Keyhaven could not read the text of your message from the editor ({e})."));
            }
        }
    }
    user.rich_text.clone().unwrap_or_default()
}

/// Builds the user message's content: context blocks, images, then the user's text.
pub async fn user_content(
    user: &agent::UserMessage,
    ctx: &agent::RequestContext,
    io: &Io<'_>,
    earlier: &[Entry],
    vision: bool,
) -> Attached {
    let mut out = Attached::default();
    let text = user_text(user, io, &mut out.notices).await;
    let sel = user.selected_context.clone().unwrap_or_default();
    let mut blocks: Vec<String> = Vec::new();
    let mut images: Vec<Part> = Vec::new();
    let mut image_blocks: Vec<ContextBlock> = Vec::new();
    let mut in_play: Vec<String> = transcript_paths(earlier);
    let mut reads = 0usize;

    for f in &sel.files {
        let path = shown_path(&f.path, f.relative_path.as_deref());
        in_play.push(f.path.clone());
        let body = if !f.content.is_empty() || f.path.is_empty() {
            f.content.clone()
        } else {
            reads += 1;
            match io.read_file(reads, &f.path).await {
                Ok(t) => t,
                Err(e) => format!("(Keyhaven could not read this file: {e})"),
            }
        };
        blocks.push(block("file", &[("path", path)], &body));
    }
    for c in &sel.code_selections {
        in_play.push(c.path.clone());
        let path = shown_path(&c.path, c.relative_path.as_deref());
        blocks.push(block("selection", &[("path", path), ("lines", range_attr(c.range.as_ref()))], &c.content));
    }
    for t in &sel.terminals {
        let attrs = [("title", t.title.clone().unwrap_or_default()), ("path", t.path.clone().unwrap_or_default())];
        blocks.push(block("terminal", &attrs, &t.content));
    }
    for t in &sel.terminal_selections {
        let attrs = [
            ("title", t.title.clone().unwrap_or_default()),
            ("path", t.path.clone().unwrap_or_default()),
            ("lines", range_attr(t.range.as_ref())),
        ];
        blocks.push(block("terminal_selection", &attrs, &t.content));
    }
    for f in &sel.folders {
        let path = shown_path(&f.path, f.relative_path.as_deref());
        blocks.push(block("folder", &[("path", path)], "(a folder the user pointed at; list it with list_dir)"));
    }
    for l in &sel.external_links {
        let body = match l.pdf_content.as_deref().filter(|c| !c.is_empty()) {
            Some(pdf) => pdf.to_owned(),
            None => "(a link the user pasted; fetch it with fetch_url if its content is needed)".to_owned(),
        };
        blocks.push(block(
            "link",
            &[("url", l.url.clone()), ("filename", l.filename.clone().unwrap_or_default())],
            &body,
        ));
    }
    for r in sel.cursor_rules.iter().filter_map(|r| r.rule.as_ref()) {
        blocks.push(rule_block(r));
    }
    for c in &sel.cursor_commands {
        let name = c.display_name.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| c.name.clone());
        blocks.push(block("command", &[("name", name), ("path", c.full_path.clone().unwrap_or_default())], &c.content));
    }
    for d in &sel.documentations {
        blocks.push(block(
            "docs",
            &[("name", d.name.clone()), ("id", d.doc_id.clone())],
            "(documentation the user referred to; Keyhaven has no index of it)",
        ));
    }
    for l in &sel.console_logs {
        blocks.push(block("console_log", &[("level", l.level.clone()), ("client", l.client_name.clone())], &l.message));
    }
    let extra = sel.extra_context.iter().cloned().map(Ok::<_, String>);
    let mut entries = Vec::new();
    for e in &sel.extra_context_entries {
        entries.push(match &e.data_or_blob_id {
            Some(extra_context_entry::DataOrBlobId::Data(d)) => Ok(d.clone()),
            Some(extra_context_entry::DataOrBlobId::BlobId(id)) => io.blob_text(id).await,
            None => Ok(String::new()),
        });
    }
    for e in extra.chain(entries) {
        match e {
            Ok(t) if !t.trim().is_empty() => blocks.push(block("context", &[], &t)),
            Ok(_) => {}
            Err(e) => blocks.push(block("context", &[], &format!("(Keyhaven could not read this entry: {e})"))),
        }
    }
    for c in &sel.git_commits {
        let mut body = c.message.clone();
        if let Some(d) = c.description.as_deref().filter(|d| !d.is_empty()) {
            body.push_str(&format!("\n\n{d}"));
        }
        if !c.diff.is_empty() {
            body.push_str(&format!("\n\n{}", c.diff));
        }
        blocks.push(block("commit", &[("sha", c.sha.clone())], &body));
    }
    if let Some(d) = &sel.git_diff {
        blocks.push(block("git_diff", &[("scope", "working tree".to_owned())], &d.content));
    }
    if let Some(d) = &sel.git_diff_from_branch_to_main {
        blocks.push(block("git_diff", &[("scope", "branch to main".to_owned())], &d.content));
    }
    for p in &sel.past_chats {
        blocks.push(block(
            "past_chat",
            &[("name", p.name.clone()), ("id", p.agent_id.clone())],
            "(an earlier chat the user referred to; its transcript is not available here)",
        ));
    }
    for d in &sel.selected_documents {
        let data = match &d.data_or_blob_id {
            Some(selected_document::DataOrBlobId::Data(b)) => Ok(b.clone()),
            Some(selected_document::DataOrBlobId::BlobIdWithData(b)) => Ok(b.data.clone()),
            Some(selected_document::DataOrBlobId::BlobId(id)) => io.blobs.content(id).await.map_err(|e| e.to_string()),
            None => Ok(Vec::new()),
        };
        let body = match data {
            Ok(b) => match String::from_utf8(b) {
                Ok(t) => t,
                Err(_) => format!("(a {} document Keyhaven cannot show as text)", d.mime_type),
            },
            Err(e) => format!("(Keyhaven could not read this document: {e})"),
        };
        blocks.push(block("document", &[("name", d.filename.clone()), ("path", d.path.clone())], &body));
    }
    for s in &sel.selected_skills {
        blocks.push(block(
            "skill",
            &[("path", s.full_path.clone()), ("description", s.description.clone())],
            &s.content,
        ));
    }
    for s in &sel.selected_subagents {
        blocks.push(block("subagent", &[("name", s.name.clone())], "(Keyhaven runs no subagents)"));
    }

    // Rules of the request context that belong to this message.
    let rel_in_play: Vec<String> = in_play.iter().map(|p| relative(p, io.workspace).to_owned()).collect();
    for r in ctx.rules.iter().filter(|r| !r.content.trim().is_empty()) {
        match r.r#type.as_ref().and_then(|t| t.r#type.as_ref()) {
            Some(cursor_rule_type::Type::ManuallyAttached(_)) => blocks.push(rule_block(r)),
            Some(cursor_rule_type::Type::FileGlobbed(g))
                if g.globs.iter().any(|glob| rel_in_play.iter().any(|p| glob_matches(glob, p))) =>
            {
                blocks.push(rule_block(r));
            }
            _ => {}
        }
    }

    for (i, img) in sel.selected_images.iter().enumerate() {
        let data = match &img.data_or_blob_id {
            Some(selected_image::DataOrBlobId::Data(b)) => Ok(b.clone()),
            Some(selected_image::DataOrBlobId::BlobIdWithData(b)) if !b.data.is_empty() => Ok(b.data.clone()),
            Some(selected_image::DataOrBlobId::BlobIdWithData(b)) => {
                io.blobs.content(&b.blob_id).await.map_err(|e| e.to_string())
            }
            Some(selected_image::DataOrBlobId::BlobId(id)) => io.blobs.content(id).await.map_err(|e| e.to_string()),
            None => Err("no image data".to_owned()),
        };
        let name = if img.path.is_empty() { format!("image {}", i + 1) } else { img.path.clone() };
        match &data {
            Ok(d) if vision && !d.is_empty() => {
                image_blocks.push(ContextBlock {
                    kind: "image".to_owned(),
                    source: img.path.clone(),
                    bytes: u64::try_from(d.len()).unwrap_or(u64::MAX),
                });
                images.push(Part::Image {
                    source: ImageSource::Base64 {
                        media_type: image_type(&img.mime_type, d),
                        data: base64::engine::general_purpose::STANDARD.encode(d),
                    },
                    cache: None,
                });
            }
            Ok(_) if !vision => {
                blocks.push(block(
                    "image",
                    &[("path", img.path.clone())],
                    "(the user attached an image here; the selected model cannot see images, so it was not shown)",
                ));
                out.notices.push(format!(
                    "The selected model cannot see images: {name} was not sent to it. Pick a model with vision \
                     to include images."
                ));
            }
            _ => {
                let why = match &data {
                    Err(e) => e.clone(),
                    Ok(_) => "it was empty".to_owned(),
                };
                blocks.push(block(
                    "image",
                    &[("path", img.path.clone())],
                    &format!("(the user attached an image here; Keyhaven could not read it: {why})"),
                ));
                out.notices.push(format!("Keyhaven could not read the attached {name} ({why}); it was not sent."));
            }
        }
    }

    // Dedup: against the transcript, then within this message.
    let earlier_texts: HashSet<&str> = earlier
        .iter()
        .flat_map(|e| &e.message.content)
        .filter_map(|p| match p {
            Part::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let mut seen = HashSet::new();
    for b in blocks {
        if !seen.insert(b.clone()) {
            continue;
        }
        if earlier_texts.contains(b.as_str()) {
            let head = b.lines().next().unwrap_or_default().trim_end_matches('>').to_owned();
            let stub = format!(
                "{head} unchanged=\"true\">\n(unchanged since it was attached earlier in this conversation)\n</attached>"
            );
            out.blocks.push(describe(&stub));
            out.parts.push(Part::text(stub));
        } else {
            out.blocks.push(describe(&b));
            out.parts.push(Part::text(b));
        }
    }
    out.parts.extend(images);
    out.blocks.extend(image_blocks);
    out.parts.push(Part::text(text));
    out
}
