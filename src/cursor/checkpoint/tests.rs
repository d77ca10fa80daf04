//! Checkpoint encoding, trimming and restore planning on synthetic transcripts.

use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use serde_json::json;

use crate::cursor::blobs::{BlobChannel, BlobError, BlobId, blob_id, verify};
use crate::cursor::checkpoint::recovery::{self, Plan, RecoveryError, Source};
use crate::cursor::checkpoint::{MAX_WIRE_BYTES, Meta, RootBlob, encode, root_ids, trim};
use crate::cursor::protocol::agent::{self, AgentMode, conversation_step, conversation_turn_structure};
use crate::cursor::transport::Output;
use crate::model::{Entry, Message, Part, Role};

fn conversation() -> Vec<Entry> {
    vec![
        Entry::new("system:c", Message::text(Role::System, "You are helpful.")),
        Entry::new("user:m1", Message::text(Role::User, "read a.txt")),
        Entry::new(
            "r1:a1",
            Message {
                role: Role::Assistant,
                content: vec![
                    Part::Thinking { text: "look".into(), signature: Some("sig".into()) },
                    Part::ToolUse { id: "c1".into(), name: "read_file".into(), input: json!({"path": "a.txt"}) },
                ],
            },
        ),
        Entry::new(
            "r1:t1",
            Message {
                role: Role::Tool,
                content: vec![Part::ToolResult {
                    tool_use_id: "c1".into(),
                    content: vec![Part::text("x")],
                    is_error: false,
                }],
            },
        ),
        Entry::new("r1:a2", Message::text(Role::Assistant, "It says x.")),
    ]
}

fn meta() -> Meta {
    Meta {
        mode: AgentMode::Agent,
        workspace_paths: vec!["/w".into()],
        used_tokens: 1234,
        context_window: Some(128_000),
        todos: Vec::new(),
    }
}

fn blob<'a>(enc: &'a crate::cursor::checkpoint::Encoded, id: &[u8]) -> &'a [u8] {
    &enc.blobs.iter().find(|(b, _)| b.as_slice() == id).expect("blob of the id").1
}

#[test]
fn encode_addresses_every_blob_by_sha256_and_roots_round_trip_losslessly() {
    let entries = conversation();
    let enc = encode(&entries, &meta(), None);
    for (id, data) in &enc.blobs {
        assert_eq!(*id, blob_id(data));
    }
    let s = &enc.state;
    assert_eq!(s.root_prompt_messages_json.len(), entries.len());
    for (id, e) in s.root_prompt_messages_json.iter().zip(&entries) {
        let root: RootBlob = serde_json::from_slice(blob(&enc, id)).expect("root json");
        assert_eq!(root.v, 1);
        assert_eq!(&root.entry(), e, "thinking signatures, tool ids and arguments survive");
    }
    assert_eq!(s.turns.len(), 1);
    let turn = agent::ConversationTurnStructure::decode(blob(&enc, &s.turns[0])).expect("turn");
    let Some(conversation_turn_structure::Turn::AgentConversationTurn(t)) = turn.turn else { panic!("agent turn") };
    assert_eq!(t.request_id.as_deref(), Some("r1"));
    let user = agent::UserMessage::decode(blob(&enc, &t.user_message)).expect("user");
    assert_eq!((user.text.as_str(), user.message_id.as_str()), ("read a.txt", "m1"));
    let steps: Vec<_> = t
        .steps
        .iter()
        .map(|id| agent::ConversationStep::decode(blob(&enc, id)).expect("step").message.expect("case"))
        .collect();
    assert!(matches!(steps[0], conversation_step::Message::ThinkingMessage(_)));
    assert!(matches!(steps[1], conversation_step::Message::ToolCall(_)));
    assert_eq!(
        steps[2],
        conversation_step::Message::AssistantMessage(agent::AssistantMessage { text: "It says x.".into() })
    );
    assert!(s.pending_tool_calls.is_empty());
    assert_eq!(s.token_details, Some(agent::ConversationTokenDetails { used_tokens: 1234, max_tokens: 128_000 }));
    assert_eq!(s.previous_workspace_uris, vec!["file:///w".to_owned()]);
    assert_eq!(s.mode, Some(AgentMode::Agent as i32));
    assert_eq!(s.agent_type.as_deref(), Some("ide"));
    assert_eq!(s.read_paths, vec!["a.txt".to_owned()]);
    // Every referenced blob is there, children included.
    assert_eq!(enc.referenced().len(), enc.blobs.len());
}

