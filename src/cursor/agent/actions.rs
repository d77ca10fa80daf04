//! The action a run request carries (docs/cursor-wire.md §6.3), read into what the turn does.
//!
//! | run request action | the turn |
//! |---|---|
//! | `user_message_action` | a turn for the message, in the message's mode |
//! | `start_plan_action{user_message, request_context}` | the same, in plan mode (the model writes a plan with `create_plan`; `is_spec` is not read) |
//! | `execute_plan_action` (the plan card's Build) | a turn whose user message asks to carry out the plan: the plan's text (`plan_file_content`, else `plan.plan`) as a `plan` block, the conversation's todos as a `todos` block; in `execution_mode` (agent when unset) |
//! | `inject_context_action` | a turn for the injected message (the previous run has ended); acknowledged with `context_injection_state` (see `super::delivery` for the mid-run case) |
//! | `resume_action`, `summarize_action` | continue the conversation, compact it |
//! | `cancel_action` | nothing to cancel: an empty turn |
//! | `background_task_completion_action` (a backgrounded shell or task finished; no fields are known) | a turn that tells the model so, as a `background_task` block pointing it at the editor's terminal files, where the shell's output is |
//! | anything else (`shell_command_action`, other background and subagent actions, unknown cases) | a notice naming the action, then `turn_ended`: never a silent empty turn |

use crate::cursor::agent::context::block;
use crate::cursor::protocol::agent::{
    self, AgentMode, TodoStatus, conversation_action::Action, inject_context_action::Payload,
};

/// What a run request asks the turn to do.
#[derive(Debug)]
pub enum Start {
    /// A turn for a user message; `mode` overrides the message's own; `injection` is the id of
    /// the injection it came from.
    Message {
        user: Box<agent::UserMessage>,
        ctx: Box<agent::RequestContext>,
        mode: Option<AgentMode>,
        injection: Option<String>,
    },
    ExecutePlan(Box<agent::ExecutePlanAction>),
    Resume(Box<agent::RequestContext>),
    Summarize,
    /// Nothing to do (a cancel with no run).
    Nothing,
    /// An action Keyhaven does not act on (its wire name).
    Unsupported(&'static str),
}

/// The wire name of an action case Keyhaven does not act on.
pub fn unsupported_name(action: &Action) -> Option<&'static str> {
    Some(match action {
        Action::ShellCommandAction(_) => "shell_command_action",
        Action::AsyncAskQuestionCompletionAction(_) => "async_ask_question_completion_action",
        Action::CancelSubagentAction(_) => "cancel_subagent_action",
        Action::BackgroundShellAction(_) => "background_shell_action",
        Action::BackgroundSubagentAction(_) => "background_subagent_action",
        Action::SubscriptionNotificationAction(_) => "subscription_notification_action",
        Action::GoalContinuationAction(_) => "goal_continuation_action",
        _ => return None,
    })
}

/// The notice for an action Keyhaven does not act on.
pub fn unsupported_notice(name: &str, during_run: bool) -> String {
    if during_run {
        format!(
            "Cursor sent `{name}` while the agent worked; Keyhaven does not support that action, so it was ignored."
        )
    } else {
        format!("Cursor asked for `{name}`; Keyhaven does not support that action, so nothing was run.")
    }
}

