//! The system message of a Cursor conversation, written once on its first turn and kept verbatim
//! afterwards (it is the first transcript message, so the prompt prefix stays stable and provider
//! caches keep hitting; later changes to rules or the custom prompt are not picked up by an
//! existing conversation).

use crate::cursor::protocol::agent::{CursorRule, RequestContextEnv};

/// The system prompt from what the client reported on the conversation's first turn.
pub fn system(custom: Option<&str>, env: &RequestContextEnv, workspace: Option<&str>, rules: &[CursorRule]) -> String {
    let mut s = String::from(
        "You are a coding agent working in the user's editor. Use the tools to inspect and change the \
         user's workspace: read files before you edit them, keep changes focused, and run commands only when \
         they help. Answer in Markdown.\n",
    );
    match workspace {
        Some(w) => s.push_str(&format!("\nWorkspace root: {w} (relative paths resolve against it).\n")),
        None => s.push_str("\nThe workspace root is unknown; use absolute paths.\n"),
    }
    if !env.os_version.is_empty() {
        s.push_str(&format!("Operating system: {}\n", env.os_version));
    }
    if !env.shell.is_empty() {
        s.push_str(&format!("Shell: {}\n", env.shell));
    }
    for rule in rules.iter().filter(|r| !r.content.trim().is_empty()) {
        s.push_str(&format!("\nRule ({}):\n{}\n", rule.full_path, rule.content.trim()));
    }
    if let Some(custom) = custom.map(str::trim).filter(|c| !c.is_empty()) {
        s.push('\n');
        s.push_str(custom);
        s.push('\n');
    }
    s
}

/// The workspace root from the environment: the first workspace path (a `file://` URI or a
/// path), else the process working directory.
pub fn workspace_root(env: &RequestContextEnv) -> Option<String> {
    env.workspace_paths
        .iter()
        .chain(std::iter::once(&env.process_working_directory))
        .map(|p| p.strip_prefix("file://").unwrap_or(p).trim())
        .find(|p| !p.is_empty())
        .map(str::to_owned)
}
