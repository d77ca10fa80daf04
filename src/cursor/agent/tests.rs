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
