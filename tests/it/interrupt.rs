//! Interrupts: the stop button during the model call and during a tool round. The run ends with
//! `turn_ended` and `{}`, running execs are aborted on the client, unfinished calls get an
//! "interrupted" result in the transcript, and the next turn continues from it.

use std::time::Duration;

use serde_json::json;

use crate::support::Reply;
use crate::support::cursor_client::{self, Act, Turn, oa_text, oa_text_unfinished, oa_tools};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_tools_aborts_the_execs_and_the_next_turn_sees_interrupted_results() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "x\n");
    s.mock.push(Reply::sse(&oa_tools(&[
        ("c-read", "read_file", json!({"path": "a.txt"})),
        ("c-sh", "run_terminal_cmd", json!({"command": "sleep 100"})),
    ])));
    s.mock.push(Reply::sse(&oa_text("ok, stopped")));
    // The client answers the read but never the shell command, and says when the shell exec came.
    let shell_out = std::sync::Arc::new(tokio::sync::Notify::new());
    let notify = shell_out.clone();
    let policy: cursor_client::Policy =
        std::sync::Arc::new(move |x: &keyhaven::cursor::protocol::agent::ExecServerMessage| {
            if x.exec_id == "c-sh" {
                notify.notify_one();
                Act::Ignore
            } else {
                Act::Run
            }
        });
    let run = s.start_run(&Turn::new("req-int", "conv-int", "run it"), policy).await;
    tokio::time::timeout(cursor_client::TIMEOUT, shell_out.notified()).await.expect("the shell exec arrives");
    run.cancel().await;
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()), "a canceled turn still ends with turn_ended and {{}}");
    assert!(seen.turn_ended().is_some());
    let shell = seen.execs().into_iter().find(|x| x.exec_id == "c-sh").expect("shell exec");
    assert!(seen.aborts.contains(&shell.id), "the running shell exec is aborted: {:?}", seen.aborts);
    // The shell card still completes (as interrupted) or is left without a result, but the run row says canceled.
    let runs = s.te.handle.store.conversation_runs("conv-int").await.expect("runs");
    assert_eq!(runs[0].status, keyhaven::model::RunStatus::Canceled);

    // The next turn continues the conversation: the provider sees the interrupted result.
    let next = s.turn(&Turn::new("req-int-2", "conv-int", "what happened?")).await;
    assert_eq!(next.end, Some(Default::default()));
    let up = s.mock.seen();
    let last = &up.last().expect("a request").body;
    let tool = last["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "c-sh")
        .expect("the shell call has a result");
    assert!(tool.to_string().contains("Interrupted"), "{tool}");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_the_model_call_after_a_tool_round() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "x\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    // The second model call streams a little, then hangs.
    s.mock.push(Reply::sse(&oa_text_unfinished("partial answer")).hang());
    let run = s.start_run(&Turn::new("req-mc", "conv-mc", "read"), cursor_client::run_everything()).await;
    for _ in 0..500 {
        if s.mock.seen().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    run.cancel().await;
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    assert_eq!(seen.call_sequence("c-read"), vec!["partial", "exec", "started", "completed"]);
    let calls = s.te.wait_calls(2).await;
    assert_eq!(calls[0].summary.status, keyhaven::model::CallStatus::Canceled, "the hanging call is dropped");
    assert!(!s.mock.dropped_at().is_empty(), "the upstream response was closed");
    s.te.stop().await;
}
