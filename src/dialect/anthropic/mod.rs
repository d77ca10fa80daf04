//! Anthropic Messages (`/v1/messages`).
//!
//! Inbound: [`decode_request`], [`encode_response`], [`StreamEncoder`], [`encode_error`].
//! Outbound: [`encode_request`], [`decode_response`], [`StreamDecoder`], [`decode_error`].

use serde_json::Value;

use crate::dialect::DecodeError;
use crate::dialect::sse::SseEvent;
use crate::model;

/// Per-provider choices for outbound requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// `max_tokens` is required by Anthropic; used when the request has none.
    pub default_max_tokens: u32,
}

impl Default for EncodeOptions {
    fn default() -> EncodeOptions {
        EncodeOptions { default_max_tokens: 8192 }
    }
}

pub fn decode_request(body: &[u8]) -> Result<model::Request, DecodeError> {
    let _ = body;
    unimplemented!()
}

pub fn encode_response(resp: &model::Response) -> Value {
    let _ = resp;
    unimplemented!()
}

/// The body of an error response in this dialect (`{"type":"error","error":{...}}`).
pub fn encode_error(error: &model::ErrorInfo) -> Value {
    let _ = error;
    unimplemented!()
}

/// Outbound request body for `upstream_model`. Always asks for a stream.
pub fn encode_request(req: &model::Request, upstream_model: &str, opts: &EncodeOptions) -> Value {
    let _ = (req, upstream_model, opts);
    unimplemented!()
}

pub fn decode_response(body: &[u8]) -> Result<model::Response, DecodeError> {
    let _ = body;
    unimplemented!()
}

/// The error an upstream reported with a non-2xx `status` and `body` (any body, even not JSON).
pub fn decode_error(status: u16, body: &[u8]) -> model::ErrorInfo {
    let _ = (status, body);
    unimplemented!()
}

/// Turns canonical stream events into Anthropic SSE text (`message_start` ... `message_stop`).
#[derive(Debug)]
pub struct StreamEncoder {}

impl StreamEncoder {
    pub fn new(id: &str, model: &str) -> StreamEncoder {
        let _ = (id, model);
        unimplemented!()
    }

    pub fn encode(&mut self, event: &model::StreamEvent, out: &mut String) {
        let _ = (event, out);
        unimplemented!()
    }

    pub fn finish(&mut self, out: &mut String) {
        let _ = out;
        unimplemented!()
    }
}

/// Turns upstream Anthropic SSE events into canonical stream events.
#[derive(Debug, Default)]
pub struct StreamDecoder {}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    pub fn decode(&mut self, event: &SseEvent, out: &mut Vec<model::StreamEvent>) -> Result<(), DecodeError> {
        let _ = (event, out);
        unimplemented!()
    }

    /// True once `message_stop` was seen.
    pub fn is_done(&self) -> bool {
        unimplemented!()
    }

    pub fn finish(&mut self, out: &mut Vec<model::StreamEvent>) {
        let _ = out;
        unimplemented!()
    }
}
