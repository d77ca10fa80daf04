//! Unit tests of mid-run delivery: classification of conversation actions and the
//! conversation's target check and pending messages.

use crate::cursor::agent::delivery::{Delivery, classify};
use crate::cursor::conversation::Conversation;
use crate::cursor::protocol::agent::{self, conversation_action};
use crate::model::{Entry, Message, Role};
use crate::run::{CommandResult, RunCommand, command_channel};

fn user_action(text: &str, id: &str, interrupted: bool) -> agent::ConversationAction {
    agent::ConversationAction {
        action: Some(conversation_action::Action::UserMessageAction(agent::UserMessageAction {
            user_message: Some(agent::UserMessage { text: text.into(), message_id: id.into(), ..Default::default() }),
            interrupted_pending_tool_call_resolutions: interrupted.then(Vec::new),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn entry(id: &str) -> Entry {
    Entry::new(id, Message::text(Role::User, "x"))
}

#[test]
fn user_messages_insert_unless_they_interrupted_the_tools() {
    let Delivery::Command(RunCommand::InsertMessages(batch)) = classify(user_action("more", "m2", false), "r1", 4)
    else {
        panic!("insert")
    };
    assert_eq!(batch[0].id, "user:m2");
    let Delivery::Command(RunCommand::BreakMessages(batch)) = classify(user_action("stop that", "", true), "r1", 5)
    else {
        panic!("break")
    };
    assert_eq!(batch[0].id, "r1:in5", "a message without id gets one from its run and seqno");
    assert_eq!(classify(user_action("", "m3", false), "r1", 6), Delivery::Ignore, "an empty message is ignored");
}

#[test]
fn cancel_summarize_and_other_actions() {
    let cancel = agent::ConversationAction {
        action: Some(conversation_action::Action::CancelAction(agent::CancelAction { reason: "user_stopped".into() })),
        ..Default::default()
    };
    assert_eq!(classify(cancel, "r", 1), Delivery::Command(RunCommand::Cancel { reason: "user_stopped".into() }));
    let summarize = agent::ConversationAction {
        action: Some(conversation_action::Action::SummarizeAction(agent::SummarizeAction {})),
        ..Default::default()
    };
    assert_eq!(classify(summarize, "r", 1), Delivery::Summarize);
    let resume = agent::ConversationAction {
        action: Some(conversation_action::Action::ResumeAction(agent::ResumeAction::default())),
        ..Default::default()
    };
    assert_eq!(classify(resume, "r", 1), Delivery::Ignore);
}

#[test]
fn stale_targets_are_ignored_and_late_messages_wait_for_the_next_run() {
    let c = Conversation::detached("c1");
    // No run: a targeted command is stale, an untargeted batch waits for the next run.
    assert_eq!(c.deliver(Some("r0"), RunCommand::InsertMessages(vec![entry("a")])), CommandResult::StaleTarget);
    assert_eq!(c.deliver(None, RunCommand::InsertMessages(vec![entry("b")])), CommandResult::Applied);
    let (handle, inbox) = command_channel("r1", []);
    c.set_current(Some(handle));
    assert_eq!(c.deliver(Some("r0"), RunCommand::InsertMessages(vec![entry("c")])), CommandResult::StaleTarget);
    assert_eq!(c.deliver(Some("r1"), RunCommand::InsertMessages(vec![entry("d")])), CommandResult::Applied);
    assert_eq!(c.deliver(Some("r1"), RunCommand::InsertMessages(vec![entry("d")])), CommandResult::Duplicate);
    // The run ends (its inbox is gone): a batch for it becomes pending.
    drop(inbox);
    assert_eq!(c.deliver(Some("r1"), RunCommand::BreakMessages(vec![entry("e")])), CommandResult::Applied);
    let pending: Vec<String> = c.take_pending().into_iter().map(|e| e.id).collect();
    assert_eq!(pending, vec!["b", "e"]);
    assert!(c.take_pending().is_empty());
}

#[tokio::test]
async fn pending_messages_and_acknowledged_blobs_come_back_from_the_store() {
    use std::sync::Arc;

    use crate::cursor::conversation::Conversations;
    use crate::store::{ConversationOp, Store, StoreOptions};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("keyhaven.db");
    let store = Arc::new(Store::open(&path, StoreOptions::default()).expect("open"));
    let conversations = Conversations::new(Some(store.clone()));
    let c = conversations.get("c1").await;
    // No run: an untargeted batch waits for the next run, and so does a repeat of it once.
    assert_eq!(c.deliver(None, RunCommand::InsertMessages(vec![entry("a"), entry("b")])), CommandResult::Applied);
    c.add_pending(vec![entry("b"), entry("c")]);
    c.acked_blobs.lock().expect("acked").insert([7; 32]);
    store
        .conversation(ConversationOp::AckedBlobs {
            conversation_id: "c1".into(),
            added: vec![vec![7; 32]],
            removed: Vec::new(),
            acked_ms: 1,
        })
        .await
        .expect("acked");
    store.flush().await.expect("flush");

    // Another registry on the same database (a restarted engine) finds both.
    let again = Conversations::new(Some(store.clone())).get("c1").await;
    assert_eq!(again.acked_blobs.lock().expect("acked").iter().copied().collect::<Vec<_>>(), vec![[7; 32]]);
    let ids = |v: Vec<Entry>| v.into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(ids(again.take_pending()), vec!["a", "b", "c"]);
    // Taking them is not delivering them: until the transcript holds them they stay stored.
    assert_eq!(ids(Conversations::new(Some(store.clone())).get("c1").await.take_pending()), vec!["a", "b", "c"]);
    assert!(again.take_pending().is_empty());
}

fn action(a: conversation_action::Action) -> agent::ConversationAction {
    agent::ConversationAction { action: Some(a), ..Default::default() }
}

#[test]
fn injections_insert_and_actions_without_support_are_named() {
    use crate::cursor::protocol::agent::inject_context_action::Payload;
    let inject = |payload| {
        action(conversation_action::Action::InjectContextAction(agent::InjectContextAction {
            injection_id: "i1".into(),
            expected_run_id: "run-1".into(),
            payload,
        }))
    };
    let system =
        Payload::SystemContext(agent::SystemContextInjection { producer: "hook".into(), content: "CI red".into() });
    let Delivery::Inject { injection_id, expected_run_id, entry } = classify(inject(Some(system)), "r", 3) else {
        panic!("inject")
    };
    assert_eq!((injection_id.as_str(), expected_run_id.as_str(), entry.id.as_str()), ("i1", "run-1", "inject:i1"));
    assert_eq!(
        entry.message.joined_text(""),
        "<attached source=\"system_context\" producer=\"hook\">\nCI red\n</attached>"
    );
    let empty = Payload::UserContext(agent::UserContextInjection::default());
    assert_eq!(classify(inject(Some(empty)), "r", 4), Delivery::Unsupported("inject_context_action (without content)"));
    let plan = action(conversation_action::Action::StartPlanAction(agent::StartPlanAction::default()));
    assert_eq!(classify(plan, "r", 5), Delivery::Unsupported("start_plan_action"));
    let bg = action(conversation_action::Action::BackgroundShellAction(agent::UnreadAction {}));
    assert_eq!(classify(bg, "r", 6), Delivery::Unsupported("background_shell_action"));
    assert_eq!(
        classify(agent::ConversationAction::default(), "r", 7),
        Delivery::Unsupported("an action this version of Keyhaven does not know")
    );
}

#[test]
fn a_build_asks_to_carry_out_the_plan_in_its_execution_mode() {
    use crate::cursor::agent::actions::{execution_mode, plan_message};
    let a = agent::ExecutePlanAction {
        plan_file_content: Some("# P\n".into()),
        plan: Some(agent::ConversationPlan { plan: "older text".into() }),
        plan_file_path: Some("/p/plan.md".into()),
        execution_mode: 0,
        ..Default::default()
    };
    let m = plan_message(&a, &[]);
    assert!(m.text.contains("<attached source=\"plan\" path=\"/p/plan.md\">\n# P\n</attached>"), "{}", m.text);
    assert!(!m.text.contains("older text") && !m.text.contains("todos"), "the file's content wins; no empty todo list");
    assert_eq!(execution_mode(&a), agent::AgentMode::Agent, "unset means agent");
    let unknown = agent::ExecutePlanAction { execution_mode: 42, ..Default::default() };
    assert_eq!(execution_mode(&unknown), agent::AgentMode::Ask, "an unknown mode fails closed");
    assert!(plan_message(&unknown, &[]).text.contains("did not send the plan's text"));
}

#[test]
fn a_finished_background_task_is_told_to_the_model_as_a_run_and_mid_run() {
    let expected = "<attached source=\"background_task\" event=\"finished\">\nA shell command or task that was moved to the \
                    background has finished. Its output is in the editor's terminal files (the terminals folder named \
                    when it was backgrounded): read them if the result matters for what you are doing, then \
                    continue.\n</attached>";
    let done = || action(conversation_action::Action::BackgroundTaskCompletionAction(agent::UnreadAction {}));
    let Delivery::Command(RunCommand::InsertMessages(batch)) = classify(done(), "r", 8) else { panic!("insert") };
    assert_eq!(batch.len(), 1);
    assert_eq!((batch[0].id.as_str(), batch[0].message.joined_text("").as_str()), ("r:in8", expected));
    let crate::cursor::agent::actions::Start::Message { user, mode: None, injection: None, .. } =
        crate::cursor::agent::actions::start(done().action)
    else {
        panic!("a turn")
    };
    assert_eq!(user.text, expected);
}
