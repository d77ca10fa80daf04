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
    let err = from_json::<Probe>(b"{\"a\": [1,").unwrap_err();
    assert!(matches!(err, DecodeError::Syntax { line: 1, .. }), "{err:?}");
}

#[test]
fn type_errors_name_the_field_path() {
    let err = from_json::<Probe>(br#"{"a": [1, "x"]}"#).unwrap_err();
    assert_eq!(
        err,
        DecodeError::Field { path: "a[1]".into(), message: "invalid type: string \"x\", expected u32".into() }
    );
}

#[test]
fn missing_fields_are_field_errors() {
    let err = from_json::<Probe>(b"{}").unwrap_err();
    assert!(matches!(err, DecodeError::Field { .. }), "{err:?}");
}
