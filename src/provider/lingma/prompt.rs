//! The request side, pure: a canonical request becomes what one `session/prompt` carries — the
//! text (the latest user message for a reused session, a transcript for a fresh one), the images
//! of the latest user message, the Lingma model id, and which session mode applies.
//!
//! Lingma takes one prompt text per turn, so a fresh session gets the system prompt and the
//! history as a labelled transcript (the wording is ours). Tool calls reach here already
//! rewritten by [`crate::provider::emulation`] (lingma models always emulate tools), so every
//! message is text; anything else is rendered defensively.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use crate::config::{LingmaOptions, SessionMode};
use crate::model::{ImageSource, Part, Request, Role};

/// The shipped model-id table (`upstream` name → Lingma's id).
const MODEL_TABLE: &str = include_str!("models.txt");

static MODELS: LazyLock<BTreeMap<String, String>> = LazyLock::new(|| parse_model_table(MODEL_TABLE));

/// Parses `name = id` lines; `#` starts a comment; names are matched case-insensitively.
pub fn parse_model_table(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .collect()
}

/// Lingma's id for a model: the provider's `model_map` first (exact name), then the shipped
/// table (any case), else the name unchanged.
pub fn model_id(upstream: &str, extra: &BTreeMap<String, String>) -> String {
    extra
        .get(upstream)
        .or_else(|| MODELS.get(&upstream.to_ascii_lowercase()))
        .cloned()
        .unwrap_or_else(|| upstream.to_owned())
}

/// What one call sends to Lingma.
#[derive(Debug, Clone)]
pub struct Prompt {
    /// The provider, for the connection registry.
    pub provider: String,
    pub opts: Arc<LingmaOptions>,
    /// Lingma's model id (after mapping).
    pub model: String,
    /// The model name the answer reports.
    pub upstream: String,
    /// `Reuse` or `Fresh` (`Auto` already resolved).
    pub mode: SessionMode,
    /// The system prompt, when there is one.
    pub system: Option<String>,
    /// The latest user message's text (what a reused session is sent).
    pub latest: String,
    /// The whole conversation as one text (what a fresh session is sent).
    pub transcript: String,
    /// The latest user message's images.
    pub images: Vec<ImageSource>,
}

impl Prompt {
    /// The text for this turn: a fresh session gets the transcript; a reused one the latest
    /// message (with the system prompt when the session is new).
    pub fn text(&self, new_session: bool) -> String {
        match (self.mode, &self.system) {
            (SessionMode::Fresh, _) => self.transcript.clone(),
            (_, Some(system)) if new_session => format!("System instructions:\n{system}\n\n{}", self.latest),
            _ => self.latest.clone(),
        }
    }
}

/// Which mode a request runs in: `auto` reuses the sticky session for a single-turn request
/// (one user message, no system prompt) and opens a fresh one otherwise.
pub fn resolve_mode(configured: SessionMode, req: &Request) -> SessionMode {
    match configured {
        SessionMode::Auto => {
            let single = req.messages.len() == 1 && req.messages.iter().all(|m| m.role == Role::User);
            if single { SessionMode::Reuse } else { SessionMode::Fresh }
        }
        m => m,
    }
}

/// Builds the prompt of `req` for `model` (already mapped) of `provider`.
pub fn build(provider: &str, opts: &Arc<LingmaOptions>, upstream: &str, req: &Request) -> Result<Prompt, String> {
    let system: Vec<String> =
        req.messages.iter().filter(|m| m.role == Role::System).map(|m| render(&m.content)).collect();
    let system = Some(system.join("\n\n")).filter(|s| !s.trim().is_empty());
    let turns: Vec<(Role, String)> = req
        .messages
        .iter()
        .filter(|m| m.role != Role::System)
        .map(|m| (m.role, render(&m.content)))
        .filter(|(_, t)| !t.trim().is_empty())
        .collect();
    let last_user = req.messages.iter().rposition(|m| m.role == Role::User);
    let Some(last_user) = last_user else {
        return Err("the request has no user message".into());
    };
    let latest_msg = &req.messages[last_user];
    let latest = render(&latest_msg.content);
    let images: Vec<ImageSource> = latest_msg
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Image { source, .. } => Some(source.clone()),
            _ => None,
        })
        .collect();
    if latest.trim().is_empty() && images.is_empty() {
        return Err("the latest user message is empty".into());
    }
    let transcript = if system.is_none() && turns.len() <= 1 {
        latest.clone()
    } else {
        let mut parts = Vec::new();
        if let Some(s) = &system {
            parts.push(format!("System instructions:\n{s}"));
        }
        parts.push("Conversation transcript:".to_owned());
        for (role, text) in &turns {
            let who = match role {
                Role::Assistant => "Assistant",
                Role::Tool => "Tool",
                Role::User | Role::System => "User",
            };
            parts.push(format!("{who}: {text}"));
        }
        parts.push(
            "Reply as the assistant to the latest user message only, following the system instructions and the transcript."
                .to_owned(),
        );
        parts.join("\n\n")
    };
    Ok(Prompt {
        provider: provider.to_owned(),
        opts: opts.clone(),
        model: model_id(upstream, &opts.model_map),
        upstream: upstream.to_owned(),
        mode: resolve_mode(opts.session_mode, req),
        system,
        latest,
        transcript,
        images,
    })
}

/// A message's content as text.
fn render(parts: &[Part]) -> String {
    let mut out: Vec<String> = Vec::new();
    for p in parts {
        match p {
            Part::Text { text, .. } => out.push(text.clone()),
            Part::Image { .. } => {}
            Part::Thinking { .. } | Part::RedactedThinking { .. } => {}
            Part::ToolUse { name, input, .. } => out.push(format!("[tool call {name}: {input}]")),
            Part::ToolResult { content, .. } => out.push(format!("[tool result: {}]", render(content))),
        }
    }
    out.join("\n")
}
