//! An independent description of Cursor Tab's wire types (docs/cursor-tab.md §2 and §3), written
//! by hand from the field tables: `StreamCppRequest` encoded with [`crate::support::cursor_raw`]'s
//! primitives, and `StreamCppResponse` frames, end-stream frames and `ErrorDetails` decoded by a
//! small protobuf reader. Nothing here uses the engine's generated types, so a wrong field number
//! on the engine's side fails these tests.

use base64::Engine as _;
use serde_json::Value;

use crate::support::cursor_raw::{int, ld, st};

/// A Tab request: `StreamCppRequest{current_file=1 CurrentFileInfo{relative_workspace_path=1,
/// contents=2, cursor_position=3 {line=1, column=2}, rely_on_filesync=18, workspace_root_path=19},
/// model_name=3, cpp_intent_info=16 {source=1}}`.
pub fn stream_cpp_request(path: &str, contents: &str, line: u64, column: u64, intent: &str, filesync: bool) -> Vec<u8> {
    let mut file = [st(1, path), st(2, contents), ld(3, &[int(1, line), int(2, column)].concat())].concat();
    if filesync {
        file.extend(int(18, 1));
    }
    file.extend(st(19, "/home/dev/project"));
    [ld(1, &file), st(3, "fast"), ld(16, &st(1, intent))].concat()
}

/// One Connect envelope: flags, big-endian length, payload (gzip-compressed with flag 0x01).
pub fn envelope(payload: &[u8], gzip: bool) -> Vec<u8> {
    let (flags, body) = if gzip {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(payload).expect("gzip");
        (1u8, enc.finish().expect("gzip"))
    } else {
        (0u8, payload.to_vec())
    };
    let mut out = vec![flags];
    out.extend(u32::try_from(body.len()).expect("len").to_be_bytes());
    out.extend(body);
    out
}

/// A decoded `StreamCppResponse` frame: the fields of §3.1 that a FIM server may send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CppFrame {
    /// text = 1
    pub text: Option<String>,
    /// done_stream = 4
    pub done_stream: Option<bool>,
    /// range_to_replace = 11 {start_line_number = 1, end_line_number_inclusive = 2}
    pub range: Option<(u64, u64)>,
    /// done_edit = 13
    pub done_edit: Option<bool>,
    /// model_info = 14 {is_fused_cursor_prediction_model = 1, is_multidiff_model = 2}
    pub model_info: Option<(bool, bool)>,
    /// Field numbers this description does not expect.
    pub unknown: Vec<u64>,
}

/// One response envelope.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Message(CppFrame),
    /// The end-stream JSON (flags 0x02).
    End(Value),
}

/// A protobuf field: number and value (varint or bytes).
#[derive(Debug, Clone)]
pub enum Field {
    Varint(u64),
    Bytes(Vec<u8>),
}

fn read_varint(buf: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = buf[*pos];
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return v;
        }
        shift += 7;
    }
}

/// Splits a message into its fields (wire types 0, 1, 2 and 5).
pub fn fields(buf: &[u8]) -> Vec<(u64, Field)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = read_varint(buf, &mut pos);
        let value = match key & 7 {
            0 => Field::Varint(read_varint(buf, &mut pos)),
            2 => {
                let len = usize::try_from(read_varint(buf, &mut pos)).expect("len");
                let v = buf[pos..pos + len].to_vec();
                pos += len;
                Field::Bytes(v)
            }
            1 => {
                pos += 8;
                Field::Bytes(Vec::new())
            }
            5 => {
                pos += 4;
                Field::Bytes(Vec::new())
            }
            w => panic!("unexpected wire type {w}"),
        };
        out.push((key >> 3, value));
    }
    out
}

fn varint_of(f: &Field) -> u64 {
    match f {
        Field::Varint(v) => *v,
        Field::Bytes(_) => panic!("expected a varint"),
    }
}

fn bytes_of(f: &Field) -> &[u8] {
    match f {
        Field::Bytes(b) => b,
        Field::Varint(_) => panic!("expected bytes"),
    }
}

/// Decodes a `StreamCppResponse`.
pub fn cpp_frame(buf: &[u8]) -> CppFrame {
    let mut f = CppFrame::default();
    for (n, v) in fields(buf) {
        match n {
            1 => f.text = Some(String::from_utf8(bytes_of(&v).to_vec()).expect("utf-8")),
            4 => f.done_stream = Some(varint_of(&v) != 0),
            11 => {
                let (mut start, mut end) = (0, 0);
                for (m, x) in fields(bytes_of(&v)) {
                    match m {
                        1 => start = varint_of(&x),
                        2 => end = varint_of(&x),
                        _ => f.unknown.push(100 + m),
                    }
                }
                f.range = Some((start, end));
            }
            13 => f.done_edit = Some(varint_of(&v) != 0),
            14 => {
                let (mut fused, mut multi) = (false, false);
                for (m, x) in fields(bytes_of(&v)) {
                    match m {
                        1 => fused = varint_of(&x) != 0,
                        2 => multi = varint_of(&x) != 0,
                        _ => f.unknown.push(200 + m),
                    }
                }
                f.model_info = Some((fused, multi));
            }
            other => f.unknown.push(other),
        }
    }
    f
}

/// Splits a response body into envelopes (uncompressed; this server never compresses).
pub fn frames(body: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < body.len() {
        let flags = body[pos];
        let len = u32::from_be_bytes(body[pos + 1..pos + 5].try_into().expect("4 bytes")) as usize;
        let payload = &body[pos + 5..pos + 5 + len];
        pos += 5 + len;
        assert_eq!(flags & 1, 0, "frames are not compressed");
        if flags & 2 != 0 {
            out.push(Frame::End(serde_json::from_slice(payload).expect("end-stream json")));
        } else {
            out.push(Frame::Message(cpp_frame(payload)));
        }
    }
    out
}

/// The `aiserver.v1.ErrorDetails.error` (field 1) of an end-stream error's first detail.
pub fn error_kind(end: &Value) -> Option<u64> {
    let detail = end["error"]["details"].as_array()?.first()?;
    assert_eq!(detail["type"], "aiserver.v1.ErrorDetails");
    let raw = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(detail["value"].as_str()?.trim_end_matches('='))
        .expect("base64");
    fields(&raw).into_iter().find(|(n, _)| *n == 1).map(|(_, v)| varint_of(&v))
}
