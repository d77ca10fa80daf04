//! Message compilation and delivery for actions that arrive while a run works
//! (docs/cursor-backend.md §4 "Message compilation and delivery"): a `conversation_action` sent
//! as its own `AgentClientMessage` during a run is classified here, then delivered to the
//! conversation's current run with the run it was meant for as the target (the request id of
//! the stream it arrived on).
//!
//! | action during a run | delivery |
//! |---|---|
//! | `user_message_action` | `InsertMessages`: waits until the current step (model call and tool round) completes |
//! | `user_message_action` with `interrupted_pending_tool_call_resolutions` | `BreakMessages`: the current step is canceled, unfinished tools get interrupted results, the same run continues |
//! | `cancel_action{reason}` | `Cancel`: the model call and every running exec are aborted; `turn_ended` + `{}` |
//! | `summarize_action` | compaction before the next model cycle |
//! | `inject_context_action` (3.13+) | `InsertMessages` of the injected message (a user message, or a system context as a `system_context` block), acknowledged with `context_injection_state`: `queued` when the run took it, `delivered{step, delivery_batch_id, delivered_at_ms}` when it enters the transcript, `queued_for_next_turn` when the run was already ending (or ended before delivering it), `rejected{reason}` when it names another run (`expected_run_id` ≠ the run request's `run_id`) or the run it was meant for is gone |
//! | `resume_action` | ignored |
//! | anything else (`start_plan_action`, background and subagent actions, …) | ignored, with a notice naming it |
//!
//! **Attachments.** A mid-run user message (`user_message_action`, or an injected
//! `user_context`) that carries `selected_context` (or a text moved to a blob) is compiled like a
//! run's first message ([`crate::cursor::agent::context::user_content`]: blocks, images, files
//! read through exec, blobs through KV) before it is delivered; [`needs_context`] says which, and
//! [`classify_with`] puts the compiled content into its entry. Its blocks are not deduplicated
//! against the transcript (the run holds it while it works), only within the message.
//!
//! A message batch the run (or, when it was already finalizing, the next run) accepted is
//! echoed as `user_message_appended` (§4.6 case 6), so the client knows it was taken.
//!
//! docs/cursor-wire.md does not classify mid-run user messages itself: it says a separate
//! conversation action is how the client cancels and injects context mid-run (§4.4), and that a
//! new message while running is observed as `cancel_action{new_message_submitted}` followed by a
//! new run (§5.5; the new run supersedes the old through the run request, not through here). An
//! injected user message is therefore context for the running task (insert), unless the client
//! says it interrupted the pending tool calls for it (break). `prepend_user_messages` come first.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::cursor::agent::actions;
use crate::cursor::protocol::agent::{
    self, context_injection_state, conversation_action, inject_context_action, interaction_update,
};
use crate::cursor::protocol::events;
use crate::model::{Entry, Message, Role};
use crate::run::RunCommand;

/// What a mid-run conversation action asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    Ignore,
    Command(RunCommand),
    Summarize,
    /// An injected message for the running turn.
    Inject {
        injection_id: String,
        expected_run_id: String,
        entry: Entry,
    },
    /// An action Keyhaven does not act on during a run (its wire name).
    Unsupported(&'static str),
}

/// Injected messages the run took but has not delivered yet: entry id → injection id.
#[derive(Debug, Default)]
pub struct Injections(Mutex<HashMap<String, String>>);

impl Injections {
    pub fn track(&self, entry_id: &str, injection_id: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(entry_id.to_owned(), injection_id.to_owned());
        }
    }

    /// The injection an appended entry delivers, if any (forgotten afterwards).
    pub fn delivered(&self, entry_id: &str) -> Option<String> {
        self.0.lock().ok().and_then(|mut m| m.remove(entry_id))
    }

    /// The injections never delivered (forgotten afterwards).
    pub fn take_remaining(&self) -> Vec<String> {
        self.0.lock().map(|mut m| m.drain().map(|(_, v)| v).collect()).unwrap_or_default()
    }
}

/// `context_injection_state{injection_id, state}`.
pub fn injection_state(injection_id: &str, state: context_injection_state::State) -> agent::AgentServerMessage {
    events::update(interaction_update::Message::ContextInjectionState(agent::ContextInjectionStateUpdate {
        injection_id: injection_id.to_owned(),
        state: Some(agent::ContextInjectionState { state: Some(state) }),
    }))
}

/// The transcript entry of an injection (`None` when it carries nothing).
pub fn injection_entry(a: &agent::InjectContextAction) -> Option<Entry> {
    let fallback = format!("inject:{}", a.injection_id);
    match a.payload.as_ref()? {
        inject_context_action::Payload::UserContext(u) => {
            u.user_message.as_ref().filter(|m| !m.text.is_empty()).map(|m| user_entry(m, &fallback))
        }
        inject_context_action::Payload::SystemContext(s) => (!s.content.trim().is_empty())
            .then(|| Entry::new(fallback, Message::text(Role::User, actions::system_context_text(s)))),
    }
}

/// The transcript id of a Cursor user message (`fallback` when the client gave no id).
pub fn user_entry_id(message_id: &str, fallback: &str) -> String {
    if message_id.is_empty() { fallback.to_owned() } else { format!("user:{message_id}") }
}

fn user_entry(m: &agent::UserMessage, fallback: &str) -> Entry {
    Entry::new(user_entry_id(&m.message_id, fallback), Message::text(Role::User, m.text.clone()))
}

