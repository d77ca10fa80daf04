//! The fuzz entry points of the three JSON dialects (cargo-fuzz targets `anthropic`,
//! `openai_chat` and `openai_responses` in `fuzz/`, beside the Cursor ones). Each runs one
//! dialect's decoders over arbitrary bytes — as a client's request body, as an error body and as
//! a stream of server-sent events (upstreams always stream; no whole response body is decoded) — and feeds whatever decodes
//! to every encoder that would meet it in the gateway: a decoded request to the three outbound
//! request encoders, decoded stream events to the three client stream encoders and (accumulated)
//! to the three response encoders. They must return, never panic, whatever the input.

use crate::dialect::sse::SseEvent;
use crate::dialect::{anthropic as an, openai_chat as chat, openai_responses as resp};
use crate::model::{Accumulator, Request, Response, StreamEvent};

/// Feeds `data`'s SSE events to a stream decoder until it fails or is done, then hands what it
/// decoded to every client encoder. (The three decoders share method names, not a trait.)
macro_rules! drive {
    ($dec:expr, $data:expr) => {{
        let mut dec = $dec;
        let mut out = Vec::new();
        for ev in events($data) {
            if dec.decode(&ev, &mut out).is_err() || dec.is_done() {
                break;
            }
        }
        dec.finish(&mut out);
        client_streams(&out);
    }};
}

/// Anthropic Messages: request, error, stream.
pub fn anthropic(data: &[u8]) {
    if let Ok(req) = an::decode_request(data) {
        outbound(&req);
    }
    let _ = an::decode_error(status(data), data);
    drive!(an::StreamDecoder::new(), data);
}

/// OpenAI Chat Completions: request, error, stream.
pub fn openai_chat(data: &[u8]) {
    if let Ok((req, _)) = chat::decode_request(data) {
        outbound(&req);
    }
    let _ = chat::decode_error(status(data), data);
    drive!(chat::StreamDecoder::new(), data);
}

/// OpenAI Responses: request, error, stream.
pub fn openai_responses(data: &[u8]) {
    if let Ok((req, _)) = resp::decode_request(data) {
        outbound(&req);
    }
    let _ = resp::decode_error(status(data), data);
    drive!(resp::StreamDecoder::new(), data);
}

/// An HTTP error status picked by the input (400..=599).
fn status(data: &[u8]) -> u16 {
    400 + data.last().map_or(0, |b| u16::from(*b) % 200)
}

/// The input as server-sent events, parsed the simple way (events split on a blank line, `event:`
/// and `data:` fields, other lines skipped). The provider's real parser is `eventsource-stream`;
/// here only the decoders' handling of arbitrary event names and payloads matters.
fn events(data: &[u8]) -> Vec<SseEvent> {
    let text = String::from_utf8_lossy(data);
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut ev = SseEvent::default();
        let mut data_lines: Vec<&str> = Vec::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                ev.event = Some(v.trim_start().to_owned());
            } else if let Some(v) = line.strip_prefix("data:") {
                data_lines.push(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if data_lines.is_empty() && ev.event.is_none() {
            continue;
        }
        ev.data = data_lines.join("\n");
        out.push(ev);
    }
    out
}

/// A decoded client request, encoded for each provider dialect.
fn outbound(req: &Request) {
    let _ = an::encode_request(req, "m", &an::EncodeOptions::default());
    for reasoning_content in [false, true] {
        let opts = chat::EncodeOptions { reasoning_content, reasoning_effort: reasoning_content, ..Default::default() };
        let _ = chat::encode_request(req, "m", &opts);
    }
    let _ = resp::encode_request(req, "m", &resp::EncodeOptions { reasoning: true });
}

/// A decoded upstream answer, encoded for each client dialect.
fn answers(r: &Response) {
    let _ = an::encode_response(r);
    let _ = chat::encode_response(r);
    let _ = resp::encode_response(r);
}

/// Decoded upstream events, streamed to each client dialect and accumulated into a whole answer.
fn client_streams(events: &[StreamEvent]) {
    let mut s = String::new();
    let mut a = an::StreamEncoder::new("id", "m");
    let mut c = chat::StreamEncoder::new("id", "m", 0, chat::StreamOptions { include_usage: true });
    let mut r = resp::StreamEncoder::new("id", "m", 0);
    let mut acc = Accumulator::new();
    for ev in events {
        a.encode(ev, &mut s);
        c.encode(ev, &mut s);
        r.encode(ev, &mut s);
        acc.push(ev);
        s.clear();
    }
    a.finish(&mut s);
    c.finish(&mut s);
    r.finish(&mut s);
    answers(&acc.finish(0));
}
