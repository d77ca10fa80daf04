//! The tools that ask the user, end to end through the Cursor client simulator: `ask_question`,
//! `create_plan` and `switch_mode` send an `interaction_query` tied to the call's card, the
//! simulated user answers (or declines, or never answers), and the model gets the decision; an
//! approved mode switch narrows what the rest of the run may do; a query nobody answers ends
//! with the turn when the user stops it.

use std::sync::Arc;

use keyhaven::cursor::protocol::agent::{
    self, agent_server_message, ask_question_result, create_plan_result, interaction_query, interaction_response,
    interaction_update, switch_mode_result, tool_call,
};
use serde_json::{Value, json};

use crate::support::Reply;
use crate::support::cursor_client::{self, Turn, User, oa_text, oa_tools};

/// The content of the tool message answering `call_id` in the provider's last request.
fn tool_result(s: &cursor_client::CursorSim, call_id: &str) -> String {
    let seen = s.mock.seen();
    let body = &seen.last().expect("a provider request").body;
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .expect("the call has a result")
}

/// Index of the first message matching `f`.
fn position(seen: &cursor_client::Seen, f: impl Fn(&agent::AgentServerMessage) -> bool) -> usize {
    seen.msgs.iter().position(f).expect("the message was sent")
}

fn is_card(m: &agent::AgentServerMessage, started: bool, id: &str) -> bool {
    match &m.message {
        Some(agent_server_message::Message::InteractionUpdate(u)) => match &u.message {
            Some(interaction_update::Message::ToolCallStarted(c)) => started && c.call_id == id,
            Some(interaction_update::Message::ToolCallCompleted(c)) => !started && c.call_id == id,
            _ => false,
        },
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_question_reaches_the_user_and_the_model_gets_the_chosen_labels() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_tools(&[(
        "c-ask",
        "ask_question",
        json!({"title": "Setup", "questions": [
            {"prompt": "Which database?", "options": [{"label": "SQLite"}, {"label": "Postgres"}]},
            {"id": "tabs", "prompt": "Indent with tabs?", "options": [{"id": "n", "label": "No"}, {"id": "y", "label": "Yes"}]}
        ]}),
    )])));
    s.mock.push(Reply::sse(&oa_text("SQLite it is.")));
    let seen = s.turn(&Turn::new("req-ask", "conv-ask", "set up storage")).await;
    assert_eq!(seen.end, Some(Default::default()));

    let qs = seen.queries();
    assert_eq!(qs.len(), 1, "one query per call");
    let Some(interaction_query::Query::AskQuestionInteractionQuery(q)) = &qs[0].query else {
        panic!("an ask_question query: {:?}", qs[0])
    };
    assert_eq!(q.tool_call_id, "c-ask", "the query names the card's call id");
    let args = q.args.clone().expect("args");
    assert_eq!(args.title, "Setup");
    assert_eq!(args.questions.len(), 2);
    assert_eq!(args.questions[0].id, "q1", "missing ids are filled in");
    assert_eq!(args.questions[1].options[0].id, "n");

    // started → query → completed, and the completed card carries the answers.
    let started = position(&seen, |m| is_card(m, true, "c-ask"));
    let query = position(&seen, |m| matches!(m.message, Some(agent_server_message::Message::InteractionQuery(_))));
    let completed = position(&seen, |m| is_card(m, false, "c-ask"));
    assert!(started < query && query < completed, "{started} < {query} < {completed}");
    let Some(tool_call::Tool::AskQuestionToolCall(card)) = seen.completed("c-ask").tool else {
        panic!("an ask_question card")
    };
    assert!(matches!(card.result.and_then(|r| r.result), Some(ask_question_result::Result::Success(_))));

    let text = tool_result(&s, "c-ask");
    assert!(text.contains("Which database? → SQLite"), "{text}");
    assert!(text.contains("Indent with tabs? → No"), "{text}");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_question_and_a_declined_plan_are_errors_with_the_users_reason() {
    let mut s = cursor_client::start("").await;
    let user: User = Arc::new(|q: &agent::InteractionQuery| {
        Some(match q.query.as_ref()? {
            interaction_query::Query::AskQuestionInteractionQuery(_) => {
                interaction_response::Result::AskQuestionInteractionResponse(agent::AskQuestionInteractionResponse {
                    result: Some(agent::AskQuestionResult {
                        result: Some(ask_question_result::Result::Rejected(agent::AskQuestionRejected {
                            reason: "decide yourself".into(),
                        })),
                    }),
                })
            }
            interaction_query::Query::CreatePlanRequestQuery(_) => {
                interaction_response::Result::CreatePlanRequestResponse(agent::CreatePlanRequestResponse {
                    result: Some(agent::CreatePlanResult {
                        result: Some(create_plan_result::Result::Error(agent::CreatePlanError {
                            error: "too broad".into(),
                        })),
                        plan_uri: String::new(),
                    }),
                })
            }
            _ => return None,
        })
    });
    s.user = user;
    s.mock.push(Reply::sse(&oa_tools(&[
        (
            "c-q",
            "ask_question",
            json!({"questions": [{"prompt": "A or B?", "options": [{"label": "A"}, {"label": "B"}]}]}),
        ),
        ("c-plan", "create_plan", json!({"name": "Refactor", "plan": "1. everything", "todos": [{"content": "all"}]})),
    ])));
    s.mock.push(Reply::sse(&oa_text("Going with A.")));
    let seen = s.turn(&Turn::new("req-no", "conv-no", "refactor")).await;
    assert_eq!(seen.end, Some(Default::default()));
    assert_eq!(seen.queries().len(), 2, "both calls of the step ask at once");

    let skipped = tool_result(&s, "c-q");
    assert!(skipped.contains("skipped") && skipped.contains("decide yourself"), "{skipped}");
    let declined = tool_result(&s, "c-plan");
    assert!(declined.contains("not accepted") && declined.contains("too broad"), "{declined}");
    let Some(tool_call::Tool::CreatePlanToolCall(card)) = seen.completed("c-plan").tool else {
        panic!("a create_plan card")
    };
    assert!(matches!(card.result.and_then(|r| r.result), Some(create_plan_result::Result::Error(_))));
    // A declined plan leaves the todo list alone.
    let todos = seen.last_checkpoint().expect("a checkpoint").todos;
    assert!(todos.is_empty(), "{todos:?}");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_plan_becomes_the_todo_list() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_tools(&[(
        "c-plan",
        "create_plan",
        json!({"name": "Add cache", "overview": "An LRU in front of the DB", "plan": "## Steps\n1. add lru\n2. wire it",
               "todos": [{"id": "lru", "content": "add lru"}, {"content": "wire it"}]}),
    )])));
    s.mock.push(Reply::sse(&oa_tools(&[(
        "c-todo",
        "todo_write",
        json!({"todos": [{"id": "lru", "status": "in_progress"}], "merge": true}),
    )])));
    s.mock.push(Reply::sse(&oa_text("Plan accepted; starting.")));
    let seen = s.turn(&Turn::new("req-plan", "conv-plan", "plan a cache")).await;
    assert_eq!(seen.end, Some(Default::default()));

    let Some(interaction_query::Query::CreatePlanRequestQuery(q)) = seen.queries()[0].query.clone() else {
        panic!("a create_plan query")
    };
    assert_eq!(q.tool_call_id, "c-plan");
    let args = q.args.expect("args");
    assert_eq!((args.name.as_str(), args.overview.as_str()), ("Add cache", "An LRU in front of the DB"));
    assert_eq!(args.todos.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), vec!["lru", "plan-2"]);

    let accepted = tool_result(&s, "c-plan");
    assert!(accepted.contains("accepted") && accepted.contains("file:///plans/Add-cache.md"), "{accepted}");
    // The merge the model sent next finds the plan's items.
    let list = tool_result(&s, "c-todo");
    assert!(list.contains("[in_progress] lru: add lru") && list.contains("[pending] plan-2: wire it"), "{list}");
    let todos: Vec<agent::TodoItem> = seen
        .last_checkpoint()
        .expect("a checkpoint")
        .todos
        .iter()
        .map(|b| prost::Message::decode(b.as_slice()).expect("todo item"))
        .collect();
    assert_eq!(
        todos.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        vec!["lru", "plan-2"],
        "the plan's todos reach the checkpoint"
    );
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_switch_to_ask_mode_refuses_writes_for_the_rest_of_the_run() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "keep\n");
    s.mock.push(Reply::sse(&oa_tools(&[(
        "c-mode",
        "switch_mode",
        json!({"target_mode": "ask", "explanation": "you only asked a question"}),
    )])));
    s.mock.push(Reply::sse(&oa_tools(&[("c-write", "write_file", json!({"path": "a.txt", "contents": "changed\n"}))])));
    s.mock.push(Reply::sse(&oa_text("Left the file alone.")));
    let seen = s.turn(&Turn::new("req-mode", "conv-mode", "what does a.txt say?")).await;
    assert_eq!(seen.end, Some(Default::default()));

    let Some(interaction_query::Query::SwitchModeRequestQuery(q)) = seen.queries()[0].query.clone() else {
        panic!("a switch_mode query")
    };
    let args = q.args.expect("args");
    assert_eq!(args.target_mode_id, "ask");
    assert_eq!(args.explanation.as_deref(), Some("you only asked a question"));
    assert_eq!(args.tool_call_id, "c-mode");
    let Some(tool_call::Tool::SwitchModeToolCall(card)) = seen.completed("c-mode").tool else {
        panic!("a switch_mode card")
    };
    let Some(switch_mode_result::Result::Success(ok)) = card.result.and_then(|r| r.result) else {
        panic!("the switch succeeded")
    };
    assert_eq!((ok.from_mode_id.as_str(), ok.to_mode_id.as_str()), ("agent", "ask"));
    let last = seen.last_checkpoint().expect("a checkpoint");
    assert_eq!(last.mode, Some(agent::AgentMode::Ask as i32), "the checkpoint carries the switched mode");
    assert!(tool_result(&s, "c-mode").contains("now in Ask mode"));

    let refused = tool_result(&s, "c-write");
    assert!(refused.contains("not available in ask mode"), "{refused}");
    assert_eq!(s.ws.read("a.txt").as_deref(), Some("keep\n"), "the write never reached the editor");
    assert!(seen.execs().iter().all(|x| x.exec_id != "c-write"), "no exec for the refused write");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_nobody_answers_ends_with_the_users_stop() {
    let mut s = cursor_client::start("").await;
    s.user = Arc::new(|_: &agent::InteractionQuery| None);
    s.mock.push(Reply::sse(&oa_tools(&[(
        "c-wait",
        "ask_question",
        json!({"questions": [{"prompt": "Now?", "options": [{"label": "yes"}, {"label": "no"}]}]}),
    )])));
    s.mock.push(Reply::sse(&oa_text("stopped")));
    let run = s.start_run(&Turn::new("req-wait", "conv-wait", "ask me"), cursor_client::run_everything()).await;
    run.wait_until(|msgs| {
        msgs.iter().any(|m| matches!(m.message, Some(agent_server_message::Message::InteractionQuery(_))))
    })
    .await;
    run.cancel().await;
    let seen = run.finish().await;
    assert_eq!(seen.end, Some(Default::default()), "the stopped turn ends with turn_ended and {{}}");
    let runs = s.te.handle.store.conversation_runs("conv-wait").await.expect("runs");
    assert_eq!(runs[0].status, keyhaven::model::RunStatus::Canceled);
    // The next turn: the unanswered call has an interrupted result, and nothing is asked again.
    s.mock.push(Reply::sse(&oa_text("ok")));
    let next = s.turn(&Turn::new("req-wait-2", "conv-wait", "never mind")).await;
    assert_eq!(next.end, Some(Default::default()));
    assert!(next.queries().is_empty());
    assert!(tool_result(&s, "c-wait").contains("Interrupted"), "{}", tool_result(&s, "c-wait"));
    s.te.stop().await;
}