/// Reads the run request's action.
pub fn start(action: Option<Action>) -> Start {
    match action {
        Some(Action::UserMessageAction(a)) => Start::Message {
            user: Box::new(a.user_message.unwrap_or_default()),
            ctx: Box::new(a.request_context.unwrap_or_default()),
            mode: None,
            injection: None,
        },
        Some(Action::StartPlanAction(a)) => Start::Message {
            user: Box::new(a.user_message.unwrap_or_default()),
            ctx: Box::new(a.request_context.unwrap_or_default()),
            mode: Some(AgentMode::Plan),
            injection: None,
        },
        Some(Action::ExecutePlanAction(a)) => Start::ExecutePlan(Box::new(a)),
        Some(Action::InjectContextAction(a)) => {
            let injection = Some(a.injection_id.clone());
            match a.payload {
                Some(Payload::UserContext(u)) => Start::Message {
                    user: Box::new(u.user_message.unwrap_or_default()),
                    ctx: Box::new(u.request_context.unwrap_or_default()),
                    mode: None,
                    injection,
                },
                Some(Payload::SystemContext(s)) => Start::Message {
                    user: Box::new(agent::UserMessage { text: system_context_text(&s), ..Default::default() }),
                    ctx: Box::default(),
                    mode: None,
                    injection,
                },
                None => Start::Unsupported("inject_context_action (without content)"),
            }
        }
        Some(Action::ResumeAction(r)) => Start::Resume(Box::new(r.request_context.unwrap_or_default())),
        Some(Action::SummarizeAction(_)) => Start::Summarize,
        Some(Action::CancelAction(_)) => Start::Nothing,
        Some(Action::BackgroundTaskCompletionAction(_)) => Start::Message {
            user: Box::new(agent::UserMessage { text: background_task_text(), ..Default::default() }),
            ctx: Box::default(),
            mode: None,
            injection: None,
        },
        Some(other) => Start::Unsupported(unsupported_name(&other).unwrap_or("an unknown action")),
        None => Start::Unsupported("an action this version of Keyhaven does not know"),
    }
}

/// What the model is told when Cursor reports that a backgrounded shell or task finished. The
/// action carries no fields Keyhaven knows, so the text names where the output is, not what it is.
pub fn background_task_text() -> String {
    block(
        "background_task",
        &[("event", "finished".to_owned())],
        "A shell command or task that was moved to the background has finished. Its output is in the \
         editor's terminal files (the terminals folder named when it was backgrounded): read them if \
         the result matters for what you are doing, then continue.",
    )
}

/// The text of a system context injection: a `system_context` block naming its producer.
pub fn system_context_text(s: &agent::SystemContextInjection) -> String {
    block("system_context", &[("producer", s.producer.clone())], &s.content)
}

fn todo_status(status: i32) -> &'static str {
    match TodoStatus::try_from(status).unwrap_or(TodoStatus::Unspecified) {
        TodoStatus::Completed => "completed",
        TodoStatus::InProgress => "in_progress",
        TodoStatus::Cancelled => "cancelled",
        TodoStatus::Pending | TodoStatus::Unspecified => "pending",
    }
}

/// The user message of a Build (`execute_plan_action`): the request to carry out the plan, the
/// plan's text and the conversation's todos.
pub fn plan_message(a: &agent::ExecutePlanAction, todos: &[agent::TodoItem]) -> agent::UserMessage {
    let location = [a.plan_file_path.as_deref(), a.plan_file_uri.as_deref()]
        .into_iter()
        .flatten()
        .find(|p| !p.is_empty())
        .unwrap_or_default()
        .to_owned();
    let text = [a.plan_file_content.as_deref(), a.plan.as_ref().map(|p| p.plan.as_str())]
        .into_iter()
        .flatten()
        .find(|t| !t.trim().is_empty())
        .map_or_else(
            || "(the editor did not send the plan's text; read it from the plan file)".to_owned(),
            str::to_owned,
        );
    let mut out = String::from(
        "Carry out the plan below: work through it step by step, keep the todo list current with todo_write, \
         and say what you did at the end.\n\n",
    );
    out.push_str(&block("plan", &[("path", location)], &text));
    if !todos.is_empty() {
        let list: String = todos.iter().map(|t| format!("- [{}] {}\n", todo_status(t.status), t.content)).collect();
        out.push_str("\n\n");
        out.push_str(&block("todos", &[], &list));
    }
    agent::UserMessage {
        text: out,
        message_id: a.kickoff_message_id.clone().unwrap_or_default(),
        mode: execution_mode(a) as i32,
        ..Default::default()
    }
}

/// The mode a Build runs in: `execution_mode`, agent when unset. An unknown value fails closed
/// (the ask tool set), like an unknown message mode.
pub fn execution_mode(a: &agent::ExecutePlanAction) -> AgentMode {
    match AgentMode::try_from(a.execution_mode) {
        Ok(AgentMode::Unspecified) => AgentMode::Agent,
        Ok(m) => m,
        Err(_) => AgentMode::Ask,
    }
}
