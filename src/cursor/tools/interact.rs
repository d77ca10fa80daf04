//! The tools that ask the user (docs/cursor-wire.md §4.10, §5.3 "Interaction tools"): each sends
//! an `interaction_query` and waits, possibly for minutes (the transport's heartbeats keep the
//! stream alive), for the `interaction_response` of the same id. The card (`tool_call_started`,
//! then `tool_call_completed` with the result) is the tool's own case.
//!
//! - `ask_question`: structured questions with options; the model gets the chosen labels.
//! - `create_plan`: the user reviews a plan (name, overview, Markdown body, todos); the editor
//!   stores it and answers with its URI.
//! - `switch_mode`: the model asks for another agent mode. An approved switch is recorded in the
//!   run's [`ModeCell`]; from then on tools outside the new mode are refused, and the editor
//!   sends the new mode with the user's next message (the tool list of a run never changes, so
//!   tools a wider mode adds arrive with the next turn).
//!
//! A query the run abandons (cancel, break) or the editor answers without a result is an error
//! result for the model; nothing waits forever on the editor except the user's decision.

use std::sync::Mutex;

use serde::Deserialize;

use crate::cursor::protocol::agent::{
    self, AgentMode, ask_question_result, create_plan_result, interaction_query, interaction_response,
    switch_mode_request_response, switch_mode_result, tool_call,
};
use crate::cursor::tools::dispatch::{Call, CursorTools};
use crate::cursor::tools::query::Unanswered;
use crate::run::ToolOutput;

/// The agent mode of a run: the request's mode, changed by an approved `switch_mode`.
#[derive(Debug)]
pub struct ModeCell(Mutex<AgentMode>);

impl ModeCell {
    pub fn new(mode: AgentMode) -> ModeCell {
        ModeCell(Mutex::new(mode))
    }

    pub fn get(&self) -> AgentMode {
        self.0.lock().map_or(AgentMode::Agent, |m| *m)
    }

    fn set(&self, mode: AgentMode) {
        if let Ok(mut m) = self.0.lock() {
            *m = mode;
        }
    }
}

/// A mode's id on the wire and in the tool's schema.
pub fn mode_id(mode: AgentMode) -> &'static str {
    match mode {
        AgentMode::Agent | AgentMode::Unspecified => "agent",
        AgentMode::Ask => "ask",
        AgentMode::Plan => "plan",
        AgentMode::Debug => "debug",
        AgentMode::Triage => "triage",
        AgentMode::Project => "project",
        AgentMode::Multitask => "multitask",
    }
}

/// The modes the model may ask for.
pub const SWITCHABLE: [&str; 4] = ["agent", "ask", "plan", "debug"];

pub(super) fn parse_mode(id: &str) -> Option<AgentMode> {
    match id.trim().to_ascii_lowercase().as_str() {
        "agent" => Some(AgentMode::Agent),
        "ask" => Some(AgentMode::Ask),
        "plan" => Some(AgentMode::Plan),
        "debug" => Some(AgentMode::Debug),
        _ => None,
    }
}

