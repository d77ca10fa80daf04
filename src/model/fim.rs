//! The canonical fill-in-the-middle (FIM) request: the text before and after the cursor, and how
//! much to generate. FIM answers are streamed as ordinary [`crate::model::StreamEvent`]s
//! (`TextDelta`, `Usage`, `Stop`, `Error`), so the accumulator and the call record work unchanged.

use serde::{Deserialize, Serialize};

/// One FIM request, whatever FIM dialect carries it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FimRequest {
    /// The model name as asked for (display name, alias or id).
    pub model: String,
    /// The text before the cursor.
    pub prompt: String,
    /// The text after the cursor.
    pub suffix: String,
    pub max_tokens: u32,
    /// Generation stops before any of these.
    pub stop: Vec<String>,
    pub temperature: Option<f64>,
}

impl FimRequest {
    /// The request's text length in bytes (for the engine's token estimate when no usage comes).
    pub fn text_len(&self) -> usize {
        self.prompt.len() + self.suffix.len()
    }
}
