//! The actions that start or steer a Cursor run (issue 15 item 4, docs/cursor-wire.md §6.3),
//! 3.15's request context parts in blobs (§6.2) and the MCP results the card has no case for
//! (§4.8), end to end through the Cursor client simulator.
//!
//! The client's messages are encoded by hand from the wire description (`support::cursor_raw`),
//! and every server frame is checked against the independent description of the wire types
//! (`support::cursor_schema`), so a wrong field number on the engine's side fails here.
//!
//! - `start_plan_action` runs in plan mode (the plan tools, no edit tools; the checkpoint says
//!   PLAN), whatever mode its message names;
//! - `execute_plan_action` (the plan card's Build) runs in agent mode with the plan's text and the
//!   conversation's todos in the user message;
//! - `inject_context_action` during a run is acknowledged `queued`, then `delivered` when it
//!   enters the transcript, and reaches the next model call; one for another run is `rejected`;
//!   as a run's own action it starts a turn; what a mid-run message (injected or a follow-up
//!   user message) has attached reaches the model as the first message's attachments do;
//! - an action Keyhaven does not support ends with a notice, never an empty turn;
//! - rules, skills and MCP definitions moved into blobs reach the prompt like the inline fields;
//! - `McpResult.server_not_found` and `approved` become cards the IDE decodes and words the model
//!   reads;
//! - a Cursor call's detail (the Calls page) lists the context blocks of its run and their size.

use std::sync::Arc;

use keyhaven::cursor::protocol::agent::{
    self, agent_server_message, context_injection_state, exec_client_message, interaction_update, mcp_tool_result,
    tool_call,
};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::support::Reply;
use crate::support::cursor_client::{self, Act, CursorSim, oa_text, oa_tools, run_everything};
use crate::support::cursor_raw::{self as raw, int, ld, st};

fn sha(data: &[u8]) -> Vec<u8> {
    keyhaven::cursor::blobs::blob_id(data).to_vec()
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"].as_array().map_or_else(Vec::new, |t| {
        t.iter().map(|t| t["function"]["name"].as_str().expect("tool name").to_owned()).collect()
    })
}

fn last_user_text(body: &Value) -> String {
    let user = body["messages"].as_array().expect("messages").iter().rev().find(|m| m["role"] == "user").cloned();
    match &user.expect("a user message")["content"] {
        Value::String(t) => t.clone(),
        other => panic!("unexpected content {other}"),
    }
}

fn roles(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().expect("role").to_owned())
        .collect()
}

/// `ConversationAction.user_message_action=1 {user_message=1, request_context=2}`.
fn user_message_action(s: &CursorSim, text: &str, message_id: &str) -> Vec<u8> {
    ld(
        1,
        &[ld(1, &raw::user_message(text, message_id, 1)), ld(2, &raw::request_context(&s.ws.root_str(), &[]))].concat(),
    )
}

/// The `context_injection_state` updates of a run, as (injection id, state).
fn injection_states(msgs: &[agent::AgentServerMessage]) -> Vec<(String, context_injection_state::State)> {
    msgs.iter()
        .filter_map(|m| match &m.message {
            Some(agent_server_message::Message::InteractionUpdate(agent::InteractionUpdate {
                message: Some(interaction_update::Message::ContextInjectionState(u)),
            })) => Some((u.injection_id.clone(), u.state.clone()?.state?)),
            _ => None,
        })
        .collect()
}

