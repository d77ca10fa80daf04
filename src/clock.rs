//! Wall-clock time as the engine records it: milliseconds since the Unix epoch (call rows,
//! transcripts, checkpoints, todos, usage windows). One function, so every timestamp in the
//! store and on the wire is taken the same way.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
