//! Cursor's checkpoint (docs/cursor-backend.md §7 "Checkpoints", docs/cursor-wire.md §4.11, §5.6):
//! the conversation as a `ConversationStateStructure` whose contents live in content-addressed
//! blobs on the client.
//!
//! - [`encode`] builds the state and its blobs from the engine's transcript (the source of truth):
//!   `root_prompt_messages_json` holds one blob id per transcript message (the blob is the
//!   message as versioned JSON, [`RootBlob`], lossless so a restore gives the provider the same
//!   bytes); `turns` holds one `ConversationTurnStructure` blob per user turn, whose user message
//!   and steps (assistant text, thinking, tool-call card) are blobs too; `pending_tool_calls`
//!   names the tool calls of the newest assistant message that have no results yet;
//!   `token_details` the context use of the latest model call; plus mode, workspace URIs,
//!   `agent_type = "ide"`, read paths and todos ([`Meta::todos`]: the conversation's server-side
//!   list as it was when the checkpoint's snapshot was taken).
//! - [`trim`] keeps the state under [`MAX_WIRE_BYTES`]. First (a Keyhaven addition that loses
//!   nothing) long strings inside `pending_tool_calls` are abbreviated: the full arguments are in
//!   the root blobs, and a 600 KB `write_file` would otherwise cost the whole history. Then, in
//!   the documented order (docs/cursor-wire.md §5.6): file states, read paths and turn timings;
//!   the oldest root messages (the first root, the system prompt, is kept); the oldest turns
//!   (the newest is kept); summary, plan and todos.
//! - [`recovery`] turns an incoming state back into transcript entries (blobs from
//!   `pre_fetched_blobs` or `get_blob_args`, each verified against its SHA-256 id).
//! - [`worker`] publishes checkpoints during a run: blobs first (`set_blob_args`), the
//!   `conversation_checkpoint_update` only once every new blob is acknowledged.
//!
//! Invariant: the state is derived from the transcript; nothing here edits the transcript.
//! Root blobs carry a version (`v`) and must stay readable by later builds.

pub mod recovery;
pub mod worker;

use std::collections::HashMap;

use prost::Message as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::cursor::blobs::{BlobId, blob_id};
use crate::cursor::protocol::agent::{self, AgentMode, conversation_step, conversation_turn_structure};
use crate::cursor::tools::catalog::Catalog;
use crate::model::{Entry, Message, Part, Role};

/// The most bytes a checkpoint may take on the wire (SAK `trimCheckpointForWire`: the renderer
/// JSON-stringifies it).
pub const MAX_WIRE_BYTES: usize = 512 * 1024;
/// The version of [`RootBlob`] this build writes.
pub const ROOT_VERSION: u32 = 1;
/// Strings in `pending_tool_calls` longer than this (in chars) are cut when the state is too large.
const PENDING_STRING_CHARS: usize = 1024;
/// The context window reported when the catalog does not know the model's.
const DEFAULT_MAX_TOKENS: u32 = 200_000;

/// One transcript message as a root blob: versioned, lossless JSON (`{v, id, role, content}`
/// with Keyhaven's canonical parts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RootBlob {
    pub v: u32,
    pub id: String,
    pub role: Role,
    pub content: Vec<Part>,
}

impl RootBlob {
    pub fn bytes(entry: &Entry) -> Vec<u8> {
        let blob = RootBlob {
            v: ROOT_VERSION,
            id: entry.id.clone(),
            role: entry.message.role,
            content: entry.message.content.clone(),
        };
        serde_json::to_vec(&blob).unwrap_or_default()
    }

    pub fn entry(self) -> Entry {
        Entry::new(self.id, Message { role: self.role, content: self.content })
    }
}

/// What the checkpoint says besides the transcript.
#[derive(Debug, Clone, Default)]
pub struct Meta {
    pub mode: AgentMode,
    pub workspace_paths: Vec<String>,
    /// Prompt plus output tokens of the latest model call.
    pub used_tokens: u64,
    pub context_window: Option<u64>,
    /// Serialized `TodoItem`s (the conversation's server-side list, `Conversation::todos`, as
    /// the checkpoint's snapshot found it).
    pub todos: Vec<Vec<u8>>,
}

/// A state and the blobs it references (children before parents).
#[derive(Debug, Clone, Default)]
pub struct Encoded {
    pub state: agent::ConversationStateStructure,
    pub blobs: Vec<(BlobId, Vec<u8>)>,
    /// Blobs a turn blob references (user message, steps).
    pub children: HashMap<BlobId, Vec<BlobId>>,
}

impl Encoded {
    fn blob(&mut self, data: Vec<u8>) -> BlobId {
        let id = blob_id(&data);
        if !self.blobs.iter().any(|(b, _)| *b == id) {
            self.blobs.push((id, data));
        }
        id
    }

