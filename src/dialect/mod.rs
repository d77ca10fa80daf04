//! Pure wire codecs, one module per dialect. Each codec serves both sides: `api` decodes requests
//! and encodes responses with it (inbound), `provider` encodes requests and decodes responses with
//! it (outbound). Dialects convert only to and from [`crate::model`], never into each other.
//!
//! Invariants: no I/O, no clock, no randomness; decoding never panics. Unknown fields and unknown
//! stream events are skipped (with a `tracing::warn!` for events), so new provider features do not
//! break old builds.

pub mod anthropic;
pub mod error;
pub mod fim;
pub mod fuzz;
pub mod openai_chat;
pub mod openai_responses;
pub mod sse;

#[cfg(test)]
pub(crate) mod mutate;

use std::fmt;
use std::marker::PhantomData;

use serde::Deserializer;
use serde::de::{self, DeserializeOwned, SeqAccess, Visitor};

/// A request or response body that does not fit the dialect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON at all, or truncated.
    #[error("malformed JSON at line {line} column {column}: {message}")]
    Syntax { line: usize, column: usize, message: String },
    /// JSON, but a field has the wrong type or a required field is missing.
    #[error("invalid field `{path}`: {message}")]
    Field { path: String, message: String },
    /// Well-formed, but the content makes no sense (e.g. a tool result without an id).
    #[error("{0}")]
    Invalid(String),
}

impl DecodeError {
    pub fn kind(&self) -> &'static str {
        match self {
            DecodeError::Syntax { .. } => "malformed_json",
            DecodeError::Field { .. } => "invalid_field",
            DecodeError::Invalid(_) => "invalid_request",
        }
    }
}

/// Deserialises `body` into `T`, reporting the JSON path of a bad field.
pub fn from_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() || path == "." {
            if inner.is_data() {
                return DecodeError::Field { path: "$".into(), message: inner.to_string() };
            }
            DecodeError::Syntax { line: inner.line(), column: inner.column(), message: inner.to_string() }
        } else {
            DecodeError::Field { path, message: strip_position(&inner.to_string()) }
        }
    })?;
    // Trailing bytes after the value make the body malformed.
    de.end().map_err(|e| DecodeError::Syntax { line: e.line(), column: e.column(), message: e.to_string() })?;
    Ok(value)
}

/// A JSON field that is either a string or an array of `T` (message content, `input`, `stop`).
#[derive(Debug)]
pub(crate) enum TextOrList<T> {
    Text(String),
    List(Vec<T>),
}

/// Deserialises a [`TextOrList`]; `expecting` completes serde's "invalid type …, expected …".
pub(crate) fn text_or_list<'de, D, T>(deserializer: D, expecting: &'static str) -> Result<TextOrList<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    struct V<T>(&'static str, PhantomData<T>);

    impl<'de, T: serde::Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = TextOrList<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<TextOrList<T>, E> {
            Ok(TextOrList::Text(v.to_owned()))
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<TextOrList<T>, E> {
            Ok(TextOrList::Text(v))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TextOrList<T>, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element::<T>()? {
                items.push(item);
            }
            Ok(TextOrList::List(items))
        }
    }

    deserializer.deserialize_any(V(expecting, PhantomData))
}

/// serde_json appends " at line L column C" to data errors; the path says more.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(pos) => message[..pos].to_owned(),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests;
