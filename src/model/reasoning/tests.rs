//! Unit tests of the reasoning envelope (expected strings computed independently: base64url of
//! the JSON written out by hand).

use crate::model::reasoning::{Envelope, Family, PREFIX, is_envelope};

#[test]
fn chat_envelope_has_the_documented_form() {
    assert_eq!(Envelope::openai_chat().encode(), "khr1.eyJmIjoib3BlbmFpX2NoYXQifQ");
}

#[test]
fn responses_envelope_round_trips_id_and_encrypted_content() {
    let s = Envelope::openai_responses(Some("rs_1"), Some("gAAA")).encode();
    assert_eq!(s, "khr1.eyJmIjoib3BlbmFpX3Jlc3BvbnNlcyIsImlkIjoicnNfMSIsImQiOiJnQUFBIn0");
    let back = Envelope::decode(&s).expect("decodes");
    assert_eq!(back.family, Family::OpenaiResponses);
    assert_eq!(back.id.as_deref(), Some("rs_1"));
    assert_eq!(back.data.as_deref(), Some("gAAA"));
}

#[test]
fn raw_signatures_are_anthropic_and_broken_envelopes_are_nothing() {
    assert_eq!(Envelope::of_signature("EqQBCkYIARgCIkB"), Some(Envelope::anthropic("EqQBCkYIARgCIkB")));
    assert!(!is_envelope("EqQBCkYIARgCIkB"));
    assert_eq!(Envelope::of_signature(&format!("{PREFIX}!!!")), None);
    assert_eq!(Envelope::of_signature(&format!("{PREFIX}eyJmIjoibm9wZSJ9")), None, "unknown family");
}
