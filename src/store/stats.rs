//! Cheap counters of the writer's health for the metrics endpoint: how long each transaction's
//! commit took (a fixed-bucket histogram of atomics), updated by the writer thread and read
//! without locks. The queue depth is the queue's own length.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the commit-time buckets; one more bucket catches the rest.
pub const COMMIT_BOUNDS_SECONDS: [f64; 12] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// The writer's counters, shared by the store handle and its writer thread.
#[derive(Debug, Default)]
pub struct WriterStats {
    commits: AtomicU64,
    commit_micros: AtomicU64,
    buckets: [AtomicU64; COMMIT_BOUNDS_SECONDS.len() + 1],
}

impl WriterStats {
    /// One batch was committed (or failed to commit) after `took`.
    pub(crate) fn committed(&self, took: Duration) {
        let secs = took.as_secs_f64();
        let idx = COMMIT_BOUNDS_SECONDS.iter().position(|b| secs <= *b).unwrap_or(COMMIT_BOUNDS_SECONDS.len());
        self.buckets[idx].fetch_add(1, Ordering::Relaxed);
        self.commit_micros.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, dropped: u64, queue_depth: u64) -> LedgerSnapshot {
        let mut cumulative = 0;
        let buckets = COMMIT_BOUNDS_SECONDS
            .iter()
            .zip(&self.buckets)
            .map(|(bound, n)| {
                cumulative += n.load(Ordering::Relaxed);
                (*bound, cumulative)
            })
            .collect();
        LedgerSnapshot {
            queue_depth,
            dropped,
            commits: self.commits.load(Ordering::Relaxed),
            commit_seconds_sum: self.commit_micros.load(Ordering::Relaxed) as f64 / 1e6,
            commit_buckets: buckets,
        }
    }
}

/// The ledger's health at one moment ([`Store::ledger_stats`](crate::store::Store::ledger_stats)).
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerSnapshot {
    /// Commands queued and not yet taken by the writer.
    pub queue_depth: u64,
    /// Records dropped because the queue was full, since open.
    pub dropped: u64,
    /// Batches committed (or failed) since open.
    pub commits: u64,
    pub commit_seconds_sum: f64,
    /// `(upper bound in seconds, commits at or under it)`, cumulative, for
    /// [`COMMIT_BOUNDS_SECONDS`]; `commits` is the `+Inf` bucket.
    pub commit_buckets: Vec<(f64, u64)>,
}
