//! The reasoning memory: remembered per tool call and provider, restored only where a replayed
//! assistant message lost its reasoning, never across providers, bounded.

use serde_json::json;

use crate::model::{Message, Part, Request, Role};
use crate::provider::memory::{CAPACITY, ReasoningMemory, ttl_ms};

const NOW: i64 = 1_700_000_000_000;

impl ReasoningMemory {
    fn remember_at(&self, provider: &str, content: &[Part]) {
        let _ = self.remember(provider, content, NOW);
    }
}

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
    m.remember_at("ds", &[thinking("khr1.abc"), Part::text("reading"), call("call_1")]);
    let mut req = replay(vec![Part::text("reading"), call("call_1")]);
    assert_eq!(m.restore("ds", &mut req, NOW), 1);
    assert_eq!(req.messages[1].content, vec![thinking("khr1.abc"), Part::text("reading"), call("call_1")]);
}

#[test]
fn a_replay_that_kept_its_reasoning_is_left_alone() {
    let m = ReasoningMemory::default();
    m.remember_at("ds", &[thinking("khr1.abc"), call("call_1")]);
    let mut req = replay(vec![thinking("client-copy"), call("call_1")]);
    assert_eq!(m.restore("ds", &mut req, NOW), 0);
    assert_eq!(req.messages[1].content, vec![thinking("client-copy"), call("call_1")]);
}

#[test]
fn reasoning_never_crosses_to_another_provider_and_unsigned_thinking_is_not_kept() {
    let m = ReasoningMemory::default();
    m.remember_at("ds", &[thinking("khr1.abc"), call("call_1")]);
    let mut req = replay(vec![call("call_1")]);
    assert_eq!(m.restore("other", &mut req, NOW), 0);
    assert_eq!(req.messages[1].content, vec![call("call_1")]);

    let m = ReasoningMemory::default();
    m.remember_at("ds", &[Part::Thinking { text: "t".into(), signature: None }, call("call_1")]);
    assert!(m.is_empty());
    m.remember_at("ds", &[Part::text("no tools"), thinking("s")]);
    assert!(m.is_empty());
}

#[test]
fn the_memory_is_bounded() {
    let m = ReasoningMemory::default();
    for i in 0..CAPACITY + 10 {
        m.remember_at("ds", &[thinking("s"), call(&format!("call_{i}"))]);
    }
    assert_eq!(m.len(), CAPACITY);
    // The oldest went first.
    let mut req = replay(vec![call("call_0")]);
    assert_eq!(m.restore("ds", &mut req, NOW), 0);
    let mut req = replay(vec![call(&format!("call_{}", CAPACITY + 9))]);
    assert_eq!(m.restore("ds", &mut req, NOW), 1);
}

#[test]
fn a_persisted_record_restores_after_a_restart_until_it_expires() {
    let m = ReasoningMemory::default();
    let record = m.remember("ds", &[thinking("khr1.abc"), call("call_1")], NOW).expect("a record to persist");
    assert_eq!(record.tool_call_ids, vec!["call_1".to_owned()]);
    assert_eq!(record.created_ms, NOW);

    // A new process loads it and restores the replay.
    let fresh = ReasoningMemory::default();
    assert_eq!(fresh.load(std::slice::from_ref(&record), NOW + 1_000), 1);
    let mut req = replay(vec![call("call_1")]);
    assert_eq!(fresh.restore("ds", &mut req, NOW + 1_000), 1);
    assert_eq!(req.messages[1].content, vec![thinking("khr1.abc"), call("call_1")]);

    // Too old to load; and a loaded one expires.
    let late = ReasoningMemory::default();
    assert_eq!(late.load(std::slice::from_ref(&record), NOW + ttl_ms() + 1), 0);
    let mut req = replay(vec![call("call_1")]);
    assert_eq!(fresh.restore("ds", &mut req, NOW + ttl_ms() + 1), 0);
    // Unreadable parts are skipped.
    let bad = crate::model::ReasoningRecord { parts: "not json".into(), ..record };
    assert_eq!(ReasoningMemory::default().load(&[bad], NOW), 0);
}