/// Classifies an action that arrived as message `seqno` of run `run_id`.
pub fn classify(action: agent::ConversationAction, run_id: &str, seqno: u64) -> Delivery {
    match action.action {
        Some(conversation_action::Action::CancelAction(c)) => {
            Delivery::Command(RunCommand::Cancel { reason: c.reason })
        }
        Some(conversation_action::Action::UserMessageAction(a)) => {
            let mut batch: Vec<Entry> = a
                .prepend_user_messages
                .iter()
                .enumerate()
                .filter(|(_, m)| !m.text.is_empty())
                .map(|(i, m)| user_entry(m, &format!("{run_id}:in{seqno}.{i}")))
                .collect();
            if let Some(m) = a.user_message.as_ref().filter(|m| !m.text.is_empty()) {
                batch.push(user_entry(m, &format!("{run_id}:in{seqno}")));
            }
            if batch.is_empty() {
                return Delivery::Ignore;
            }
            if a.interrupted_pending_tool_call_resolutions.is_some() {
                Delivery::Command(RunCommand::BreakMessages(batch))
            } else {
                Delivery::Command(RunCommand::InsertMessages(batch))
            }
        }
        Some(conversation_action::Action::SummarizeAction(_)) => Delivery::Summarize,
        Some(conversation_action::Action::InjectContextAction(a)) => match injection_entry(&a) {
            Some(entry) => Delivery::Inject { injection_id: a.injection_id, expected_run_id: a.expected_run_id, entry },
            None => Delivery::Unsupported("inject_context_action (without content)"),
        },
        // A backgrounded shell or task finished while the agent works: the model hears of it at
        // its next step, like a message typed during the run.
        Some(conversation_action::Action::BackgroundTaskCompletionAction(_)) => {
            let note = agent::UserMessage { text: actions::background_task_text(), ..Default::default() };
            Delivery::Command(RunCommand::InsertMessages(vec![user_entry(&note, &format!("{run_id}:in{seqno}"))]))
        }
        Some(conversation_action::Action::StartPlanAction(_)) => Delivery::Unsupported("start_plan_action"),
        Some(conversation_action::Action::ExecutePlanAction(_)) => Delivery::Unsupported("execute_plan_action"),
        Some(other) => match actions::unsupported_name(&other) {
            Some(name) => Delivery::Unsupported(name),
            None => Delivery::Ignore,
        },
        None => Delivery::Unsupported("an action this version of Keyhaven does not know"),
    }
}

/// The user message whose attachments a mid-run action carries: the `user_message` of a
/// `user_message_action` or an injected `user_context`.
pub fn main_user(action: &agent::ConversationAction) -> Option<&agent::UserMessage> {
    match &action.action {
        Some(conversation_action::Action::UserMessageAction(a)) => a.user_message.as_ref(),
        Some(conversation_action::Action::InjectContextAction(a)) => match &a.payload {
            Some(inject_context_action::Payload::UserContext(u)) => u.user_message.as_ref(),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a mid-run action's message must be compiled before delivery: it has attachments, or
/// its text is in a blob.
pub fn needs_context(action: &agent::ConversationAction) -> bool {
    let in_blob = |id: &Option<Vec<u8>>| id.as_ref().is_some_and(|b| !b.is_empty());
    main_user(action).is_some_and(|m| {
        m.selected_context.is_some()
            || (m.text.is_empty() && (in_blob(&m.text_blob_id) || in_blob(&m.rich_text_blob_id)))
    })
}

/// As [`classify`], with the main user message's content (its compiled attachments and text)
/// in place of its bare text.
pub fn classify_with(mut action: agent::ConversationAction, run_id: &str, seqno: u64, content: Message) -> Delivery {
    let text = content.joined_text("\n");
    let placeholder = if text.is_empty() { "(attachments)".to_owned() } else { text };
    match &mut action.action {
        Some(conversation_action::Action::UserMessageAction(a)) => {
            if let Some(m) = a.user_message.as_mut().filter(|m| m.text.is_empty()) {
                m.text = placeholder;
            }
        }
        Some(conversation_action::Action::InjectContextAction(a)) => {
            if let Some(inject_context_action::Payload::UserContext(u)) = &mut a.payload
                && let Some(m) = u.user_message.as_mut().filter(|m| m.text.is_empty())
            {
                m.text = placeholder;
            }
        }
        _ => {}
    }
    let main_id = main_user(&action).map(|m| m.message_id.clone());
    let mut delivery = classify(action, run_id, seqno);
    let patch = |e: &mut Entry| {
        e.message = content.clone();
    };
    match &mut delivery {
        Delivery::Command(RunCommand::InsertMessages(batch) | RunCommand::BreakMessages(batch)) => {
            // The main message is the batch's last entry (after `prepend_user_messages`).
            if let Some(e) = batch.last_mut().filter(|_| main_id.is_some()) {
                patch(e);
            }
        }
        Delivery::Inject { entry, .. } => patch(entry),
        _ => {}
    }
    delivery
}

/// `user_message_appended` for an accepted entry.
pub fn appended(entry: &Entry) -> agent::AgentServerMessage {
    let text = entry.message.joined_text("\n");
    let message_id = entry.id.strip_prefix("user:").unwrap_or(&entry.id).to_owned();
    events::update(interaction_update::Message::UserMessageAppended(agent::UserMessageAppendedUpdate {
        user_message: Some(agent::UserMessage { text, message_id, ..Default::default() }),
    }))
}
