//! Tests of the Anthropic codec, driven by the fixtures in `tests/fixtures/anthropic/`.
//!
//! Snapshots live in `tests/fixtures/anthropic/snapshots/`; refresh them with
//! `UPDATE_EXPECT=1 cargo test --lib dialect::anthropic` and review every change by eye.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::dialect::DecodeError;
use crate::dialect::anthropic::{
    EncodeOptions, StreamDecoder, StreamEncoder, decode_error, decode_request, decode_response, encode_error,
    encode_request, encode_response,
};
use crate::dialect::mutate::{Rng, mutate};
use crate::dialect::sse::{SseEvent, parse_all};
use crate::model::{
    Accumulator, CacheControl, Effort, ErrorInfo, ErrorKind, ImageSource, Message, Part, Request, Response, Role,
    SamplingParams, StopReason, StreamEvent, ThinkingConfig, ToolChoice, ToolDef, Usage,
};

// ------------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------------

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/anthropic").join(name)
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(fixture_path(name)).expect("fixture is readable")
}

fn snapshot(name: &str) -> expect_test::ExpectFile {
    expect_test::expect_file![fixture_path(&format!("snapshots/{name}"))]
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).expect("JSON values serialise") + "\n"
}

/// Every file of the fixture directory whose name starts with `prefix` and ends with `suffix`.
fn fixtures(prefix: &str, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixture_path(""))
        .expect("fixture dir is readable")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix) && n.ends_with(suffix))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no fixtures {prefix}*{suffix}");
    names
}

/// Decodes a whole SSE text; errors are rendered inline instead of stopping.
fn decode_stream(text: &str) -> (Vec<StreamEvent>, Vec<String>, bool) {
    let mut decoder = StreamDecoder::new();
    let mut events = Vec::new();
    let mut errors = Vec::new();
    for ev in parse_all(text) {
        if let Err(err) = decoder.decode(&ev, &mut events) {
            errors.push(format!("{err}"));
        }
    }
    let done = decoder.is_done();
    decoder.finish(&mut events);
    (events, errors, done)
}

fn encode_stream(events: &[StreamEvent]) -> String {
    let mut encoder = StreamEncoder::new("msg_kh_0001", "claude-sonnet-4-5");
    let mut out = String::new();
    for ev in events {
        encoder.encode(ev, &mut out);
    }
    encoder.finish(&mut out);
    out
}

fn accumulate(events: &[StreamEvent]) -> Response {
    let mut acc = Accumulator::new();
    for ev in events {
        acc.push(ev);
    }
    acc.finish(0)
}

/// Checks the Anthropic streaming protocol: `message_start` first, blocks indexed 0, 1, ... and
/// each started, delta'd and stopped in order, one open at a time; `message_delta` + `message_stop`
/// last unless the stream ended with an `error`.
fn check_protocol(sse: &str) {
    let events = parse_all(sse);
    let mut open: Option<u64> = None;
    let mut next = 0u64;
    let mut started = false;
    let mut ended = false;
    for (i, ev) in events.iter().enumerate() {
        let name = ev.event.as_deref().expect("every event is named");
        let data: Value = serde_json::from_str(&ev.data).expect("data is JSON");
        assert_eq!(data["type"], name, "event name matches data type");
        assert!(!ended, "nothing after message_stop / error");
        let index = data["index"].as_u64();
        match name {
            "message_start" => {
                assert_eq!(i, 0, "message_start first");
                started = true;
            }
            "ping" => {}
            "content_block_start" => {
                assert!(started && open.is_none(), "start while a block is open: {sse}");
                assert_eq!(index, Some(next), "consecutive indexes");
                open = index;
                next += 1;
            }
            "content_block_delta" => assert_eq!(index, open, "delta for the open block"),
            "content_block_stop" => {
                assert_eq!(index, open, "stop for the open block");
                open = None;
            }
            "message_delta" => assert!(open.is_none(), "blocks closed before message_delta"),
            "message_stop" | "error" => ended = true,
            other => panic!("unexpected event {other}"),
        }
    }
    assert!(ended, "stream ends with message_stop or error");
}

