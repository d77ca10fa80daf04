//! Data-driven tests of the OpenAI Responses codec.
//!
//! Inputs live in `tests/fixtures/openai_responses/<kind>/`, snapshots of the outputs in
//! `tests/fixtures/openai_responses/<kind>/expected/`. Refresh snapshots with
//! `UPDATE_EXPECT=1 cargo test --lib dialect::openai_responses` and review every diff by eye.

use std::path::{Path, PathBuf};

use expect_test::expect_file;
use serde_json::{Value, json};

use crate::dialect::DecodeError;
use crate::dialect::mutate::{Rng, mutate};
use crate::dialect::openai_responses::{
    EncodeOptions, REDACTED_PREFIX, StreamDecoder, StreamEncoder, decode_error, decode_request, decode_response,
    encode_error, encode_request, encode_response,
};
use crate::dialect::sse::{self, SseEvent};
use crate::model::reasoning::Envelope;
use crate::model::{self, Accumulator, ErrorInfo, ErrorKind, Part, Role, StopReason, StreamEvent, ToolChoice};

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

fn fixture_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openai_responses").join(kind)
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

fn fixture(kind: &str, name: &str) -> Vec<u8> {
    std::fs::read(fixture_dir(kind).join(name)).expect("fixture")
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

/// Feeds every SSE event through a decoder, rendering one line per canonical event (or decode
/// error), then the events of `finish()`.
fn run_stream_decoder(sse_text: &str) -> (Vec<StreamEvent>, String) {
    let mut decoder = StreamDecoder::new();
    let mut all = Vec::new();
    let mut rendered = String::new();
    for event in sse::parse_all(sse_text) {
        let mut out = Vec::new();
        if let Err(err) = decoder.decode(&event, &mut out) {
            rendered.push_str(&format!("ERR {err:?}\n"));
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

fn encode_stream(events: &[StreamEvent]) -> String {
    let mut encoder = StreamEncoder::new("resp_kh1", "client-model", 1_750_000_000_123);
    let mut out = String::new();
    for ev in events {
        encoder.encode(ev, &mut out);
    }
    encoder.finish(&mut out);
    let mut again = String::new();
    encoder.finish(&mut again);
    assert_eq!(again, "", "finish twice writes nothing the second time");
    out
}

fn tool_uses(content: &[Part]) -> Vec<(String, String, Value)> {
    content
        .iter()
        .filter_map(|p| match p {
            Part::ToolUse { id, name, input } => Some((id.clone(), name.clone(), input.clone())),
            _ => None,
        })
        .collect()
}

fn text_of(content: &[Part]) -> String {
    content.iter().filter_map(|p| if let Part::Text { text, .. } = p { Some(text.as_str()) } else { None }).collect()
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
        let events: Vec<StreamEvent> =
            serde_json::from_value(input["events"].clone()).expect("canonical stream events");
        let out = encode_stream(&events);
        expect_file![snapshot_path("stream_encode", &format!("{name}.sse"))].assert_eq(&out);

        // Every event is named after its type and numbered in order from 0.
        let parsed = sse::parse_all(&out);
        for (n, ev) in parsed.iter().enumerate() {
            let data: Value = serde_json::from_str(&ev.data).expect("event data is JSON");
            assert_eq!(ev.event.as_deref(), data["type"].as_str(), "{name}: event name is the type");
            assert_eq!(data["sequence_number"], json!(n), "{name}: sequence numbers");
        }

        // What we write reads back through our own decoder with the same text and calls.
        let (decoded, _) = run_stream_decoder(&out);
        let sent: Vec<StreamEvent> =
            events.iter().take_while(|e| !matches!(e, StreamEvent::Error { .. })).cloned().collect();
        let (want, got) = (accumulate(&sent), accumulate(&decoded));
        assert_eq!(text_of(&got.content), text_of(&want.content), "{name}: text survives");
        assert_eq!(tool_uses(&got.content), tool_uses(&want.content), "{name}: calls survive");
        // A raw (Anthropic) signature comes back inside an `anthropic` envelope: same reasoning.
        let thinking = |r: &model::Response| -> Vec<(String, Option<Envelope>)> {
            r.content
                .iter()
                .filter_map(|p| match p {
                    Part::Thinking { text, signature } => {
                        Some((text.clone(), signature.as_deref().and_then(Envelope::of_signature)))
                    }
                    Part::RedactedThinking { data } => Some((format!("redacted:{data}"), None)),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(thinking(&got), thinking(&want), "{name}: reasoning and envelopes survive");
        if !events.iter().any(|e| matches!(e, StreamEvent::Error { .. })) {
            assert_eq!(got.usage, want.usage, "{name}: usage survives");
        }
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
        let opts = EncodeOptions { reasoning: input["options"]["reasoning"].as_bool().unwrap_or(false) };
        let body = encode_request(&req, upstream, &opts);
        expect_file![snapshot_path("request_encode", &format!("{name}.json"))].assert_eq(&pretty(&body));

        assert_eq!(body["stream"], json!(true), "{name}: always streams");
        assert_eq!(body["store"], json!(false), "{name}: never stores upstream");
        // Arguments are always strings, tools never nested under `function`.
        for item in body["input"].as_array().expect("input") {
            if item["type"] == "function_call" {
                assert!(item["arguments"].is_string(), "{name}: {item}");
            }
        }
        for tool in body["tools"].as_array().into_iter().flatten() {
            assert!(tool.get("function").is_none() && tool["name"].is_string(), "{name}: {tool}");
        }
        // Whatever we send upstream is itself a valid Responses request.
        let (back, opts) = decode_request(&serde_json::to_vec(&body).expect("JSON")).expect("encoded request decodes");
        assert!(back.stream && !opts.store, "{name}");
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
        // And back: the same content (text runs merged), calls and envelopes.
        let back = decode_response(&serde_json::to_vec(&body).expect("JSON")).expect("re-decodes");
        assert_eq!(text_of(&back.content), text_of(&resp.content), "{name}");
        assert_eq!(tool_uses(&back.content), tool_uses(&resp.content), "{name}");
        assert_eq!(back.usage.openai_prompt_tokens(), resp.usage.openai_prompt_tokens(), "{name}");
        assert_eq!(back.usage.cache_read_tokens, resp.usage.cache_read_tokens, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Mapping details
// ---------------------------------------------------------------------------------------------

#[test]
fn codex_request_decodes_with_its_tool_history() {
    let (req, opts) = decode_request(&fixture("request_decode", "codex_multi_turn.json")).expect("decodes");
    assert!(req.stream);
    assert!(!opts.store && opts.has_instructions && opts.previous_response_id.is_none());
    assert_eq!(req.thinking.and_then(|t| t.effort), Some(model::Effort::Medium));
    let names: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["shell", "update_plan", "apply_patch"], "web_search and custom tools skipped");
    assert_eq!(req.tool_choice, Some(ToolChoice::Auto));
    let roles: Vec<Role> = req.messages.iter().map(|m| m.role).collect();
    use Role::{Assistant, System, Tool, User};
    assert_eq!(roles, [System, System, User, User, Assistant, Tool, Assistant, Tool, Assistant, User]);
    // Every call is answered by a result with its id, in order.
    let calls: Vec<String> = req.messages.iter().flat_map(|m| tool_uses(&m.content)).map(|(id, _, _)| id).collect();
    let results: Vec<String> = req
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|p| if let Part::ToolResult { tool_use_id, .. } = p { Some(tool_use_id.clone()) } else { None })
        .collect();
    assert_eq!(calls, ["call_shell_1", "call_patch_2", "call_shell_3"]);
    assert_eq!(results, calls);
    // The second assistant turn: encrypted reasoning, text, then two parallel calls.
    let kinds: Vec<&str> = req.messages[6]
        .content
        .iter()
        .map(|p| match p {
            Part::Thinking { .. } => "thinking",
            Part::Text { .. } => "text",
            Part::ToolUse { .. } => "tool_use",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use", "tool_use"]);
    assert_eq!(
        req.messages[6].content[0],
        Part::Thinking {
            text: String::new(),
            // Codex's own ciphertext, tagged as Responses reasoning (the item had no id).
            signature: Some(Envelope::openai_responses(None, Some("gAAAAABoEnc2-second")).encode())
        }
    );
}

/// decode(encode(decode(x))) keeps the conversation, except what Responses upstreams cannot use
/// (unsigned and redacted thinking).
#[test]
fn request_round_trip_through_encode_request() {
    for (name, bytes) in fixtures("request_decode", "json") {
        let (first, _) = decode_request(&bytes).expect("fixture decodes");
        let body = encode_request(&first, &first.model, &EncodeOptions { reasoning: true });
        let (second, _) = decode_request(&serde_json::to_vec(&body).expect("JSON")).expect("re-decodes");
        let sendable: Vec<model::Message> = first
            .messages
            .iter()
            .map(|m| model::Message {
                role: m.role,
                content: m
                    .content
                    .iter()
                    .filter(|p| !matches!(p, Part::Thinking { signature: None, .. } | Part::RedactedThinking { .. }))
                    .cloned()
                    .collect(),
            })
            .filter(|m| !m.content.is_empty())
            .collect();
        // Assistant text runs are merged into one message item.
        let merged = |msgs: &[model::Message]| -> Vec<Summary> {
            msgs.iter().map(|m| (m.role, text_of(&m.content), tool_uses(&m.content))).collect()
        };
        assert_eq!(merged(&second.messages), merged(&sendable), "{name}: messages");
        assert_eq!(second.tools, first.tools, "{name}: tools");
        if !first.tools.is_empty() {
            assert_eq!(second.tool_choice, first.tool_choice, "{name}: tool_choice");
            assert_eq!(second.parallel_tool_calls, first.parallel_tool_calls, "{name}");
        }
        assert_eq!(second.params.max_tokens, first.params.max_tokens, "{name}");
        assert_eq!(second.params.temperature, first.params.temperature, "{name}");
        assert_eq!(second.user, first.user, "{name}");
    }
}

#[test]
fn codex_request_round_trips_exactly() {
    let (first, _) = decode_request(&fixture("request_decode", "codex_multi_turn.json")).expect("decodes");
    let body = encode_request(&first, "gpt-5-codex", &EncodeOptions { reasoning: true });
    assert_eq!(body["instructions"], json!(first_text(&first.messages[0])));
    assert_eq!(body["input"][0]["role"], json!("developer"), "later system messages stay in place");
    let (second, _) = decode_request(&serde_json::to_vec(&body).expect("JSON")).expect("re-decodes");
    assert_eq!(second.messages, first.messages);
    assert_eq!(body["reasoning"], json!({"effort": "medium", "summary": "auto"}));
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
}

/// A message as role, text and tool calls.
type Summary = (Role, String, Vec<(String, String, Value)>);

fn first_text(m: &model::Message) -> String {
    text_of(&m.content)
}

#[test]
fn usage_maps_cached_tokens_as_a_subset() {
    let (events, _) = run_stream_decoder(text(&fixture("stream_decode", "text_cached_usage.sse")));
    let usage = accumulate(&events).usage;
    assert_eq!((usage.input_tokens, usage.cache_read_tokens, usage.output_tokens), (176, 1024, 5));
    assert_eq!(usage.openai_prompt_tokens(), 1200);

    let resp = decode_response(&fixture("response_decode", "text_cached.json")).expect("decodes");
    assert_eq!((resp.usage.input_tokens, resp.usage.cache_read_tokens), (86, 1920));
    let body = encode_response(&resp);
    assert_eq!(body["usage"]["input_tokens"], json!(2006), "input_tokens includes cached tokens again");
    assert_eq!(body["usage"]["input_tokens_details"]["cached_tokens"], json!(1920));
    assert_eq!(body["usage"]["total_tokens"], json!(2306));

    // Anthropic-style disjoint usage: writes count as input, reads as cached.
    let u = model::Usage {
        input_tokens: 200,
        cache_read_tokens: 800,
        cache_write_tokens: 100,
        output_tokens: 7,
        ..Default::default()
    };
    let body = encode_response(&model::Response { usage: u, ..Default::default() });
    assert_eq!(body["usage"]["input_tokens"], json!(1100));
    assert_eq!(body["usage"]["input_tokens_details"]["cached_tokens"], json!(800));

    // More cached than input (a vendor bug) clamps instead of going negative.
    let resp = decode_response(
        br#"{"usage":{"input_tokens":5,"input_tokens_details":{"cached_tokens":9},"output_tokens":1}}"#,
    )
    .expect("decodes");
    assert_eq!((resp.usage.input_tokens, resp.usage.cache_read_tokens), (0, 5));
}

#[test]
fn function_call_items_are_complete_when_done() {
    let bytes = fixture("stream_encode", "thinking_then_interleaved_tools.json");
    let input: Value = serde_json::from_slice(&bytes).expect("JSON");
    let events: Vec<StreamEvent> = serde_json::from_value(input["events"].clone()).expect("events");
    let out = encode_stream(&events);
    let data: Vec<Value> = sse::parse_all(&out).iter().map(|e| serde_json::from_str(&e.data).expect("JSON")).collect();
    let done: Vec<&Value> = data
        .iter()
        .filter(|d| d["type"] == "response.output_item.done" && d["item"]["type"] == "function_call")
        .map(|d| &d["item"])
        .collect();
    assert_eq!(done.len(), 2);
    assert_eq!(done[0]["name"], json!("get_weather"));
    assert_eq!(done[0]["call_id"], json!("call_a"));
    assert_eq!(done[0]["arguments"], json!("{\"city\":\"Paris\"}"));
    assert_eq!(done[1]["name"], json!("get_time"));
    assert_eq!(done[1]["arguments"], json!("{\"tz\":\"CET\"}"));
    let completed = data.last().expect("events");
    assert_eq!(completed["type"], json!("response.completed"));
    let output = completed["response"]["output"].as_array().expect("output");
    let types: Vec<&str> = output.iter().filter_map(|i| i["type"].as_str()).collect();
    assert_eq!(types, ["reasoning", "reasoning", "message", "function_call", "function_call"]);
    // An Anthropic signature reaches a Responses client inside an `anthropic` envelope.
    assert_eq!(output[0]["encrypted_content"], json!(Envelope::anthropic("EqQBCkYIBxgCKkBsig==").encode()));
    assert_eq!(output[1]["encrypted_content"], json!(format!("{REDACTED_PREFIX}RkVEQ0JB")));
    assert!(output.iter().all(|i| i["type"] != "function_call" || i["arguments"].is_string()));
    assert_eq!(completed["response"]["usage"]["output_tokens_details"]["reasoning_tokens"], json!(9));
}

#[test]
fn stop_reasons_and_statuses() {
    let (events, _) = run_stream_decoder(text(&fixture("stream_decode", "incomplete_max_tokens.sse")));
    assert_eq!(accumulate(&events).stop_reason, Some(StopReason::MaxTokens));
    let (events, _) = run_stream_decoder(text(&fixture("stream_decode", "parallel_calls_interleaved.sse")));
    assert_eq!(accumulate(&events).stop_reason, Some(StopReason::ToolUse));
    let body = encode_response(&model::Response { stop_reason: Some(StopReason::MaxTokens), ..Default::default() });
    assert_eq!(body["status"], json!("incomplete"));
    assert_eq!(body["incomplete_details"], json!({"reason": "max_output_tokens"}));
    let body = encode_response(&model::Response { stop_reason: Some(StopReason::ToolUse), ..Default::default() });
    assert_eq!((body["status"].clone(), body["incomplete_details"].clone()), (json!("completed"), Value::Null));
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

#[test]
fn encode_error_for_every_kind() {
    let kinds = [
        ErrorKind::InvalidRequest,
        ErrorKind::Authentication,
        ErrorKind::PermissionDenied,
        ErrorKind::NotFound,
        ErrorKind::RequestTooLarge,
        ErrorKind::RateLimited,
        ErrorKind::Overloaded,
        ErrorKind::Timeout,
        ErrorKind::Upstream,
        ErrorKind::Internal,
    ];
    let all: Vec<Value> =
        kinds.iter().map(|&kind| encode_error(&ErrorInfo { kind, message: format!("{kind:?} happened") })).collect();
    expect_file![fixture_dir("errors").join("expected/encode_error.json")].assert_eq(&pretty(&Value::Array(all)));
}

#[test]
fn decode_error_bodies() {
    let cases: Vec<(u16, Vec<u8>)> = vec![
        (
            400,
            br#"{"error":{"message":"Previous response with id 'resp_x' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}"#.to_vec(),
        ),
        (401, br#"{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}"#.to_vec()),
        (429, br#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#.to_vec()),
        (500, br#"{"error":{"message":"Overloaded","type":"server_error","code":"server_is_overloaded"}}"#.to_vec()),
        (404, br#"{"error":"no such model"}"#.to_vec()),
        (502, b"<html>Bad Gateway</html>".to_vec()),
        (503, b"".to_vec()),
        (500, vec![0xff, 0xfe]),
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
    let cases: [(&[u8], &str); 7] = [
        (br#"{"model": 4, "input": "x"}"#, "model"),
        (br#"{"model": "m", "input": 5}"#, "input"),
        (br#"{"model": "m", "input": [{"type": "function_call", "call_id": 1}]}"#, "input[0].call_id"),
        (
            br#"{"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]}"#,
            "input[0].content[0].text",
        ),
        (br#"{"model": "m", "input": "x", "max_output_tokens": "many"}"#, "max_output_tokens"),
        (br#"{"model": "m", "input": "x", "tools": [{"type": "function", "name": 3}]}"#, "tools[0].name"),
        (br#"{"model": "m", "input": "x", "reasoning": {"effort": 1}}"#, "reasoning.effort"),
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
fn every_truncation_of_a_stream_event_is_an_error_not_a_panic() {
    for (name, bytes) in fixtures("stream_decode", "sse") {
        for event in sse::parse_all(text(&bytes)) {
            if !event.data.starts_with('{') {
                continue;
            }
            for (cut, _) in event.data.char_indices() {
                let mut decoder = StreamDecoder::new();
                let mut out = Vec::new();
                let truncated = SseEvent::new(event.event.as_deref(), &event.data[..cut]);
                assert!(decoder.decode(&truncated, &mut out).is_err() || cut == 0, "{name}: cut at {cut}");
                decoder.finish(&mut out);
            }
        }
    }
}

#[test]
fn stream_decoder_tolerates_odd_but_valid_json() {
    let odd = [
        "{}",
        "null",
        "0",
        r#"{"type":"response.created","response":5}"#,
        r#"{"type":"response.output_item.added","item":null}"#,
        r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","arguments":{"a":1}}}"#,
        r#"{"type":"response.function_call_arguments.delta","output_index":0,"delta":7}"#,
        r#"{"type":"response.output_item.done","output_index":18446744073709551615,"item":{"type":"function_call"}}"#,
        r#"{"type":"response.output_item.done","output_index":3,"item":{"type":"reasoning","summary":5,"encrypted_content":4}}"#,
        r#"{"type":"response.output_text.delta","delta":null}"#,
        r#"{"type":"response.reasoning_summary_text.delta","item_id":"x","summary_index":"a","delta":"t"}"#,
        r#"{"type":"response.completed","response":{"output":7,"usage":{"input_tokens":18446744073709551615,"input_tokens_details":{"cached_tokens":18446744073709551615},"output_tokens":18446744073709551615}}}"#,
    ];
    let mut decoder = StreamDecoder::new();
    let mut out = Vec::new();
    for data in odd {
        decoder.decode(&SseEvent::new(None, data), &mut out).expect("valid JSON is never an error");
    }
    decoder.finish(&mut out);
    let sse_out = encode_stream(&out);
    assert!(sse_out.contains("response.completed"));
    assert!(sse_out.contains(r#""total_tokens":18446744073709551615"#), "saturates instead of overflowing");
    for data in [r#"{"type":"error"}"#, r#"{"type":"response.failed","response":{"error":{"message":5}}}"#] {
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        d.decode(&SseEvent::new(None, data), &mut out).expect("valid JSON");
        assert!(matches!(out.as_slice(), [StreamEvent::Error { .. }]), "{data}: {out:?}");
        assert!(d.is_done());
    }
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
            let body = encode_request(&req, "upstream", &EncodeOptions { reasoning: case % 2 == 0 });
            assert_eq!(body["stream"], json!(true));
            let resp = model::Response {
                content: req
                    .messages
                    .iter()
                    .filter(|m| m.role == Role::Assistant)
                    .flat_map(|m| m.content.clone())
                    .collect(),
                ..Default::default()
            };
            let _ = encode_response(&resp);
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
        let _ = encode_stream(&out);
        let _ = accumulate(&out);
    }
}