fn notices(seen: &cursor_client::Seen) -> Vec<String> {
    seen.updates()
        .into_iter()
        .filter_map(|u| match u {
            interaction_update::Message::TextDelta(t) if t.is_server_notice => Some(t.text),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Plan mode and Build

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_plan_action_runs_in_plan_mode() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_text("Here is the plan.")));
    // start_plan_action=6 {user_message=1 (mode AGENT 1), request_context=2, is_spec=3}
    let action = ld(
        6,
        &[
            ld(1, &raw::user_message("plan the parser refactor", "m-plan", 1)),
            ld(2, &raw::request_context(&s.ws.root_str(), &[])),
            int(3, 0),
        ]
        .concat(),
    );
    let run =
        s.start_raw_run("req-plan", &raw::run_request(&action, "conv-plan", "oa-model", &[]), run_everything()).await;
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    let up = s.mock.seen();
    assert_eq!(up.len(), 1);
    assert_eq!(last_user_text(&up[0].body), "plan the parser refactor");
    let tools = tool_names(&up[0].body);
    assert!(tools.contains(&"create_plan".to_owned()), "plan mode offers create_plan: {tools:?}");
    for edit in ["edit_file", "write_file", "delete_file", "run_terminal_cmd"] {
        assert!(!tools.contains(&edit.to_owned()), "plan mode offers no {edit}: {tools:?}");
    }
    // The checkpoint's mode=10 is AGENT_MODE_PLAN (3).
    assert_eq!(seen.last_checkpoint().expect("a checkpoint").mode, Some(3));
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_plan_action_carries_out_the_plan_with_its_todos() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_text("Done.")));
    // execute_plan_action=7 {request_context=1, plan=2 {plan=1}, plan_file_uri=3,
    //   execution_mode=5 AGENT, kickoff_message_id=6}
    let action = ld(
        7,
        &[
            ld(1, &raw::request_context(&s.ws.root_str(), &[])),
            ld(2, &st(1, "# Parser\n1. Extract the parser\n2. Add tests\n")),
            st(3, "file:///home/u/.cursor/plans/parser.plan.md"),
            int(5, 1),
            st(6, "m-build"),
        ]
        .concat(),
    );
    let todos = raw::todos_state(&[("t1", "Extract the parser", 1), ("t2", "Add tests", 3)]);
    let msg = raw::run_request(&action, "conv-build", "oa-model", &todos);
    let seen = s.start_raw_run("req-build", &msg, run_everything()).await.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    let up = s.mock.seen();
    assert_eq!(up.len(), 1);
    assert_eq!(
        last_user_text(&up[0].body),
        "Carry out the plan below: work through it step by step, keep the todo list current with todo_write, \
         and say what you did at the end.\n\n\
         <attached source=\"plan\" path=\"file:///home/u/.cursor/plans/parser.plan.md\">\n\
         # Parser\n1. Extract the parser\n2. Add tests\n\
         </attached>\n\n\
         <attached source=\"todos\">\n\
         - [pending] Extract the parser\n\
         - [completed] Add tests\n\
         </attached>"
    );
    let tools = tool_names(&up[0].body);
    assert!(tools.contains(&"edit_file".to_owned()), "a Build runs with the agent's tools: {tools:?}");
    assert_eq!(seen.last_checkpoint().expect("a checkpoint").mode, Some(1), "AGENT_MODE_AGENT");
    let stored = s.te.handle.store.conversation_messages("conv-build").await.expect("messages");
    assert!(stored.iter().any(|m| m.entry.id == "user:m-build"), "the kickoff message id names the message");
    s.te.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Injected context (3.13+)