    /// The blobs the (possibly trimmed) state still references, children first.
    pub fn referenced(&self) -> Vec<(BlobId, &[u8])> {
        let mut wanted: std::collections::HashSet<BlobId> = std::collections::HashSet::new();
        let ids = self.state.root_prompt_messages_json.iter().chain(&self.state.turns);
        for id in ids {
            let Ok(id) = BlobId::try_from(id.as_slice()) else { continue };
            wanted.insert(id);
            wanted.extend(self.children.get(&id).into_iter().flatten().copied());
        }
        self.blobs.iter().filter(|(id, _)| wanted.contains(id)).map(|(id, d)| (*id, d.as_slice())).collect()
    }
}

/// The root blob ids of `entries` (what `root_prompt_messages_json` holds for them).
pub fn root_ids(entries: &[Entry]) -> Vec<BlobId> {
    entries.iter().map(|e| blob_id(&RootBlob::bytes(e))).collect()
}

/// The blob ids a run request shows the client holds: the roots and turns of the state it sent
/// back (the IDE keeps its latest checkpoint together with its blobs, docs/cursor-wire.md §5.6)
/// and the `pre_fetched_blobs` whose content matches their id.
pub fn held_by_client(
    state: Option<&agent::ConversationStateStructure>,
    pre_fetched: &[agent::PreFetchedBlob],
) -> std::collections::HashSet<BlobId> {
    let named = state.into_iter().flat_map(|s| s.root_prompt_messages_json.iter().chain(&s.turns));
    let fetched = pre_fetched.iter().filter(|b| blob_id(&b.value).as_slice() == b.id.as_slice()).map(|b| &b.id);
    named.chain(fetched).filter_map(|id| BlobId::try_from(id.as_slice()).ok()).collect()
}

/// The tool calls of the newest assistant message that have no results yet.
pub fn pending_calls(entries: &[Entry]) -> Option<&Entry> {
    let last = entries.last()?;
    let has_calls = last.message.content.iter().any(|p| matches!(p, Part::ToolUse { .. }));
    (last.message.role == Role::Assistant && has_calls).then_some(last)
}

fn pending_json(entry: &Entry) -> String {
    let content: Vec<Value> = entry
        .message
        .content
        .iter()
        .filter_map(|p| match p {
            Part::ToolUse { id, name, input } => {
                Some(json!({"type": "tool-call", "toolCallId": id, "toolName": name, "args": input}))
            }
            Part::Thinking { text, .. } => Some(json!({"type": "reasoning", "text": text})),
            Part::Text { text, .. } => Some(json!({"type": "text", "text": text})),
            _ => None,
        })
        .collect();
    json!({"id": entry.id, "role": "assistant", "content": content}).to_string()
}

/// The run a message id belongs to (`<run>:a1` → `<run>`).
fn run_of(id: &str) -> Option<&str> {
    id.rsplit_once(':').map(|(run, _)| run).filter(|r| !r.is_empty())
}

/// Builds the state and its blobs from the transcript.
pub fn encode(entries: &[Entry], meta: &Meta, catalog: Option<&Catalog>) -> Encoded {
    let mut enc = Encoded::default();
    let mut roots = Vec::with_capacity(entries.len());
    for e in entries {
        roots.push(enc.blob(RootBlob::bytes(e)).to_vec());
    }
    let mut read_paths = Vec::new();
    let mut turns = Vec::new();
    // (user blob, steps, request id) of the turn being built.
    let mut turn: Option<(BlobId, Vec<BlobId>, Option<String>)> = None;
    let finish = |enc: &mut Encoded, turns: &mut Vec<Vec<u8>>, t: (BlobId, Vec<BlobId>, Option<String>)| {
        let (user, steps, request_id) = t;
        let structure = agent::ConversationTurnStructure {
            turn: Some(conversation_turn_structure::Turn::AgentConversationTurn(
                agent::AgentConversationTurnStructure {
                    user_message: user.to_vec(),
                    steps: steps.iter().map(|s| s.to_vec()).collect(),
                    request_id,
                },
            )),
        };
        let id = enc.blob(structure.encode_to_vec());
        let mut kids = vec![user];
        kids.extend(steps);
        enc.children.insert(id, kids);
        turns.push(id.to_vec());
    };
    for e in entries {
        match e.message.role {
            Role::System => {}
            Role::User => {
                if let Some(t) = turn.take() {
                    finish(&mut enc, &mut turns, t);
                }
                let text = e.message.joined_text("");
                let user = agent::UserMessage {
                    text,
                    message_id: e.id.strip_prefix("user:").unwrap_or(&e.id).to_owned(),
                    mode: meta.mode as i32,
                    ..Default::default()
                };
                turn = Some((enc.blob(user.encode_to_vec()), Vec::new(), None));
            }
            Role::Assistant | Role::Tool => {
                let Some(t) = turn.as_mut() else { continue };
                if t.2.is_none() {
                    t.2 = run_of(&e.id).map(str::to_owned);
                }
                for p in &e.message.content {
                    let step = match p {
                        Part::Text { text, .. } if e.message.role == Role::Assistant => {
                            conversation_step::Message::AssistantMessage(agent::AssistantMessage { text: text.clone() })
                        }
                        Part::Thinking { text, .. } => {
                            conversation_step::Message::ThinkingMessage(agent::ThinkingMessage {
                                text: text.clone(),
                                duration_ms: 0,
                            })
                        }
                        Part::ToolUse { id, name, input } => {
                            if name == "read_file"
                                && let Some(path) = input.get("path").and_then(Value::as_str)
                                && !read_paths.iter().any(|p| p == path)
                            {
                                read_paths.push(path.to_owned());
                            }
                            let mut card = catalog.and_then(|c| c.skeleton(name)).unwrap_or_default();
                            card.tool_call_id = Some(id.clone());
                            conversation_step::Message::ToolCall(card)
                        }
                        _ => continue,
                    };
                    let step = agent::ConversationStep { message: Some(step) };
                    let id = enc.blob(step.encode_to_vec());
                    t.1.push(id);
                }
            }
        }
    }
    if let Some(t) = turn.take() {
        finish(&mut enc, &mut turns, t);
    }
    let max_tokens = meta.context_window.map_or(DEFAULT_MAX_TOKENS, |w| u32::try_from(w).unwrap_or(u32::MAX));
    enc.state = agent::ConversationStateStructure {
        root_prompt_messages_json: roots,
        todos: meta.todos.clone(),
        pending_tool_calls: pending_calls(entries).map(pending_json).into_iter().collect(),
        token_details: Some(agent::ConversationTokenDetails {
            used_tokens: u32::try_from(meta.used_tokens).unwrap_or(u32::MAX),
            max_tokens,
        }),
        turns,
        previous_workspace_uris: meta.workspace_paths.iter().map(|p| format!("file://{p}")).collect(),
        mode: Some(meta.mode as i32),
        read_paths,
        agent_type: Some("ide".to_owned()),
        ..Default::default()
    };
    enc
}

