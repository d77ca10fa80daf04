//! The gateway's own copy of the reasoning that came before each tool call, for clients that
//! cannot carry it or drop it (issue 13 §2).
//!
//! A Chat Completions client has nowhere to keep a Responses item's `encrypted_content` or an
//! Anthropic signature, and Claude Code's context management clears thinking blocks from earlier
//! turns; the upstream then refuses the next tool turn (Anthropic with thinking on wants the
//! signed block back, a DeepSeek-style reasoner wants `reasoning_content`, Responses with
//! `store: false` wants the reasoning item before its `function_call`). So after every finished
//! answer that called tools, the reasoning parts that preceded the calls are remembered under each
//! tool-call id and the provider that produced them; when a later request replays an assistant
//! message with those tool calls but without any reasoning, the remembered parts are put back at
//! the start of that message, exactly as the upstream issued them (the encoders then restore each family's own
//! form from the envelope).
//!
//! Bounded ([`CAPACITY`] tool calls, oldest dropped first) and expiring ([`TTL`]). Each remembered
//! answer also goes to the call sink (`CallSink::reasoning`; `app` writes it to the store), and
//! the engine loads what is younger than [`TTL`] at start, so a restart does not forget it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use crate::model::{Message, Part, ReasoningRecord, Request, Role};

/// The most tool calls remembered.
pub const CAPACITY: usize = 4096;
/// How long a tool call's reasoning is kept.
pub const TTL: Duration = Duration::from_secs(6 * 3600);

#[derive(Debug)]
struct Entry {
    provider: String,
    parts: Vec<Part>,
    at_ms: i64,
}

#[derive(Debug, Default)]
pub struct ReasoningMemory {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_call: HashMap<String, Entry>,
    order: VecDeque<String>,
}

fn is_reasoning(p: &Part) -> bool {
    matches!(p, Part::Thinking { .. } | Part::RedactedThinking { .. })
}

impl ReasoningMemory {
    /// Remembers the reasoning of a finished answer of `provider` under each of its tool calls,
    /// and returns the record to persist. Only reasoning that can be replayed is kept (thinking
    /// with a signature or envelope, or redacted thinking).
    pub fn remember(&self, provider: &str, content: &[Part], now_ms: i64) -> Option<ReasoningRecord> {
        let reasoning: Vec<Part> = content
            .iter()
            .filter(|p| match p {
                Part::Thinking { signature, .. } => signature.as_deref().is_some_and(|s| !s.is_empty()),
                Part::RedactedThinking { .. } => true,
                _ => false,
            })
            .cloned()
            .collect();
        if reasoning.is_empty() {
            return None;
        }
        let ids: Vec<String> = content
            .iter()
            .filter_map(|p| match p {
                Part::ToolUse { id, .. } if !id.is_empty() => Some(id.clone()),
                _ => None,
            })
            .collect();
        if ids.is_empty() {
            return None;
        }
        let parts = serde_json::to_string(&reasoning).ok()?;
        self.insert(&ids, provider, &reasoning, now_ms);
        Some(ReasoningRecord { tool_call_ids: ids, provider: provider.to_owned(), parts, created_ms: now_ms })
    }

    /// Loads persisted records (oldest first), skipping what expired or does not parse.
    pub fn load(&self, records: &[ReasoningRecord], now_ms: i64) -> usize {
        let mut n = 0;
        for r in records.iter().filter(|r| now_ms - r.created_ms <= ttl_ms()) {
            if let Ok(parts) = serde_json::from_str::<Vec<Part>>(&r.parts) {
                self.insert(&r.tool_call_ids, &r.provider, &parts, r.created_ms);
                n += r.tool_call_ids.len();
            }
        }
        n
    }

    fn insert(&self, ids: &[String], provider: &str, parts: &[Part], at_ms: i64) {
        let Ok(mut inner) = self.inner.lock() else { return };
        for id in ids {
            let entry = Entry { provider: provider.to_owned(), parts: parts.to_vec(), at_ms };
            if inner.by_call.insert(id.clone(), entry).is_none() {
                inner.order.push_back(id.clone());
            }
        }
        while inner.order.len() > CAPACITY {
            if let Some(old) = inner.order.pop_front() {
                inner.by_call.remove(&old);
            }
        }
    }

    /// Puts remembered reasoning back in front of the tool calls of every assistant message of
    /// `req` that has tool calls but no reasoning, when it was remembered for `provider`. Returns
    /// how many messages were restored.
    pub fn restore(&self, provider: &str, req: &mut Request, now_ms: i64) -> usize {
        let Ok(mut inner) = self.inner.lock() else { return 0 };
        while let Some(front) = inner.order.front() {
            let expired = inner.by_call.get(front).is_none_or(|e| now_ms - e.at_ms > ttl_ms());
            if !expired {
                break;
            }
            if let Some(old) = inner.order.pop_front() {
                inner.by_call.remove(&old);
            }
        }
        let mut restored = 0;
        for msg in req.messages.iter_mut().filter(|m| m.role == Role::Assistant) {
            if msg.content.iter().any(is_reasoning) {
                continue;
            }
            let Some(parts) = tool_ids(msg)
                .find_map(|id| inner.by_call.get(id).filter(|e| e.provider == provider).map(|e| e.parts.clone()))
            else {
                continue;
            };
            // Reasoning opens the turn: Anthropic wants the thinking block first, Responses the
            // reasoning item before the message and the calls.
            msg.content.splice(0..0, parts);
            restored += 1;
        }
        restored
    }
}

#[cfg(test)]
impl ReasoningMemory {
    /// How many tool calls are remembered.
    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.by_call.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// [`TTL`] in milliseconds.
pub fn ttl_ms() -> i64 {
    i64::try_from(TTL.as_millis()).unwrap_or(i64::MAX)
}

fn tool_ids(msg: &Message) -> impl Iterator<Item = &str> {
    msg.content.iter().filter_map(|p| match p {
        Part::ToolUse { id, .. } => Some(id.as_str()),
        _ => None,
    })
}

#[cfg(test)]
mod tests;