fn title_case(id: &str) -> String {
    let mut c = id.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

#[derive(Deserialize)]
pub(crate) struct OptionIn {
    id: Option<String>,
    label: String,
}

#[derive(Deserialize)]
pub(crate) struct QuestionIn {
    id: Option<String>,
    prompt: String,
    #[serde(default)]
    options: Vec<OptionIn>,
    #[serde(default)]
    allow_multiple: bool,
}

#[derive(Deserialize)]
pub(crate) struct AskIn {
    title: Option<String>,
    questions: Vec<QuestionIn>,
}

#[derive(Deserialize)]
pub(crate) struct PlanTodoIn {
    id: Option<String>,
    content: String,
}

#[derive(Deserialize)]
pub(crate) struct PlanIn {
    name: String,
    overview: Option<String>,
    plan: String,
    #[serde(default)]
    todos: Vec<PlanTodoIn>,
}

#[derive(Deserialize)]
pub(crate) struct SwitchIn {
    target_mode: String,
    explanation: Option<String>,
}

fn reason_suffix(reason: &str) -> String {
    if reason.trim().is_empty() { String::new() } else { format!(": {}", reason.trim()) }
}

const NO_DECISION: &str = "The editor answered without a decision.";

/// The questions as the query carries them: ids filled in (`q1`, `q2`, …; options `a`, `b`, …).
pub(super) fn questions(a: AskIn) -> Result<agent::AskQuestionArgs, String> {
    if a.questions.is_empty() {
        return Err("ask_question needs at least one question.".to_owned());
    }
    let mut out = Vec::with_capacity(a.questions.len());
    for (i, q) in a.questions.into_iter().enumerate() {
        if q.prompt.trim().is_empty() {
            return Err(format!("Question {} has no prompt.", i + 1));
        }
        let options = q
            .options
            .into_iter()
            .enumerate()
            .map(|(j, o)| agent::AskQuestionOption {
                id: o.id.filter(|s| !s.trim().is_empty()).unwrap_or_else(|| option_id(j)),
                label: o.label,
            })
            .collect::<Vec<_>>();
        if options.len() < 2 {
            return Err(format!("Question {} needs at least two options.", i + 1));
        }
        out.push(agent::AskQuestionQuestion {
            id: q.id.filter(|s| !s.trim().is_empty()).unwrap_or_else(|| format!("q{}", i + 1)),
            prompt: q.prompt,
            options,
            allow_multiple: q.allow_multiple,
        });
    }
    Ok(agent::AskQuestionArgs { title: a.title.unwrap_or_default(), questions: out, ..Default::default() })
}

fn option_id(j: usize) -> String {
    let letters = b"abcdefghijklmnopqrstuvwxyz";
    match letters.get(j) {
        Some(&c) => char::from(c).to_string(),
        None => format!("o{}", j + 1),
    }
}

/// The answers as the model sees them: each question's prompt, the chosen labels and the text
/// the user typed instead of (or besides) picking an option (`freeform_text`, quoted).
pub(super) fn render_answers(args: &agent::AskQuestionArgs, s: &agent::AskQuestionSuccess) -> String {
    let mut text = String::from("The user answered:\n");
    for q in &args.questions {
        let answer = s.answers.iter().find(|a| a.question_id == q.id);
        let mut said: Vec<String> = answer
            .map(|a| {
                a.selected_option_ids
                    .iter()
                    .map(|id| q.options.iter().find(|o| &o.id == id).map_or(id.clone(), |o| o.label.clone()))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(free) = answer.and_then(|a| a.freeform_text.as_deref()).map(str::trim).filter(|t| !t.is_empty()) {
            said.push(format!("\"{free}\" (typed by the user)"));
        }
        if said.is_empty() {
            text.push_str(&format!("- {} → (no answer)\n", q.prompt));
        } else {
            text.push_str(&format!("- {} → {}\n", q.prompt, said.join(", ")));
        }
    }
    text
}

impl CursorTools {
    pub(crate) async fn ask_question(&self, c: Call<'_>, a: AskIn) -> ToolOutput {
        let args = match questions(a) {
            Ok(args) => args,
            Err(e) => return ToolOutput::error(e),
        };
        let card = |result| {
            tool_call::Tool::AskQuestionToolCall(agent::AskQuestionToolCall { args: Some(args.clone()), result })
        };
        self.started(c, card(None));
        let query = interaction_query::Query::AskQuestionInteractionQuery(agent::AskQuestionInteractionQuery {
            args: Some(args.clone()),
            tool_call_id: c.id.to_owned(),
        });
        let result = match self.queries.ask(query).await {
            Ok(interaction_response::Result::AskQuestionInteractionResponse(r)) => r.result,
            Ok(_) => Some(error_result(NO_DECISION)),
            Err(e) => {
                let msg = unanswered(e);
                self.completed(c, card(Some(error_result(&msg))));
                return ToolOutput::error(msg);
            }
        }
        .unwrap_or_else(|| error_result(NO_DECISION));
        let out = match &result.result {
            Some(ask_question_result::Result::Success(s)) => ToolOutput::text(render_answers(&args, s)),
            Some(ask_question_result::Result::Rejected(r)) => ToolOutput::error(format!(
                "The user skipped the questions{}. Continue with sensible defaults and say which you chose.",
                reason_suffix(&r.reason)
            )),
            Some(ask_question_result::Result::Error(e)) => {
                ToolOutput::error(format!("Asking the user failed: {}", e.error_message))
            }
            Some(ask_question_result::Result::Async(_)) => {
                ToolOutput::text("The questions stay open in the editor; the user will answer in a later message.")
            }
            None => ToolOutput::error(NO_DECISION),
        };
        self.completed(c, card(Some(result)));
        out
    }

    pub(crate) async fn create_plan(&self, c: Call<'_>, a: PlanIn) -> ToolOutput {
        if a.name.trim().is_empty() || a.plan.trim().is_empty() {
            return ToolOutput::error("create_plan needs a `name` and a `plan`.");
        }
        let now = crate::clock::now_ms();
        let todos = a
            .todos
            .into_iter()
            .enumerate()
            .map(|(i, t)| agent::TodoItem {
                id: t.id.filter(|s| !s.trim().is_empty()).unwrap_or_else(|| format!("plan-{}", i + 1)),
                content: t.content,
                status: agent::TodoStatus::Pending as i32,
                created_at: now,
                updated_at: now,
                dependencies: Vec::new(),
            })
            .collect();
        let args = agent::CreatePlanArgs {
            plan: a.plan,
            todos,
            overview: a.overview.unwrap_or_default(),
            name: a.name,
            ..Default::default()
        };
        let card = |result| {
            tool_call::Tool::CreatePlanToolCall(agent::CreatePlanToolCall { args: Some(args.clone()), result })
        };
        self.started(c, card(None));
        let query = interaction_query::Query::CreatePlanRequestQuery(agent::CreatePlanRequestQuery {
            args: Some(args.clone()),
            tool_call_id: c.id.to_owned(),
        });
        let plan_error = |e: &str| agent::CreatePlanResult {
            result: Some(create_plan_result::Result::Error(agent::CreatePlanError { error: e.to_owned() })),
            plan_uri: String::new(),
        };
        let result = match self.queries.ask(query).await {
            Ok(interaction_response::Result::CreatePlanRequestResponse(r)) => {
                r.result.unwrap_or_else(|| plan_error(NO_DECISION))
            }
            Ok(_) => plan_error(NO_DECISION),
            Err(e) => plan_error(&unanswered(e)),
        };
        let out = match &result.result {
            Some(create_plan_result::Result::Success(_)) => {
                if !args.todos.is_empty() {
                    self.todos.update(args.todos.clone(), false, now);
                }
                let at = if result.plan_uri.is_empty() {
                    String::new()
                } else {
                    format!(" It is saved at {}.", result.plan_uri)
                };
                ToolOutput::text(format!(
                    "The user accepted the plan \"{}\".{at} Its todos are now the todo list; follow the plan.",
                    args.name
                ))
            }
            Some(create_plan_result::Result::Error(e)) => {
                ToolOutput::error(format!("The plan was not accepted{}", reason_suffix(&e.error)))
            }
            None => ToolOutput::error(NO_DECISION),
        };
        self.completed(c, card(Some(result)));
        out
    }

    pub(crate) async fn switch_mode(&self, c: Call<'_>, a: SwitchIn) -> ToolOutput {
        let from = self.mode.get();
        let Some(to) = parse_mode(&a.target_mode) else {
            return ToolOutput::error(format!(
                "Unknown mode `{}`; choose one of: {}.",
                a.target_mode,
                SWITCHABLE.join(", ")
            ));
        };
        if mode_id(to) == mode_id(from) {
            return ToolOutput::text(format!("Already in {} mode.", title_case(mode_id(to))));
        }
        let args = agent::SwitchModeArgs {
            target_mode_id: mode_id(to).to_owned(),
            explanation: a.explanation.filter(|e| !e.trim().is_empty()),
            tool_call_id: c.id.to_owned(),
        };
        let card = |result| {
            tool_call::Tool::SwitchModeToolCall(agent::SwitchModeToolCall { args: Some(args.clone()), result })
        };
        self.started(c, card(None));
        let query = interaction_query::Query::SwitchModeRequestQuery(agent::SwitchModeRequestQuery {
            args: Some(args.clone()),
        });
        let (result, out) = match self.queries.ask(query).await {
            Ok(interaction_response::Result::SwitchModeRequestResponse(r)) => match r.result {
                Some(switch_mode_request_response::Result::Approved(_)) => {
                    self.mode.set(to);
                    let success = agent::SwitchModeSuccess {
                        from_mode_id: mode_id(from).to_owned(),
                        to_mode_id: mode_id(to).to_owned(),
                    };
                    let note = if self.catalog.offers_all(to) && !self.catalog.offers_all(from) {
                        " Tools of the new mode that you do not have yet arrive with the user's next message; \
                         finish this answer with what you will do next."
                    } else {
                        ""
                    };
                    (
                        switch_mode_result::Result::Success(success),
                        ToolOutput::text(format!("The user approved: now in {} mode.{note}", title_case(mode_id(to)))),
                    )
                }
                Some(switch_mode_request_response::Result::Rejected(r)) => (
                    switch_mode_result::Result::Rejected(agent::SwitchModeRejected { reason: r.reason.clone() }),
                    ToolOutput::error(format!(
                        "The user declined switching to {} mode{}. Stay in {} mode.",
                        title_case(mode_id(to)),
                        reason_suffix(&r.reason),
                        title_case(mode_id(from))
                    )),
                ),
                None => (
                    switch_mode_result::Result::Error(agent::SwitchModeError { error: NO_DECISION.to_owned() }),
                    ToolOutput::error(NO_DECISION),
                ),
            },
            other => {
                let msg = match other {
                    Err(e) => unanswered(e),
                    Ok(_) => NO_DECISION.to_owned(),
                };
                (
                    switch_mode_result::Result::Error(agent::SwitchModeError { error: msg.clone() }),
                    ToolOutput::error(msg),
                )
            }
        };
        self.completed(c, card(Some(agent::SwitchModeResult { result: Some(result) })));
        out
    }
}

/// Why a query has no answer, as the model reads it.
fn unanswered(e: Unanswered) -> String {
    format!("No answer: {e}. Continue without the user's decision, or ask in your answer.")
}

fn error_result(msg: &str) -> agent::AskQuestionResult {
    agent::AskQuestionResult {
        result: Some(ask_question_result::Result::Error(agent::AskQuestionError { error_message: msg.to_owned() })),
    }
}
