//! The reasoning envelope: one opaque, versioned string that carries what Keyhaven needs to give
//! a provider back its own reasoning, whatever dialect the client speaks.
//!
//! Form: [`PREFIX`] + base64url (no padding) of a small JSON object `{"f": family, "id": ..,
//! "d": ..}`. Clients get it where their dialect has an opaque reasoning field (Anthropic's
//! thinking `signature`, Responses' `encrypted_content`) and send it back unchanged.
//!
//! Canonical rule ([`crate::model::Part::Thinking`]'s `signature`): either an envelope, or a raw
//! string, which is Anthropic's own signature (Anthropic clients and upstreams keep theirs
//! verbatim, so an Anthropic-to-Anthropic route is byte-identical). Each outbound encoder sends
//! only its own family's reasoning and drops the others ("a foreign envelope never reaches a
//! vendor"):
//! - Anthropic: raw signatures and `anthropic` envelopes (unwrapped) as signed thinking;
//! - OpenAI Responses: `openai_responses` envelopes as reasoning items with their own `id` and
//!   `encrypted_content`;
//! - OpenAI Chat: the thinking text as `reasoning_content` (what DeepSeek-style vendors need).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

/// Marks an envelope; the digit is the format version.
pub const PREFIX: &str = "khr1.";

/// Whose reasoning an envelope holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Anthropic thinking; `data` is its signature.
    Anthropic,
    /// An OpenAI-compatible Chat vendor's `reasoning_content`; the text is the thinking text.
    OpenaiChat,
    /// An OpenAI Responses reasoning item; `id` and `data` (its `encrypted_content`).
    OpenaiResponses,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    #[serde(rename = "f")]
    pub family: Family,
    #[serde(rename = "id", default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

impl Envelope {
    pub fn anthropic(signature: &str) -> Envelope {
        Envelope { family: Family::Anthropic, id: None, data: Some(signature.to_owned()) }
    }

    pub fn openai_chat() -> Envelope {
        Envelope { family: Family::OpenaiChat, id: None, data: None }
    }

    pub fn openai_responses(id: Option<&str>, encrypted: Option<&str>) -> Envelope {
        Envelope {
            family: Family::OpenaiResponses,
            id: id.filter(|s| !s.is_empty()).map(str::to_owned),
            data: encrypted.filter(|s| !s.is_empty()).map(str::to_owned),
        }
    }

    /// The envelope string.
    pub fn encode(&self) -> String {
        // Serialising a struct of strings cannot fail.
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json))
    }

    /// Reads an envelope string; `None` for anything else (no prefix, bad base64 or JSON, a
    /// family this build does not know).
    pub fn decode(s: &str) -> Option<Envelope> {
        let rest = s.strip_prefix(PREFIX)?;
        let json = URL_SAFE_NO_PAD.decode(rest.trim_end_matches('=')).ok()?;
        serde_json::from_slice(&json).ok()
    }

    /// What a canonical signature stands for: an envelope, or a raw Anthropic signature. An
    /// envelope-prefixed string that does not decode is `None` (it goes nowhere).
    pub fn of_signature(signature: &str) -> Option<Envelope> {
        if is_envelope(signature) { Envelope::decode(signature) } else { Some(Envelope::anthropic(signature)) }
    }
}

/// True when `s` has the envelope prefix.
pub fn is_envelope(s: &str) -> bool {
    s.starts_with(PREFIX)
}

#[cfg(test)]
mod tests;
