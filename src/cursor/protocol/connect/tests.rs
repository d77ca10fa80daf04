//! Connect framing: round trips, every malformed-input class, and a randomized mutation pass
//! (xorshift, stable Rust) over the envelope and BidiAppend decoders.

use prost::Message;

use crate::cursor::protocol::agent::{self, agent_client_message};
use crate::cursor::protocol::aiserver;
use crate::cursor::protocol::connect::*;

fn heartbeat_bytes() -> Vec<u8> {
    agent::AgentClientMessage {
        message: Some(agent_client_message::Message::ClientHeartbeat(agent::ClientHeartbeat {})),
    }
    .encode_to_vec()
}

#[test]
fn client_heartbeat_is_3a00() {
    assert_eq!(hex::encode(heartbeat_bytes()), "3a00");
}

#[test]
fn envelopes_round_trip_plain_and_gzip() {
    let payload = b"hello world, hello world, hello world".to_vec();
    let mut body = encode_envelope(&payload, false).to_vec();
    body.extend_from_slice(&encode_envelope(&payload, true));
    body.extend_from_slice(&encode_end_stream(&EndStream::default()));
    let envs = decode_envelopes(&body, true).expect("decodes");
    assert_eq!(
        envs,
        vec![
            Envelope::Message(payload.clone().into()),
            Envelope::Message(payload.into()),
            Envelope::EndStream(bytes::Bytes::from_static(b"{}"))
        ]
    );
}

#[test]
fn success_end_stream_is_the_documented_bytes() {
    assert_eq!(encode_end_stream(&EndStream::default()).to_vec(), vec![0x02, 0, 0, 0, 2, b'{', b'}']);
}

#[test]
fn decoder_waits_for_split_input() {
    let frame = encode_envelope(b"abc", false);
    let mut dec = EnvelopeDecoder::new(false);
    for b in frame.iter() {
        assert_eq!(dec.try_next(), Ok(None));
        dec.push(&[*b]);
    }
    assert_eq!(dec.try_next(), Ok(Some(Envelope::Message(bytes::Bytes::from_static(b"abc")))));
    assert_eq!(dec.finish(), Ok(()));
}

#[test]
fn malformed_envelopes_are_typed_errors() {
    // Truncated header and truncated payload.
    assert_eq!(decode_envelopes(&[0, 0, 0], false), Err(FrameError::Truncated { need: 5, have: 3 }));
    assert_eq!(decode_envelopes(&[0, 0, 0, 0, 9, 1, 2], false), Err(FrameError::Truncated { need: 14, have: 7 }));
    // A length beyond the cap.
    assert_eq!(
        decode_envelopes(&[0, 0xff, 0xff, 0xff, 0xff], false),
        Err(FrameError::TooLarge { len: 0xffff_ffff, limit: MAX_MESSAGE_BYTES })
    );
    // Unknown flag bits.
    assert_eq!(decode_envelopes(&[0x80, 0, 0, 0, 0], false), Err(FrameError::UnknownFlags(0x80)));
    // Corrupt gzip.
    let bad = [0x01, 0, 0, 0, 4, 0x1f, 0x8b, 0, 0];
    assert!(matches!(decode_envelopes(&bad, true), Err(FrameError::Gzip(_))));
    // Compressed without negotiation and not gzip.
    assert_eq!(decode_envelopes(&[0x01, 0, 0, 0, 1, 7], false), Err(FrameError::UnexpectedCompression));
}

#[test]
fn gzip_bombs_stop_at_the_limit() {
    let zeros = vec![0u8; 300_000];
    let zipped = gzip(&zeros);
    assert_eq!(gunzip(&zipped, 1000), Err(FrameError::TooLarge { len: 1001, limit: 1000 }));
    let mut frame = vec![0x01];
    frame.extend_from_slice(&u32::try_from(zipped.len()).expect("len").to_be_bytes());
    frame.extend_from_slice(&zipped);
    let mut dec = EnvelopeDecoder::with_limit(true, 100_000);
    dec.push(&frame);
    assert!(matches!(dec.try_next(), Err(FrameError::TooLarge { .. })));
}

#[test]
fn unary_bodies_honour_content_encoding() {
    let msg = b"\x0a\x03foo".to_vec();
    assert_eq!(unary_body(&msg, None), Ok(msg.clone()));
    assert_eq!(unary_body(&gzip(&msg), Some("gzip")), Ok(msg.clone()));
    assert!(matches!(unary_body(&msg, Some("gzip")), Err(FrameError::Gzip(_))));
    assert!(matches!(unary_body(&msg, Some("br")), Err(FrameError::UnsupportedEncoding(_))));
    assert!(accepts_gzip(Some("identity, gzip;q=1")));
    assert!(!accepts_gzip(Some("br")));
}