// ------------------------------------------------------------------------------------------------
// Stream decoding
// ------------------------------------------------------------------------------------------------

#[test]
fn stream_decode_fixtures() {
    for name in fixtures("decode_", ".sse") {
        let (events, errors, done) = decode_stream(&fixture(&name));
        assert!(errors.is_empty(), "{name}: {errors:?}");
        let rendered = format!("{events:#?}\nis_done: {done}\n");
        snapshot(&name.replace(".sse", ".txt")).assert_eq(&rendered);
    }
}

#[test]
fn stream_decode_parallel_tools_accumulate_to_objects() {
    let (events, _, done) = decode_stream(&fixture("decode_parallel_tools.sse"));
    assert!(done);
    let resp = accumulate(&events);
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(resp.usage, Usage { input_tokens: 472, output_tokens: 89, ..Usage::default() });
    let inputs: Vec<&Value> = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::ToolUse { input, .. } => Some(input),
            _ => None,
        })
        .collect();
    assert_eq!(
        inputs,
        [&json!({"location": "San Francisco, CA"}), &json!({"location": "New York, NY", "unit": "fahrenheit"})]
    );
}

#[test]
fn stream_decode_cut_off_stream_closes_tools_at_finish() {
    let text = fixture("decode_parallel_tools.sse");
    let cut =
        text.find("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}").expect("cut point");
    let (events, errors, done) = decode_stream(&text[..cut]);
    assert!(errors.is_empty());
    assert!(!done);
    assert_eq!(events.last(), Some(&StreamEvent::ToolCallEnd { index: 1 }));
}

#[test]
fn stream_decoder_survives_garbage() {
    let cases: &[(Option<&str>, &str, bool)] = &[
        (None, "not json", true),
        (
            Some("content_block_delta"),
            "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_de",
            true,
        ),
        (Some("message_start"), "[DONE]", true),
        (None, "5", false),
        (None, "[]", false),
        (None, "null", false),
        (Some("content_block_delta"), "{\"type\":\"content_block_delta\"}", true),
        (Some("content_block_start"), "{\"type\":\"content_block_start\",\"index\":-1,\"content_block\":{}}", true),
        (Some("content_block_start"), "{\"type\":\"content_block_start\",\"index\":7,\"content_block\":5}", false),
        (
            Some("content_block_delta"),
            "{\"type\":\"content_block_delta\",\"index\":9,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}",
            false,
        ),
        (Some("content_block_stop"), "{\"type\":\"content_block_stop\",\"index\":42}", false),
        (Some("message_delta"), "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":5}}", true),
        (Some("brand_new_event"), "{\"type\":\"brand_new_event\"}", false),
        (Some("brand_new_event"), "{}", false),
        (Some("error"), "{\"type\":\"error\"}", false),
        (Some("ping"), "", false),
    ];
    for (event, data, want_err) in cases {
        let mut decoder = StreamDecoder::new();
        let mut out = Vec::new();
        let result = decoder.decode(&SseEvent::new(*event, *data), &mut out);
        assert_eq!(result.is_err(), *want_err, "{event:?} {data:?}: {result:?} {out:?}");
        decoder.finish(&mut out);
    }
}

#[test]
fn stream_decoder_maps_error_kinds() {
    let mut decoder = StreamDecoder::new();
    let mut out = Vec::new();
    let data = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
    decoder.decode(&SseEvent::new(Some("error"), data), &mut out).expect("decodes");
    assert_eq!(
        out,
        [StreamEvent::Error {
            error: ErrorInfo {
                kind: ErrorKind::RateLimited,
                message: "Number of request tokens has exceeded your per-minute rate limit".into()
            }
        }]
    );
}

// ------------------------------------------------------------------------------------------------
// Stream encoding
// ------------------------------------------------------------------------------------------------

