//! The inbound dialects, as one closed enum: how each decodes a request and encodes answers,
//! stream chunks and errors.

use serde_json::Value;

use crate::dialect::{DecodeError, anthropic, openai_chat, openai_responses};
use crate::model::{self, ErrorInfo, StreamEvent};

/// The dialect a request arrived in, with its per-request stream options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inbound {
    OpenaiChat(openai_chat::StreamOptions),
    Anthropic,
    /// `/v1/responses`. Its per-request options (`previous_response_id`, ...) are handled by the
    /// handler before the call, so none travel here.
    OpenaiResponses,
}

impl Inbound {
    pub fn name(self) -> &'static str {
        match self {
            Inbound::OpenaiChat(_) => "openai_chat",
            Inbound::Anthropic => "anthropic",
            Inbound::OpenaiResponses => "openai_responses",
        }
    }

    /// Decodes a request body, returning the dialect with the options it asked for.
    pub fn decode(self, body: &[u8]) -> Result<(model::Request, Inbound), DecodeError> {
        match self {
            Inbound::OpenaiChat(_) => openai_chat::decode_request(body).map(|(r, o)| (r, Inbound::OpenaiChat(o))),
            Inbound::Anthropic => anthropic::decode_request(body).map(|r| (r, Inbound::Anthropic)),
            Inbound::OpenaiResponses => {
                openai_responses::decode_request(body).map(|(r, _)| (r, Inbound::OpenaiResponses))
            }
        }
    }

    pub fn encode_response(self, resp: &model::Response) -> Value {
        match self {
            Inbound::OpenaiChat(_) => openai_chat::encode_response(resp),
            Inbound::Anthropic => anthropic::encode_response(resp),
            Inbound::OpenaiResponses => openai_responses::encode_response(resp),
        }
    }

    pub fn encode_error(self, error: &ErrorInfo) -> Value {
        match self {
            Inbound::OpenaiChat(_) => openai_chat::encode_error(error),
            Inbound::Anthropic => anthropic::encode_error(error),
            Inbound::OpenaiResponses => openai_responses::encode_error(error),
        }
    }

    pub fn stream_encoder(self, id: &str, model: &str, created_ms: i64) -> StreamEncoder {
        match self {
            Inbound::OpenaiChat(opts) => {
                StreamEncoder::OpenaiChat(openai_chat::StreamEncoder::new(id, model, created_ms, opts))
            }
            Inbound::Anthropic => StreamEncoder::Anthropic(anthropic::StreamEncoder::new(id, model)),
            Inbound::OpenaiResponses => {
                StreamEncoder::OpenaiResponses(openai_responses::StreamEncoder::new(id, model, created_ms))
            }
        }
    }

    /// The inbound dialect of a path (for errors raised before a handler runs).
    pub fn for_path(path: &str) -> Inbound {
        if path.starts_with("/v1/messages") {
            Inbound::Anthropic
        } else if path.starts_with("/v1/responses") {
            Inbound::OpenaiResponses
        } else {
            Inbound::OpenaiChat(openai_chat::StreamOptions::default())
        }
    }
}

#[derive(Debug)]
pub enum StreamEncoder {
    OpenaiChat(openai_chat::StreamEncoder),
    Anthropic(anthropic::StreamEncoder),
    OpenaiResponses(openai_responses::StreamEncoder),
}

impl StreamEncoder {
    pub fn encode(&mut self, event: &StreamEvent, out: &mut String) {
        match self {
            StreamEncoder::OpenaiChat(e) => e.encode(event, out),
            StreamEncoder::Anthropic(e) => e.encode(event, out),
            StreamEncoder::OpenaiResponses(e) => e.encode(event, out),
        }
    }

    pub fn finish(&mut self, out: &mut String) {
        match self {
            StreamEncoder::OpenaiChat(e) => e.finish(out),
            StreamEncoder::Anthropic(e) => e.finish(out),
            StreamEncoder::OpenaiResponses(e) => e.finish(out),
        }
    }
}
