//! Tool rounds end to end: the Cursor client simulator really executes each tool kind (read,
//! write, edit, shell, grep, glob, ls, delete, MCP) against a temporary workspace; the model's
//! calls of one step are in flight at once; cards and exec ids match the model's call ids; the
//! provider sees every result.

use keyhaven::cursor::protocol::agent::{self, edit_result, interaction_update, shell_result, tool_call};
use serde_json::{Value, json};

use crate::support::Reply;
use crate::support::cursor_client::{self, Turn, oa_text, oa_tools};

/// The tool messages of an OpenAI request body: `tool_call_id` → content.
fn tool_contents(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let content = match &m["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (m["tool_call_id"].as_str().expect("id").to_owned(), content)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_tool_runs_against_the_workspace() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "hello\nworld\n");
    s.ws.write("src/lib.rs", "fn main() {}\n// world\n");
    s.ws.write("old.txt", "remove me\n");
    s.mock.push(Reply::sse(&oa_tools(&[
        ("c-read", "read_file", json!({"path": "a.txt"})),
        ("c-grep", "grep", json!({"pattern": "world"})),
        ("c-glob", "glob_file_search", json!({"glob_pattern": "**/*.rs"})),
        ("c-ls", "list_dir", json!({"path": "."})),
    ])));
    s.mock.push(Reply::sse(&oa_tools(&[
        ("c-edit", "edit_file", json!({"path": "a.txt", "old_string": "world", "new_string": "there"})),
        ("c-write", "write_file", json!({"path": "notes/new.txt", "contents": "one\ntwo\n"})),
        ("c-del", "delete_file", json!({"path": "old.txt"})),
    ])));
    s.mock.push(Reply::sse(&oa_tools(&[(
        "c-sh",
        "run_terminal_cmd",
        json!({"command": "cat a.txt; echo oops >&2; exit 3"}),
    )])));
    s.mock.push(Reply::sse(&oa_text("All done.")));
    let seen = s.turn(&Turn::new("req-tools", "conv-tools", "tidy up")).await;
    assert_eq!(seen.end, Some(Default::default()), "the turn ends with turn_ended and {{}}");
    assert!(seen.turn_ended().is_some());

    // The workspace changed for real.
    assert_eq!(s.ws.read("a.txt").as_deref(), Some("hello\nthere\n"));
    assert_eq!(s.ws.read("notes/new.txt").as_deref(), Some("one\ntwo\n"));
    assert_eq!(s.ws.read("old.txt"), None);
    assert!(s.ws.escapes.lock().expect("escapes").is_empty(), "every path stayed in the workspace");

    // Exec ids are the model's call ids; read-only tools send the exec first, the others the card.
    let execs = seen.execs();
    let mut ids: Vec<u32> = execs.iter().map(|x| x.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), execs.len(), "exec ids are unique per run");
    for call in ["c-read", "c-grep", "c-glob", "c-ls"] {
        assert_eq!(seen.call_sequence(call), vec!["partial", "exec", "started", "completed"], "{call}");
    }
    assert_eq!(seen.call_sequence("c-del"), vec!["partial", "started", "exec", "completed"]);
    // Edits read the file first (hidden read), then write it.
    assert_eq!(seen.call_sequence("c-edit"), vec!["partial", "started", "exec", "exec", "completed"]);
    assert_eq!(seen.call_sequence("c-sh"), vec!["partial", "started", "exec", "delta", "completed"]);
    // All four calls of step 1 were requested before any of them completed.
    let first_completed = seen.msgs.iter().position(seen_completed).expect("a completed card");
    let execs_before: usize = seen.msgs[..first_completed]
        .iter()
        .filter(|m| matches!(m.message, Some(agent::agent_server_message::Message::ExecServerMessage(_))))
        .count();
    assert_eq!(execs_before, 4, "the four calls of step 1 were all in flight at once");

    // The edit card: before/after, lines added and removed, a diff.
    let Some(tool_call::Tool::EditToolCall(edit)) = seen.completed("c-edit").tool else { panic!("edit card") };
    let Some(edit_result::Result::Success(ok)) = edit.result.and_then(|r| r.result) else { panic!("edit success") };
    assert_eq!(ok.before_full_file_content, "hello\nworld\n");
    assert_eq!(ok.after_full_file_content, "hello\nthere\n");
    assert_eq!((ok.lines_added, ok.lines_removed), (1, 1));
    assert!(ok.diff_string.contains("-world") && ok.diff_string.contains("+there"), "{}", ok.diff_string);
    let Some(tool_call::Tool::EditToolCall(write)) = seen.completed("c-write").tool else { panic!("write card") };
    let Some(edit_result::Result::Success(ok)) = write.result.and_then(|r| r.result) else { panic!("write success") };
    assert_eq!((ok.before_full_file_content.as_str(), ok.lines_added, ok.lines_removed), ("", 2, 0));

    // The shell card: a failure with the exit code and both streams; the output was mirrored live.
    let Some(tool_call::Tool::ShellToolCall(sh)) = seen.completed("c-sh").tool else { panic!("shell card") };
    let Some(shell_result::Result::Failure(f)) = sh.result.and_then(|r| r.result) else { panic!("shell failure") };
    assert_eq!((f.exit_code, f.stdout.as_str(), f.stderr.as_str()), (3, "hello\nthere\n", "oops\n"));
    assert!(
        seen.updates()
            .iter()
            .any(|u| matches!(u, interaction_update::Message::ToolCallDelta(d) if d.call_id == "c-sh"))
    );

    // The provider saw each result, paired with its call, in call order.
    let seen_up = s.mock.seen();
    assert_eq!(seen_up.len(), 4);
    let step2 = tool_contents(&seen_up[1].body);
    assert_eq!(step2.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), vec!["c-read", "c-grep", "c-glob", "c-ls"]);
    assert!(step2[0].1.contains("hello\nworld"), "{step2:?}");
    assert!(step2[1].1.contains("a.txt:2:world") && step2[1].1.contains("src/lib.rs:2:// world"), "{step2:?}");
    assert_eq!(step2[2].1, "src/lib.rs");
    assert!(step2[3].1.contains("- a.txt") && step2[3].1.contains("- src/"), "{step2:?}");
    let step4 = tool_contents(&seen_up[3].body);
    assert!(step4.last().expect("shell result").1.contains("Exit code: 3"), "{step4:?}");
    // Tools are offered on every step, the same list each time.
    assert_eq!(seen_up[0].body["tools"], seen_up[3].body["tools"]);
    assert_eq!(seen_up[0].body["tools"].as_array().expect("tools").len(), 15);

    // Every model call is a recorded call of client `cursor`; the run and its rounds are stored.
    let calls = s.te.wait_calls(4).await;
    assert!(calls.iter().all(|c| c.summary.client == "cursor"));
    let store = &s.te.handle.store;
    let _ = store.flush().await;
    let runs = store.conversation_runs("conv-tools").await.expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].status, runs[0].steps), (keyhaven::model::RunStatus::Completed, 4));
    let rounds = store.tool_rounds("req-tools").await.expect("rounds");
    assert_eq!(rounds.iter().map(|r| r.calls).collect::<Vec<_>>(), vec![4, 3, 1]);
    assert_eq!(rounds.iter().map(|r| r.failed).collect::<Vec<_>>(), vec![0, 0, 1], "the exit-3 shell is a failure");
    s.te.stop().await;
}