#[test]
fn stream_encode_fixtures() {
    for name in fixtures("encode_", ".json") {
        let events: Vec<StreamEvent> = serde_json::from_str(&fixture(&name)).expect("canonical events");
        let sse = encode_stream(&events);
        check_protocol(&sse);
        snapshot(&name.replace(".json", ".sse")).assert_eq(&sse);
    }
}

#[test]
fn stream_encode_then_decode_keeps_content() {
    for name in fixtures("encode_", ".json") {
        let events: Vec<StreamEvent> = serde_json::from_str(&fixture(&name)).expect("canonical events");
        if events.iter().any(|e| matches!(e, StreamEvent::Error { .. })) {
            continue;
        }
        let (decoded, errors, done) = decode_stream(&encode_stream(&events));
        assert!(errors.is_empty() && done, "{name}: {errors:?}");
        assert_eq!(accumulate(&decoded).content, accumulate(&events).content, "{name}");
    }
}

#[test]
fn stream_encode_upstream_sse_round_trips_to_same_events() {
    // Anthropic upstream → canonical → Anthropic client → canonical: nothing lost.
    for name in ["decode_text.sse", "decode_thinking.sse", "decode_parallel_tools.sse", "decode_cache_usage.sse"] {
        let (events, _, _) = decode_stream(&fixture(name));
        let (again, errors, _) = decode_stream(&encode_stream(&events));
        assert!(errors.is_empty(), "{name}");
        let strip = |evs: &[StreamEvent]| -> Vec<StreamEvent> {
            evs.iter()
                .filter(|e| !matches!(e, StreamEvent::MessageStart { .. } | StreamEvent::Usage { .. }))
                .cloned()
                .collect()
        };
        assert_eq!(strip(&again), strip(&events), "{name}");
        assert_eq!(accumulate(&again).usage, accumulate(&events).usage, "{name}");
    }
}

#[test]
fn stream_encode_finish_is_idempotent_and_silent_after_error() {
    let mut enc = StreamEncoder::new("msg_1", "m");
    let mut out = String::new();
    enc.encode(&StreamEvent::Error { error: ErrorInfo { kind: ErrorKind::Timeout, message: "slow".into() } }, &mut out);
    enc.finish(&mut out);
    enc.finish(&mut out);
    assert_eq!(
        out,
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"timeout_error\",\"message\":\"slow\"}}\n\n"
    );

    let mut enc = StreamEncoder::new("msg_2", "m");
    let mut out = String::new();
    enc.finish(&mut out);
    let len = out.len();
    enc.finish(&mut out);
    assert_eq!(out.len(), len);
    check_protocol(&out);
}

// ------------------------------------------------------------------------------------------------
// Requests
// ------------------------------------------------------------------------------------------------

#[test]
fn request_decode_fixtures() {
    for name in fixtures("request_", ".json") {
        let req = decode_request(fixture(&name).as_bytes()).expect("valid request");
        snapshot(&name.replace(".json", ".txt")).assert_eq(&format!("{req:#?}\n"));
    }
}

#[test]
fn request_decode_splits_tool_results_in_order() {
    let req = decode_request(fixture("request_claude_code.json").as_bytes()).expect("valid request");
    let roles: Vec<Role> = req.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::Tool, Role::User, Role::Assistant, Role::Tool]);
    let ids: Vec<&str> = req.messages[6]
        .content
        .iter()
        .filter_map(|p| match p {
            Part::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["toolu_01PqA7RZH4c3mS9jYfAWxQ2n", "toolu_01Xk9mF2vB7nLq3Rt5Ws8Yz1"]);
}

/// Claude Code's request toward an Anthropic upstream is the client's body itself: only the model
/// name changes (and `stream`, which is already true).
#[test]
fn request_passes_through_claude_code_unchanged() {
    let mut original: Value = serde_json::from_str(&fixture("request_claude_code.json")).expect("JSON");
    let req = decode_request(fixture("request_claude_code.json").as_bytes()).expect("valid request");
    let encoded = encode_request(&req, "claude-sonnet-4-5-20250929", &EncodeOptions::default());
    original["model"] = json!("claude-sonnet-4-5-20250929");
    assert_eq!(encoded, original);
}