/// `inject_context_action=19 {injection_id=1, expected_run_id=2, user_context=3 {user_message=1}}`.
fn inject_user(injection_id: &str, expected_run_id: &str, text: &str, message_id: &str) -> Vec<u8> {
    raw::conversation_action(&ld(
        19,
        &[st(1, injection_id), st(2, expected_run_id), ld(3, &ld(1, &raw::user_message(text, message_id, 1)))].concat(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_message_reaches_the_running_turn_and_is_acknowledged() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("alpha; b.txt checked too")));
    let gate = Arc::new(Semaphore::new(0));
    let policy: cursor_client::Policy = {
        let gate = gate.clone();
        Arc::new(move |_: &agent::ExecServerMessage| Act::After(gate.clone()))
    };
    let msg = raw::run_request(
        &user_message_action(&s, "read a.txt", "m-first"),
        "conv-inj",
        "oa-model",
        &raw::run_id("run-7"),
    );
    let run = s.start_raw_run("req-inj", &msg, policy).await;
    run.wait_for(|m| {
        m.iter().any(|m| matches!(&m.message, Some(agent_server_message::Message::ExecServerMessage(x)) if x.exec_id == "c-read"))
    })
    .await;
    // One for an older run of the conversation, one for this run, while the tool round waits.
    run.send_raw(&inject_user("inj-old", "run-6", "stale words", "m-stale")).await;
    run.send_raw(&inject_user("inj-1", "run-7", "also check b.txt", "m-inj")).await;
    run.wait_for(|m| injection_states(m).len() == 2).await;
    gate.add_permits(1);
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    let states = injection_states(&seen.msgs);
    assert_eq!(states.len(), 3, "{states:?}");
    assert_eq!(
        states[0],
        (
            "inj-old".to_owned(),
            context_injection_state::State::Rejected(agent::ContextInjectionRejected {
                reason: "the run this message was meant for is no longer running".into()
            })
        )
    );
    assert_eq!(
        states[1],
        ("inj-1".to_owned(), context_injection_state::State::Queued(agent::ContextInjectionQueued {}))
    );
    let (id, context_injection_state::State::Delivered(d)) = &states[2] else { panic!("delivered: {states:?}") };
    assert_eq!(id, "inj-1");
    assert_eq!((d.step, d.delivery_batch_id.as_str()), (1, "user:m-inj"), "delivered after step 1's tool round");
    assert!(d.delivered_at_ms > 1_700_000_000_000, "a wall-clock time in ms: {}", d.delivered_at_ms);
    // The next model call has it after the tool result; the stale one never arrives.
    let up = s.mock.seen();
    assert_eq!(up.len(), 2);
    assert_eq!(roles(&up[1].body), vec!["system", "user", "assistant", "tool", "user"]);
    assert_eq!(up[1].body["messages"][4]["content"], "also check b.txt");
    assert!(!up[1].body.to_string().contains("stale words"));
    s.te.stop().await;
}

/// `UserMessage{text=1, message_id=2, selected_context=3 {files=4 {content=1, path=2,
/// relative_path=3}, code_selections=5 {content=1, path=2, relative_path=3, range=4 {start=1
/// {line=1}, end=2 {line=1}}}}, mode=4}`.
fn user_message_with_context(text: &str, message_id: &str, root: &str) -> Vec<u8> {
    let inline = [st(1, "fn a() {}\n"), st(2, &format!("{root}/src/a.rs")), st(3, "src/a.rs")].concat();
    let path_only = st(2, &format!("{root}/src/b.rs"));
    let selection = [
        st(1, "let x = 1;"),
        st(2, &format!("{root}/src/c.rs")),
        st(3, "src/c.rs"),
        ld(4, &[ld(1, &int(1, 3)), ld(2, &int(1, 5))].concat()),
    ]
    .concat();
    let selected = [ld(4, &inline), ld(4, &path_only), ld(5, &selection)].concat();
    [st(1, text), st(2, message_id), ld(3, &selected), int(4, 1)].concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_of_mid_run_messages_reach_the_model_like_the_first_messages() {
    let s = cursor_client::start("").await;
    let root = s.ws.root_str();
    s.ws.write("a.txt", "alpha\n");
    s.ws.write("src/b.rs", "fn b() {}\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_tools(&[("c-read2", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("done")));
    let gate = Arc::new(Semaphore::new(0));
    let policy: cursor_client::Policy = {
        let gate = gate.clone();
        Arc::new(
            move |x: &agent::ExecServerMessage| {
                if x.exec_id.starts_with("c-read") { Act::After(gate.clone()) } else { Act::Run }
            },
        )
    };
    let msg = raw::run_request(
        &user_message_action(&s, "read a.txt", "m-first"),
        "conv-mid",
        "oa-model",
        &raw::run_id("run-9"),
    );
    let run = s.start_raw_run("req-mid", &msg, policy).await;
    let exec_seen = |id: &'static str| {
        move |m: &[agent::AgentServerMessage]| {
            m.iter().any(
                |m| matches!(&m.message, Some(agent_server_message::Message::ExecServerMessage(x)) if x.exec_id == id),
            )
        }
    };
    run.wait_for(exec_seen("c-read")).await;
    // Injected (3.13+): inject_context_action=19 {injection_id=1, expected_run_id=2, user_context=3 {user_message=1}}.
    let injected = raw::conversation_action(&ld(
        19,
        &[st(1, "inj-ctx"), st(2, "run-9"), ld(3, &ld(1, &user_message_with_context("look at these", "m-inj", &root)))]
            .concat(),
    ));
    run.send_raw(&injected).await;
    run.wait_for(|m| injection_states(m).len() == 1).await;
    gate.add_permits(1);
    run.wait_for(exec_seen("c-read2")).await;
    // A follow-up user message: user_message_action=1 {user_message=1}.
    run.send_raw(&raw::conversation_action(&ld(1, &ld(1, &user_message_with_context("and these", "m-follow", &root)))))
        .await;
    run.wait_for(|m| {
        m.iter().any(|m| {
            matches!(&m.message, Some(agent_server_message::Message::InteractionUpdate(u))
                if matches!(&u.message, Some(interaction_update::Message::UserMessageAppended(a))
                    if a.user_message.as_ref().is_some_and(|m| m.message_id == "m-follow")))
        })
    })
    .await;
    gate.add_permits(1);
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    let blocks = |text: &str| {
        vec![
            "<attached source=\"file\" path=\"src/a.rs\">\nfn a() {}\n</attached>".to_owned(),
            format!("<attached source=\"file\" path=\"{root}/src/b.rs\">\nfn b() {{}}\n</attached>"),
            "<attached source=\"selection\" path=\"src/c.rs\" lines=\"3-5\">\nlet x = 1;\n</attached>".to_owned(),
            text.to_owned(),
        ]
    };
    let up = s.mock.seen();
    assert_eq!(up.len(), 3);
    let user_texts = |i: usize, n: usize| -> Vec<String> {
        let users: Vec<&Value> =
            up[i].body["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "user").collect();
        match &users[n]["content"] {
            Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str().map(str::to_owned)).collect(),
            Value::String(t) => vec![t.clone()],
            other => panic!("content {other}"),
        }
    };
    assert_eq!(user_texts(1, 1), blocks("look at these"), "the injected message's attachments");
    assert_eq!(user_texts(2, 2), blocks("and these"), "the follow-up message's attachments");
    // The path-only file was read through exec for each message (no card).
    let ctx_reads = seen.execs().iter().filter(|x| x.exec_id.contains(":ctx")).count();
    assert_eq!(ctx_reads, 2);
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injection_as_the_run_action_starts_a_turn() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_text("I see CI is red.")));
    // inject_context_action=19 {injection_id=1, system_context=4 {producer=1, content=2}}
    let action = ld(19, &[st(1, "inj-sys"), ld(4, &[st(1, "ci-hook"), st(2, "CI is red on main.")].concat())].concat());
    let seen = s
        .start_raw_run("req-sys", &raw::run_request(&action, "conv-sys", "oa-model", &[]), run_everything())
        .await
        .finish()
        .await;
    assert_eq!(seen.end, Some(Default::default()));
    let up = s.mock.seen();
    assert_eq!(up.len(), 1);
    assert_eq!(
        last_user_text(&up[0].body),
        "<attached source=\"system_context\" producer=\"ci-hook\">\nCI is red on main.\n</attached>"
    );
    let states = injection_states(&seen.msgs);
    assert_eq!(states.len(), 1, "{states:?}");
    assert!(
        matches!(&states[0], (id, context_injection_state::State::Delivered(d)) if id == "inj-sys" && d.delivery_batch_id == "inject:inj-sys"),
        "{states:?}"
    );
    s.te.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Unsupported actions

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_keyhaven_does_not_support_ends_with_a_notice() {
    let s = cursor_client::start("").await;
    // background_shell_action=13 {} as the run's action.
    let seen = s
        .start_raw_run("req-bg", &raw::run_request(&ld(13, &[]), "conv-bg", "oa-model", &[]), run_everything())
        .await
        .finish()
        .await;
    assert_eq!(seen.end, Some(Default::default()));
    assert_eq!(
        notices(&seen),
        vec![
            "> Keyhaven: Cursor asked for `background_shell_action`; Keyhaven does not support that action, so \
             nothing was run.\n\n"
        ]
    );
    assert!(seen.turn_ended().is_some());
    // A case number no extraction has (field 40): still a notice, not a silent turn.
    let seen = s
        .start_raw_run("req-unk", &raw::run_request(&ld(40, &[]), "conv-bg", "oa-model", &[]), run_everything())
        .await
        .finish()
        .await;
    assert_eq!(seen.end, Some(Default::default()));
    let n = notices(&seen);
    assert_eq!(n.len(), 1, "{n:?}");
    assert!(n[0].contains("an action this version of Keyhaven does not know"), "{n:?}");
    // During a run: the action is ignored with a notice, the run goes on.
    s.mock.push(Reply::sse(&oa_text("first")).gate(2, Arc::new(Semaphore::new(1))));
    let run = s
        .start_raw_run(
            "req-mid",
            &raw::run_request(&user_message_action(&s, "hello", "m-mid"), "conv-mid", "oa-model", &[]),
            run_everything(),
        )
        .await;
    // cancel_subagent_action=10 {}
    run.send_raw(&raw::conversation_action(&ld(10, &[]))).await;
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    assert!(s.mock.seen().len() == 1, "no model call of its own");
    assert!(
        notices(&seen).iter().any(|n| n.contains("`cancel_subagent_action`") && n.contains("ignored")),
        "{:?}",
        notices(&seen)
    );
    s.te.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 3.15: request context parts in blobs

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_skills_and_mcp_definitions_in_blobs_reach_the_prompt() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_text("ok")));
    // RequestContextRulesPart{rules=1 CursorRule{full_path=1, content=2, type=3 {global=1 {}}},
    //   non_file_rules=2 CursorRule{content=2}}
    let rules = [
        ld(1, &[st(1, "/w/.cursor/rules/style.mdc"), st(2, "Use tabs."), ld(3, &ld(1, &[]))].concat()),
        ld(2, &st(2, "Answer in French.")),
    ]
    .concat();
    // RequestContextSkillsPart{agent_skills=1 AgentSkill{full_path=1, content=2, description=3}}
    let skills =
        ld(1, &[st(1, "/w/.cursor/skills/deploy/SKILL.md"), st(2, "steps"), st(3, "Deploys the app")].concat());
    // RequestContextMcpsPart{tools=1 McpToolDefinition{name=1, description=2, provider_identifier=4,
    //   tool_name=5}, mcp_instructions=2 McpInstructions{server_name=1, instructions=2}}
    let mcps = [
        ld(1, &[st(1, "lookup"), st(2, "Looks up a ticket."), st(4, "tickets"), st(5, "lookup")].concat()),
        ld(2, &[st(1, "tickets"), st(2, "Use lookup for ticket numbers.")].concat()),
    ]
    .concat();
    // Rules pre-fetched, skills and MCP definitions from the client's KV store.
    s.blobs.lock().expect("blobs").insert(sha(&skills), skills.clone());
    s.blobs.lock().expect("blobs").insert(sha(&mcps), mcps.clone());
    // request_context_parts=17 {rules_blob_id=1, rules_byte_length=2, skills_blob_id=3,
    //   mcps_blob_id=7, dynamic_context=9 RequestContext{web_search_enabled=17 false}}
    let parts = [
        ld(1, &sha(&rules)),
        int(2, u64::try_from(rules.len()).expect("len")),
        ld(3, &sha(&skills)),
        ld(7, &sha(&mcps)),
        ld(9, &int(17, 0)),
    ]
    .concat();
    let action = [user_message_action(&s, "deploy it", "m-parts"), ld(17, &parts)].concat();
    let msg = raw::run_request(&action, "conv-parts", "oa-model", &raw::pre_fetched(&sha(&rules), &rules));
    let seen = s.start_raw_run("req-parts", &msg, run_everything()).await.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    assert!(notices(&seen).is_empty(), "{:?}", notices(&seen));
    let up = s.mock.seen();
    let system = up[0].body["messages"][0]["content"].as_str().expect("system text").to_owned();
    for expected in [
        "\nUser rule:\nAnswer in French.\n",
        "\nRule (/w/.cursor/rules/style.mdc):\nUse tabs.\n",
        "\nSkills (read a skill's file with read_file before using it):\n- /w/.cursor/skills/deploy/SKILL.md: Deploys the app\n",
        "\nInstructions of the MCP server tickets:\nUse lookup for ticket numbers.\n",
    ] {
        assert!(system.contains(expected), "missing {expected:?} in:\n{system}");
    }
    let tools = tool_names(&up[0].body);
    assert!(tools.iter().any(|t| t.contains("lookup")), "the MCP tool from the blob is offered: {tools:?}");
    assert!(!tools.contains(&"web_search".to_owned()), "the dynamic context turned web search off: {tools:?}");
    s.te.stop().await;
}

