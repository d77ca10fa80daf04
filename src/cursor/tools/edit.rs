//! What an edit card shows: lines added and removed and a unified diff between the file before
//! and after (the before/after contents themselves travel in the card too, which is what makes
//! Cursor's Keep/Undo work).

use similar::{ChangeTag, TextDiff};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditSummary {
    pub lines_added: i32,
    pub lines_removed: i32,
    pub diff: String,
}

pub fn summarize(path: &str, before: &str, after: &str) -> EditSummary {
    let diff = TextDiff::from_lines(before, after);
    let (mut added, mut removed) = (0i32, 0i32);
    for change in diff.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => added = added.saturating_add(1),
            ChangeTag::Delete => removed = removed.saturating_add(1),
            ChangeTag::Equal => {}
        }
    }
    let text = diff.unified_diff().context_radius(3).header(&format!("a/{path}"), &format!("b/{path}")).to_string();
    EditSummary { lines_added: added, lines_removed: removed, diff: text }
}

/// Why a string replacement could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplaceError {
    #[error("old_string was not found in the file")]
    NotFound,
    #[error("old_string appears {0} times in the file; add context to make it unique or set replace_all")]
    Ambiguous(usize),
    #[error("old_string and new_string are the same")]
    NoChange,
}

/// Replaces `old` by `new` in `text`: exactly once unless `all`.
pub fn replace(text: &str, old: &str, new: &str, all: bool) -> Result<String, ReplaceError> {
    if old.is_empty() {
        return Err(ReplaceError::NotFound);
    }
    if old == new {
        return Err(ReplaceError::NoChange);
    }
    let count = text.matches(old).count();
    match count {
        0 => Err(ReplaceError::NotFound),
        1 => Ok(text.replacen(old, new, 1)),
        _ if all => Ok(text.replace(old, new)),
        n => Err(ReplaceError::Ambiguous(n)),
    }
}
