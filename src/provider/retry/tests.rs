//! Retry-After parsing and backoff tests.

use std::time::{Duration, SystemTime};

use crate::provider::retry::{backoff, parse_retry_after, retryable_status};

#[test]
fn retry_after_forms() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
    assert_eq!(parse_retry_after(None, Some("2"), now), Some(Duration::from_secs(2)));
    assert_eq!(parse_retry_after(Some("1500"), Some("9"), now), Some(Duration::from_millis(1500)));
    assert_eq!(parse_retry_after(None, Some("0.5"), now), Some(Duration::from_millis(500)));
    assert_eq!(parse_retry_after(None, Some("Sun, 06 Nov 1994 08:49:47 GMT"), now), Some(Duration::from_secs(10)));
    assert_eq!(parse_retry_after(None, Some("Sun, 06 Nov 1994 08:49:27 GMT"), now), Some(Duration::ZERO));
    assert_eq!(parse_retry_after(None, None, now), None);
    assert_eq!(parse_retry_after(Some("x"), Some("soon"), now), None);
    assert_eq!(parse_retry_after(None, Some("-1"), now), None);
}

#[test]
fn retry_after_is_total() {
    let now = SystemTime::now();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..10_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 40) as usize;
        let s: String = (0..len)
            .map(|i| char::from(b" 0123456789.,:-+eEGMTSunNovinf\x7f"[((x >> (i % 60)) % 31) as usize]))
            .collect();
        let _ = parse_retry_after(Some(&s), Some(&s), now);
    }
    for s in ["1e400", "NaN", "inf", "18446744073709551616", "99999999999999999999999"] {
        let _ = parse_retry_after(Some(s), Some(s), now);
    }
}

#[test]
fn backoff_is_bounded() {
    let base = Duration::from_millis(500);
    assert_eq!(backoff(base, 0, 1.0), base);
    assert_eq!(backoff(base, 3, 1.0), Duration::from_secs(4));
    assert_eq!(backoff(base, 30, 1.0), Duration::from_secs(8));
    assert_eq!(backoff(base, 2, 0.0), Duration::ZERO);
}

#[test]
fn only_refusals_and_server_errors_retry() {
    for s in [429, 500, 502, 503, 504, 529] {
        assert!(retryable_status(s));
    }
    for s in [400, 401, 403, 404, 413, 422] {
        assert!(!retryable_status(s));
    }
}
