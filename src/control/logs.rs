//! The live log tail: a bounded ring of recent log lines, fed by [`LogLayer`], a
//! `tracing_subscriber` layer. The binary (or the shell) installs the layer in its subscriber and
//! hands the ring to the engine; the engine never installs a global subscriber itself.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

use crate::control::dto::LogLine;

/// Lines kept by default.
pub const DEFAULT_CAPACITY: usize = 2000;
/// The longest message kept (longer ones are cut).
const MAX_MESSAGE: usize = 4096;

/// A bounded ring of recent log lines with a live feed. Cheap to clone.
#[derive(Clone)]
pub struct LogRing {
    inner: Arc<RingInner>,
}

struct RingInner {
    lines: Mutex<VecDeque<LogLine>>,
    capacity: usize,
    seq: AtomicU64,
    tx: broadcast::Sender<LogLine>,
}

impl std::fmt::Debug for LogRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogRing").field("capacity", &self.inner.capacity).finish_non_exhaustive()
    }
}

impl Default for LogRing {
    fn default() -> LogRing {
        LogRing::new(DEFAULT_CAPACITY)
    }
}

impl LogRing {
    pub fn new(capacity: usize) -> LogRing {
        let (tx, _) = broadcast::channel(256);
        LogRing {
            inner: Arc::new(RingInner {
                lines: Mutex::new(VecDeque::with_capacity(capacity.min(4096))),
                capacity: capacity.max(1),
                seq: AtomicU64::new(0),
                tx,
            }),
        }
    }

    /// Appends a line (dropping the oldest when full) and sends it to subscribers.
    pub fn push(&self, ts_ms: i64, level: &str, target: &str, mut message: String) {
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let line = LogLine {
            seq: self.inner.seq.fetch_add(1, Ordering::Relaxed) + 1,
            ts_ms,
            level: level.to_owned(),
            target: target.to_owned(),
            message,
        };
        {
            let mut lines = self.inner.lines.lock().unwrap_or_else(PoisonError::into_inner);
            if lines.len() >= self.inner.capacity {
                lines.pop_front();
            }
            lines.push_back(line.clone());
        }
        let _ = self.inner.tx.send(line);
    }

    /// The last `n` lines, oldest first.
    pub fn tail(&self, n: usize) -> Vec<LogLine> {
        let lines = self.inner.lines.lock().unwrap_or_else(PoisonError::into_inner);
        lines.iter().skip(lines.len().saturating_sub(n)).cloned().collect()
    }

    /// Up to `n` lines with a sequence number above `seq`, oldest first.
    pub fn after(&self, seq: u64, n: usize) -> Vec<LogLine> {
        let lines = self.inner.lines.lock().unwrap_or_else(PoisonError::into_inner);
        lines.iter().filter(|l| l.seq > seq).take(n).cloned().collect()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<LogLine> {
        self.inner.tx.subscribe()
    }

    /// The layer that feeds this ring.
    pub fn layer(&self) -> LogLayer {
        LogLayer { ring: self.clone() }
    }
}

/// A `tracing_subscriber` layer writing every event it sees into a [`LogRing`].
#[derive(Debug, Clone)]
pub struct LogLayer {
    ring: LogRing,
}

#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LogLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
        fields.message.push_str(&fields.rest);
        self.ring.push(ts, meta.level().as_str(), meta.target(), fields.message);
    }
}