/// Bytes one `repeated bytes`/`string` element takes on the wire.
fn elem_len(len: usize) -> usize {
    1 + prost::encoding::encoded_len_varint(len as u64) + len
}

/// How many leading elements (from `start`) must go to free `over` bytes.
fn drop_count<T: AsRef<[u8]>>(items: &[T], start: usize, keep_last: usize, over: usize) -> usize {
    let mut freed = 0;
    let mut n = 0;
    for item in items.iter().skip(start).take(items.len().saturating_sub(start + keep_last)) {
        if freed >= over {
            break;
        }
        freed += elem_len(item.as_ref().len());
        n += 1;
    }
    n
}

/// Cuts long strings in a JSON value.
fn abbreviate(v: &mut Value) {
    match v {
        Value::String(s) if s.chars().count() > PENDING_STRING_CHARS => {
            let cut: String = s.chars().take(PENDING_STRING_CHARS).collect();
            *s = format!("{cut}… [abbreviated]");
        }
        Value::Array(a) => a.iter_mut().for_each(abbreviate),
        Value::Object(o) => o.values_mut().for_each(abbreviate),
        _ => {}
    }
}

/// What [`trim`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trimmed {
    pub extras: bool,
    pub roots: usize,
    pub turns: usize,
    pub summary_plan_todos: bool,
    pub pending_abbreviated: bool,
}

impl Trimmed {
    pub fn any(&self) -> bool {
        *self != Trimmed::default()
    }
}

/// Keeps `state` at most `max` bytes (encoded), in the documented order (module docs).
pub fn trim(state: &mut agent::ConversationStateStructure, max: usize) -> Trimmed {
    let mut t = Trimmed::default();
    let over = |s: &agent::ConversationStateStructure| s.encoded_len().saturating_sub(max);
    if over(state) == 0 {
        return t;
    }
    for p in &mut state.pending_tool_calls {
        if let Ok(mut v) = serde_json::from_str::<Value>(p) {
            abbreviate(&mut v);
            let short = v.to_string();
            t.pending_abbreviated |= short.len() < p.len();
            *p = short;
        }
    }
    if over(state) == 0 {
        return t;
    }
    t.extras = !(state.file_states.is_empty() && state.read_paths.is_empty() && state.turn_timings.is_empty());
    state.file_states.clear();
    state.read_paths.clear();
    state.turn_timings.clear();
    let o = over(state);
    if o > 0 {
        // A leading system message (the stable root of the prompt) is kept. Its blob is JSON
        // with `"role":"system"`; ids alone cannot tell, so the first root is always kept.
        let start = usize::from(!state.root_prompt_messages_json.is_empty());
        let n = drop_count(&state.root_prompt_messages_json, start, 0, o);
        state.root_prompt_messages_json.drain(start..start + n);
        t.roots = n;
    }
    let o = over(state);
    if o > 0 {
        let n = drop_count(&state.turns, 0, 1, o);
        state.turns.drain(..n);
        t.turns = n;
    }
    if over(state) > 0 {
        t.summary_plan_todos = state.summary.is_some() || state.plan.is_some() || !state.todos.is_empty();
        state.summary = None;
        state.plan = None;
        state.todos.clear();
    }
    t
}

#[cfg(test)]
mod tests;
