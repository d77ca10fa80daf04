//! Delivery of Cursor's own mid-run actions (docs/cursor-backend.md §4 "Message compilation and
//! delivery"): a follow-up user message during a run is inserted after the current step (the
//! tool results stay right behind their assistant message), a message sent to a run that is no
//! longer current never reaches the conversation, and a resubmitted message after a provider
//! error is not sent twice in a row. Timing is fixed by the test (gated exec answers and gated
//! provider streams), never by sleeps.

use std::sync::Arc;

use keyhaven::cursor::protocol::agent::{self, agent_server_message, interaction_update};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::support::Reply;
use crate::support::cursor_client::{self, Act, Turn, oa_text, oa_text_unfinished, oa_tools};

fn has_exec(msgs: &[agent::AgentServerMessage], exec_id: &str) -> bool {
    msgs.iter().any(
        |m| matches!(&m.message, Some(agent_server_message::Message::ExecServerMessage(x)) if x.exec_id == exec_id),
    )
}

fn has_text(msgs: &[agent::AgentServerMessage]) -> bool {
    msgs.iter().any(|m| {
        matches!(
            &m.message,
            Some(agent_server_message::Message::InteractionUpdate(agent::InteractionUpdate {
                message: Some(interaction_update::Message::TextDelta(_))
            }))
        )
    })
}

fn appended(msgs: &[agent::AgentServerMessage], message_id: &str) -> bool {
    msgs.iter().any(|m| {
        matches!(&m.message, Some(agent_server_message::Message::InteractionUpdate(agent::InteractionUpdate {
            message: Some(interaction_update::Message::UserMessageAppended(u))
        })) if u.user_message.as_ref().is_some_and(|u| u.message_id == message_id))
    })
}

fn roles(body: &serde_json::Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().expect("role").to_owned())
        .collect()
}

