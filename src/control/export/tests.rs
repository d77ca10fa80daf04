//! Export bounds, decimal USD and the CSV cell rules.

use crate::control::export::{Format, Range, defuse, parse_bound, usd};

#[test]
fn bounds_are_days_or_rfc3339_instants() {
    // 2026-11-30T00:00:00Z = 1_795_996_800 s (20787 days after the epoch).
    assert_eq!(parse_bound("2026-11-30", false).expect("day"), 1_795_996_800_000);
    assert_eq!(parse_bound("2026-11-30", true).expect("day"), 1_795_996_800_000 + 86_400_000);
    assert_eq!(parse_bound("2026-11-30T09:00:00Z", false).expect("instant"), 1_795_996_800_000 + 9 * 3_600_000);
    assert_eq!(parse_bound("2026-11-30T10:00:00+01:00", true).expect("instant"), 1_795_996_800_000 + 9 * 3_600_000);
    assert!(parse_bound("yesterday", false).is_err());
    assert!(Range::parse(Some("2026-12-02"), Some("2026-11-30"), 0, 0).is_err());
    let r = Range::parse(Some("2026-11-29"), Some("2026-11-30"), 0, 0).expect("range");
    assert_eq!(r.days(), ("2026-11-29".to_owned(), "2026-11-30".to_owned()));
    assert_eq!(r.file_name("calls", Format::Csv), "keyhaven-calls-2026-11-29-to-2026-11-30.csv");
}

#[test]
fn usd_is_exact() {
    assert_eq!(usd(0), "0.000000");
    assert_eq!(usd(1_500), "0.001500");
    assert_eq!(usd(123_456_789), "123.456789");
    assert_eq!(usd(-5), "-0.000005");
}

#[test]
fn formula_cells_are_defused() {
    assert_eq!(defuse("=HYPERLINK(\"x\")"), "'=HYPERLINK(\"x\")");
    assert_eq!(defuse("@sum"), "'@sum");
    assert_eq!(defuse("claude-cli/2.0"), "claude-cli/2.0");
    assert!(Format::parse("xml").is_err());
}
