//! Tests of the shared decoding helpers.

use serde::Deserialize;

use crate::dialect::{DecodeError, from_json};

#[derive(Debug, Deserialize)]
struct Probe {
    #[expect(dead_code, reason = "only decoding is under test")]
    a: Vec<u32>,
}

#[test]
fn syntax_errors_name_the_position() {
    let err = from_json::<Probe>(b"{\"a\": [1,").expect_err("must fail");
    assert!(matches!(err, DecodeError::Syntax { line: 1, .. }), "{err:?}");
}

#[test]
fn type_errors_name_the_field_path() {
    let err = from_json::<Probe>(br#"{"a": [1, "x"]}"#).expect_err("must fail");
    assert_eq!(
        err,
        DecodeError::Field { path: "a[1]".into(), message: "invalid type: string \"x\", expected u32".into() }
    );
}

#[test]
fn missing_fields_are_field_errors() {
    let err = from_json::<Probe>(b"{}").expect_err("must fail");
    assert!(matches!(err, DecodeError::Field { .. }), "{err:?}");
}

#[test]
fn sse_fixture_parser_reads_events_and_data() {
    let evs = crate::dialect::sse::parse_all("event: a\ndata: 1\ndata: 2\n\n: comment\ndata: x\n\n");
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[0], crate::dialect::sse::SseEvent::new(Some("a"), "1\n2"));
    assert_eq!(evs[1], crate::dialect::sse::SseEvent::new(None, "x"));
}

#[test]
fn sse_writer_splits_multiline_data() {
    let mut out = String::new();
    crate::dialect::sse::write_event(&mut out, Some("e"), "a\nb");
    assert_eq!(out, "event: e\ndata: a\ndata: b\n\n");
}

#[test]
fn trailing_bytes_are_malformed() {
    let err = from_json::<Probe>(b"{\"a\": [1]} trailing").expect_err("must fail");
    assert!(matches!(err, DecodeError::Syntax { .. }), "{err:?}");
}
