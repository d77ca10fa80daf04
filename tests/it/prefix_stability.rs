//! Prefix stability: over five turns of one conversation (one with a tool round), every request
//! the provider sees starts with every message of the request before it, byte for byte, and the
//! tool list never changes, so provider prompt caches keep hitting.

use serde_json::json;

use crate::support::Reply;
use crate::support::cursor_client::{self, Turn, oa_text, oa_tools};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_turns_send_an_append_only_transcript() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_text("one")));
    s.mock.push(Reply::sse(&oa_tools(&[("c-1", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("two")));
    for reply in ["three", "four", "five"] {
        s.mock.push(Reply::sse(&oa_text(reply)));
    }
    for i in 1..=5 {
        let seen = s.turn(&Turn::new(&format!("req-p{i}"), "conv-prefix", &format!("question {i}"))).await;
        assert_eq!(seen.end, Some(Default::default()), "turn {i}");
    }
    let up = s.mock.seen();
    assert_eq!(up.len(), 6, "five turns, one of them with a tool round");
    for pair in up.windows(2) {
        let (a, b) = (&pair[0].body, &pair[1].body);
        let (ma, mb) = (a["messages"].as_array().expect("messages"), b["messages"].as_array().expect("messages"));
        assert!(mb.len() > ma.len());
        assert_eq!(&mb[..ma.len()], &ma[..], "a later request starts with the earlier one");
        assert_eq!(a["tools"], b["tools"], "the tool list is stable");
    }
    // The last request: system, then per turn the user message and the answers, in order.
    let last = up.last().expect("request").body["messages"].as_array().expect("messages").clone();
    let roles: Vec<&str> = last.iter().map(|m| m["role"].as_str().expect("role")).collect();
    assert_eq!(
        roles,
        vec![
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "user"
        ]
    );
    // The transcript is persisted in the same order.
    let stored = s.te.handle.store.conversation_messages("conv-prefix").await.expect("messages");
    assert_eq!(stored.len(), 13);
    assert_eq!(stored.iter().map(|m| m.seq).collect::<Vec<_>>(), (0..13).collect::<Vec<u64>>());
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_engine_continues_the_conversation_from_the_store() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_text("noted")));
    s.mock.push(Reply::sse(&oa_text("it was 42")));
    let seen = s.turn(&Turn::new("req-r1", "conv-restart", "remember 42")).await;
    assert_eq!(seen.end, Some(Default::default()));
    // A new process on the same data directory.
    let s = s.restart().await;
    let seen = s.turn(&Turn::new("req-r2", "conv-restart", "what was it?")).await;
    assert_eq!(seen.end, Some(Default::default()));
    let up = s.mock.seen();
    let (first, second) =
        (up[0].body["messages"].as_array().expect("m"), up[1].body["messages"].as_array().expect("m"));
    assert_eq!(&second[..first.len()], &first[..], "the restarted engine sends the same prefix");
    let roles: Vec<&str> = second.iter().map(|m| m["role"].as_str().expect("role")).collect();
    assert_eq!(roles, vec!["system", "user", "assistant", "user"]);
    assert_eq!(second[2]["content"], "noted");
    s.te.stop().await;
}
