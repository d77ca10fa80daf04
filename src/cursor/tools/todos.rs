//! Todos, kept server-side per conversation (docs/cursor-wire.md §5.3 "Todos"): the
//! `todo_write` tool replaces or merges the list, and its card is an `update_todos_tool_call`
//! (started and completed with the merged list). Nothing goes to the client but the card; the
//! checkpoint reads the list through [`TodoList::get`] (the conversation's accessor).

use std::sync::Mutex;

use serde::Deserialize;

use crate::cursor::protocol::agent::{self, TodoItem, TodoStatus, tool_call, update_todos_result};
use crate::cursor::tools::dispatch::{Call, CursorTools};
use crate::run::ToolOutput;

/// One conversation's todo list.
#[derive(Debug, Default)]
pub struct TodoList(Mutex<Vec<TodoItem>>);

impl From<Vec<TodoItem>> for TodoList {
    fn from(todos: Vec<TodoItem>) -> TodoList {
        TodoList(Mutex::new(todos))
    }
}

impl TodoList {
    pub fn get(&self) -> Vec<TodoItem> {
        self.0.lock().map(|t| t.clone()).unwrap_or_default()
    }

    pub fn set(&self, todos: Vec<TodoItem>) {
        if let Ok(mut t) = self.0.lock() {
            *t = todos;
        }
    }

    /// Applies an update at `now_ms`: with `merge`, items update by id (content and status;
    /// `created_at` is kept) and new ids are appended; without, the list is replaced. Returns
    /// the new list.
    pub fn update(&self, items: Vec<TodoItem>, merge: bool, now_ms: i64) -> Vec<TodoItem> {
        let Ok(mut list) = self.0.lock() else { return Vec::new() };
        if !merge {
            list.clear();
        }
        for mut item in items {
            match list.iter_mut().find(|t| t.id == item.id) {
                Some(t) => {
                    if !item.content.is_empty() {
                        t.content = item.content;
                    }
                    if item.status != TodoStatus::Unspecified as i32 {
                        t.status = item.status;
                    }
                    if !item.dependencies.is_empty() {
                        t.dependencies = item.dependencies;
                    }
                    t.updated_at = now_ms;
                }
                None => {
                    item.created_at = now_ms;
                    item.updated_at = now_ms;
                    list.push(item);
                }
            }
        }
        list.clone()
    }
}

#[derive(Deserialize)]
pub(crate) struct TodoIn {
    id: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    dependencies: Vec<String>,
}

#[derive(Deserialize)]
pub(crate) struct TodosIn {
    todos: Vec<TodoIn>,
    #[serde(default)]
    merge: bool,
}

fn status(s: Option<&str>) -> Result<TodoStatus, String> {
    Ok(match s {
        None => TodoStatus::Unspecified,
        Some("pending") => TodoStatus::Pending,
        Some("in_progress") => TodoStatus::InProgress,
        Some("completed") => TodoStatus::Completed,
        Some("cancelled") => TodoStatus::Cancelled,
        Some(other) => return Err(format!("unknown status `{other}`")),
    })
}

fn status_name(s: i32) -> &'static str {
    match TodoStatus::try_from(s).unwrap_or(TodoStatus::Unspecified) {
        TodoStatus::Pending | TodoStatus::Unspecified => "pending",
        TodoStatus::InProgress => "in_progress",
        TodoStatus::Completed => "completed",
        TodoStatus::Cancelled => "cancelled",
    }
}

/// The list as the model sees it.
pub fn render(todos: &[TodoItem]) -> String {
    if todos.is_empty() {
        return "The todo list is empty.".to_owned();
    }
    let mut s = String::from("Todo list:\n");
    for t in todos {
        s.push_str(&format!("- [{}] {}: {}\n", status_name(t.status), t.id, t.content));
    }
    s
}

impl CursorTools {
    pub(crate) fn todos_tool(&self, c: Call<'_>, a: TodosIn) -> ToolOutput {
        let mut items = Vec::new();
        for t in a.todos {
            match status(t.status.as_deref()) {
                Ok(st) => items.push(TodoItem {
                    id: t.id,
                    content: t.content,
                    status: st as i32,
                    dependencies: t.dependencies,
                    ..TodoItem::default()
                }),
                Err(e) => return ToolOutput::error(format!("Invalid arguments for todo_write: {e}")),
            }
        }
        let args = agent::UpdateTodosArgs { todos: items.clone(), merge: a.merge };
        let card = |result| {
            tool_call::Tool::UpdateTodosToolCall(agent::UpdateTodosToolCall { args: Some(args.clone()), result })
        };
        self.started(c, card(None));
        let list = self.todos.update(items, a.merge, crate::clock::now_ms());
        let result = agent::UpdateTodosResult {
            result: Some(update_todos_result::Result::Success(agent::UpdateTodosSuccess {
                total_count: i32::try_from(list.len()).unwrap_or(i32::MAX),
                todos: list.clone(),
                was_merge: a.merge,
            })),
        };
        self.completed(c, card(Some(result)));
        ToolOutput::text(render(&list))
    }
}
