//! The seqno-ordered inbox: BidiAppends arrive concurrently and in any order; the run reads them
//! strictly by `append_seqno`, starting at 0, or at the seqno of the run's first message when
//! that arrives elsewhere ([`Inbox::first`]).
//!
//! - A duplicate (already pending) or stale (already delivered) seqno is dropped.
//! - A seqno beyond the next one waits in a bounded buffer until the gap is filled. A gap that
//!   stays open longer than [`InboxOptions::gap_wait`] is skipped (the client will not resend an
//!   append it got a 200 for), so one lost append cannot stall a run forever.
//! - A full buffer refuses further appends ([`Push::Overflow`]).
//! - Start at any seqno: a run request may come at a seqno other than 0 under a reused request
//!   id (docs/cursor-wire.md §8.5). Before anything was delivered, [`Inbox::first`] takes a
//!   pending message its caller recognises as a start (a `run_request`) and orders from there;
//!   older seqnos become stale. A non-start message ahead of the gap (a heartbeat) still waits
//!   for seqno 0 as usual.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Recognises a run's first message (a `run_request`) in an append's bytes.
pub type IsStart = dyn Fn(&[u8]) -> bool + Sync;

#[derive(Debug, Clone, Copy)]
pub struct InboxOptions {
    /// Appends buffered ahead of a gap.
    pub max_pending: usize,
    /// How long a gap may stay open before it is skipped.
    pub gap_wait: Duration,
}

impl Default for InboxOptions {
    fn default() -> InboxOptions {
        InboxOptions { max_pending: 256, gap_wait: Duration::from_secs(30) }
    }
}

/// What became of a pushed append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    Accepted,
    /// The seqno is pending already.
    Duplicate,
    /// The seqno was delivered already.
    Stale,
    /// Too many appends wait behind a gap.
    Overflow,
    /// The run is over.
    Closed,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    pending: BTreeMap<u64, Bytes>,
    /// When the current gap opened (pending non-empty, `next` missing).
    gap_since: Option<Instant>,
    closed: bool,
    /// Whether a message was delivered (a start is looked for only before the first).
    delivered: bool,
}

#[derive(Debug)]
pub struct Inbox {
    options: InboxOptions,
    state: Mutex<State>,
    notify: Notify,
}

impl Inbox {
    pub fn new(options: InboxOptions) -> Inbox {
        Inbox { options, state: Mutex::new(State::default()), notify: Notify::new() }
    }

    pub fn push(&self, seqno: u64, data: Bytes) -> Push {
        let Ok(mut s) = self.state.lock() else { return Push::Closed };
        if s.closed {
            return Push::Closed;
        }
        if seqno < s.next {
            return Push::Stale;
        }
        if s.pending.contains_key(&seqno) {
            return Push::Duplicate;
        }
        if s.pending.len() >= self.options.max_pending {
            return Push::Overflow;
        }
        s.pending.insert(seqno, data);
        if seqno != s.next && s.gap_since.is_none() {
            s.gap_since = Some(Instant::now());
        }
        drop(s);
        self.notify.notify_one();
        Push::Accepted
    }

    /// Stops accepting appends and wakes the reader.
    pub fn close(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.closed = true;
        }
        self.notify.notify_one();
    }

    /// The next message in seqno order, `None` once closed. Cancel-safe.
    pub async fn next(&self) -> Option<(u64, Bytes)> {
        self.next_from(None).await
    }

    /// The run's first message: as [`Inbox::next`], except that while nothing was delivered yet
    /// a pending message for which `is_start` holds is taken at once even when lower seqnos are
    /// missing (delivery continues after it; lower seqnos are stale). Cancel-safe.
    pub async fn first(&self, is_start: &IsStart) -> Option<(u64, Bytes)> {
        self.next_from(Some(is_start)).await
    }

    async fn next_from(&self, is_start: Option<&IsStart>) -> Option<(u64, Bytes)> {
        loop {
            let notified = self.notify.notified();
            let wait = {
                let Ok(mut s) = self.state.lock() else { return None };
                if let Some(is_start) = is_start
                    && !s.delivered
                    && !s.pending.contains_key(&s.next)
                    && let Some(start) = s.pending.iter().find(|(_, d)| is_start(d)).map(|(k, _)| *k)
                {
                    tracing::info!(seqno = start, "run request at a seqno other than the next one; ordering from it");
                    s.pending.retain(|k, _| *k >= start);
                    s.next = start;
                }
                let next = s.next;
                if let Some(data) = s.pending.remove(&next) {
                    s.delivered = true;
                    s.next = next + 1;
                    s.gap_since = if s.pending.is_empty() || s.pending.contains_key(&s.next) {
                        None
                    } else {
                        Some(Instant::now())
                    };
                    return Some((next, data));
                }
                if s.closed {
                    return None;
                }
                match (s.gap_since, s.pending.keys().next().copied()) {
                    (Some(since), Some(first)) => {
                        let deadline = since + self.options.gap_wait;
                        if Instant::now() >= deadline {
                            tracing::warn!(from = next, to = first, "append gap not filled in time; skipping it");
                            s.next = first;
                            s.gap_since = None;
                            continue;
                        }
                        Some(deadline)
                    }
                    _ => None,
                }
            };
            match wait {
                Some(deadline) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}
