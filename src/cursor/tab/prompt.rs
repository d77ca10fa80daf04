//! From a `StreamCppRequest` to a FIM prompt, and from the FIM completion to the line-range
//! replacement Cursor applies (docs/cursor-tab.md). Pure: no I/O, no clock.
//!
//! - The file: `contents` split on `\n` (`\r` dropped); a non-zero `contents_start_at_line` is the
//!   file line of `contents`' first line. The cursor is 0-based, its column in UTF-16 units.
//! - Prefix: the cursor line up to the cursor, then whole lines above it while the prefix budget
//!   lasts. Suffix: the rest of the cursor line, then whole lines below while the suffix budget
//!   lasts. Budgets are in tokens, estimated as [`BYTES_PER_TOKEN`] bytes each.
//! - A first line naming the file in the language's comment syntax (language from the extension),
//!   then the user's most recent edits to this file (`file_diff_histories`: at most
//!   [`MAX_EDITS`] entries, [`MAX_EDIT_LINES`] lines, each line cut at [`MAX_EDIT_LINE`] bytes), as
//!   comment lines `<line><+|->|<text>`, oldest first: what the user was just doing is the best
//!   hint of what comes next, and a FIM model sees nothing but the prompt and the suffix. They
//!   count against the prefix budget and take at most a quarter of it.
//! - Single-line mode (the `typing` trigger with text before the cursor): stop at `\n`, the
//!   line budget. Otherwise multi-line: stop at a blank line, the block budget.
//! - The answer replaces the whole cursor line (`range_to_replace` = that line, 1-based,
//!   inclusive) with `line_prefix + completion + line_suffix`; a multi-line completion simply has
//!   more lines than the range. A completion that repeats the start of the line suffix, or the
//!   lines that follow, has that repetition removed (the client drops suggestions that duplicate
//!   the following text).

use crate::config::CursorTabConfig;
use crate::cursor::protocol::aiserver;
use crate::model::FimRequest;

/// The token estimate: bytes per token (typical for code with BPE tokenizers).
pub const BYTES_PER_TOKEN: usize = 4;

/// The most recent edits of the current file put into the prompt.
pub const MAX_EDITS: usize = 3;
/// The most diff lines put into the prompt.
pub const MAX_EDIT_LINES: usize = 12;
/// The longest diff line (bytes, cut at a character boundary).
pub const MAX_EDIT_LINE: usize = 160;

/// Why a request cannot be prompted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    /// `rely_on_filesync`: the client expects the server to hold the file; it re-sends the full
    /// buffer after a FILE_NOT_FOUND error.
    #[error("the request relies on file sync")]
    FileSync,
    #[error("the request has no current file")]
    NoFile,
    #[error("the cursor is outside the file")]
    CursorOutside,
}

/// A prompt and what mapping its completion back needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub request: FimRequest,
    /// The cursor's 0-based line in the file.
    pub line: u32,
    /// The cursor line before and after the cursor.
    pub line_prefix: String,
    pub line_suffix: String,
    pub multi_line: bool,
    /// The non-empty lines after the cursor line, trimmed (at most three), for removing a
    /// completion's repetition of them.
    next_lines: Vec<String>,
}

/// The suggestion: replace file line `line` (1-based) with `text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suggestion {
    pub line: u32,
    pub text: String,
}

/// A language's name and line-comment marker, from the file extension.
pub fn language(path: &str) -> Option<(&'static str, &'static str)> {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase())?;
    Some(match ext.as_str() {
        "rs" => ("Rust", "//"),
        "ts" | "mts" | "cts" => ("TypeScript", "//"),
        "tsx" => ("TypeScript React", "//"),
        "js" | "mjs" | "cjs" => ("JavaScript", "//"),
        "jsx" => ("JavaScript React", "//"),
        "go" => ("Go", "//"),
        "java" => ("Java", "//"),
        "kt" | "kts" => ("Kotlin", "//"),
        "swift" => ("Swift", "//"),
        "c" | "h" => ("C", "//"),
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => ("C++", "//"),
        "cs" => ("C#", "//"),
        "scala" => ("Scala", "//"),
        "dart" => ("Dart", "//"),
        "php" => ("PHP", "//"),
        "zig" => ("Zig", "//"),
        "py" | "pyi" => ("Python", "#"),
        "rb" => ("Ruby", "#"),
        "sh" | "bash" | "zsh" => ("Shell", "#"),
        "pl" => ("Perl", "#"),
        "r" => ("R", "#"),
        "ex" | "exs" => ("Elixir", "#"),
        "yaml" | "yml" => ("YAML", "#"),
        "toml" => ("TOML", "#"),
        "lua" => ("Lua", "--"),
        "sql" => ("SQL", "--"),
        "hs" => ("Haskell", "--"),
        _ => return None,
    })
}

/// The byte offset in `line` of a UTF-16 column (clamped to the line's end).
fn byte_at_utf16(line: &str, column: usize) -> usize {
    let mut units = 0;
    for (i, c) in line.char_indices() {
        if units >= column {
            return i;
        }
        units += c.len_utf16();
    }
    line.len()
}

