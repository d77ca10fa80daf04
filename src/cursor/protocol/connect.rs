//! Connect framing as Cursor uses it (docs/cursor-wire.md §2, §3.1).
//!
//! - Unary calls: the body is the bare protobuf (`application/proto`), gzip when
//!   `content-encoding: gzip`; errors are a JSON body `{"code","message","details"}`.
//! - Streams: envelopes `[flags u8][length u32 BE][payload]`; flag `0x01` = the payload is gzip
//!   (per frame), flag `0x02` = the end-stream frame, whose payload is JSON: `{}` on success or
//!   `{"error":{…}}`.
//! - Errors carry Cursor's `aiserver.v1.ErrorDetails` as a base64 detail.
//!
//! Every decoder bounds its input ([`MAX_MESSAGE_BYTES`], also after decompression) and returns a
//! [`FrameError`] on malformed, truncated or oversized input; nothing here panics on input.

use std::io::{Read, Write};

use base64::Engine as _;
use bytes::{Buf, Bytes, BytesMut};
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::cursor::protocol::aiserver;

/// The largest message (compressed or not) any decoder accepts.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// The envelope header: flags byte plus big-endian u32 length.
pub const HEADER_LEN: usize = 5;
pub const FLAG_COMPRESSED: u8 = 0x01;
pub const FLAG_END_STREAM: u8 = 0x02;

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("truncated envelope: {have} of {need} bytes")]
    Truncated { need: usize, have: usize },
    #[error("message of {len} bytes exceeds the {limit}-byte limit")]
    TooLarge { len: usize, limit: usize },
    #[error("unknown envelope flags {0:#04x}")]
    UnknownFlags(u8),
    #[error("compressed frame without a negotiated encoding")]
    UnexpectedCompression,
    #[error("unsupported content encoding `{0}`")]
    UnsupportedEncoding(String),
    #[error("bad gzip data: {0}")]
    Gzip(String),
    #[error("bad protobuf: {0}")]
    Protobuf(String),
    #[error("bad hex in `data`: {0}")]
    Hex(String),
    #[error("bad end-stream JSON: {0}")]
    EndStream(String),
    #[error("missing field `{0}`")]
    Missing(&'static str),
}

impl FrameError {
    /// A low-cardinality label for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            FrameError::Truncated { .. } => "truncated",
            FrameError::TooLarge { .. } => "too_large",
            FrameError::UnknownFlags(_) => "unknown_flags",
            FrameError::UnexpectedCompression => "unexpected_compression",
            FrameError::UnsupportedEncoding(_) => "unsupported_encoding",
            FrameError::Gzip(_) => "gzip",
            FrameError::Protobuf(_) => "protobuf",
            FrameError::Hex(_) => "hex",
            FrameError::EndStream(_) => "end_stream",
            FrameError::Missing(_) => "missing_field",
        }
    }
}

/// Compresses with gzip.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(data.len() / 2 + 32), flate2::Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

/// Decompresses gzip, refusing output larger than `limit` (a gzip bomb stops at the limit).
pub fn gunzip(data: &[u8], limit: usize) -> Result<Vec<u8>, FrameError> {
    let dec = flate2::read::GzDecoder::new(data);
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    dec.take(cap).read_to_end(&mut out).map_err(|e| FrameError::Gzip(e.to_string()))?;
    if out.len() > limit {
        return Err(FrameError::TooLarge { len: out.len(), limit });
    }
    Ok(out)
}

/// Whether a `content-encoding` / `connect-content-encoding` value means gzip; identity is
/// `Ok(false)`, anything else an error.
pub fn is_gzip(encoding: Option<&str>) -> Result<bool, FrameError> {
    match encoding.map(str::trim) {
        None | Some("" | "identity") => Ok(false),
        Some(e) if e.eq_ignore_ascii_case("gzip") => Ok(true),
        Some(e) => Err(FrameError::UnsupportedEncoding(e.chars().take(40).collect())),
    }
}

/// Whether an `accept-encoding`-style list offers gzip.
pub fn accepts_gzip(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|t| t.split(';').next().is_some_and(|n| n.trim().eq_ignore_ascii_case("gzip")))
    })
}

/// Decodes a protobuf message.
pub fn decode_message<M: Message + Default>(bytes: &[u8]) -> Result<M, FrameError> {
    M::decode(bytes).map_err(|e| FrameError::Protobuf(e.to_string()))
}

// ---------------------------------------------------------------------------------------------
// Unary

/// The message bytes of a unary request body, decompressed per `content-encoding`.
pub fn unary_body(body: &[u8], content_encoding: Option<&str>) -> Result<Vec<u8>, FrameError> {
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(FrameError::TooLarge { len: body.len(), limit: MAX_MESSAGE_BYTES });
    }
    if is_gzip(content_encoding)? { gunzip(body, MAX_MESSAGE_BYTES) } else { Ok(body.to_vec()) }
}

