//! Finished Responses conversations kept for `previous_response_id`: a bounded, memory-only LRU.
//!
//! Each entry is the canonical conversation of one finished response: the messages sent for it
//! (with earlier turns already expanded, but without that request's `instructions`, which OpenAI
//! does not carry over either) plus the assistant's answer. A request naming it as
//! `previous_response_id` gets these messages in front of its own input.
//!
//! Memory only: a restart forgets every entry, and such ids then get
//! `previous_response_not_found`. Requests with `store: false` are kept too (in memory, only for
//! chaining; nothing here is written to disk). Bounded by entry count and by an estimate of the
//! bytes held; the least recently used entries go first, and a conversation larger than the
//! whole budget is not kept.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::model::{ImageSource, Message, Part};

/// Entries kept by default.
pub const DEFAULT_ENTRIES: usize = 256;
/// Estimated bytes kept by default.
pub const DEFAULT_BYTES: usize = 128 * 1024 * 1024;

#[derive(Debug)]
struct Entry {
    messages: Arc<[Message]>,
    bytes: usize,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, Entry>,
    /// Least recently used first.
    order: VecDeque<String>,
    bytes: usize,
}

impl Inner {
    fn touch(&mut self, id: &str) {
        if let Some(pos) = self.order.iter().position(|k| k == id)
            && let Some(key) = self.order.remove(pos)
        {
            self.order.push_back(key);
        }
    }

    fn remove(&mut self, id: &str) {
        if let Some(old) = self.map.remove(id) {
            self.bytes = self.bytes.saturating_sub(old.bytes);
            self.order.retain(|k| k != id);
        }
    }
}

#[derive(Debug)]
pub struct Conversations {
    inner: Mutex<Inner>,
    max_entries: usize,
    max_bytes: usize,
}

impl Default for Conversations {
    fn default() -> Conversations {
        Conversations::new(DEFAULT_ENTRIES, DEFAULT_BYTES)
    }
}

impl Conversations {
    pub fn new(max_entries: usize, max_bytes: usize) -> Conversations {
        Conversations { inner: Mutex::new(Inner::default()), max_entries: max_entries.max(1), max_bytes }
    }

    /// The conversation of response `id`, marking it recently used.
    pub fn get(&self, id: &str) -> Option<Arc<[Message]>> {
        let mut inner = self.inner.lock().ok()?;
        let found = inner.map.get(id).map(|e| e.messages.clone());
        if found.is_some() {
            inner.touch(id);
        }
        found
    }

    /// Keeps the conversation of response `id`, evicting the least recently used entries to stay
    /// within the bounds.
    pub fn put(&self, id: String, messages: Vec<Message>) {
        let bytes = estimate_bytes(&messages);
        let Ok(mut inner) = self.inner.lock() else { return };
        inner.remove(&id);
        if bytes > self.max_bytes {
            tracing::warn!(response = %id, bytes, "conversation too large to keep for previous_response_id");
            return;
        }
        while !inner.order.is_empty() && (inner.order.len() >= self.max_entries || inner.bytes + bytes > self.max_bytes)
        {
            if let Some(oldest) = inner.order.pop_front()
                && let Some(old) = inner.map.remove(&oldest)
            {
                inner.bytes = inner.bytes.saturating_sub(old.bytes);
            }
        }
        inner.bytes += bytes;
        inner.order.push_back(id.clone());
        inner.map.insert(id, Entry { messages: messages.into(), bytes });
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.map.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A cheap estimate of the memory a conversation holds.
fn estimate_bytes(messages: &[Message]) -> usize {
    fn part(p: &Part) -> usize {
        64 + match p {
            Part::Text { text, .. } => text.len(),
            Part::Thinking { text, signature } => text.len() + signature.as_ref().map_or(0, String::len),
            Part::RedactedThinking { data } => data.len(),
            Part::Image { source: ImageSource::Url { url }, .. } => url.len(),
            Part::Image { source: ImageSource::Base64 { media_type, data }, .. } => media_type.len() + data.len(),
            Part::ToolUse { id, name, input } => id.len() + name.len() + input.to_string().len(),
            Part::ToolResult { tool_use_id, content, .. } => {
                tool_use_id.len() + content.iter().map(part).sum::<usize>()
            }
        }
    }
    messages.iter().map(|m| 32 + m.content.iter().map(part).sum::<usize>()).sum()
}

#[cfg(test)]
mod tests;