/// Builds the FIM prompt for `req` with the model `model` and the budgets of `settings`.
pub fn build(req: &aiserver::StreamCppRequest, settings: &CursorTabConfig, model: &str) -> Result<Prompt, PromptError> {
    let file = req.current_file.as_ref().ok_or(PromptError::NoFile)?;
    if file.rely_on_filesync {
        return Err(PromptError::FileSync);
    }
    let cursor = file.cursor_position.unwrap_or_default();
    let line_no = u32::try_from(cursor.line).map_err(|_| PromptError::CursorOutside)?;
    let start = u32::try_from(file.contents_start_at_line.max(0)).unwrap_or(0);
    let lines: Vec<&str> = file.contents.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let idx = line_no.checked_sub(start).map(|i| i as usize).filter(|i| *i < lines.len());
    let idx = idx.ok_or(PromptError::CursorOutside)?;
    let current = lines[idx];
    let at = byte_at_utf16(current, usize::try_from(cursor.column.max(0)).unwrap_or(0));
    let (line_prefix, line_suffix) = current.split_at(at);

    let path = &file.relative_workspace_path;
    let mut header = String::new();
    let mut budget = settings.prefix_tokens as usize * BYTES_PER_TOKEN;
    if let Some((_, comment)) = language(path) {
        header.push_str(&format!("{comment} Path: {path}\n"));
        header.push_str(&recent_edits(req, path, comment, budget / 4));
    }
    budget = budget.saturating_sub(line_prefix.len() + header.len());
    let mut first = idx;
    while first > 0 && lines[first - 1].len() < budget {
        budget -= lines[first - 1].len() + 1;
        first -= 1;
    }
    let mut budget = (settings.suffix_tokens as usize * BYTES_PER_TOKEN).saturating_sub(line_suffix.len());
    let mut last = idx;
    while last + 1 < lines.len() && lines[last + 1].len() < budget {
        budget -= lines[last + 1].len() + 1;
        last += 1;
    }
    let mut prompt = header;
    for l in &lines[first..idx] {
        prompt.push_str(l);
        prompt.push('\n');
    }
    prompt.push_str(line_prefix);
    let mut suffix = line_suffix.to_owned();
    for l in &lines[idx + 1..=last] {
        suffix.push('\n');
        suffix.push_str(l);
    }
    if last + 1 < lines.len() {
        // The window ends at a whole line.
        suffix.push('\n');
    }

    let typing = req.cpp_intent_info.as_ref().is_some_and(|i| i.source == "typing");
    let multi_line = !typing || line_prefix.trim().is_empty();
    let (max_tokens, stop) = if multi_line {
        (settings.block_tokens, vec!["\n\n".to_owned()])
    } else {
        (settings.line_tokens, vec!["\n".to_owned()])
    };
    let next_lines =
        lines[idx + 1..].iter().map(|l| l.trim()).filter(|l| !l.is_empty()).take(3).map(str::to_owned).collect();
    Ok(Prompt {
        request: FimRequest { model: model.to_owned(), prompt, suffix, max_tokens, stop, temperature: Some(0.0) },
        line: line_no,
        line_prefix: line_prefix.to_owned(),
        line_suffix: line_suffix.to_owned(),
        multi_line,
        next_lines,
    })
}

/// The comment block of the user's latest edits to `path` (empty when there are none or they do
/// not fit in `max_bytes`).
fn recent_edits(req: &aiserver::StreamCppRequest, path: &str, comment: &str, max_bytes: usize) -> String {
    let Some(history) = req.file_diff_histories.iter().rev().find(|h| h.file_name == path) else {
        return String::new();
    };
    let entries = &history.diff_history[history.diff_history.len().saturating_sub(MAX_EDITS)..];
    let mut lines: Vec<String> = entries
        .iter()
        .flat_map(|e| e.lines())
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("{comment} {}\n", cut(l.trim_end(), MAX_EDIT_LINE)))
        .collect();
    // The newest lines are kept when there are too many.
    lines.drain(..lines.len().saturating_sub(MAX_EDIT_LINES));
    let title = format!("{comment} Recent edits (oldest first):\n");
    while !lines.is_empty() && title.len() + lines.iter().map(String::len).sum::<usize>() > max_bytes {
        lines.remove(0);
    }
    if lines.is_empty() {
        return String::new();
    }
    title + &lines.concat()
}

/// `s` cut to at most `max` bytes at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Maps a completion onto the cursor line; `None` when there is nothing to show.
pub fn suggestion(prompt: &Prompt, completion: &str) -> Option<Suggestion> {
    let mut text = completion.replace('\r', "");
    if !prompt.multi_line
        && let Some(nl) = text.find('\n')
    {
        text.truncate(nl);
    }
    // Trailing blank lines add nothing (trailing spaces of a last line that is not blank stay).
    while let Some(n) = text.trim_end_matches([' ', '\t']).strip_suffix('\n').map(str::len) {
        text.truncate(n);
    }
    // The completion re-emits the lines that follow the cursor line.
    if prompt.multi_line && text.contains('\n') {
        let mut lines: Vec<&str> = text.split('\n').collect();
        for n in (1..=prompt.next_lines.len().min(lines.len() - 1)).rev() {
            let tail = &lines[lines.len() - n..];
            if tail.iter().map(|l| l.trim()).eq(prompt.next_lines[..n].iter().map(String::as_str)) {
                lines.truncate(lines.len() - n);
                break;
            }
        }
        text = lines.join("\n");
    }
    // The completion's end repeats the start of the rest of the line (closing brackets, quotes).
    let rest = prompt.line_suffix.as_str();
    if !rest.is_empty() {
        let max = rest.len().min(text.len());
        if let Some(k) = (1..=max).rev().find(|&k| rest.is_char_boundary(k) && text.ends_with(&rest[..k])) {
            text.truncate(text.len() - k);
        }
    }
    if text.trim().is_empty() {
        return None;
    }
    Some(Suggestion { line: prompt.line + 1, text: format!("{}{text}{}", prompt.line_prefix, prompt.line_suffix) })
}
