//! Emulation unit tests: the streaming scanner at every chunk boundary, the lenient parser, the
//! request rewrite and the emulator's events and retry decisions.

use serde_json::{Value, json};

use crate::model::{Message, Part, Request, Role, StopReason, StreamEvent, ToolChoice, ToolDef, Usage};
use crate::provider::emulation::{
    CONTINUATION, CONTRACT_HEADER, Emulator, Finish, Scanner, Segment, ToolNames, corrective, id_prefix, parse_block,
    rewrite,
};

fn names(list: &[&str]) -> ToolNames {
    ToolNames::new(list.iter().map(|s| (*s).to_owned()).collect())
}

/// Scans `text` split into the given pieces; adjacent text segments are merged.
fn scan_pieces(pieces: &[&str]) -> Vec<Segment> {
    let mut s = Scanner::new();
    let mut out = Vec::new();
    for p in pieces {
        s.push(p, &mut out);
    }
    s.finish(&mut out);
    let mut merged: Vec<Segment> = Vec::new();
    for seg in out {
        match (merged.last_mut(), seg) {
            (Some(Segment::Text(a)), Segment::Text(b)) => a.push_str(&b),
            (_, seg) => merged.push(seg),
        }
    }
    merged
}

const REPLY: &str = "Let me look.\n```json action\n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"a```b.md\"}}\n```\nThen:\n```python\nprint('x')\n```\n```json action\n{\"tool\":\"ls\"}```done";