/// Without the client's body (a request the engine built or changed), Claude Code's request is
/// encoded from the canonical fields: messages, system, tools and settings come back as sent
/// (tool-result string content becomes the equivalent one-text-block array).
#[test]
fn request_round_trip_claude_code() {
    let original: Value = serde_json::from_str(&fixture("request_claude_code.json")).expect("JSON");
    let mut req = decode_request(fixture("request_claude_code.json").as_bytes()).expect("valid request");
    req.passthrough = None;
    let encoded = encode_request(&req, "claude-sonnet-4-5-20250929", &EncodeOptions::default());

    let mut expected_messages = original["messages"].clone();
    for msg in expected_messages.as_array_mut().expect("array") {
        for block in msg["content"].as_array_mut().into_iter().flatten() {
            if let Some(text) = block.get("content").and_then(Value::as_str).map(str::to_owned) {
                block["content"] = json!([{"type": "text", "text": text}]);
            }
        }
    }
    assert_eq!(encoded["messages"], expected_messages);
    for key in ["system", "tools", "tool_choice", "thinking", "metadata", "max_tokens", "model", "stream"] {
        assert_eq!(encoded[key], original[key], "{key}");
    }
}

fn base_request(messages: Vec<Message>) -> Request {
    Request { model: "claude".into(), messages, ..Request::default() }
}

#[test]
fn request_encode_merges_roles_and_drops_what_anthropic_rejects() {
    let cache = Some(CacheControl { ttl: Some("1h".into()) });
    let req = Request {
        messages: vec![
            Message::text(Role::System, "Be brief."),
            Message::text(Role::User, "Read two files."),
            Message {
                role: Role::User,
                content: vec![Part::text(""), Part::Text { text: "Please.".into(), cache: cache.clone() }],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    Part::Thinking { text: "deepseek reasoning".into(), signature: None },
                    Part::Text { text: String::new(), cache: None },
                    Part::ToolUse { id: "call_0".into(), name: "read".into(), input: json!("{\"path\":\"a\"}") },
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    Part::ToolUse { id: "call_1".into(), name: "read".into(), input: json!("{\"path\": \"b\"") },
                    Part::ToolUse { id: "call_2".into(), name: "noop".into(), input: json!([1, 2]) },
                ],
            },
            Message {
                role: Role::Tool,
                content: vec![Part::ToolResult {
                    tool_use_id: "call_0".into(),
                    content: vec![Part::text("A")],
                    is_error: false,
                }],
            },
            Message {
                role: Role::User,
                content: vec![Part::Image { source: ImageSource::from_url("data:image/png;base64,iVBOR"), cache }],
            },
            Message {
                role: Role::Tool,
                content: vec![
                    Part::ToolResult { tool_use_id: "call_1".into(), content: vec![], is_error: true },
                    Part::ToolResult {
                        tool_use_id: "call_2".into(),
                        content: vec![Part::Image {
                            source: ImageSource::Url { url: "https://x/y.png".into() },
                            cache: None,
                        }],
                        is_error: false,
                    },
                ],
            },
            Message::text(Role::System, "Late system note."),
            Message {
                role: Role::Assistant,
                content: vec![
                    Part::Thinking { text: "signed".into(), signature: Some("sig".into()) },
                    Part::text("Done."),
                ],
            },
        ],
        tools: vec![ToolDef {
            name: "read".into(),
            description: Some("Read a file".into()),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            cache: Some(CacheControl::default()),
        }],
        tool_choice: Some(ToolChoice::Required),
        parallel_tool_calls: Some(false),
        params: SamplingParams {
            temperature: Some(0.5),
            stop: vec!["END".into()],
            seed: Some(7),
            ..SamplingParams::default()
        },
        user: Some("u-1".into()),
        ..base_request(vec![])
    };
    let body = encode_request(&req, "claude-sonnet-4-5-20250929", &EncodeOptions { default_max_tokens: 4096 });
    snapshot("encode_request_merging.json").assert_eq(&pretty(&body));
}

