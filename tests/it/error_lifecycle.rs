//! Errors across a run's life: a provider failure after a tool round ends the turn with one
//! readable Connect error; unknown tools and invalid arguments are tool errors the model sees
//! (the turn goes on); every run has exactly one terminal and one finished run row.

use serde_json::json;

use crate::support::Reply;
use crate::support::cursor_client::{self, Turn, oa_text, oa_tools};
use keyhaven::cursor::protocol::connect::Code;
use keyhaven::model::RunStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_failure_after_a_tool_round_is_one_error_terminal() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "x\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::json(400, r#"{"error":{"message":"context too long","type":"invalid_request_error"}}"#));
    let seen = s.turn(&Turn::new("req-err", "conv-err", "read")).await;
    let err = seen.end.clone().expect("end").error.expect("an error end-stream");
    assert_eq!(err.code, Code::InvalidArgument);
    assert!(err.message.contains("context too long"), "{err:?}");
    assert!(seen.turn_ended().is_none(), "an error turn has no turn_ended");
    assert_eq!(seen.call_sequence("c-read"), vec!["partial", "exec", "started", "completed"]);
    let runs = s.te.handle.store.conversation_runs("conv-err").await.expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].status, runs[0].error_kind.as_deref()), (RunStatus::ProviderError, Some("invalid_request")));
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tools_and_bad_arguments_are_errors_the_model_sees() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_tools(&[
        ("c-unknown", "launch_rockets", json!({})),
        ("c-bad", "read_file", json!({"file": "a.txt"})),
        ("c-missing", "edit_file", json!({"path": "nope.txt", "old_string": "a", "new_string": "b"})),
    ])));
    s.mock.push(Reply::sse(&oa_text("sorry")));
    let seen = s.turn(&Turn::new("req-bad", "conv-bad", "go")).await;
    assert_eq!(seen.end, Some(Default::default()));
    let body = &s.mock.seen()[1].body;
    let tool = |id: &str| {
        body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .find(|m| m["tool_call_id"] == id)
            .expect("result")
            .to_string()
    };
    assert!(tool("c-unknown").contains("no tool named"), "{}", tool("c-unknown"));
    assert!(tool("c-bad").contains("Invalid arguments for read_file"), "{}", tool("c-bad"));
    assert!(tool("c-missing").contains("does not exist"), "{}", tool("c-missing"));
    // The missing file's edit card completes with file_not_found.
    let Some(keyhaven::cursor::protocol::agent::tool_call::Tool::EditToolCall(e)) = seen.completed("c-missing").tool
    else {
        panic!("edit card")
    };
    assert!(matches!(
        e.result.and_then(|r| r.result),
        Some(keyhaven::cursor::protocol::agent::edit_result::Result::FileNotFound(_))
    ));
    s.te.stop().await;
}
