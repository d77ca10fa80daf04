//! Unit tests of the canonical model.

use crate::model::{Accumulator, ImageSource, Part, StopReason, StreamEvent, Usage};

#[test]
fn openai_usage_subtracts_cached_tokens() {
    let u = Usage::from_openai(1000, 800, 50, 10);
    assert_eq!(u.input_tokens, 200);
    assert_eq!(u.cache_read_tokens, 800);
    assert_eq!(u.openai_prompt_tokens(), 1000);
    assert_eq!(u.total_tokens(), 1050);
}

#[test]
fn openai_usage_clamps_cached_above_prompt() {
    let u = Usage::from_openai(100, 150, 5, 0);
    assert_eq!(u.input_tokens, 0);
    assert_eq!(u.cache_read_tokens, 100);
}

#[test]
fn usage_merge_keeps_largest_totals() {
    let mut u = Usage { input_tokens: 10, cache_read_tokens: 5, ..Default::default() };
    u.merge_max(&Usage { output_tokens: 7, input_tokens: 3, ..Default::default() });
    assert_eq!(u, Usage { input_tokens: 10, output_tokens: 7, cache_read_tokens: 5, ..Default::default() });
}

#[test]
fn data_urls_split_and_join() {
    let src = ImageSource::from_url("data:image/png;base64,AAAA");
    assert_eq!(src, ImageSource::Base64 { media_type: "image/png".into(), data: "AAAA".into() });
    assert_eq!(src.to_url(), "data:image/png;base64,AAAA");
    assert!(matches!(ImageSource::from_url("https://x/y.png"), ImageSource::Url { .. }));
    assert!(matches!(ImageSource::from_url("data:garbage"), ImageSource::Url { .. }));
}

#[test]
fn accumulator_builds_text_thinking_and_parallel_tools() {
    let mut acc = Accumulator::new();
    let events = [
        StreamEvent::MessageStart { id: "m1".into(), model: "x".into() },
        StreamEvent::ThinkingDelta { text: "hm".into() },
        StreamEvent::ThinkingDelta { text: "m".into() },
        StreamEvent::ThinkingSignature { signature: "sig".into() },
        StreamEvent::TextDelta { text: "Hi".into() },
        StreamEvent::ToolCallStart { index: 0, id: "a".into(), name: "f".into() },
        StreamEvent::ToolCallStart { index: 1, id: "b".into(), name: "g".into() },
        StreamEvent::ToolCallDelta { index: 1, arguments: "{\"y\":".into() },
        StreamEvent::ToolCallDelta { index: 0, arguments: "{\"x\":1}".into() },
        StreamEvent::ToolCallDelta { index: 1, arguments: "2}".into() },
        StreamEvent::Stop { reason: StopReason::ToolUse, stop_sequence: None },
    ];
    for e in &events {
        acc.push(e);
    }
    let r = acc.finish(0);
    assert_eq!(r.content.len(), 4);
    assert_eq!(r.content[0], Part::Thinking { text: "hmm".into(), signature: Some("sig".into()) });
    assert_eq!(r.content[2], Part::ToolUse { id: "a".into(), name: "f".into(), input: serde_json::json!({"x":1}) });
    assert_eq!(r.content[3], Part::ToolUse { id: "b".into(), name: "g".into(), input: serde_json::json!({"y":2}) });
    assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
}

#[test]
fn invalid_tool_arguments_are_kept_as_text() {
    assert_eq!(crate::model::parse_arguments("{oops"), serde_json::Value::String("{oops".into()));
    assert_eq!(crate::model::parse_arguments(""), serde_json::json!({}));
}

#[test]
fn effort_names_parse_onto_the_canonical_scale() {
    use crate::model::Effort;
    assert_eq!(Effort::parse("minimal"), Some(Effort::Minimal));
    assert_eq!(Effort::parse("xhigh"), Some(Effort::High));
    assert_eq!(Effort::parse("none"), None);
    assert_eq!(Effort::parse("HIGH"), None);
}