#[test]
fn request_encode_thinking_budget_rules() {
    let opts = EncodeOptions::default();
    let with = |thinking: ThinkingConfig, max_tokens: Option<u32>| {
        let req = Request {
            thinking: Some(thinking),
            params: SamplingParams {
                max_tokens,
                temperature: Some(0.7),
                top_p: Some(0.9),
                top_k: Some(5),
                ..Default::default()
            },
            ..base_request(vec![Message::text(Role::User, "hi")])
        };
        encode_request(&req, "claude-opus-4-1", &opts)
    };

    let body = with(ThinkingConfig { budget_tokens: Some(500), effort: None, adaptive: false }, Some(4000));
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 1024}));
    assert_eq!(body["max_tokens"], 4000);
    for key in ["temperature", "top_p", "top_k"] {
        assert!(body.get(key).is_none(), "{key} dropped with thinking");
    }

    let body = with(ThinkingConfig { budget_tokens: None, effort: Some(Effort::High), adaptive: false }, Some(16000));
    assert_eq!(body["thinking"]["budget_tokens"], 24576);
    assert_eq!(body["max_tokens"], 24576 + 1024, "raised above the budget");

    let body = with(ThinkingConfig { budget_tokens: Some(31999), effort: None, adaptive: false }, Some(32000));
    assert_eq!(body["max_tokens"], 32000, "a valid pair is kept");

    let body = with(ThinkingConfig { budget_tokens: Some(10000), effort: None, adaptive: false }, None);
    assert_eq!(body["max_tokens"], 11024, "default 8192 is too small for the budget");

    let body = with(ThinkingConfig::default(), None);
    assert_eq!(body["thinking"]["budget_tokens"], Effort::Medium.budget_tokens());

    let req = Request {
        params: SamplingParams { temperature: Some(0.7), top_k: Some(5), ..Default::default() },
        ..base_request(vec![Message::text(Role::User, "hi")])
    };
    let body = encode_request(&req, "claude-haiku-4-5", &opts);
    assert_eq!(
        (body["temperature"].clone(), body["top_k"].clone(), body["max_tokens"].clone()),
        (json!(0.7), json!(5), json!(8192))
    );
    assert!(body.get("thinking").is_none());
    assert_eq!(body["stream"], true);
}

#[test]
fn request_encode_tool_choice_and_parallel() {
    let tool = ToolDef { name: "t".into(), description: None, parameters: json!({"type": "object"}), cache: None };
    let cases = [
        (Some(ToolChoice::Auto), Some(false), json!({"type": "auto", "disable_parallel_tool_use": true})),
        (Some(ToolChoice::None), Some(false), json!({"type": "none"})),
        (Some(ToolChoice::Tool { name: "t".into() }), None, json!({"type": "tool", "name": "t"})),
        (Some(ToolChoice::Required), Some(true), json!({"type": "any"})),
        (None, Some(false), json!({"type": "auto", "disable_parallel_tool_use": true})),
        (None, None, Value::Null),
    ];
    for (choice, parallel, want) in cases {
        let req = Request {
            tools: vec![tool.clone()],
            tool_choice: choice.clone(),
            parallel_tool_calls: parallel,
            ..base_request(vec![Message::text(Role::User, "hi")])
        };
        let body = encode_request(&req, "m", &EncodeOptions::default());
        assert_eq!(body.get("tool_choice").cloned().unwrap_or(Value::Null), want, "{choice:?} {parallel:?}");
    }
}

