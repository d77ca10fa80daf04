//! Misbehaving tools: a slow client that keeps an exec alive with heartbeats, a client that
//! throws, a user who rejects a command, and a client that never answers. The runtime never
//! hangs: every turn ends, never-answered execs are aborted after the silence timeout, and the
//! model is told what happened.

use std::sync::Arc;
use std::time::Duration;

use keyhaven::cursor::protocol::agent::{self, shell_result, tool_call};
use serde_json::json;

use crate::support::Reply;
use crate::support::cursor_client::{self, Act, Turn, oa_text, oa_tools};

fn tool_result(body: &serde_json::Value, id: &str) -> String {
    body["messages"].as_array().expect("messages").iter().find(|m| m["tool_call_id"] == id).expect("result").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_failing_rejecting_and_silent_clients_all_end_the_turn() {
    // One second of silence is the limit; the slow client stays under it with heartbeats.
    let s = cursor_client::start("exec_timeout = 1000").await;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_tools(&[
        ("c-slow", "read_file", json!({"path": "a.txt"})),
        ("c-throw", "list_dir", json!({"path": "."})),
        ("c-reject", "run_terminal_cmd", json!({"command": "rm -rf /"})),
        ("c-silent", "grep", json!({"pattern": "alpha"})),
    ])));
    s.mock.push(Reply::sse(&oa_text("handled")));
    let policy: cursor_client::Policy = Arc::new(|x: &agent::ExecServerMessage| match x.exec_id.as_str() {
        "c-slow" => Act::Late { heartbeats: 4, gap: Duration::from_millis(400) },
        "c-throw" => Act::Throw("EACCES".into()),
        "c-reject" => Act::Reject("not on my machine".into()),
        "c-silent" => Act::Ignore,
        _ => Act::Run,
    });
    let seen = s.start_run(&Turn::new("req-faults", "conv-faults", "go"), policy).await.finish().await;
    assert_eq!(seen.end, Some(Default::default()), "the turn ends normally");
    let body = &s.mock.seen()[1].body;
    assert!(tool_result(body, "c-slow").contains("alpha"), "heartbeats kept the slow read alive");
    assert!(tool_result(body, "c-throw").contains("EACCES"), "{}", tool_result(body, "c-throw"));
    assert!(tool_result(body, "c-reject").contains("rejected"), "{}", tool_result(body, "c-reject"));
    assert!(tool_result(body, "c-silent").contains("did not answer"), "{}", tool_result(body, "c-silent"));
    let silent = seen.execs().into_iter().find(|x| x.exec_id == "c-silent").expect("grep exec");
    assert!(seen.aborts.contains(&silent.id), "the silent exec is aborted on the client");
    assert_eq!(seen.aborts.len(), 1, "only the silent exec is aborted");
    let Some(tool_call::Tool::ShellToolCall(sh)) = seen.completed("c-reject").tool else { panic!("shell card") };
    assert!(matches!(sh.result.and_then(|r| r.result), Some(shell_result::Result::Rejected(_))));
    for id in ["c-slow", "c-throw", "c-reject", "c-silent"] {
        assert_eq!(seen.call_sequence(id).last(), Some(&"completed"), "{id} gets its completed card");
    }
    let rounds = s.te.handle.store.tool_rounds("req-faults").await.expect("rounds");
    assert_eq!((rounds[0].calls, rounds[0].failed), (4, 3));
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_answering_with_the_wrong_result_kind_is_a_tool_error() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("ok")));
    let policy: cursor_client::Policy = Arc::new(|_: &agent::ExecServerMessage| {
        Act::Reply(agent::exec_client_message::Message::LsResult(agent::LsResult::default()))
    });
    let seen = s.start_run(&Turn::new("req-wrong", "conv-wrong", "go"), policy).await.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    assert!(tool_result(&s.mock.seen()[1].body, "c-read").contains("another kind of result"));
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_never_answers_does_not_hold_the_turn() {
    // An editor that never answers interaction queries (e.g. a build without the query): after
    // `question_timeout` every waiting tool gets a clear result and the turn goes on and ends.
    let mut s = cursor_client::start("question_timeout = 300").await;
    s.user = Arc::new(|_: &agent::InteractionQuery| None);
    s.mock.push(Reply::sse(&oa_tools(&[
        (
            "c-ask",
            "ask_question",
            json!({"questions": [{"prompt": "A or B?", "options": [{"label": "A"}, {"label": "B"}]}]}),
        ),
        ("c-mode", "switch_mode", json!({"target_mode": "plan"})),
        ("c-fetch", "fetch_url", json!({"url": "http://127.0.0.1:9/"})),
    ])));
    s.mock.push(Reply::sse(&oa_text("Going with A.")));
    let seen = s.turn(&Turn::new("req-silent-user", "conv-silent-user", "choose")).await;
    assert_eq!(seen.end, Some(Default::default()), "the turn ends on its own");
    assert_eq!(seen.queries().len(), 3);
    let up = s.mock.seen();
    for id in ["c-ask", "c-mode", "c-fetch"] {
        let text = tool_result(&up[1].body, id);
        assert!(text.contains("nobody answered in the editor within 1 s"), "{id}: {text}");
    }
    let Some(tool_call::Tool::SwitchModeToolCall(card)) = seen.completed("c-mode").tool else { panic!("card") };
    assert!(matches!(card.result.and_then(|r| r.result), Some(agent::switch_mode_result::Result::Error(_))));
    let runs = s.te.handle.store.conversation_runs("conv-silent-user").await.expect("runs");
    assert_eq!(runs[0].status, keyhaven::model::RunStatus::Completed);
    s.te.stop().await;
}