#[test]
fn pending_tool_calls_name_the_unanswered_calls() {
    let entries = conversation()[..3].to_vec();
    let enc = encode(&entries, &meta(), None);
    assert_eq!(enc.state.pending_tool_calls.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&enc.state.pending_tool_calls[0]).expect("json");
    assert_eq!(v["id"], "r1:a1");
    assert_eq!(
        v["content"][1],
        json!({"type": "tool-call", "toolCallId": "c1", "toolName": "read_file", "args": {"path": "a.txt"}})
    );
    let fix = recovery::interrupted_results(&entries).expect("a resolution");
    assert_eq!(fix.id, "r1:a1:interrupted");
    assert!(
        matches!(&fix.message.content[0], Part::ToolResult { tool_use_id, is_error: true, .. } if tool_use_id == "c1")
    );
    assert!(recovery::interrupted_results(&conversation()).is_none());
}

#[test]
fn trim_follows_the_documented_order_and_stays_under_the_limit() {
    let id = |i: u32| blob_id(&i.to_le_bytes()).to_vec();
    let base = agent::ConversationStateStructure {
        root_prompt_messages_json: (0..12_000).map(id).collect(),
        turns: (0..6_000).map(|i| id(100_000 + i)).collect(),
        read_paths: (0..1_000).map(|i| format!("/some/long/path/{i}.rs")).collect(),
        todos: vec![vec![1; 100]],
        summary: Some(vec![2; 100]),
        pending_tool_calls: vec![json!({"id": "a", "content": [{"args": {"x": "y".repeat(300_000)}}]}).to_string()],
        ..Default::default()
    };
    assert!(base.encoded_len() > MAX_WIRE_BYTES);

    // Abbreviating pending calls comes first and, here, is not enough.
    let mut s = base.clone();
    let t = trim(&mut s, MAX_WIRE_BYTES);
    assert!(s.encoded_len() <= MAX_WIRE_BYTES, "{}", s.encoded_len());
    assert!(t.pending_abbreviated && t.extras);
    assert!(s.read_paths.is_empty());
    assert!(t.roots > 0);
    assert_eq!(s.root_prompt_messages_json[0], id(0), "the first root (the system prompt) is kept");
    assert_eq!(s.root_prompt_messages_json.last(), base.root_prompt_messages_json.last(), "the newest roots are kept");
    assert_eq!(s.root_prompt_messages_json[1], id(u32::try_from(t.roots).expect("fits") + 1), "the oldest went first");
    assert_eq!(t.turns, 0, "turns only go when dropping roots is not enough");
    assert_eq!(s.todos.len(), 1);

    // A tighter limit reaches the turns (the newest kept), then summary, plan and todos.
    let mut s = base.clone();
    let t = trim(&mut s, 100_000);
    assert!(s.encoded_len() <= 100_000);
    assert_eq!(s.root_prompt_messages_json.len(), 1);
    assert!(t.turns > 0);
    assert_eq!(s.turns.last(), base.turns.last());
    assert!(s.todos.len() == 1 && s.summary.is_some(), "not needed yet");
    let mut s = base.clone();
    let t = trim(&mut s, 1_250);
    assert!(t.summary_plan_todos);
    assert!(s.todos.is_empty() && s.summary.is_none());
    assert_eq!(s.turns.len(), 1);

    // A state within the limit is untouched.
    let mut small = encode(&conversation(), &meta(), None).state;
    let before = small.clone();
    assert!(!trim(&mut small, MAX_WIRE_BYTES).any());
    assert_eq!(small, before);
}