#[test]
fn request_decode_tool_choice_and_thinking_variants() {
    let decode = |extra: &str| {
        let body = format!(r#"{{"model":"m","max_tokens":10,"messages":[{{"role":"user","content":"hi"}}]{extra}}}"#);
        decode_request(body.as_bytes()).expect("valid request")
    };
    let req = decode(r#","tool_choice":{"type":"any","disable_parallel_tool_use":true}"#);
    assert_eq!((req.tool_choice, req.parallel_tool_calls), (Some(ToolChoice::Required), Some(false)));
    let req = decode(r#","tool_choice":{"type":"none"}"#);
    assert_eq!((req.tool_choice, req.parallel_tool_calls), (Some(ToolChoice::None), None));
    let req = decode(r#","thinking":{"type":"enabled","budget_tokens":2048}"#);
    assert_eq!(req.thinking, Some(ThinkingConfig { budget_tokens: Some(2048), effort: None, adaptive: false }));
    let req = decode(r#","thinking":{"type":"disabled"}"#);
    assert_eq!(req.thinking, None);
    let req = decode(r#","thinking":{"type":"adaptive"},"stream":true,"metadata":{"user_id":"abc"}"#);
    assert_eq!(
        req.thinking,
        Some(ThinkingConfig { budget_tokens: None, effort: Some(Effort::Medium), adaptive: true })
    );
    assert!(req.stream);
    assert_eq!(req.user.as_deref(), Some("abc"));
    let req = decode(r#","system":[]"#);
    assert_eq!(req.messages.len(), 1, "empty system adds no message");
}

// ------------------------------------------------------------------------------------------------
// Responses and errors
// ------------------------------------------------------------------------------------------------

#[test]
fn response_decode_and_encode_fixtures() {
    for name in fixtures("response_", ".json") {
        let resp = decode_response(fixture(&name).as_bytes()).expect("valid response");
        let encoded = encode_response(&resp);
        let rendered = format!("{resp:#?}\n\n{}", pretty(&encoded));
        snapshot(&name.replace(".json", ".txt")).assert_eq(&rendered);
    }
}

#[test]
fn response_encode_repairs_for_sdks() {
    let resp = Response {
        id: "msg_kh_1".into(),
        model: "claude-sonnet-4-5".into(),
        content: vec![
            Part::Thinking { text: "unsigned".into(), signature: None },
            Part::text(""),
            Part::ToolUse { id: "call_1".into(), name: "f".into(), input: json!("{\"a\": 1}") },
            Part::ToolUse { id: "call_2".into(), name: "f".into(), input: json!("{broken") },
            Part::ToolUse { id: "call_3".into(), name: "f".into(), input: json!(42) },
        ],
        stop_reason: Some(StopReason::EndTurn),
        usage: Usage {
            input_tokens: 5,
            output_tokens: 6,
            cache_read_tokens: 7,
            cache_write_tokens: 8,
            reasoning_tokens: 3,
        },
        ..Response::default()
    };
    snapshot("encode_response_repairs.json").assert_eq(&pretty(&encode_response(&resp)));

    let reasons = [
        (Some(StopReason::MaxTokens), "max_tokens"),
        (Some(StopReason::StopSequence), "stop_sequence"),
        (Some(StopReason::ContentFilter), "refusal"),
        (Some(StopReason::Refusal), "refusal"),
        (Some(StopReason::Other("pause_turn".into())), "pause_turn"),
    ];
    for (reason, want) in reasons {
        let resp = Response { stop_reason: reason, content: vec![Part::text("x")], ..Response::default() };
        assert_eq!(encode_response(&resp)["stop_reason"], want);
    }
    assert_eq!(encode_response(&Response::default())["stop_reason"], Value::Null);
}

#[test]
fn error_encode_all_kinds() {
    let kinds = ErrorKind::ALL;
    let mut rendered = String::new();
    for kind in kinds {
        let body = encode_error(&ErrorInfo { kind, message: format!("{} happened", kind.as_str()) });
        rendered.push_str(&format!("{:<18} {body}\n", kind.as_str()));
        // What we encode, we decode back to the same kind (except the catch-all api_error).
        let back = decode_error(500, body.to_string().as_bytes());
        if kind != ErrorKind::Internal {
            assert_eq!(back.kind, kind);
        }
    }
    snapshot("encode_error.txt").assert_eq(&rendered);
}

#[test]
fn error_decode_bodies() {
    let long = "x".repeat(2000);
    let cases: Vec<(u16, Vec<u8>)> = vec![
        (529, fixture("error_overloaded.json").into_bytes()),
        (502, fixture("error_gateway.html").into_bytes()),
        (429, br#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization"}}"#.to_vec()),
        (400, br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.thinking.signature: Field required"}}"#.to_vec()),
        (402, br#"{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low"}}"#.to_vec()),
        (401, br#"{"type":"error","error":{"type":"authentication_error"}}"#.to_vec()),
        (503, Vec::new()),
        (504, b"   \n".to_vec()),
        (500, long.into_bytes()),
        (418, vec![0xff, 0xfe, b'o', b'k']),
    ];
    let mut rendered = String::new();
    for (status, body) in cases {
        let info = decode_error(status, &body);
        rendered.push_str(&format!("{status} {:?} {:?}\n", info.kind, info.message));
    }
    snapshot("decode_error.txt").assert_eq(&rendered);
}

// ------------------------------------------------------------------------------------------------
// Bad input
// ------------------------------------------------------------------------------------------------

#[test]
fn request_decode_rejects_malformed_json() {
    let err = decode_request(b"{\"model\": \"m\", \"messages\": [").expect_err("truncated");
    assert!(matches!(err, DecodeError::Syntax { .. }), "{err:?}");
    let err = decode_request(b"<html>").expect_err("not JSON");
    assert!(matches!(err, DecodeError::Syntax { .. }), "{err:?}");
}

#[test]
fn request_decode_every_truncation_fails_cleanly() {
    let body = fixture("request_claude_code.json");
    let body = body.trim_end().as_bytes();
    for len in 0..body.len() {
        assert!(decode_request(&body[..len]).is_err(), "prefix of {len} bytes decoded");
    }
    assert!(decode_request(body).is_ok());
}

#[test]
fn request_decode_wrong_types_name_the_path() {
    let cases = [
        (
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":5}]}]}"#,
            "messages[0].content[1].type",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"text":"b"}]}]}"#,
            "messages[0].content[1].type",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":7}]}]}"#,
            "messages[0].content[0].text",
        ),
        (r#"{"model":"m","messages":[{"role":"tool","content":"x"}]}"#, "messages[0].role"),
        (r#"{"model":"m","messages":[{"role":"user","content":5}]}"#, "messages[0].content"),
        (r#"{"model":"m","messages":[{"role":"user","content":[7]}]}"#, "messages[0].content[0]"),
        (r#"{"model":"m","max_tokens":"many","messages":[{"role":"user","content":"x"}]}"#, "max_tokens"),
        (r#"{"model":"m","system":5,"messages":[{"role":"user","content":"x"}]}"#, "system"),
        (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"name":"t"}]}"#, "tools[0].input_schema"),
        (
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"sometimes"}}"#,
            "tool_choice.type",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"tool"}}"#,
            "tool_choice.name",
        ),
        (
            r#"{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]}"#,
            "messages[0].content[0].id",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":5}]}]}]}"#,
            "messages[0].content[0].content[0].text",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"AA"}}]}]}"#,
            "messages[0].content[0].source.media_type",
        ),
        (
            r#"{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"t"}]}]}"#,
            "messages[0].content[0].type",
        ),
        (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stop_sequences":"END"}"#, "stop_sequences"),
        (r#"{"messages":[{"role":"user","content":"x"}]}"#, "$"),
    ];
    for (body, path) in cases {
        match decode_request(body.as_bytes()) {
            Err(DecodeError::Field { path: p, .. }) => assert_eq!(p, path, "{body}"),
            other => panic!("{body}: expected a field error at {path}, got {other:?}"),
        }
    }
}

#[test]
fn request_decode_rejects_empty_messages_and_model() {
    let err = decode_request(br#"{"model":"m","max_tokens":5,"messages":[]}"#).expect_err("empty messages");
    assert!(matches!(err, DecodeError::Invalid(_)), "{err:?}");
    let err = decode_request(br#"{"model":"  ","messages":[{"role":"user","content":"x"}]}"#).expect_err("empty model");
    assert!(matches!(err, DecodeError::Invalid(_)), "{err:?}");
}

#[test]
fn request_decode_skips_unknown_blocks() {
    let body = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"hologram","frequency":3},{"type":"text","text":"hi"}]}]}"#;
    let req = decode_request(body).expect("unknown blocks are skipped");
    assert_eq!(req.messages, [Message::text(Role::User, "hi")]);
}

