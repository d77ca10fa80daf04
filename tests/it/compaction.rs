//! Compaction: near the model's context window (catalog `context_window`, `[agent] compact_at`)
//! and on Cursor's summarize action, the conversation is summarized through the provider and
//! replaced explicitly (system message verbatim, then one summary message); Cursor sees
//! `summary_started`, `summary`, `summary_completed`; the store holds the compacted transcript
//! and later requests grow from it append-only again; a compaction mid-turn is checkpointed at
//! once (before the turn ends).

use keyhaven::cursor::protocol::agent::agent_server_message;
use keyhaven::cursor::protocol::agent::interaction_update::Message as U;
use serde_json::json;

use crate::support::Reply;
use crate::support::cursor_client::{self, SMALL_MODEL, Turn, oa_text, oa_tools};

fn small(request_id: &str, conversation_id: &str, text: &str) -> Turn {
    Turn { model: "small-model".into(), ..Turn::new(request_id, conversation_id, text) }
}

/// The summary frames, in order, as names.
fn summary_frames(updates: &[U]) -> Vec<String> {
    updates
        .iter()
        .filter_map(|u| match u {
            U::SummaryStarted(_) => Some("started".to_owned()),
            U::Summary(s) => Some(format!("summary {}", s.summary)),
            U::SummaryCompleted(_) => Some("completed".to_owned()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_near_the_window_is_summarized_and_replaced_between_model_calls() {
    // The tool call reports 100 prompt tokens: 10 % of the 1000-token window, over the 8 % mark.
    let s = cursor_client::start_with("compact_at = 8", SMALL_MODEL).await;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("SUMMARY: the user asked to read a.txt; it says alpha")));
    s.mock.push(Reply::sse(&oa_text("It says alpha.")));
    s.mock.push(Reply::sse(&oa_text("You are welcome.")));
    let seen = s.turn(&small("req-c1", "conv-c", "what is in a.txt?")).await;
    assert_eq!(seen.end, Some(Default::default()));
    let updates = seen.updates();
    assert_eq!(
        summary_frames(&updates),
        vec![
            "started".to_owned(),
            "summary SUMMARY: the user asked to read a.txt; it says alpha".to_owned(),
            "completed".to_owned()
        ]
    );
    let at = |pred: &dyn Fn(&U) -> bool| updates.iter().position(pred).expect("frame");
    assert!(at(&|u| matches!(u, U::ToolCallCompleted(_))) < at(&|u| matches!(u, U::SummaryStarted(_))));
    assert!(at(&|u| matches!(u, U::SummaryCompleted(_))) < at(&|u| matches!(u, U::TextDelta(_))));

    let up = s.mock.seen();
    assert_eq!(up.len(), 3);
    // The summary call: the whole transcript plus the instruction, tools listed but not callable.
    let summary_call = &up[1].body;
    assert_eq!(summary_call["tool_choice"], "none");
    assert_eq!(summary_call["tools"], up[0].body["tools"], "the same tools (and prompt prefix) as the run");
    let msgs = summary_call["messages"].as_array().expect("messages");
    let first = up[0].body["messages"].as_array().expect("messages");
    assert_eq!(msgs.len(), 5, "system, user, assistant, tool, instruction");
    assert_eq!(&msgs[..2], &first[..], "the summary call starts with the run's prompt (cache hits)");
    assert!(msgs.last().expect("instruction")["content"].to_string().contains("Summarize the conversation"));
    // The next call starts from the compacted transcript.
    let after = up[2].body["messages"].as_array().expect("messages");
    assert_eq!(after.len(), 2);
    assert_eq!(after[0], up[0].body["messages"][0], "the system message is kept verbatim");
    let summary_text = after[1]["content"].as_str().expect("text");
    assert!(summary_text.contains("it says alpha") && summary_text.contains("what is in a.txt?"), "{summary_text}");
    // The store holds the compacted transcript.
    let stored = s.te.handle.store.conversation_messages("conv-c").await.expect("messages");
    let ids: Vec<&str> = stored.iter().map(|m| m.entry.id.as_str()).collect();
    assert_eq!(ids, vec!["system:conv-c", "req-c1:c2:summary", "req-c1:a2"]);
    assert_eq!(stored.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![0, 1, 2]);

    // A restarted engine continues from the compacted transcript, append-only again.
    let s = s.restart().await;
    let seen = s.turn(&small("req-c2", "conv-c", "thanks")).await;
    assert_eq!(seen.end, Some(Default::default()));
    let up = s.mock.seen();
    let next = up.last().expect("request").body["messages"].as_array().expect("messages").clone();
    assert_eq!(&next[..2], &after[..], "the compacted prefix is stable");
    assert_eq!(next.len(), 4, "summary, the answer, the new message");
    assert_eq!(next[3]["content"], "thanks");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summarize_action_compacts_the_conversation_and_ends_the_turn() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_text("first answer")));
    s.mock.push(Reply::sse(&oa_text("we talked about one question")));
    s.mock.push(Reply::sse(&oa_text("third answer")));
    let seen = s.turn(&Turn::new("req-s1", "conv-sum", "one question")).await;
    assert_eq!(seen.end, Some(Default::default()));
    let seen = s.turn(&Turn::summarize("req-s2", "conv-sum")).await;
    assert_eq!(seen.end, Some(Default::default()), "a summarize turn ends with turn_ended and {{}}");
    assert!(seen.turn_ended().is_some());
    assert_eq!(
        summary_frames(&seen.updates()),
        vec!["started".to_owned(), "summary we talked about one question".to_owned(), "completed".to_owned()]
    );
    // The compacted state is published (its blobs acknowledged first), before turn_ended.
    let checkpoint_at = seen
        .msgs
        .iter()
        .position(|m| matches!(m.message, Some(agent_server_message::Message::ConversationCheckpointUpdate(_))))
        .expect("a checkpoint of the compacted state");
    let ended_at = seen
        .msgs
        .iter()
        .position(|m| match &m.message {
            Some(agent_server_message::Message::InteractionUpdate(u)) => matches!(u.message, Some(U::TurnEnded(_))),
            _ => false,
        })
        .expect("turn_ended");
    assert!(checkpoint_at < ended_at);
    let state = seen.last_checkpoint().expect("checkpoint");
    let roots: Vec<String> = s.roots(&state).into_iter().map(|r| r.id).collect();
    assert_eq!(roots, vec!["system:conv-sum", "req-s2:c0:summary", "req-s2:c0:ack"], "the compacted roots");
    let seen = s.turn(&Turn::new("req-s3", "conv-sum", "and now?")).await;
    assert_eq!(seen.end, Some(Default::default()));
    let up = s.mock.seen();
    assert_eq!(up.len(), 3);
    let third = up[2].body["messages"].as_array().expect("messages");
    let roles: Vec<&str> = third.iter().map(|m| m["role"].as_str().expect("role")).collect();
    assert_eq!(roles, vec!["system", "user", "assistant", "user"], "never two user messages in a row");
    assert!(third[1]["content"].as_str().expect("summary").contains("we talked about one question"));
    assert_eq!(third[3]["content"], "and now?");
    let stored = s.te.handle.store.conversation_messages("conv-sum").await.expect("messages");
    assert_eq!(stored.len(), 5, "system, summary, acknowledgement, the new message, its answer");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summarize_action_during_a_run_compacts_before_the_next_model_call() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("read a.txt: alpha")));
    s.mock.push(Reply::sse(&oa_text("It says alpha.")));
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    let policy: cursor_client::Policy =
        std::sync::Arc::new(move |_: &keyhaven::cursor::protocol::agent::ExecServerMessage| {
            cursor_client::Act::After(g.clone())
        });
    let run = s.start_run(&Turn::new("req-ms", "conv-ms", "read a.txt"), policy).await;
    run.wait_for(|m| {
        m.iter().any(|m| {
            matches!(
                &m.message,
                Some(keyhaven::cursor::protocol::agent::agent_server_message::Message::ExecServerMessage(_))
            )
        })
    })
    .await;
    // Routed before the exec's answer (inbox order), so it is seen before the next model cycle.
    run.summarize().await;
    gate.add_permits(1);
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    assert_eq!(summary_frames(&seen.updates()).len(), 3);
    let up = s.mock.seen();
    assert_eq!(up.len(), 3, "tool call, summary, answer");
    assert_eq!(up[1].body["tool_choice"], "none");
    assert_eq!(up[2].body["messages"].as_array().expect("messages").len(), 2);
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_mid_turn_publishes_a_checkpoint_of_the_compacted_transcript_before_turn_ended() {
    use keyhaven::cursor::protocol::agent;
    let s = cursor_client::start_with("compact_at = 8", SMALL_MODEL).await;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("SUMMARY: a.txt says alpha")));
    s.mock.push(Reply::sse(&oa_text("It says alpha.")));
    let seen = s.turn(&small("req-cc", "conv-cc", "what is in a.txt?")).await;
    assert_eq!(seen.end, Some(Default::default()));
    // Positions in the stream of server messages.
    let update_at = |f: &dyn Fn(&U) -> bool| {
        seen.msgs
            .iter()
            .position(|m| match &m.message {
                Some(agent_server_message::Message::InteractionUpdate(u)) => u.message.as_ref().is_some_and(f),
                _ => false,
            })
            .expect("update")
    };
    let completed = update_at(&|u| matches!(u, U::SummaryCompleted(_)));
    let ended = update_at(&|u| matches!(u, U::TurnEnded(_)));
    let checkpoints: Vec<(usize, agent::ConversationStateStructure)> = seen
        .msgs
        .iter()
        .enumerate()
        .filter_map(|(i, m)| match &m.message {
            Some(agent_server_message::Message::ConversationCheckpointUpdate(c)) => Some((i, c.clone())),
            _ => None,
        })
        .collect();
    // The ids of a checkpoint's root messages, read from the client's blob store (so the
    // checkpoint's blobs were acknowledged before it).
    let root_ids =
        |st: &agent::ConversationStateStructure| -> Vec<String> { s.roots(st).into_iter().map(|r| r.id).collect() };
    let roots: Vec<(usize, Vec<String>)> = checkpoints.iter().map(|(i, st)| (*i, root_ids(st))).collect();
    let compacted = vec!["system:conv-cc".to_owned(), "req-cc:c2:summary".to_owned()];
    let (at, _) = roots.iter().find(|(_, ids)| *ids == compacted).unwrap_or_else(|| panic!("{roots:?}"));
    assert!(*at > completed && *at < ended, "after the compaction, before turn_ended: {at} {completed} {ended}");
    assert_eq!(roots.len(), 4, "tool round started, its results, the compaction, the final one: {roots:?}");
    assert_eq!(roots[3].1, vec!["system:conv-cc", "req-cc:c2:summary", "req-cc:a2"]);
    assert_eq!(roots[3].0, ended - 1);
    // The store's latest checkpoint is the compacted transcript's, not an older and longer one.
    s.te.handle.store.flush().await.expect("flush");
    let stored = s.te.handle.store.latest_checkpoint("conv-cc").await.expect("read").expect("checkpoint");
    assert_eq!(stored.seq, 3);
    s.te.stop().await;
}