fn seen_completed(m: &agent::AgentServerMessage) -> bool {
    matches!(
        &m.message,
        Some(agent::agent_server_message::Message::InteractionUpdate(agent::InteractionUpdate {
            message: Some(interaction_update::Message::ToolCallCompleted(_))
        }))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_from_the_run_request_carry_text_and_images() {
    let s = cursor_client::start("").await;
    let schema = json!({"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]});
    let mut turn = Turn::new("req-mcp", "conv-mcp", "echo please");
    turn.mcp_tools = vec![agent::McpToolDefinition {
        name: "demo-echo".into(),
        description: "Echoes its arguments.".into(),
        input_schema: Some(keyhaven::cursor::tools::json::from_json(&schema)),
        provider_identifier: "demo".into(),
        tool_name: "echo".into(),
    }];
    s.mock.push(Reply::sse(&oa_tools(&[("c-mcp", "demo-echo", json!({"word": "hi", "n": 2}))])));
    s.mock.push(Reply::sse(&oa_text("echoed")));
    let seen = s.turn(&turn).await;
    assert_eq!(seen.end, Some(Default::default()));
    let up = s.mock.seen();
    let tools = up[0].body["tools"].as_array().expect("tools");
    let mcp = tools.iter().find(|t| t["function"]["name"] == "demo-echo").expect("the MCP tool is offered");
    assert_eq!(mcp["function"]["parameters"], schema);
    let x = seen.execs().into_iter().find(|x| x.exec_id == "c-mcp").expect("mcp exec");
    let Some(agent::exec_server_message::Message::McpArgs(args)) = x.message else { panic!("mcp args") };
    assert_eq!(
        (args.name.as_str(), args.tool_name.as_str(), args.provider_identifier.as_str()),
        ("demo-echo", "echo", "demo")
    );
    // The model gets the text and the image.
    let results: Vec<&Value> =
        up[1].body["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "tool").collect();
    let all = serde_json::to_string(&up[1].body["messages"]).expect("json");
    assert!(!results.is_empty());
    assert!(all.contains("n=2,word=\\\"hi\\\""), "{all}");
    assert!(all.contains("image/png") || all.contains("data:image/png;base64"), "{all}");
    let Some(tool_call::Tool::McpToolCall(card)) = seen.completed("c-mcp").tool else { panic!("mcp card") };
    assert!(matches!(card.result.and_then(|r| r.result), Some(agent::mcp_tool_result::Result::Success(_))));
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_mode_offers_only_read_only_tools() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_text("just answering")));
    let mut turn = Turn::new("req-ask", "conv-ask", "what is this?");
    turn.mode = agent::AgentMode::Ask;
    let seen = s.turn(&turn).await;
    assert_eq!(seen.end, Some(Default::default()));
    let names: Vec<String> = s.mock.seen()[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name").to_owned())
        .collect();
    assert_eq!(
        names,
        vec![
            "read_file",
            "grep",
            "glob_file_search",
            "list_dir",
            "todo_write",
            "read_lints",
            "fetch_url",
            "web_search",
            "ask_question",
            "create_plan",
            "switch_mode"
        ]
    );
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_or_unknown_mode_gets_the_ask_tools_and_no_write_shell_or_mcp() {
    let s = cursor_client::start("").await;
    let mcp = agent::McpToolDefinition { name: "deploy".into(), ..Default::default() };
    for (i, value) in [8, 77].into_iter().enumerate() {
        s.mock.push(Reply::sse(&oa_text("just answering")));
        let mut turn = Turn::new(&format!("req-custom-{i}"), &format!("conv-custom-{i}"), "do it");
        turn.mode_value = Some(value);
        turn.mcp_tools = vec![mcp.clone()];
        let seen = s.turn(&turn).await;
        assert_eq!(seen.end, Some(Default::default()));
        let names: Vec<String> = s.mock.seen()[i].body["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["function"]["name"].as_str().expect("name").to_owned())
            .collect();
        // The ask set (see ask_mode_offers_only_read_only_tools), written out by hand.
        assert_eq!(
            names,
            vec![
                "read_file",
                "grep",
                "glob_file_search",
                "list_dir",
                "todo_write",
                "read_lints",
                "fetch_url",
                "web_search",
                "ask_question",
                "create_plan",
                "switch_mode"
            ],
            "mode value {value}"
        );
    }
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todos_stay_server_side_diagnostics_and_fetch_run_on_the_client_and_search_needs_a_provider() {
    // `fetch = "editor"`: pages are fetched by the editor (the default fetches in Keyhaven).
    let s = cursor_client::start_with("", "\n[web]\nfetch = \"editor\"\n").await;
    s.ws.write("src/lib.rs", "fn a() {}\n// FIXME: handle errors\n");
    s.mock.push(Reply::sse(&oa_tools(&[
        (
            "c-todo",
            "todo_write",
            json!({"todos": [{"id": "1", "content": "fix lints", "status": "in_progress"},
                             {"id": "2", "content": "read docs", "status": "pending"}]}),
        ),
        ("c-lint", "read_lints", json!({"path": "src/lib.rs"})),
        ("c-fetch", "fetch_url", json!({"url": "https://example.test/docs"})),
        ("c-offline", "fetch_url", json!({"url": "https://elsewhere.test/"})),
        ("c-search", "web_search", json!({"query": "keyhaven"})),
    ])));
    s.mock.push(Reply::sse(&oa_tools(&[(
        "c-todo2",
        "todo_write",
        json!({"todos": [{"id": "1", "status": "completed"}], "merge": true}),
    )])));
    s.mock.push(Reply::sse(&oa_text("done")));
    let seen = s.turn(&Turn::new("req-td", "conv-td", "fix it")).await;
    assert_eq!(seen.end, Some(Default::default()));
    // Todos never reach the client as an exec; their cards carry the merged list.
    assert!(seen.execs().iter().all(|x| !x.exec_id.starts_with("c-todo")));
    assert_eq!(seen.call_sequence("c-todo"), vec!["partial", "started", "completed"]);
    let Some(tool_call::Tool::UpdateTodosToolCall(card)) = seen.completed("c-todo2").tool else { panic!("todo card") };
    let Some(agent::update_todos_result::Result::Success(ok)) = card.result.and_then(|r| r.result) else {
        panic!("todo result")
    };
    let list: Vec<(String, i32)> = ok.todos.iter().map(|t| (t.content.clone(), t.status)).collect();
    assert_eq!(
        list,
        vec![
            ("fix lints".to_owned(), agent::TodoStatus::Completed as i32),
            ("read docs".to_owned(), agent::TodoStatus::Pending as i32)
        ]
    );
    assert!(ok.was_merge);
    // Diagnostics and fetch are execs, read-only order (exec before started).
    assert_eq!(seen.call_sequence("c-lint"), vec!["partial", "exec", "started", "completed"]);
    assert_eq!(seen.call_sequence("c-fetch"), vec!["partial", "exec", "started", "completed"]);
    let up = s.mock.seen();
    let result = |i: usize, id: &str| {
        up[i].body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .find(|m| m["tool_call_id"] == id)
            .expect("result")
            .to_string()
    };
    assert!(result(1, "c-todo").contains("[in_progress] 1: fix lints"), "{}", result(1, "c-todo"));
    assert!(result(1, "c-lint").contains("unresolved FIXME"), "{}", result(1, "c-lint"));
    assert!(result(1, "c-fetch").contains("page at https://example.test/docs"), "{}", result(1, "c-fetch"));
    assert!(result(1, "c-offline").contains("no network in the simulator"), "{}", result(1, "c-offline"));
    // No search provider: no approval is asked, and the model is told search is unavailable.
    assert!(result(1, "c-search").contains("Web search is unavailable"), "{}", result(1, "c-search"));
    assert!(
        !seen.msgs.iter().any(|m| matches!(m.message, Some(agent::agent_server_message::Message::InteractionQuery(_))))
    );
    assert_eq!(seen.call_sequence("c-search"), vec!["partial", "started", "completed"]);
    assert!(result(2, "c-todo2").contains("[completed] 1: fix lints"), "{}", result(2, "c-todo2"));
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_written_file_streams_into_its_edit_card_and_steps_are_framed() {
    let s = cursor_client::start("").await;
    let contents = "fn main() {\n    println!(\"héllo \\\\ world\");\n}\n".repeat(4);
    s.mock.push(Reply::sse(&oa_tools(&[("c-w", "write_file", json!({"path": "src/main.rs", "contents": contents}))])));
    s.mock.push(Reply::sse(&oa_text("Written.")));
    let seen = s.turn(&Turn::new("req-stream", "conv-stream", "write main")).await;
    assert_eq!(seen.end, Some(Default::default()));
    assert_eq!(s.ws.read("src/main.rs").as_deref(), Some(contents.as_str()));

    let updates = seen.updates();
    let deltas: Vec<(usize, String)> = updates
        .iter()
        .enumerate()
        .filter_map(|(i, u)| match u {
            interaction_update::Message::ToolCallDelta(d) if d.call_id == "c-w" => {
                match d.tool_call_delta.as_ref().and_then(|t| t.delta.clone()) {
                    Some(agent::tool_call_delta::Delta::EditToolCallDelta(e)) => Some((i, e.stream_content_delta)),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 2, "the content streams in pieces as the arguments do: {deltas:?}");
    assert_eq!(deltas.iter().map(|(_, t)| t.as_str()).collect::<String>(), contents, "decoded, complete, in order");
    let started = updates
        .iter()
        .position(|u| matches!(u, interaction_update::Message::ToolCallStarted(c) if c.call_id == "c-w"))
        .expect("started");
    assert!(deltas.iter().all(|(i, _)| *i < started), "the content streams while the model writes it");

    // Each step is framed: started before its first update, completed after its tool round.
    let steps: Vec<String> = updates
        .iter()
        .filter_map(|u| match u {
            interaction_update::Message::StepStarted(s) => Some(format!("start {}", s.step_id)),
            interaction_update::Message::StepCompleted(s) => Some(format!("done {}", s.step_id)),
            interaction_update::Message::ToolCallCompleted(_) => Some("tool".to_owned()),
            interaction_update::Message::TurnEnded(_) => Some("end".to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(steps, vec!["start 1", "tool", "done 1", "start 2", "done 2", "end"]);
    assert!(matches!(updates.first(), Some(interaction_update::Message::StepStarted(_))));
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyhaven_fetches_a_page_after_the_users_approval() {
    use keyhaven::cursor::protocol::agent::{interaction_query, interaction_response, web_fetch_result};
    // A local web page.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().route(
        "/docs",
        axum::routing::get(|| async {
            axum::response::Html("<html><head><title>Docs</title><script>x()</script></head><body><h1>Install</h1><p>Run <code>make</code>.</p></body></html>")
        }),
    );
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let mut s = cursor_client::start("").await;
    // The user approves the docs page and declines anything else.
    s.user = std::sync::Arc::new(|q: &agent::InteractionQuery| {
        let Some(interaction_query::Query::WebFetchRequestQuery(f)) = &q.query else { return None };
        let url = f.args.as_ref().map(|a| a.url.clone()).unwrap_or_default();
        let result = if url.ends_with("/docs") {
            agent::web_fetch_request_response::Result::Approved(agent::WebFetchApproved {})
        } else {
            agent::web_fetch_request_response::Result::Rejected(agent::WebFetchRejected {
                reason: "not that one".into(),
            })
        };
        Some(interaction_response::Result::WebFetchRequestResponse(agent::WebFetchRequestResponse {
            result: Some(result),
        }))
    });
    let page = format!("http://{addr}/docs");
    s.mock.push(Reply::sse(&oa_tools(&[
        ("c-page", "fetch_url", json!({"url": page})),
        ("c-other", "fetch_url", json!({"url": format!("http://{addr}/private")})),
    ])));
    s.mock.push(Reply::sse(&oa_text("Run make.")));
    let seen = s.turn(&Turn::new("req-wf", "conv-wf", "how do I install?")).await;
    assert_eq!(seen.end, Some(Default::default()));

    assert!(seen.execs().is_empty(), "nothing is fetched by the editor");
    let asked: Vec<String> = seen
        .queries()
        .iter()
        .filter_map(|q| match &q.query {
            Some(interaction_query::Query::WebFetchRequestQuery(f)) => {
                assert!(!f.skip_approval);
                f.args.as_ref().map(|a| format!("{} {}", a.tool_call_id, a.url))
            }
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked.contains(&format!("c-page {page}")), "{asked:?}");
    let Some(tool_call::Tool::WebFetchToolCall(card)) = seen.completed("c-page").tool else {
        panic!("a web fetch card")
    };
    let Some(web_fetch_result::Result::Success(ok)) = card.result.and_then(|r| r.result) else { panic!("fetched") };
    assert!(ok.markdown.contains("Install") && ok.markdown.contains("make"), "{}", ok.markdown);
    assert!(!ok.markdown.contains("x()"), "scripts are dropped: {}", ok.markdown);

    let up = s.mock.seen();
    let tools = tool_contents(&up[1].body);
    let text = |id: &str| tools.iter().find(|(i, _)| i == id).map(|(_, t)| t.clone()).expect("a result");
    assert!(text("c-page").contains("Install"), "{}", text("c-page"));
    assert!(text("c-other").contains("declined") && text("c-other").contains("not that one"), "{}", text("c-other"));
    let Some(tool_call::Tool::WebFetchToolCall(card)) = seen.completed("c-other").tool else {
        panic!("a web fetch card")
    };
    assert!(matches!(card.result.and_then(|r| r.result), Some(web_fetch_result::Result::Rejected(_))));
    server.abort();
    s.te.stop().await;
}