#[test]
fn the_local_transcript_wins_unless_it_is_missing_or_behind() {
    let all = conversation();
    let state = encode(&all, &meta(), None).state;
    assert_eq!(recovery::plan(&all, Some(&state)), Plan::KeepLocal);
    assert_eq!(recovery::plan(&all, None), Plan::KeepLocal);
    assert_eq!(recovery::plan(&[], Some(&state)), Plan::Restore(state.root_prompt_messages_json.clone()));
    assert_eq!(recovery::plan(&all[..2], Some(&state)), Plan::Restore(state.root_prompt_messages_json[2..].to_vec()));
    let mut other = all[..2].to_vec();
    other[1] = Entry::new("user:zz", Message::text(Role::User, "something else"));
    assert_eq!(recovery::plan(&other, Some(&state)), Plan::KeepLocal, "a diverging state is ignored");
    assert_eq!(root_ids(&all).iter().map(|i| i.to_vec()).collect::<Vec<_>>(), state.root_prompt_messages_json);
}

#[tokio::test]
async fn restore_verifies_pre_fetched_blobs_and_refuses_a_corrupt_one() {
    let all = conversation();
    let enc = encode(&all, &meta(), None);
    let pre = |tamper: bool| -> Vec<agent::PreFetchedBlob> {
        enc.blobs
            .iter()
            .enumerate()
            .map(|(i, (id, d))| agent::PreFetchedBlob {
                id: id.to_vec(),
                value: if tamper && i == 1 { b"{}".to_vec() } else { d.clone() },
            })
            .collect()
    };
    let output = Arc::new(Output::new(1 << 20));
    let channel = BlobChannel::new(output.clone());
    let ids = enc.state.root_prompt_messages_json.clone();
    let source = Source::new(pre(false), &channel, Duration::from_secs(5));
    assert_eq!(recovery::restore(&ids, &source).await.expect("restored"), all);
    assert_eq!(output.published(), 0, "no get_blob round trip when everything was pre-fetched");
    let source = Source::new(pre(true), &channel, Duration::from_secs(5));
    let err = recovery::restore(&ids, &source).await.expect_err("refused");
    assert!(matches!(err, RecoveryError::Blob(BlobError::Corrupt(_))), "{err}");
    assert!(verify(&[1, 2, 3], b"x").is_err());
    // Missing and not pre-fetched: asked from the client, who has nothing.
    let source = Source::new(Vec::new(), &channel, Duration::from_secs(5));
    let (r, ()) = tokio::join!(recovery::restore(&ids[..1], &source), async {
        while output.published() == 0 {
            tokio::task::yield_now().await;
        }
        channel.deliver(agent::KvClientMessage {
            id: 1,
            message: Some(agent::kv_client_message::Message::GetBlobResult(agent::GetBlobResult { blob_data: None })),
        });
    });
    assert!(matches!(r, Err(RecoveryError::Blob(BlobError::Missing(_)))), "{r:?}");
}

#[test]
fn orphans_before_the_first_user_message_are_dropped_from_a_trimmed_state() {
    let all = conversation();
    let trimmed = vec![all[0].clone(), all[3].clone(), all[4].clone(), all[1].clone()];
    let kept = recovery::drop_orphans(trimmed.clone(), false);
    assert_eq!(kept, vec![all[0].clone(), all[1].clone()]);
    assert_eq!(recovery::drop_orphans(trimmed.clone(), true), trimmed, "after local messages nothing is dropped");
}