#[test]
fn scanner_gives_the_same_segments_at_every_split_point() {
    let whole = scan_pieces(&[REPLY]);
    assert_eq!(whole.len(), 5, "{whole:#?}");
    assert_eq!(whole[0], Segment::Text("Let me look.\n".into()));
    match &whole[1] {
        Segment::Block { body, tagged, closed, .. } => {
            assert!(*tagged && *closed);
            assert_eq!(body.trim(), r#"{"tool": "read_file", "parameters": {"path": "a```b.md"}}"#);
        }
        other => panic!("not a block: {other:?}"),
    }
    assert_eq!(whole[2], Segment::Text("\nThen:\n```python\nprint('x')\n```\n".into()));
    assert!(matches!(&whole[3], Segment::Block { body, .. } if body == "{\"tool\":\"ls\"}"));
    assert_eq!(whole[4], Segment::Text("done".into()));
    // Every split into two pieces, at every char boundary.
    for i in 0..=REPLY.len() {
        if !REPLY.is_char_boundary(i) {
            continue;
        }
        let (a, b) = REPLY.split_at(i);
        assert_eq!(scan_pieces(&[a, b]), whole, "split at {i}");
    }
    // One byte (char) at a time.
    let chars: Vec<String> = REPLY.chars().map(String::from).collect();
    let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(scan_pieces(&refs), whole);
}

#[test]
fn scanner_releases_plain_text_at_once_and_holds_only_fence_starts() {
    let mut s = Scanner::new();
    let mut out = Vec::new();
    s.push("Hello wor", &mut out);
    assert_eq!(out, [Segment::Text("Hello wor".into())]);
    out.clear();
    s.push("ld ``", &mut out);
    assert_eq!(out, [Segment::Text("ld ".into())], "two backticks may start a fence");
    out.clear();
    s.push("x", &mut out);
    assert_eq!(out, [Segment::Text("``x".into())]);
    out.clear();
    s.push("\n```rust\nfn main() {}\n", &mut out);
    assert_eq!(out, [Segment::Text("\n```rust\nfn main() {}\n".into())], "other code blocks stream through");
    assert!(!s.holding());
}

#[test]
fn scanner_reports_an_unclosed_block_at_the_end() {
    let segs = scan_pieces(&["```json action\n{\"tool\": \"ls\", \"parameters\": {}}"]);
    assert!(matches!(&segs[0], Segment::Block { closed: false, tagged: true, .. }), "{segs:?}");
}

fn one(body: &str, tagged: bool, n: &ToolNames) -> (String, Value) {
    let calls = parse_block(body, tagged, n).expect("parses").expect("an action");
    assert_eq!(calls.len(), 1, "{calls:?}");
    (calls[0].name.clone(), calls[0].arguments.clone())
}

#[test]
fn parser_accepts_the_variants_models_produce() {
    let n = names(&["read_file", "terminal"]);
    let want = ("read_file".to_owned(), json!({"path": "a"}));
    for body in [
        r#"{"tool": "read_file", "parameters": {"path": "a"}}"#,
        r#"{"tool": "read_file", "arguments": {"path": "a"}}"#,
        r#"{"tool": "read_file", "input": {"path": "a"}}"#,
        r#"{"tool": "read_file", "path": "a"}"#,
        r#"{"name": "read_file", "parameters": {"path": "a"}}"#,
        r#"{"tool": "read_file", "arguments": "{\"path\": \"a\"}"}"#,
        r#"{"function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}"#,
        r#"{"tool": "READ_FILE", "parameters": {"path": "a"}}"#,
        r#"{"tool": "view", "parameters": {"path": "a"}}"#,
        "  \n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"a\"}}\n\n",
    ] {
        assert_eq!(one(body, true, &n), want, "{body}");
    }
    assert_eq!(one(r#"{"tool": "Bash", "parameters": {"command": "ls"}}"#, true, &n).0, "terminal");
    // Unknown names stay as written.
    assert_eq!(one(r#"{"tool": "mystery"}"#, true, &n), ("mystery".to_owned(), json!({})));
    // Several calls in one block.
    let calls = parse_block(r#"[{"tool":"read_file","path":"a"},{"tool":"terminal","command":"ls"}]"#, true, &n)
        .expect("parses")
        .expect("actions");
    assert_eq!(calls.len(), 2);
}

#[test]
fn untagged_json_counts_only_when_clearly_an_action() {
    let n = names(&["read_file"]);
    assert_eq!(one(r#"{"tool": "read_file", "parameters": {"path": "a"}}"#, false, &n).0, "read_file");
    assert_eq!(one(r#"{"name": "read_file", "arguments": {"path": "a"}}"#, false, &n).0, "read_file");
    for body in [r#"{"name": "Alice", "age": 3}"#, r#"{"a": 1}"#, "[1, 2]", "not json at all"] {
        assert_eq!(parse_block(body, false, &n), Ok(None), "{body}");
    }
}

#[test]
fn tagged_blocks_that_cannot_be_read_are_malformed() {
    let n = names(&["read_file"]);
    for body in [
        r#"{"tool": "read_file", "parameters": {"path": "a"}"#,
        r#"{"parameters": {}}"#,
        "42",
        r#"{"tool": "read_file", "parameters": [1]}"#,
    ] {
        assert!(parse_block(body, true, &n).is_err(), "{body}");
    }
}

fn tool(name: &str) -> ToolDef {
    ToolDef {
        name: name.into(),
        description: Some(format!("The {name} tool.")),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        cache: None,
    }
}

fn session() -> Request {
    Request {
        model: "m".into(),
        messages: vec![
            Message::text(Role::System, "You are helpful."),
            Message::text(Role::User, "Read a and b."),
            Message {
                role: Role::Assistant,
                content: vec![
                    Part::text("Reading."),
                    Part::ToolUse { id: "t1".into(), name: "read_file".into(), input: json!({"path": "a"}) },
                    Part::ToolUse { id: "t2".into(), name: "read_file".into(), input: json!({"path": "b"}) },
                ],
            },
            Message {
                role: Role::Tool,
                content: vec![Part::ToolResult {
                    tool_use_id: "t1".into(),
                    content: vec![Part::text("AAA")],
                    is_error: false,
                }],
            },
            Message {
                role: Role::Tool,
                content: vec![Part::ToolResult {
                    tool_use_id: "t2".into(),
                    content: vec![Part::text("nope")],
                    is_error: true,
                }],
            },
        ],
        tools: vec![tool("read_file")],
        tool_choice: Some(ToolChoice::Auto),
        parallel_tool_calls: Some(true),
        ..Request::default()
    }
}

fn text_of(m: &Message) -> String {
    m.joined_text("|")
}

#[test]
fn rewrite_removes_native_tools_and_replays_the_history_as_text() {
    let r = rewrite(&session());
    assert!(r.tools.is_empty() && r.tool_choice.is_none() && r.parallel_tool_calls.is_none());
    let roles: Vec<Role> = r.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::User]);
    let system = text_of(&r.messages[0]);
    assert!(system.starts_with("You are helpful.|"), "{system}");
    assert!(system.contains(CONTRACT_HEADER) && system.contains("```json action") && system.contains("### read_file"));
    let assistant = text_of(&r.messages[2]);
    assert!(
        assistant.contains("Reading.\n\n```json action\n{\"parameters\":{\"path\":\"a\"},\"tool\":\"read_file\"}\n```"),
        "{assistant}"
    );
    let results = text_of(&r.messages[3]);
    assert!(results.contains("Tool result for read_file (call t1):\nAAA"), "{results}");
    assert!(results.contains("Tool error for read_file (call t2):\nnope"), "{results}");
    assert!(results.ends_with(CONTINUATION), "one continuation, at the end: {results}");
    assert_eq!(results.matches(CONTINUATION).count(), 1);
    assert!(
        r.messages
            .iter()
            .all(|m| m.content.iter().all(|p| !matches!(p, Part::ToolUse { .. } | Part::ToolResult { .. })))
    );
}

#[test]
fn rewrite_keeps_the_contract_when_the_client_stops_sending_tools() {
    let mut req = session();
    req.tools.clear();
    let r = rewrite(&req);
    let system = text_of(&r.messages[0]);
    assert!(system.contains("### read_file"), "names from the history keep the contract: {system}");
}

#[test]
fn corrective_restates_the_contract() {
    let r = corrective(&rewrite(&session()), "I cannot use tools.", "you refused", &["read_file".into()]);
    let last = r.messages.last().expect("message");
    assert_eq!(last.role, Role::User);
    assert!(text_of(last).contains("you refused") && text_of(last).contains("read_file"));
    assert_eq!(r.messages[r.messages.len() - 2].role, Role::Assistant);
}

fn run(em: &mut Emulator, pieces: &[&str]) -> (Vec<StreamEvent>, Finish) {
    let mut out = Vec::new();
    em.push(StreamEvent::MessageStart { id: "x".into(), model: "m".into() }, &mut out);
    for p in pieces {
        em.push(StreamEvent::TextDelta { text: (*p).to_owned() }, &mut out);
    }
    em.push(StreamEvent::Stop { reason: StopReason::EndTurn, stop_sequence: None }, &mut out);
    em.push(StreamEvent::Usage { usage: Usage { input_tokens: 10, output_tokens: 5, ..Usage::default() } }, &mut out);
    let fin = em.finish(&mut out);
    (out, fin)
}

#[test]
fn emulator_turns_blocks_into_tool_calls_with_stable_ids() {
    let mut em = Emulator::new(names(&["read_file", "ls"]), "call_emu_x".into(), false, None, true);
    let (out, fin) = run(&mut em, &[&REPLY[..20], &REPLY[20..]]);
    assert_eq!(fin, Finish::Done);
    let starts: Vec<(u32, String, String)> = out
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallStart { index, id, name } => Some((*index, id.clone(), name.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(starts, [(0, "call_emu_x_0".into(), "read_file".into()), (1, "call_emu_x_1".into(), "ls".into())]);
    assert!(out.contains(&StreamEvent::ToolCallDelta { index: 0, arguments: r#"{"path":"a```b.md"}"#.into() }));
    assert!(out.contains(&StreamEvent::Stop { reason: StopReason::ToolUse, stop_sequence: None }));
    assert_eq!(out.iter().filter(|e| matches!(e, StreamEvent::MessageStart { .. })).count(), 1);
}

#[test]
fn non_streaming_refusal_gets_one_retry_and_usage_adds_up() {
    let mut em = Emulator::new(names(&["read_file"]), "p".into(), true, None, true);
    let (out, fin) = run(&mut em, &["I'm sorry, but I cannot use tools here."]);
    assert!(matches!(fin, Finish::Retry { ref reply, .. } if reply.contains("cannot use tools")), "{fin:?}");
    assert!(out.is_empty(), "held until complete: {out:?}");
    em.restart();
    let (out, fin) = run(&mut em, &["```json action\n{\"tool\":\"read_file\",\"parameters\":{\"path\":\"x\"}}\n```"]);
    assert_eq!(fin, Finish::Done);
    assert_eq!(out.iter().filter(|e| matches!(e, StreamEvent::MessageStart { .. })).count(), 1);
    assert!(out.iter().any(|e| matches!(e, StreamEvent::ToolCallStart { index: 0, .. })));
    let usage = out.iter().rev().find_map(|e| match e {
        StreamEvent::Usage { usage } => Some(*usage),
        _ => None,
    });
    assert_eq!(usage.map(|u| (u.input_tokens, u.output_tokens)), Some((20, 10)), "both attempts are billed");
    // The second refusal is final.
    em.restart();
    let (out, fin) = run(&mut em, &["I cannot use tools."]);
    assert_eq!(fin, Finish::Done);
    assert!(out.iter().any(|e| matches!(e, StreamEvent::TextDelta { .. })));
}

#[test]
fn streaming_retries_a_malformed_first_block_but_not_after_text_went_out() {
    let bad = "```json action\n{\"tool\": \"read_file\", \"parameters\": {\"path\": }\n```";
    let mut em = Emulator::new(names(&["read_file"]), "p".into(), false, None, true);
    let (out, fin) = run(&mut em, &[bad]);
    assert!(matches!(fin, Finish::Retry { .. }), "{fin:?}");
    assert!(out.iter().all(|e| matches!(e, StreamEvent::MessageStart { .. } | StreamEvent::Usage { .. })), "{out:?}");

    let mut em = Emulator::new(names(&["read_file"]), "p".into(), false, None, true);
    let (out, fin) = run(&mut em, &["Sure.\n", bad]);
    assert_eq!(fin, Finish::Done, "text already reached the client");
    let text: String = out
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, format!("Sure.\n{bad}"), "the block is shown as written");
}

#[test]
fn required_tool_choice_without_a_call_is_retried() {
    let mut em = Emulator::new(names(&["read_file"]), "p".into(), true, Some(&ToolChoice::Required), true);
    let (_, fin) = run(&mut em, &["Here is a poem."]);
    assert!(matches!(fin, Finish::Retry { .. }));
}

#[test]
fn id_prefix_is_deterministic_and_distinct() {
    assert_eq!(id_prefix("kh-1"), id_prefix("kh-1"));
    assert_ne!(id_prefix("kh-1"), id_prefix("kh-2"));
    assert!(id_prefix("kh-1").starts_with("call_emu_"));
}
