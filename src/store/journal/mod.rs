//! The call journal: each call record's durable copy, written on the request path, so a call's
//! head never waits for SQLite and a finished call's usage never waits for the writer.
//!
//! A call's start is appended here with one write(2) before its head is sent, and its finish
//! when the call ends; the writer then commits both to SQLite in its own time. Like a
//! `synchronous = NORMAL` commit, an append survives the process being killed (the page cache
//! outlives it), not a power loss. When the store opens, what is still in the journal is put into
//! `calls`: every start first (`INSERT … ON CONFLICT DO NOTHING`, with the epoch of the process
//! that wrote it, so `interrupt_stale` then closes a call that never finished), then every finish
//! in the order written (a finish for a row no longer in flight changes nothing), and the journal
//! is emptied.
//!
//! Two segment files take turns. Appends go to the active one; once it passes [`ROTATE_BYTES`] and
//! the other is empty, appends move to the other, and the retired segment is truncated as soon
//! as every record appended to it has been committed by the writer (or has failed or been
//! dropped: it could not be committed anyway). Truncation happens outside the append lock, so an
//! append waits for at most another append.
//!
//! A record is `len: u32 LE`, `crc32: u32 LE` (of the payload), then the payload: the JSON of an
//! [`Entry`] without the request and response bodies, which are left to the SQLite row (a call
//! replayed from the journal has none). Reading stops at the first record that is short or fails
//! its checksum: a torn last append is one that never returned.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

use crate::model::{CallFinish, CallStart};

/// A segment past this size hands appends to the other one (when that one is empty).
pub(crate) const ROTATE_BYTES: u64 = 1024 * 1024;

/// A record longer than this is not a record (a corrupt length).
const MAX_RECORD: usize = 1024 * 1024;

/// The two segment files of the journal next to the database at `db`.
pub(crate) fn segment_paths(db: &Path) -> [PathBuf; 2] {
    ["-calls-a", "-calls-b"].map(|suffix| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    })
}

/// A call record as read back from the journal.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Entry {
    /// A call's start, with the epoch of the process that wrote it.
    Start {
        epoch: i64,
        start: CallStart,
    },
    Finish {
        finish: CallFinish,
    },
}

/// A call record as written: [`Entry`]'s shape over borrowed records, so nothing is copied on
/// the request path but the JSON itself.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Record<'a> {
    Start { epoch: i64, start: &'a CallStart },
    Finish { finish: &'a CallFinish },
}

/// The journal's two segments and who still needs each.
pub(crate) struct Journal {
    state: Mutex<State>,
    files: [File; 2],
}

struct State {
    active: usize,
    segments: [Segment; 2],
}

#[derive(Default, Clone, Copy)]
struct Segment {
    /// Bytes appended since the segment was last emptied.
    len: u64,
    /// Entries appended and not yet resolved (committed, failed or dropped).
    pending: u64,
    /// Being truncated outside the lock: not to be appended to.
    truncating: bool,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").finish_non_exhaustive()
    }
}

/// Held by a journaled record's command until the writer has committed (or given up on) it;
/// dropping it lets the record's segment be emptied.
pub(crate) struct Held {
    journal: Arc<Journal>,
    segment: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.journal.resolve(self.segment);
    }
}