/// One decoded BidiAppend: the stream it belongs to, its position, and the message bytes
/// (hex `data` decoded, or `data_binary`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    pub request_id: String,
    pub seqno: u64,
    pub data: Bytes,
}

/// Decodes a BidiAppend request's message bytes (already un-gzipped).
pub fn decode_append(bytes: &[u8]) -> Result<Append, FrameError> {
    let req: aiserver::BidiAppendRequest = decode_message(bytes)?;
    let request_id =
        req.request_id.map(|r| r.request_id).filter(|r| !r.is_empty()).ok_or(FrameError::Missing("request_id"))?;
    let seqno = u64::try_from(req.append_seqno).map_err(|_| FrameError::Protobuf("negative append_seqno".into()))?;
    let data = if req.data_binary.is_empty() {
        if req.data.len() / 2 > MAX_MESSAGE_BYTES {
            return Err(FrameError::TooLarge { len: req.data.len() / 2, limit: MAX_MESSAGE_BYTES });
        }
        Bytes::from(hex::decode(req.data.as_bytes()).map_err(|e| FrameError::Hex(e.to_string()))?)
    } else {
        Bytes::from(req.data_binary)
    };
    Ok(Append { request_id, seqno, data })
}

/// Encodes a BidiAppend request (what the client sends; for tests and simulators).
pub fn encode_append(request_id: &str, seqno: u64, data: &[u8]) -> Vec<u8> {
    aiserver::BidiAppendRequest {
        data: hex::encode(data),
        request_id: Some(aiserver::BidiRequestId { request_id: request_id.to_owned() }),
        append_seqno: i64::try_from(seqno).unwrap_or(i64::MAX),
        data_binary: Vec::new(),
    }
    .encode_to_vec()
}

// ---------------------------------------------------------------------------------------------
// Streaming envelopes

/// One decoded envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Envelope {
    /// A message frame's payload, decompressed.
    Message(Bytes),
    /// The end-stream frame's JSON payload, decompressed.
    EndStream(Bytes),
}

/// Frames a message. With `compress`, the payload is gzip and flag `0x01` is set.
pub fn encode_envelope(payload: &[u8], compress: bool) -> Bytes {
    frame(0, payload, compress)
}

/// Frames the end-stream JSON.
pub fn encode_end_stream(end: &EndStream) -> Bytes {
    let json = serde_json::to_vec(end).unwrap_or_else(|_| b"{}".to_vec());
    frame(FLAG_END_STREAM, &json, false)
}

fn frame(flags: u8, payload: &[u8], compress: bool) -> Bytes {
    let zipped;
    let (flags, body) = if compress {
        zipped = gzip(payload);
        (flags | FLAG_COMPRESSED, zipped.as_slice())
    } else {
        (flags, payload)
    };
    let mut out = BytesMut::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&[flags]);
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(body);
    out.freeze()
}

/// An incremental envelope decoder: push bytes as they arrive, take envelopes out.
#[derive(Debug)]
pub struct EnvelopeDecoder {
    buf: BytesMut,
    limit: usize,
    /// Whether the peer negotiated gzip (a compressed frame without it is an error).
    gzip: bool,
}

impl EnvelopeDecoder {
    pub fn new(gzip: bool) -> EnvelopeDecoder {
        EnvelopeDecoder { buf: BytesMut::new(), limit: MAX_MESSAGE_BYTES, gzip }
    }

    pub fn with_limit(gzip: bool, limit: usize) -> EnvelopeDecoder {
        EnvelopeDecoder { buf: BytesMut::new(), limit, gzip }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete envelope, `Ok(None)` when more bytes are needed.
    pub fn try_next(&mut self) -> Result<Option<Envelope>, FrameError> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let flags = self.buf[0];
        if flags & !(FLAG_COMPRESSED | FLAG_END_STREAM) != 0 {
            return Err(FrameError::UnknownFlags(flags));
        }
        let len = usize::try_from(u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]))
            .unwrap_or(usize::MAX);
        if len > self.limit {
            return Err(FrameError::TooLarge { len, limit: self.limit });
        }
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        self.buf.advance(HEADER_LEN);
        let raw = self.buf.split_to(len).freeze();
        let payload = if flags & FLAG_COMPRESSED != 0 {
            // Cursor sometimes compresses frames without announcing it; accept gzip whenever
            // the payload is gzip, but refuse when nothing was negotiated and it is not.
            if !self.gzip && !raw.starts_with(&[0x1f, 0x8b]) {
                return Err(FrameError::UnexpectedCompression);
            }
            Bytes::from(gunzip(&raw, self.limit)?)
        } else {
            raw
        };
        Ok(Some(if flags & FLAG_END_STREAM != 0 { Envelope::EndStream(payload) } else { Envelope::Message(payload) }))
    }

    /// Called at the end of the body: leftover bytes are a truncated envelope.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let need = if self.buf.len() < HEADER_LEN {
            HEADER_LEN
        } else {
            HEADER_LEN
                + usize::try_from(u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]))
                    .unwrap_or(usize::MAX)
        };
        Err(FrameError::Truncated { need, have: self.buf.len() })
    }
}

