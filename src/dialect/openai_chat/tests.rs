//! Data-driven tests of the OpenAI Chat codec.
//!
//! Inputs live in `tests/fixtures/openai_chat/<kind>/`, snapshots of the outputs in
//! `tests/fixtures/openai_chat/<kind>/expected/`. Refresh snapshots with
//! `UPDATE_EXPECT=1 cargo test --lib dialect::openai_chat` and review every diff by eye.

use std::path::{Path, PathBuf};

use expect_test::expect_file;
use serde_json::{Value, json};

use crate::dialect::DecodeError;
use crate::dialect::mutate::{Rng, mutate};
use crate::dialect::openai_chat::{
    EncodeOptions, MaxTokensField, StreamDecoder, StreamEncoder, StreamOptions, decode_error, decode_request,
    decode_response, encode_error, encode_request, encode_response,
};
use crate::dialect::sse::{self, SseEvent};
use crate::model::{self, Accumulator, ErrorInfo, ErrorKind, Part, Role, StreamEvent};

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

fn fixture_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openai_chat").join(kind)
}

/// The input fixtures of `kind` with extension `ext`, sorted by name, as (stem, contents).
fn fixtures(kind: &str, ext: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fixture_dir(kind);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("fixture directory exists")
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|p| p.is_file() && p.extension().and_then(|e| e.to_str()) == Some(ext))
        .map(|p| {
            let stem = p.file_stem().and_then(|s| s.to_str()).expect("UTF-8 file name").to_owned();
            (stem, std::fs::read(&p).expect("readable fixture"))
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no .{ext} fixtures in {}", dir.display());
    out
}

fn snapshot_path(kind: &str, name: &str) -> PathBuf {
    fixture_dir(kind).join("expected").join(name)
}

fn pretty(value: &Value) -> String {
    let mut s = serde_json::to_string_pretty(value).expect("serialisable JSON");
    s.push('\n');
    s
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("UTF-8 fixture")
}

/// Feeds every SSE event of `sse_text` through a decoder, rendering one line per canonical event
/// (or per decode error), then the events of `finish()`.
fn run_stream_decoder(sse_text: &str) -> (Vec<StreamEvent>, String) {
    let mut decoder = StreamDecoder::new();
    let mut all = Vec::new();
    let mut rendered = String::new();
    for event in sse::parse_all(sse_text) {
        let mut out = Vec::new();
        match decoder.decode(&event, &mut out) {
            Ok(()) => {}
            Err(err) => rendered.push_str(&format!("ERR {err:?}\n")),
        }
        for ev in out {
            rendered.push_str(&serde_json::to_string(&ev).expect("serialisable event"));
            rendered.push('\n');
            all.push(ev);
        }
    }
    rendered.push_str(&format!("-- done: {}\n-- finish:\n", decoder.is_done()));
    let mut out = Vec::new();
    decoder.finish(&mut out);
    for ev in out {
        rendered.push_str(&serde_json::to_string(&ev).expect("serialisable event"));
        rendered.push('\n');
        all.push(ev);
    }
    (all, rendered)
}

fn accumulate(events: &[StreamEvent]) -> model::Response {
    let mut acc = Accumulator::new();
    for ev in events {
        acc.push(ev);
    }
    acc.finish(0)
}

fn encode_options(v: &Value) -> EncodeOptions {
    let flag = |name: &str| v.get(name).and_then(Value::as_bool).unwrap_or(false);
    EncodeOptions {
        reasoning_content: flag("reasoning_content"),
        max_tokens_field: if flag("max_completion_tokens") {
            MaxTokensField::MaxCompletionTokens
        } else {
            MaxTokensField::MaxTokens
        },
        reasoning_effort: flag("reasoning_effort"),
    }
}

// ---------------------------------------------------------------------------------------------
// Snapshot tests over the fixture directories
// ---------------------------------------------------------------------------------------------

#[test]
fn stream_decode_fixtures() {
    for (name, bytes) in fixtures("stream_decode", "sse") {
        let (events, mut rendered) = run_stream_decoder(text(&bytes));
        rendered.push_str("-- accumulated:\n");
        rendered.push_str(&format!("{:#?}\n", accumulate(&events)));
        expect_file![snapshot_path("stream_decode", &format!("{name}.events"))].assert_eq(&rendered);
    }
}

#[test]
fn stream_encode_fixtures() {
    for (name, bytes) in fixtures("stream_encode", "json") {
        let input: Value = serde_json::from_slice(&bytes).expect("fixture JSON");
        let include_usage = input["include_usage"].as_bool().expect("include_usage flag");
        let events: Vec<StreamEvent> =
            serde_json::from_value(input["events"].clone()).expect("canonical stream events");
        let mut encoder =
            StreamEncoder::new("chatcmpl-kh-1", "client-model", 1_750_000_000_123, StreamOptions { include_usage });
        let mut out = String::new();
        for ev in &events {
            encoder.encode(ev, &mut out);
        }
        encoder.finish(&mut out);
        let mut again = String::new();
        encoder.finish(&mut again);
        assert_eq!(again, "", "{name}: finish twice writes nothing the second time");
        expect_file![snapshot_path("stream_encode", &format!("{name}.sse"))].assert_eq(&out);

        // What we write must read back through the real SSE parser and our own decoder.
        let (decoded, _) = run_stream_decoder(&out);
        let texts: String = decoded
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let sent: String = events
            .iter()
            .take_while(|e| !matches!(e, StreamEvent::Error { .. }))
            .filter_map(|e| match e {
                StreamEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, sent, "{name}: text survives encode -> decode");
    }
}

#[test]
fn request_decode_fixtures() {
    for (name, bytes) in fixtures("request_decode", "json") {
        let rendered = match decode_request(&bytes) {
            Ok(decoded) => format!("{decoded:#?}\n"),
            Err(err) => panic!("{name}: expected to decode, got {err:?}"),
        };
        expect_file![snapshot_path("request_decode", &format!("{name}.txt"))].assert_eq(&rendered);
    }
}

#[test]
fn bad_request_fixtures() {
    for (name, bytes) in fixtures("bad_request", "json") {
        let rendered = match decode_request(&bytes) {
            Ok(decoded) => panic!("{name}: expected an error, got {decoded:#?}"),
            Err(err) => format!("{err:?}\n{err}\n"),
        };
        expect_file![snapshot_path("bad_request", &format!("{name}.txt"))].assert_eq(&rendered);
    }
}

#[test]
fn request_encode_fixtures() {
    for (name, bytes) in fixtures("request_encode", "json") {
        let input: Value = serde_json::from_slice(&bytes).expect("fixture JSON");
        let req: model::Request = serde_json::from_value(input["request"].clone()).expect("canonical request");
        let upstream = input["upstream_model"].as_str().expect("upstream_model");
        let body = encode_request(&req, upstream, &encode_options(&input["options"]));
        expect_file![snapshot_path("request_encode", &format!("{name}.json"))].assert_eq(&pretty(&body));

        // Whatever we send upstream is itself a valid Chat Completions request.
        let body_bytes = serde_json::to_vec(&body).expect("serialisable body");
        let (back, opts) = decode_request(&body_bytes).expect("encoded request decodes");
        assert!(back.stream && opts.include_usage, "{name}: always streams with usage");
        assert_eq!(back.model, upstream);
        assert_eq!(back.tools.len(), req.tools.len(), "{name}: tools kept");
    }
}

#[test]
fn response_decode_fixtures() {
    for (name, bytes) in fixtures("response_decode", "json") {
        let resp = decode_response(&bytes).unwrap_or_else(|err| panic!("{name}: {err:?}"));
        expect_file![snapshot_path("response_decode", &format!("{name}.txt"))].assert_eq(&format!("{resp:#?}\n"));
    }
}

#[test]
fn response_encode_fixtures() {
    for (name, bytes) in fixtures("response_encode", "json") {
        let resp: model::Response = serde_json::from_slice(&bytes).expect("canonical response");
        let body = encode_response(&resp);
        expect_file![snapshot_path("response_encode", &format!("{name}.json"))].assert_eq(&pretty(&body));
    }
}

// ---------------------------------------------------------------------------------------------
// Usage mapping and round trips
// ---------------------------------------------------------------------------------------------

#[test]
fn response_usage_round_trips_prompt_tokens() {
    for (name, bytes) in fixtures("response_decode", "json") {
        let original: Value = serde_json::from_slice(&bytes).expect("fixture JSON");
        let Some(usage) = original.get("usage") else { continue };
        let resp = decode_response(&bytes).expect("decodes");
        let encoded = encode_response(&resp);
        for field in ["prompt_tokens", "completion_tokens", "total_tokens"] {
            assert_eq!(encoded["usage"][field], usage[field], "{name}: usage.{field} round trips");
        }
        // Cached tokens were subtracted from the canonical input and added back on the wire.
        let prompt = usage["prompt_tokens"].as_u64().expect("prompt_tokens");
        assert_eq!(resp.usage.input_tokens + resp.usage.cache_read_tokens, prompt, "{name}");
        assert_eq!(encoded["usage"]["prompt_tokens_details"]["cached_tokens"], json!(resp.usage.cache_read_tokens));
    }
}

#[test]
fn stream_usage_maps_cached_tokens_of_each_vendor() {
    let cases = [
        ("openai_text_usage_cached", 1200, 1024),
        ("deepseek_prompt_cache_hit_usage", 2048, 1920),
        ("content_and_tool_calls_same_chunk", 300, 256),
    ];
    for (name, prompt, cached) in cases {
        let bytes = std::fs::read(fixture_dir("stream_decode").join(format!("{name}.sse"))).expect("fixture");
        let (events, _) = run_stream_decoder(text(&bytes));
        let usage = accumulate(&events).usage;
        assert_eq!(usage.cache_read_tokens, cached, "{name}");
        assert_eq!(usage.input_tokens, prompt - cached, "{name}");
        assert_eq!(usage.openai_prompt_tokens(), prompt, "{name}");
    }
}

/// decode(encode(decode(x))) keeps what decode(x) said: messages, tools, tool calls, choices.
#[test]
fn request_round_trip_through_encode_request() {
    let opts = EncodeOptions {
        reasoning_content: true,
        max_tokens_field: MaxTokensField::MaxCompletionTokens,
        reasoning_effort: true,
    };
    for (name, bytes) in fixtures("request_decode", "json") {
        let (first, _) = decode_request(&bytes).expect("fixture decodes");
        let body = encode_request(&first, &first.model, &opts);
        let (second, _) = decode_request(&serde_json::to_vec(&body).expect("JSON")).expect("re-decodes");
        assert_eq!(second.messages, first.messages, "{name}: messages");
        assert_eq!(second.tools, first.tools, "{name}: tools");
        if !first.tools.is_empty() {
            assert_eq!(second.tool_choice, first.tool_choice, "{name}: tool_choice");
            assert_eq!(second.parallel_tool_calls, first.parallel_tool_calls, "{name}: parallel_tool_calls");
        }
        assert_eq!(second.params.max_tokens, first.params.max_tokens, "{name}: max tokens");
        assert_eq!(second.params.stop, first.params.stop, "{name}: stop");
        assert_eq!(second.params.temperature, first.params.temperature, "{name}: temperature");
        assert_eq!(second.params.seed, first.params.seed, "{name}: seed");
        assert_eq!(second.thinking, first.thinking, "{name}: thinking");
        assert_eq!(second.user, first.user, "{name}: user");
    }
}

#[test]
fn response_round_trip_through_encode_response() {
    for (name, bytes) in fixtures("response_decode", "json") {
        let first = decode_response(&bytes).expect("decodes");
        let body = serde_json::to_vec(&encode_response(&first)).expect("JSON");
        let second = decode_response(&body).expect("re-decodes");
        // Several text parts are joined into one; compare the rendered bodies instead.
        assert_eq!(encode_response(&second), encode_response(&first), "{name}");
        assert_eq!(second.usage, first.usage, "{name}: usage");
    }
}

#[test]
fn stream_events_match_the_non_streamed_answer() {
    // The accumulated stream and the decoded full response of the same answer agree.
    let bytes =
        std::fs::read(fixture_dir("stream_decode").join("parallel_tool_calls_fragmented.sse")).expect("fixture");
    let (events, _) = run_stream_decoder(text(&bytes));
    let resp = accumulate(&events);
    let tools: Vec<(&str, &Value)> = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::ToolUse { id, input, .. } => Some((id.as_str(), input)),
            _ => None,
        })
        .collect();
    assert_eq!(
        tools,
        vec![("call_weather_paris", &json!({"city": "Paris"})), ("call_weather_tokyo", &json!({"city": "Tokyo"}))]
    );
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

#[test]
fn encode_error_for_every_kind() {
    let kinds = ErrorKind::ALL;
    let all: Vec<Value> =
        kinds.iter().map(|&kind| encode_error(&ErrorInfo { kind, message: format!("{kind:?} happened") })).collect();
    expect_file![fixture_dir("errors").join("expected/encode_error.json")].assert_eq(&pretty(&Value::Array(all)));
}

#[test]
fn decode_error_bodies() {
    let long = "x".repeat(2000);
    let cases: Vec<(u16, Vec<u8>)> = vec![
        (
            401,
            br#"{"error":{"message":"Incorrect API key provided: sk-abc***xyz.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#.to_vec(),
        ),
        (
            429,
            br#"{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#.to_vec(),
        ),
        (
            400,
            br#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#.to_vec(),
        ),
        (500, br#"{"error":{"message":"Rate limit reached","type":"rate_limit_error","code":null}}"#.to_vec()),
        (404, br#"{"error":"model 'llama9' not found, try pulling it first"}"#.to_vec()),
        (422, br#"{"object":"error","message":"Input validation error","type":"BadRequestError","code":422}"#.to_vec()),
        (502, b"<html><body><h1>502 Bad Gateway</h1></body></html>\n".to_vec()),
        (503, b"".to_vec()),
        (500, b"   \n".to_vec()),
        (500, br#"{"error":{"message":"","type":"server_error"}}"#.to_vec()),
        (413, long.into_bytes()),
        (500, vec![0xff, 0xfe, b'o', b'k']),
        (529, br#"{"error":{"message":"Overloaded","type":"overloaded_error"}}"#.to_vec()),
    ];
    let mut rendered = String::new();
    for (status, body) in &cases {
        let info = decode_error(*status, body);
        rendered.push_str(&format!("{status} -> {:?}: {}\n", info.kind, info.message));
    }
    expect_file![fixture_dir("errors").join("expected/decode_error.txt")].assert_eq(&rendered);
}

#[test]
fn type_errors_name_the_field_path() {
    let cases: [(&[u8], &str); 6] = [
        (br#"{"model": 4, "messages": []}"#, "model"),
        (br#"{"model": "m", "messages": "hi"}"#, "messages"),
        (br#"{"model": "m", "messages": [{"role": "user", "content": 1}]}"#, "messages[0].content"),
        (
            br#"{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}"#,
            "messages[0].content[0].text",
        ),
        (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}"#, "max_tokens"),
        (
            br#"{"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": 1}}]}]}"#,
            "messages[0].tool_calls[0].function.name",
        ),
    ];
    for (body, want) in cases {
        match decode_request(body) {
            Err(DecodeError::Field { path, .. }) => assert_eq!(path, want, "{}", text(body)),
            other => panic!("{}: expected a Field error at {want}, got {other:?}", text(body)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Robustness
// ---------------------------------------------------------------------------------------------

#[test]
fn every_truncation_of_a_valid_request_is_an_error() {
    for (name, bytes) in fixtures("request_decode", "json") {
        let body = text(&bytes).trim_end().as_bytes();
        for len in 0..body.len() {
            assert!(decode_request(&body[..len]).is_err(), "{name}: prefix of {len} bytes decoded");
        }
        assert!(decode_request(body).is_ok(), "{name}: the whole body decodes");
    }
}

#[test]
fn every_truncation_of_a_stream_chunk_is_an_error_not_a_panic() {
    for (name, bytes) in fixtures("stream_decode", "sse") {
        for event in sse::parse_all(text(&bytes)) {
            if !event.data.starts_with('{') {
                continue;
            }
            for (cut, _) in event.data.char_indices() {
                let mut decoder = StreamDecoder::new();
                let mut out = Vec::new();
                let truncated = SseEvent::new(None, &event.data[..cut]);
                assert!(decoder.decode(&truncated, &mut out).is_err() || cut == 0, "{name}: cut at {cut}");
                decoder.finish(&mut out);
            }
        }
    }
}

#[test]
fn deeply_nested_and_huge_inputs_do_not_panic() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(decode_request(deep.as_bytes()).is_err());
    let deep_content = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":{}1{}}}]}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    assert!(decode_request(deep_content.as_bytes()).is_err());
    let mut decoder = StreamDecoder::new();
    assert!(decoder.decode(&SseEvent::new(None, deep), &mut Vec::new()).is_err());
    assert!(decode_response(b"{\"choices\": 5}").is_err());
    let info = decode_error(500, "é".repeat(10_000).as_bytes());
    assert_eq!(info.message.chars().count(), 501, "500 characters and an ellipsis");
}

#[test]
fn stream_decoder_tolerates_odd_but_valid_json() {
    let odd = [
        "{}",
        "null",
        "0",
        r#"{"choices":null,"usage":null}"#,
        r#"{"choices":[null,1,"x",{"delta":null,"finish_reason":7}]}"#,
        r#"{"id":5,"choices":[{"delta":{"tool_calls":[{"index":18446744073709551615,"function":null}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"id":"a"},{"id":"a"},{"index":0},{}]}}]}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551615,"prompt_tokens_details":{"cached_tokens":18446744073709551615}}}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":18446744073709551615}}"#,
        r#"{"error":null}"#,
        r#"{"error":{"message":5}}"#,
        r#"{"error":"plain"}"#,
    ];
    let mut decoder = StreamDecoder::new();
    let mut out = Vec::new();
    for data in odd {
        decoder.decode(&SseEvent::new(None, data), &mut out).expect("valid JSON is never an error");
    }
    decoder.finish(&mut out);
    let mut encoder = StreamEncoder::new("id", "m", 0, StreamOptions { include_usage: true });
    let mut sse_out = String::new();
    assert!(out.iter().any(|e| matches!(e, StreamEvent::Error { .. })), "error objects are errors");
    // Leave the errors out so the usage chunk is written.
    for ev in out.iter().filter(|e| !matches!(e, StreamEvent::Error { .. })) {
        encoder.encode(ev, &mut sse_out);
    }
    encoder.finish(&mut sse_out);
    assert!(sse_out.ends_with("data: [DONE]\n\n"));
    assert!(sse_out.contains(r#""total_tokens":18446744073709551615"#), "saturates instead of overflowing");

    let huge = model::Usage { input_tokens: u64::MAX, output_tokens: u64::MAX, ..Default::default() };
    let body = encode_response(&model::Response { usage: huge, ..Default::default() });
    assert_eq!(body["usage"]["total_tokens"], json!(u64::MAX));
}

/// Runs everything downstream of a decoded request so a strange but accepted request cannot
/// panic later either.
fn exercise_request(req: &model::Request) {
    for opts in [
        EncodeOptions::default(),
        EncodeOptions { reasoning_content: true, reasoning_effort: true, ..Default::default() },
    ] {
        let body = encode_request(req, "upstream", &opts);
        assert_eq!(body["stream"], json!(true));
    }
    let resp = model::Response {
        content: req.messages.iter().filter(|m| m.role == Role::Assistant).flat_map(|m| m.content.clone()).collect(),
        ..Default::default()
    };
    let _ = encode_response(&resp);
}

#[test]
fn mutated_inputs_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut requests: Vec<Vec<u8>> = fixtures("request_decode", "json").into_iter().map(|(_, b)| b).collect();
    requests.extend(fixtures("bad_request", "json").into_iter().map(|(_, b)| b));
    let streams: Vec<Vec<u8>> = fixtures("stream_decode", "sse").into_iter().map(|(_, b)| b).collect();
    let responses: Vec<Vec<u8>> = fixtures("response_decode", "json").into_iter().map(|(_, b)| b).collect();

    let mut accepted = 0;
    for case in 0..1200 {
        let base = &requests[case % requests.len()];
        let mutated = mutate(&mut rng, base);
        if let Ok((req, _)) = decode_request(&mutated) {
            accepted += 1;
            exercise_request(&req);
        }
        let base = &responses[case % responses.len()];
        let mutated = mutate(&mut rng, base);
        if let Ok(resp) = decode_response(&mutated) {
            let _ = encode_response(&resp);
        }
        let _ = decode_error(500, &mutated);
    }
    assert!(accepted > 0, "some mutations should still be valid requests");

    for case in 0..800 {
        let base = &streams[case % streams.len()];
        let mutated = mutate(&mut rng, base);
        let sse_text = String::from_utf8_lossy(&mutated);
        // Mutate whole texts (framing) through the real parser, and single event payloads.
        let mut events = sse::parse_all(&sse_text);
        let pick = rng.below(events.len());
        if let Some(ev) = events.get_mut(pick) {
            ev.data = String::from_utf8_lossy(&mutate(&mut rng, ev.data.as_bytes())).into_owned();
        }
        let mut decoder = StreamDecoder::new();
        let mut out = Vec::new();
        for ev in &events {
            let _ = decoder.decode(ev, &mut out);
        }
        decoder.finish(&mut out);
        let mut encoder = StreamEncoder::new("id", "m", 0, StreamOptions { include_usage: case % 2 == 0 });
        let mut sse_out = String::new();
        for ev in &out {
            encoder.encode(ev, &mut sse_out);
        }
        encoder.finish(&mut sse_out);
        let _ = accumulate(&out);
    }
}