#[test]
fn mutated_inputs_never_panic() {
    let requests: Vec<Vec<u8>> = fixtures("request_", ".json").iter().map(|n| fixture(n).into_bytes()).collect();
    let responses: Vec<Vec<u8>> = fixtures("response_", ".json").iter().map(|n| fixture(n).into_bytes()).collect();
    let streams: Vec<Vec<u8>> = fixtures("decode_", ".sse").iter().map(|n| fixture(n).into_bytes()).collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for case in 0..2000 {
        let req = mutate(&mut rng, &requests[case % requests.len()]);
        if let Ok(decoded) = decode_request(&req) {
            let _ = encode_request(&decoded, "m", &EncodeOptions::default());
        }
        let resp = mutate(&mut rng, &responses[case % responses.len()]);
        if let Ok(decoded) = decode_response(&resp) {
            let _ = encode_response(&decoded);
        }
        let _ = decode_error(500, &resp);
        let sse = mutate(&mut rng, &streams[case % streams.len()]);
        let (events, _, _) = decode_stream(&String::from_utf8_lossy(&sse));
        let _ = encode_stream(&events);
    }
}

/// A mid-conversation system message stays in place toward Anthropic only with the client's
/// `mid-conversation-system-*` beta; adaptive thinking goes out as `{"type": "adaptive"}` and the
/// client's `output_config` comes back verbatim. (The engine changed the request here, so the
/// body is encoded from the canonical fields.)
#[test]
fn mid_conversation_system_and_adaptive_thinking_encode_from_canonical() {
    let body = br#"{"model":"m","max_tokens":100,"system":"S","thinking":{"type":"adaptive"},
        "output_config":{"effort":"max"},"context_management":{"edits":[]},
        "tools":[{"type":"web_search_20250305","name":"web_search"}],
        "messages":[{"role":"user","content":"a"},{"role":"system","content":"R"},{"role":"user","content":"b"}]}"#;
    let mut req = decode_request(body).expect("valid");
    assert_eq!(req.thinking.as_ref().and_then(|t| t.effort), Some(Effort::Max));
    req.messages.push(Message { role: Role::Assistant, content: vec![Part::text("c")] });
    let with_beta = {
        let mut r = req.clone();
        if let Some(pt) = r.passthrough.as_deref_mut() {
            pt.betas = vec!["mid-conversation-system-2026-04-07".into()];
        }
        encode_request(&r, "claude-x", &EncodeOptions::default())
    };
    assert_eq!(
        with_beta,
        json!({
            "model": "claude-x",
            "thinking": {"type": "adaptive"},
            "max_tokens": 100,
            "system": [{"type": "text", "text": "S"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}]},
                {"role": "system", "content": [{"type": "text", "text": "R"}]},
                {"role": "user", "content": [{"type": "text", "text": "b"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "c"}]}
            ],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            "stream": true,
            "output_config": {"effort": "max"},
            "context_management": {"edits": []}
        })
    );
    let without = encode_request(&req, "claude-x", &EncodeOptions::default());
    assert_eq!(without["system"], json!([{"type": "text", "text": "S"}, {"type": "text", "text": "R"}]));
    assert_eq!(
        without["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "c"}]}
        ])
    );
}
