//! The transcript a run works on: entries (messages with stable ids) in order. Appending an id the
//! transcript already holds is a no-op, which makes delivery of the same message twice (a client
//! retry, a replayed append) harmless.

use std::collections::HashSet;

use crate::model::{Entry, Message};

#[derive(Debug, Clone, Default)]
pub struct Transcript {
    entries: Vec<Entry>,
    ids: HashSet<String>,
}

impl Transcript {
    pub fn new() -> Transcript {
        Transcript::default()
    }

    /// A transcript from stored entries (later duplicates of an id are dropped).
    pub fn from_entries(entries: impl IntoIterator<Item = Entry>) -> Transcript {
        let mut t = Transcript::new();
        for e in entries {
            t.append(e);
        }
        t
    }

    /// Appends `entry` unless its id is already present. Returns its position when applied.
    pub fn append(&mut self, entry: Entry) -> Option<u64> {
        if !self.ids.insert(entry.id.clone()) {
            return None;
        }
        self.entries.push(entry);
        Some(u64::try_from(self.entries.len() - 1).unwrap_or(u64::MAX))
    }

    pub fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The messages, in order, as a provider request carries them.
    pub fn messages(&self) -> Vec<Message> {
        self.entries.iter().map(|e| e.message.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Replaces everything (compaction only).
    pub fn replace(&mut self, entries: Vec<Entry>) {
        *self = Transcript::from_entries(entries);
    }
}