/// Decodes every envelope of a complete body.
pub fn decode_envelopes(body: &[u8], gzip: bool) -> Result<Vec<Envelope>, FrameError> {
    let mut dec = EnvelopeDecoder::new(gzip);
    dec.push(body);
    let mut out = Vec::new();
    while let Some(env) = dec.try_next()? {
        out.push(env);
    }
    dec.finish()?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Errors and the end-stream frame

/// Connect error codes, with their HTTP statuses (connectrpc.com, PR #130).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    Canceled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    pub fn http_status(self) -> u16 {
        match self {
            Code::Canceled => 499,
            Code::Unknown | Code::Internal | Code::DataLoss => 500,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
            Code::DeadlineExceeded => 504,
            Code::NotFound => 404,
            Code::AlreadyExists | Code::Aborted => 409,
            Code::PermissionDenied => 403,
            Code::ResourceExhausted => 429,
            Code::Unimplemented => 501,
            Code::Unavailable => 503,
            Code::Unauthenticated => 401,
        }
    }
}

/// One error detail: a type name and the base64 of its protobuf (padding optional on input).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    #[serde(rename = "type")]
    pub type_name: String,
    pub value: String,
}

/// A Connect error: the unary error body, and the `error` of an end-stream frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: Code,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<ErrorDetail>,
}

/// The type name Cursor looks for in error details.
pub const ERROR_DETAILS_TYPE: &str = "aiserver.v1.ErrorDetails";

impl ErrorBody {
    /// An error with Cursor's structured detail (title, detail text, retryable flag).
    pub fn cursor(
        code: Code,
        kind: aiserver::error_details::Error,
        title: &str,
        detail: &str,
        retryable: bool,
    ) -> ErrorBody {
        let details = aiserver::ErrorDetails {
            error: kind as i32,
            details: Some(aiserver::CustomErrorDetails {
                title: title.to_owned(),
                detail: detail.to_owned(),
                is_retryable: Some(retryable),
                show_request_id: Some(false),
                should_show_immediate_error: Some(true),
                ..Default::default()
            }),
            is_expected: Some(true),
        };
        ErrorBody {
            code,
            message: detail.to_owned(),
            details: vec![ErrorDetail {
                type_name: ERROR_DETAILS_TYPE.to_owned(),
                value: base64::engine::general_purpose::STANDARD_NO_PAD.encode(details.encode_to_vec()),
            }],
        }
    }

    /// The JSON body of a unary error response.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|_| br#"{"code":"internal"}"#.to_vec())
    }

    /// Cursor's `ErrorDetails`, when one is attached and decodes.
    pub fn cursor_details(&self) -> Option<aiserver::ErrorDetails> {
        let d = self.details.iter().find(|d| d.type_name == ERROR_DETAILS_TYPE)?;
        let raw = base64::engine::general_purpose::STANDARD_NO_PAD.decode(d.value.trim_end_matches('=')).ok()?;
        decode_message(&raw).ok()
    }
}

/// The end-stream frame's JSON.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EndStream {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// Parses an end-stream payload.
pub fn decode_end_stream(json: &[u8]) -> Result<EndStream, FrameError> {
    serde_json::from_slice(json).map_err(|e| FrameError::EndStream(e.to_string()))
}

/// The fuzz and randomized-test entry points: run a decoder over arbitrary bytes. They must
/// return (never panic) whatever the input.
pub mod fuzz {
    use crate::cursor::protocol::agent;
    use crate::cursor::protocol::connect::{
        Envelope, EnvelopeDecoder, decode_append, decode_end_stream, decode_message,
    };

    /// Feeds `data` to an envelope decoder in two pieces and decodes what comes out.
    pub fn envelopes(data: &[u8]) {
        let split = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
        let mut dec = EnvelopeDecoder::with_limit(true, 1 << 20);
        dec.push(&data[..split]);
        let drain = |dec: &mut EnvelopeDecoder| -> bool {
            loop {
                match dec.try_next() {
                    Ok(Some(Envelope::Message(m))) => {
                        let _ = decode_message::<agent::AgentClientMessage>(&m);
                    }
                    Ok(Some(Envelope::EndStream(j))) => {
                        let _ = decode_end_stream(&j);
                    }
                    Ok(None) => return true,
                    Err(_) => return false,
                }
            }
        };
        if drain(&mut dec) {
            dec.push(&data[split..]);
            if drain(&mut dec) {
                let _ = dec.finish();
            }
        }
    }

    /// Decodes `data` as a BidiAppend body and its payload as an AgentClientMessage.
    pub fn bidi_append(data: &[u8]) {
        if let Ok(append) = decode_append(data) {
            let _ = decode_message::<agent::AgentClientMessage>(&append.data);
        }
    }
}

#[cfg(test)]
mod tests;