#[test]
fn appends_decode_hex_and_binary_data() {
    let body = encode_append("r-1", 3, &heartbeat_bytes());
    assert_eq!(
        decode_append(&body),
        Ok(Append { request_id: "r-1".into(), seqno: 3, data: bytes::Bytes::from_static(&[0x3a, 0]) })
    );
    let binary = aiserver::BidiAppendRequest {
        data: String::new(),
        request_id: Some(aiserver::BidiRequestId { request_id: "r-2".into() }),
        append_seqno: 0,
        data_binary: vec![0x3a, 0],
    }
    .encode_to_vec();
    assert_eq!(decode_append(&binary).expect("binary").data.as_ref(), &[0x3a, 0]);
}

#[test]
fn bad_appends_are_typed_errors() {
    let bad_hex = aiserver::BidiAppendRequest {
        data: "3a0".into(),
        request_id: Some(aiserver::BidiRequestId { request_id: "r".into() }),
        append_seqno: 0,
        data_binary: Vec::new(),
    };
    assert!(matches!(decode_append(&bad_hex.encode_to_vec()), Err(FrameError::Hex(_))));
    let no_id = aiserver::BidiAppendRequest { data: "3a00".into(), ..Default::default() };
    assert_eq!(decode_append(&no_id.encode_to_vec()), Err(FrameError::Missing("request_id")));
    let negative = aiserver::BidiAppendRequest { append_seqno: -1, ..bad_hex.clone() };
    assert!(matches!(decode_append(&negative.encode_to_vec()), Err(FrameError::Protobuf(_))));
    assert!(matches!(decode_append(&[0xff, 0xff, 0xff]), Err(FrameError::Protobuf(_))));
}

#[test]
fn error_bodies_carry_cursor_details() {
    let body = ErrorBody::cursor(
        Code::Unavailable,
        aiserver::error_details::Error::ProviderError,
        "Provider error",
        "the provider is down",
        true,
    );
    let json: serde_json::Value = serde_json::from_slice(&body.to_json()).expect("json");
    assert_eq!(json["code"], "unavailable");
    assert_eq!(json["details"][0]["type"], "aiserver.v1.ErrorDetails");
    let details = body.cursor_details().expect("details");
    assert_eq!(details.error, aiserver::error_details::Error::ProviderError as i32);
    let custom = details.details.expect("custom");
    assert_eq!((custom.title.as_str(), custom.is_retryable), ("Provider error", Some(true)));
    let end = EndStream { error: Some(body.clone()), ..EndStream::default() };
    let frame = encode_end_stream(&end);
    let envs = decode_envelopes(&frame, false).expect("frame");
    let Envelope::EndStream(json) = &envs[0] else { panic!("end-stream expected") };
    assert_eq!(decode_end_stream(json), Ok(end));
    assert!(matches!(decode_end_stream(b"{nope"), Err(FrameError::EndStream(_))));
    assert_eq!(Code::Unavailable.http_status(), 503);
    assert_eq!(Code::Canceled.http_status(), 499);
}

/// xorshift64*: a deterministic generator for the randomized pass.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n.max(1)).expect("n")).expect("index")
    }
}

fn mutate(rng: &mut XorShift, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(5) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.truncate(i);
            }
            2 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, u8::try_from(rng.next() & 0xff).expect("byte"));
            }
            3 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = 0xff;
            }
            _ => {
                let extra = seed.get(..rng.below(seed.len() + 1)).unwrap_or_default().to_vec();
                v.extend(extra);
            }
        }
    }
    v
}

#[test]
fn randomized_mutations_never_panic() {
    let run = agent::AgentClientMessage {
        message: Some(agent_client_message::Message::RunRequest(agent::AgentRunRequest {
            conversation_id: Some("c-1".into()),
            ..Default::default()
        })),
    }
    .encode_to_vec();
    let mut stream = encode_envelope(&run, false).to_vec();
    stream.extend_from_slice(&encode_envelope(&heartbeat_bytes(), true));
    stream.extend_from_slice(&encode_end_stream(&EndStream::default()));
    let append = encode_append("req", 4, &run);
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        fuzz::envelopes(&mutate(&mut rng, &stream));
        fuzz::bidi_append(&mutate(&mut rng, &append));
        let _ = unary_body(&mutate(&mut rng, &gzip(&run)), Some("gzip"));
    }
}