// ---------------------------------------------------------------------------------------------
// MCP results without a card case

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_not_found_and_approved_answers_become_cards_and_words() {
    let s = cursor_client::start("").await;
    let lookup = agent::McpToolDefinition {
        name: "lookup".into(),
        description: "Looks up a ticket.".into(),
        provider_identifier: "tickets".into(),
        tool_name: "lookup".into(),
        ..Default::default()
    };
    let mut turn = cursor_client::Turn::new("req-mcp", "conv-mcp", "look up 7 twice");
    turn.mcp_tools = vec![lookup];
    s.mock.push(Reply::sse(&oa_tools(&[("c-m1", "lookup", json!({"id": 7}))])));
    s.mock.push(Reply::sse(&oa_tools(&[("c-m2", "lookup", json!({"id": 7}))])));
    s.mock.push(Reply::sse(&oa_text("the server is gone")));
    // McpResult.server_not_found=6 {name=1, available_servers=2}, then approved=7 {}: decoded by
    // the engine from these hand-encoded bytes.
    let not_found = ld(6, &[st(1, "tickets"), st(2, "github")].concat());
    let answers = Arc::new(std::sync::Mutex::new(vec![ld(7, &[]), not_found]));
    let policy: cursor_client::Policy = Arc::new(move |x: &agent::ExecServerMessage| {
        if !matches!(x.message, Some(agent::exec_server_message::Message::McpArgs(_))) {
            return Act::Run;
        }
        let bytes = answers.lock().expect("answers").pop().expect("an answer");
        let result = <agent::McpResult as prost::Message>::decode(bytes.as_slice()).expect("hand-encoded McpResult");
        Act::Reply(exec_client_message::Message::McpResult(result))
    });
    let seen = s.start_run(&turn, policy).await.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    // Cards: McpToolResult has no server_not_found case: an error card; approved: success, empty.
    let Some(tool_call::Tool::McpToolCall(first)) = seen.completed("c-m1").tool else { panic!("mcp card") };
    let Some(mcp_tool_result::Result::Error(e)) = first.result.and_then(|r| r.result) else { panic!("error card") };
    assert_eq!(e.error, "the MCP server tickets is not connected in the editor (connected servers: github)");
    let Some(tool_call::Tool::McpToolCall(second)) = seen.completed("c-m2").tool else { panic!("mcp card") };
    let Some(mcp_tool_result::Result::Success(ok)) = second.result.and_then(|r| r.result) else { panic!("success") };
    assert!(ok.content.is_empty() && !ok.is_error);
    let up = s.mock.seen();
    let tool_text = |i: usize| {
        let msgs = up[i].body["messages"].as_array().expect("messages").clone();
        msgs.iter().rev().find(|m| m["role"] == "tool").expect("tool message")["content"].to_string()
    };
    assert!(
        tool_text(1).contains("The MCP tool lookup failed: the MCP server tickets is not connected"),
        "{}",
        tool_text(1)
    );
    assert!(
        tool_text(2).contains("The user approved the MCP tool lookup, but the editor returned no result"),
        "{}",
        tool_text(2)
    );
    s.te.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The Calls page: which context blocks went into a Cursor call's prompt

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_calls_detail_lists_the_context_blocks_and_their_size() {
    let s = cursor_client::start("").await;
    let root = s.ws.root_str();
    s.mock.push(Reply::sse(&oa_text("seen")));
    let mut turn = cursor_client::Turn::new("req-page", "conv-page", "look");
    turn.selected = Some(agent::SelectedContext {
        files: vec![agent::SelectedFile {
            content: "fn a() {}\n".into(),
            path: format!("{root}/src/a.rs"),
            relative_path: Some("src/a.rs".into()),
        }],
        code_selections: vec![agent::SelectedCodeSelection {
            content: "let x = 1;".into(),
            path: format!("{root}/src/c.rs"),
            relative_path: Some("src/c.rs".into()),
            range: Some(agent::Range {
                start: Some(agent::Position { line: 3, column: 0 }),
                end: Some(agent::Position { line: 5, column: 4 }),
            }),
        }],
        ..Default::default()
    });
    let seen = s.turn(&turn).await;
    assert_eq!(seen.end, Some(Default::default()));
    let calls = s.te.wait_calls(1).await;
    let (status, body) = s.te.control(reqwest::Method::GET, &format!("/api/calls/{}", calls[0].summary.id), None).await;
    assert_eq!(status, 200, "{body}");
    let detail: Value = serde_json::from_str(&body).expect("json");
    // `<attached source="file" path="src/a.rs">\nfn a() {}\n</attached>` is 62 bytes;
    // `<attached source="selection" path="src/c.rs" lines="3-5">\nlet x = 1;\n</attached>` 80.
    assert_eq!(
        detail["contextBlocks"],
        json!([
            {"kind": "file", "source": "src/a.rs", "bytes": 62},
            {"kind": "selection", "source": "src/c.rs", "bytes": 80},
        ])
    );
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calls_detail_lists_the_rules_and_skills_of_the_system_prompt_with_their_size() {
    use agent::cursor_rule_type::Type;
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_text("ok")));
    let rule = |path: &str, content: &str, ty: Type| agent::CursorRule {
        full_path: path.into(),
        content: content.into(),
        r#type: Some(agent::CursorRuleType { r#type: Some(ty) }),
    };
    let mut turn = cursor_client::Turn::new("req-rules", "conv-rules", "hello");
    turn.context = agent::RequestContext {
        rules: vec![
            rule("/w/.cursor/rules/style.mdc", "Use tabs.", Type::Global(agent::CursorRuleTypeGlobal {})),
            rule(
                "/w/.cursor/rules/sql.mdc",
                "SQL body",
                Type::AgentFetched(agent::CursorRuleTypeAgentFetched { description: "Use for SQL".into() }),
            ),
        ],
        non_file_rules: vec![agent::CursorRule { content: "Always answer in English.".into(), ..Default::default() }],
        agent_skills: vec![agent::AgentSkill {
            full_path: "/skills/deploy.md".into(),
            description: "Deploys".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let seen = s.turn(&turn).await;
    assert_eq!(seen.end, Some(Default::default()));
    let calls = s.te.wait_calls(1).await;
    let (status, body) = s.te.control(reqwest::Method::GET, &format!("/api/calls/{}", calls[0].summary.id), None).await;
    assert_eq!(status, 200, "{body}");
    let detail: Value = serde_json::from_str(&body).expect("json");
    // What each adds to the system prompt: "\nUser rule:\nAlways answer in English.\n" is 38
    // bytes, "\nRule (/w/.cursor/rules/style.mdc):\nUse tabs.\n" 46, the offered rule's line
    // "- /w/.cursor/rules/sql.mdc: Use for SQL\n" 40, the skill's "- /skills/deploy.md: Deploys\n" 29.
    assert_eq!(
        detail["contextBlocks"],
        json!([
            {"kind": "rule", "source": "user rule", "bytes": 38},
            {"kind": "rule", "source": "/w/.cursor/rules/style.mdc", "bytes": 46},
            {"kind": "rule_offered", "source": "/w/.cursor/rules/sql.mdc", "bytes": 40},
            {"kind": "skill_offered", "source": "/skills/deploy.md", "bytes": 29},
        ])
    );
    s.te.stop().await;
}
