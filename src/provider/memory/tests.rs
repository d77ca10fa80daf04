//! The reasoning memory: remembered per tool call and provider, restored only where a replayed
//! assistant message lost its reasoning, never across providers, bounded.

use serde_json::json;

use crate::model::{Message, Part, Request, Role};
use crate::provider::memory::{CAPACITY, ReasoningMemory};

fn thinking(sig: &str) -> Part {
    Part::Thinking { text: "let me think".into(), signature: Some(sig.into()) }
}

fn call(id: &str) -> Part {
    Part::ToolUse { id: id.into(), name: "read".into(), input: json!({"path": "a"}) }
}

fn replay(parts: Vec<Part>) -> Request {
    Request {
        model: "m".into(),
        messages: vec![
            Message::text(Role::User, "hi"),
            Message { role: Role::Assistant, content: parts },
            Message {
                role: Role::Tool,
                content: vec![Part::ToolResult {
                    tool_use_id: "call_1".into(),
                    content: vec![Part::text("x")],
                    is_error: false,
                }],
            },
        ],
        ..Request::default()
    }
}

#[test]
fn a_replay_without_reasoning_gets_it_back_first_in_the_message() {
    let m = ReasoningMemory::default();
    m.remember("ds", &[thinking("khr1.abc"), Part::text("reading"), call("call_1")]);
    let mut req = replay(vec![Part::text("reading"), call("call_1")]);
    assert_eq!(m.restore("ds", &mut req), 1);
    assert_eq!(req.messages[1].content, vec![thinking("khr1.abc"), Part::text("reading"), call("call_1")]);
}

#[test]
fn a_replay_that_kept_its_reasoning_is_left_alone() {
    let m = ReasoningMemory::default();
    m.remember("ds", &[thinking("khr1.abc"), call("call_1")]);
    let mut req = replay(vec![thinking("client-copy"), call("call_1")]);
    assert_eq!(m.restore("ds", &mut req), 0);
    assert_eq!(req.messages[1].content, vec![thinking("client-copy"), call("call_1")]);
}

#[test]
fn reasoning_never_crosses_to_another_provider_and_unsigned_thinking_is_not_kept() {
    let m = ReasoningMemory::default();
    m.remember("ds", &[thinking("khr1.abc"), call("call_1")]);
    let mut req = replay(vec![call("call_1")]);
    assert_eq!(m.restore("other", &mut req), 0);
    assert_eq!(req.messages[1].content, vec![call("call_1")]);

    let m = ReasoningMemory::default();
    m.remember("ds", &[Part::Thinking { text: "t".into(), signature: None }, call("call_1")]);
    assert!(m.is_empty());
    m.remember("ds", &[Part::text("no tools"), thinking("s")]);
    assert!(m.is_empty());
}

#[test]
fn the_memory_is_bounded() {
    let m = ReasoningMemory::default();
    for i in 0..CAPACITY + 10 {
        m.remember("ds", &[thinking("s"), call(&format!("call_{i}"))]);
    }
    assert_eq!(m.len(), CAPACITY);
    // The oldest went first.
    let mut req = replay(vec![call("call_0")]);
    assert_eq!(m.restore("ds", &mut req), 0);
    let mut req = replay(vec![call(&format!("call_{}", CAPACITY + 9))]);
    assert_eq!(m.restore("ds", &mut req), 1);
}