/// A policy that holds every exec until the test releases `gate`.
fn gated(gate: &Arc<Semaphore>) -> cursor_client::Policy {
    let gate = gate.clone();
    Arc::new(move |_: &agent::ExecServerMessage| Act::After(gate.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_during_a_tool_round_is_inserted_after_the_results() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("alpha, and hi")));
    let gate = Arc::new(Semaphore::new(0));
    let run = s.start_run(&Turn::new("req-ins", "conv-ins", "read a.txt"), gated(&gate)).await;
    run.wait_for(|m| has_exec(m, "c-read")).await;
    // Sent before the exec's answer, so it reaches the run while the tool round waits.
    run.user_message("m-follow", "also say hi", false).await;
    gate.add_permits(1);
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    assert!(seen.aborts.is_empty(), "an insertion cancels nothing");
    let up = s.mock.seen();
    assert_eq!(up.len(), 2, "the insertion rides on the next model call of the same run");
    assert_eq!(roles(&up[1].body), vec!["system", "user", "assistant", "tool", "user"]);
    let msgs = up[1].body["messages"].as_array().expect("messages");
    assert!(msgs[3]["content"].to_string().contains("alpha"), "the tool result is complete: {}", msgs[3]);
    assert_eq!(msgs[4]["content"], "also say hi");
    let runs = s.te.handle.store.conversation_runs("conv-ins").await.expect("runs");
    assert_eq!((runs.len(), runs[0].status), (1, keyhaven::model::RunStatus::Completed));
    let stored = s.te.handle.store.conversation_messages("conv-ins").await.expect("messages");
    let ids: Vec<&str> = stored.iter().map(|m| m.entry.id.as_str()).collect();
    assert_eq!(
        ids,
        vec!["system:conv-ins", "user:m-req-ins", "req-ins:a1", "req-ins:t1", "user:m-follow", "req-ins:a2"]
    );
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_during_the_model_call_waits_for_the_answer() {
    let s = cursor_client::start("").await;
    let gate = Arc::new(Semaphore::new(0));
    // The first answer streams one piece, then waits for the gate before finishing.
    s.mock.push(Reply::sse(&oa_text("first answer")).gate(2, gate.clone()));
    s.mock.push(Reply::sse(&oa_text("second answer")));
    let run = s.start_run(&Turn::new("req-im", "conv-im", "question"), cursor_client::run_everything()).await;
    run.wait_for(has_text).await;
    run.user_message("m-more", "one more thing", false).await;
    // The run echoes an accepted message; only then may the provider finish.
    run.wait_for(|m| appended(m, "m-more")).await;
    gate.add_permits(1);
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    let up = s.mock.seen();
    assert_eq!(up.len(), 2, "the answer completes, then the follow-up gets its own model call");
    assert_eq!(roles(&up[1].body), vec!["system", "user", "assistant", "user"]);
    assert_eq!(up[1].body["messages"][2]["content"], "first answer");
    assert_eq!(up[1].body["messages"][3]["content"], "one more thing");
    let calls = s.te.wait_calls(2).await;
    assert!(calls.iter().all(|c| c.summary.status == keyhaven::model::CallStatus::Ok), "nothing was canceled");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_for_a_superseded_run_never_reaches_the_conversation() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_text_unfinished("slow")).hang());
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("done")));
    let first = s.start_run(&Turn::new("req-s1", "conv-stale", "one"), cursor_client::run_everything()).await;
    first.wait_for(has_text).await;
    // A new run of the same conversation supersedes the first one.
    let gate = Arc::new(Semaphore::new(0));
    let second = s.start_run(&Turn::new("req-s2", "conv-stale", "two"), gated(&gate)).await;
    second.wait_for(|m| has_exec(m, "c-read")).await;
    // The old stream still takes appends (it lingers), but its run is over.
    first.user_message("m-stale", "stale words", false).await;
    gate.add_permits(1);
    let (a, b) = (first.finish().await, second.finish().await);
    assert_eq!((a.end, b.end), (Some(Default::default()), Some(Default::default())));
    for req in s.mock.seen() {
        assert!(!req.body.to_string().contains("stale words"), "a stale message reached the provider");
    }
    let stored = s.te.handle.store.conversation_messages("conv-stale").await.expect("messages");
    assert!(stored.iter().all(|m| m.entry.id != "user:m-stale"));
    let runs = s.te.handle.store.conversation_runs("conv-stale").await.expect("runs");
    assert_eq!(runs.len(), 2);
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_provider_error_the_next_message_does_not_follow_an_unanswered_one() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::json(400, r#"{"error":{"message":"upstream broke","type":"invalid_request_error"}}"#));
    s.mock.push(Reply::sse(&oa_text("now it works")));
    s.mock.push(Reply::sse(&oa_text("and again")));
    let failed = s.turn(&Turn::new("req-e1", "conv-e", "first try")).await;
    assert!(failed.end.expect("end").error.is_some(), "the failed turn ends with an error");
    let calls_before = s.mock.seen().len();
    // A new message: user, assistant note, user.
    let ok = s.turn(&Turn::new("req-e2", "conv-e", "second try")).await;
    assert_eq!(ok.end, Some(Default::default()));
    let up = s.mock.seen();
    let body = &up[calls_before].body;
    assert_eq!(roles(body), vec!["system", "user", "assistant", "user"]);
    assert!(body["messages"][2]["content"].to_string().contains("upstream broke"), "{}", body["messages"][2]);
    // The failed request is a prefix of the next one (append-only).
    let failed_msgs = up[0].body["messages"].as_array().expect("messages");
    assert_eq!(&body["messages"].as_array().expect("messages")[..failed_msgs.len()], &failed_msgs[..]);
    // Resubmitting the same message id again after an answer sends it once more, at the end.
    let mut again = Turn::new("req-e3", "conv-e", "second try");
    again.message_id = "m-req-e2".into();
    let seen = s.turn(&again).await;
    assert_eq!(seen.end, Some(Default::default()));
    let last = s.mock.seen().last().expect("request").body.clone();
    assert_eq!(roles(&last), vec!["system", "user", "assistant", "user", "assistant", "user"]);
    s.te.stop().await;
}