#[test]
fn acknowledged_blobs_are_trusted_only_while_the_client_references_them() {
    use std::collections::HashSet;

    use crate::cursor::checkpoint::held_by_client;
    use crate::cursor::checkpoint::worker::trusted;
    let enc = encode(&conversation(), &meta(), None);
    let all: HashSet<BlobId> = enc.referenced().iter().map(|(id, _)| *id).collect();
    let none = HashSet::new();
    // The client sent back this state: every blob it references, the turns' user message and
    // steps too, need not be sent again.
    let held = held_by_client(Some(&enc.state), &[]);
    assert!(held.len() < all.len(), "the state names roots and turns only");
    assert_eq!(trusted(&all, &held, &none, &enc.children), all);
    // No state (the IDE lost it, or its store): acknowledgements alone are not trusted.
    assert!(trusted(&all, &HashSet::new(), &none, &enc.children).is_empty());
    // A state naming blobs that were never acknowledged (another backend's, or ours with the
    // acknowledgement lost): sent again.
    assert!(trusted(&none, &held, &none, &enc.children).is_empty());
    // Acknowledged during this run: always trusted.
    assert_eq!(trusted(&none, &HashSet::new(), &all, &enc.children), all);
    // Pre-fetched blobs count when their content matches their id.
    let (id, data) = enc.blobs[0].clone();
    let good = agent::PreFetchedBlob { id: id.to_vec(), value: data };
    let bad = agent::PreFetchedBlob { id: enc.blobs[1].0.to_vec(), value: b"tampered".to_vec() };
    assert_eq!(held_by_client(None, &[good, bad]), HashSet::from([id]));
}

#[test]
fn the_tracker_follows_a_compaction_and_snapshots_carry_the_todos_of_their_moment() {
    use crate::cursor::checkpoint::worker::Tracker;
    use crate::cursor::tools::todos::TodoList;
    use crate::run::{RunEvent, RunObserver};
    let all = conversation();
    let todos = Arc::new(TodoList::default());
    let (tracker, mut rx) = Tracker::new(&all[..2], todos.clone());
    tracker.on_event(RunEvent::MessageAppended { seq: 2, entry: &all[2] });
    tracker.on_event(RunEvent::ToolRoundStarted { step: 1, calls: 1 });
    let first = rx.try_recv().expect("a snapshot at the tool round");
    assert_eq!(first.entries, all[..3].to_vec());
    assert!(first.todos.is_empty());
    let item = agent::TodoItem { id: "1".into(), content: "fix it".into(), ..Default::default() };
    todos.set(vec![item.clone()]);
    tracker.on_event(RunEvent::MessageAppended { seq: 3, entry: &all[3] });
    tracker.on_event(RunEvent::ToolRoundFinished { step: 1, failed: 0 });
    let second = rx.try_recv().expect("a snapshot after the results");
    assert_eq!(second.todos, vec![item.encode_to_vec()], "the list as the tool left it");
    // A compaction replaces the mirror and asks for a checkpoint of the compacted transcript.
    let compacted = vec![all[0].clone(), Entry::new("r1:c2:summary", Message::text(Role::User, "summary"))];
    tracker.on_event(RunEvent::Compacted { before: 4, after: 2, summary: Some("summary"), entries: &compacted });
    let third = rx.try_recv().expect("a snapshot after the compaction");
    assert_eq!(third.entries, compacted);
    assert!(third.used_tokens > 0, "an estimate until the next call reports usage");
    // A failed compaction keeps the transcript and asks for nothing.
    tracker.on_event(RunEvent::Compacted { before: 2, after: 2, summary: None, entries: &compacted });
    assert!(rx.try_recv().is_err());
    // Appends continue on the compacted mirror.
    tracker.on_event(RunEvent::MessageAppended { seq: 2, entry: &all[4] });
    tracker.on_event(RunEvent::ToolRoundStarted { step: 2, calls: 1 });
    assert_eq!(rx.try_recv().expect("snapshot").entries.len(), 3);
    todos.set(Vec::new());
    assert!(tracker.snapshot(&all).todos.is_empty(), "the final snapshot reads the list as it is then");
    tracker.close();
}
