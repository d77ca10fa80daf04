//! When to retry an upstream attempt, and how long to wait first.
//!
//! Rules (docs/security-reliability.md §5.3): retry only before anything reached the client, only when
//! the upstream provably did not process the request or explicitly refused it (connect errors,
//! 429, 5xx), at most `max_retries` times, honouring `Retry-After` when it fits the deadline.

use std::time::{Duration, SystemTime};

/// Statuses worth another attempt.
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504 | 529)
}

/// Parses `retry-after-ms` (milliseconds) or `retry-after` (seconds or an HTTP date, relative to
/// `now`). Total: any string gives `Some` or `None`, never a panic.
pub fn parse_retry_after(retry_after_ms: Option<&str>, retry_after: Option<&str>, now: SystemTime) -> Option<Duration> {
    if let Some(ms) = retry_after_ms.and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && (0.0..1e12).contains(&ms)
    {
        return Some(Duration::from_millis(ms as u64));
    }
    let v = retry_after?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs.min(1_000_000_000)));
    }
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_finite() && (0.0..1e9).contains(&secs) {
            return Some(Duration::from_secs_f64(secs));
        }
        return None;
    }
    let when = httpdate(v)?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only form servers send today.
fn httpdate(v: &str) -> Option<SystemTime> {
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    let dt = time::PrimitiveDateTime::parse(v, &format).ok()?;
    let ts = dt.assume_utc().unix_timestamp();
    let secs = u64::try_from(ts).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Full-jitter exponential backoff: a random delay in `[0, min(cap, base * 2^attempt)]`.
pub fn backoff(base: Duration, attempt: u32, jitter: f64) -> Duration {
    let cap = base.saturating_mul(16);
    let exp = base.saturating_mul(1u32 << attempt.min(10)).min(cap);
    exp.mul_f64(jitter.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests;
