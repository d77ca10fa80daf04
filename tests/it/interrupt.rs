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
    // The stopped turn is closed by an assistant note: no two user messages in a row.
    let roles = roles(last);
    assert_eq!(roles, vec!["system", "user", "assistant", "tool", "tool", "assistant", "user"]);
    assert!(last["messages"][5]["content"].to_string().contains("stopped"), "{}", last["messages"][5]);
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

fn saw_exec(msgs: &[keyhaven::cursor::protocol::agent::AgentServerMessage], exec_id: &str) -> bool {
    use keyhaven::cursor::protocol::agent::agent_server_message::Message;
    msgs.iter().any(|m| matches!(&m.message, Some(Message::ExecServerMessage(x)) if x.exec_id == exec_id))
}

fn saw_text(msgs: &[keyhaven::cursor::protocol::agent::AgentServerMessage]) -> bool {
    use keyhaven::cursor::protocol::agent::{agent_server_message::Message, interaction_update};
    msgs.iter().any(|m| {
        matches!(&m.message, Some(Message::InteractionUpdate(u))
            if matches!(u.message, Some(interaction_update::Message::TextDelta(_))))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_break_during_tools_interrupts_them_and_the_same_run_answers_the_new_message() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "x\n");
    s.mock.push(Reply::sse(&oa_tools(&[
        ("c-read", "read_file", json!({"path": "a.txt"})),
        ("c-sh", "run_terminal_cmd", json!({"command": "sleep 100"})),
    ])));
    s.mock.push(Reply::sse(&oa_text("fine, doing that instead")));
    let policy: cursor_client::Policy = std::sync::Arc::new(
        |x: &keyhaven::cursor::protocol::agent::ExecServerMessage| {
            if x.exec_id == "c-sh" { Act::Ignore } else { Act::Run }
        },
    );
    let run = s.start_run(&Turn::new("req-brk", "conv-brk", "run it"), policy).await;
    run.wait_for(|m| saw_exec(m, "c-sh")).await;
    run.user_message("m-instead", "stop, do something else", true).await;
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()), "the run goes on and ends normally");
    assert_eq!(
        seen.updates()
            .iter()
            .filter(|u| matches!(u, keyhaven::cursor::protocol::agent::interaction_update::Message::TurnEnded(_)))
            .count(),
        1
    );
    let shell = seen.execs().into_iter().find(|x| x.exec_id == "c-sh").expect("shell exec");
    assert!(seen.aborts.contains(&shell.id), "the running shell exec is aborted: {:?}", seen.aborts);
    let up = s.mock.seen();
    assert_eq!(up.len(), 2, "one more model call, in the same run");
    assert_eq!(roles(&up[1].body), vec!["system", "user", "assistant", "tool", "tool", "user"]);
    let msgs = up[1].body["messages"].as_array().expect("messages");
    let sh = msgs.iter().find(|m| m["tool_call_id"] == "c-sh").expect("shell result");
    assert!(sh.to_string().contains("Interrupted"), "{sh}");
    assert_eq!(msgs[5]["content"], "stop, do something else");
    let runs = s.te.handle.store.conversation_runs("conv-brk").await.expect("runs");
    assert_eq!((runs.len(), runs[0].status), (1, keyhaven::model::RunStatus::Completed));
    let rounds = s.te.handle.store.tool_rounds("req-brk").await.expect("rounds");
    assert_eq!(rounds[0].status, "interrupted");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_break_during_the_model_call_drops_it_and_answers_the_new_message() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_text_unfinished("a long answ")).hang());
    s.mock.push(Reply::sse(&oa_text("short answer")));
    let run = s.start_run(&Turn::new("req-bm", "conv-bm", "explain"), cursor_client::run_everything()).await;
    run.wait_for(saw_text).await;
    run.user_message("m-short", "keep it short", true).await;
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    let up = s.mock.seen();
    assert_eq!(up.len(), 2);
    assert_eq!(roles(&up[1].body), vec!["system", "user", "assistant", "user"]);
    assert_eq!(up[1].body["messages"][2]["content"], "a long answ", "the streamed part is kept");
    assert_eq!(up[1].body["messages"][3]["content"], "keep it short");
    let calls = s.te.wait_calls(2).await;
    let statuses: Vec<_> = calls.iter().map(|c| c.summary.status).collect();
    assert!(statuses.contains(&keyhaven::model::CallStatus::Canceled), "the broken call is canceled: {statuses:?}");
    assert!(!s.mock.dropped_at().is_empty(), "the upstream response was closed");
    s.te.stop().await;
}