impl Journal {
    /// Opens both segments at `paths` (created 0600 on Unix, see [`crate::perms`]) and reads back
    /// what they hold, in the order written. The caller puts them into SQLite and then calls
    /// [`Journal::clear`].
    ///
    /// One process owns the journal: it holds an exclusive lock on the first segment (released
    /// when the process dies). `Ok(None)` when another one does, e.g. the command line reading
    /// the database while the engine runs: that store then keeps no journal, and leaves the
    /// owner's alone.
    pub(crate) fn open(paths: &[PathBuf; 2]) -> io::Result<Option<(Journal, Vec<Entry>)>> {
        let mut replayed = Vec::new();
        let mut files = Vec::with_capacity(2);
        for (i, path) in paths.iter().enumerate() {
            crate::perms::private_file(path)?;
            let mut file = std::fs::OpenOptions::new().read(true).append(true).open(path)?;
            if i == 0 {
                match file.try_lock() {
                    Ok(()) => {}
                    Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                    Err(std::fs::TryLockError::Error(e)) => return Err(e),
                }
            }
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            replayed.extend(decode_all(&bytes));
            files.push(file);
        }
        let [a, b]: [File; 2] = files.try_into().map_err(|_| io::Error::other("two journal segments"))?;
        let state = State { active: 0, segments: [Segment::default(); 2] };
        Ok(Some((Journal { state: Mutex::new(state), files: [a, b] }, replayed)))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `start` (written by the process of `epoch`) without its request body, which stays
    /// with the SQLite row and is put back before this returns. When this returns `Ok`, the
    /// record survives the process being killed.
    pub(crate) fn append_start(self: &Arc<Self>, epoch: i64, start: &mut CallStart) -> io::Result<Held> {
        let body = start.request_body.take();
        let record = encode(&Record::Start { epoch, start });
        start.request_body = body;
        self.append(record?)
    }

    /// Appends `finish` without its bodies (put back before this returns), like
    /// [`Journal::append_start`].
    pub(crate) fn append_finish(self: &Arc<Self>, finish: &mut CallFinish) -> io::Result<Held> {
        let bodies = (finish.request_body.take(), finish.response_body.take());
        let record = encode(&Record::Finish { finish });
        (finish.request_body, finish.response_body) = bodies;
        self.append(record?)
    }

    fn append(self: &Arc<Self>, record: Vec<u8>) -> io::Result<Held> {
        let mut state = self.lock();
        let active = state.active;
        let other = 1 - active;
        if state.segments[active].len >= ROTATE_BYTES
            && state.segments[other].len == 0
            && !state.segments[other].truncating
        {
            state.active = other;
        }
        let segment = state.active;
        (&self.files[segment]).write_all(&record)?;
        let seg = &mut state.segments[segment];
        seg.len += record.len() as u64;
        seg.pending += 1;
        Ok(Held { journal: Arc::clone(self), segment })
    }

    /// An entry of `segment` was committed, failed or dropped; a retired segment whose entries
    /// are all resolved is emptied.
    fn resolve(&self, segment: usize) {
        let mut state = self.lock();
        let seg = &mut state.segments[segment];
        seg.pending = seg.pending.saturating_sub(1);
        let retired = state.active != segment;
        let seg = &mut state.segments[segment];
        if !(retired && seg.pending == 0 && seg.len > 0 && !seg.truncating) {
            return;
        }
        seg.truncating = true;
        drop(state);
        let emptied = self.files[segment].set_len(0);
        let mut state = self.lock();
        let seg = &mut state.segments[segment];
        seg.truncating = false;
        match emptied {
            Ok(()) => seg.len = 0,
            // Left full, it is never appended to again until the next open replays and empties it.
            Err(e) => tracing::warn!(error = %e, "call journal segment could not be emptied"),
        }
    }

    /// Empties both segments (after a replay was committed, or when the writer stopped with
    /// everything applied).
    pub(crate) fn clear(&self) -> io::Result<()> {
        let mut state = self.lock();
        for (file, seg) in self.files.iter().zip(state.segments.iter_mut()) {
            file.set_len(0)?;
            *seg = Segment::default();
        }
        state.active = 0;
        Ok(())
    }

    /// Bytes held by each segment (tests).
    #[cfg(test)]
    pub(crate) fn lens(&self) -> [u64; 2] {
        let state = self.lock();
        [state.segments[0].len, state.segments[1].len]
    }
}

fn encode(entry: &Record<'_>) -> io::Result<Vec<u8>> {
    let payload = serde_json::to_vec(entry).map_err(io::Error::other)?;
    if payload.len() > MAX_RECORD {
        return Err(io::Error::other("call record too large for the journal"));
    }
    let len = u32::try_from(payload.len()).map_err(io::Error::other)?;
    let mut record = Vec::with_capacity(8 + payload.len());
    record.extend_from_slice(&len.to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    record.extend_from_slice(&payload);
    Ok(record)
}

/// Every whole, intact record of `bytes`, up to the first one that is not.
pub(crate) fn decode_all(mut bytes: &[u8]) -> Vec<Entry> {
    let mut out = Vec::new();
    while let Some((replayed, rest)) = decode_one(bytes) {
        out.push(replayed);
        bytes = rest;
    }
    out
}

fn decode_one(bytes: &[u8]) -> Option<(Entry, &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    if len > MAX_RECORD {
        return None;
    }
    let payload = bytes.get(8..8 + len)?;
    if crc32fast::hash(payload) != crc {
        return None;
    }
    let entry = serde_json::from_slice(payload).ok()?;
    Some((entry, &bytes[8 + len..]))
}

#[cfg(test)]
mod tests;
