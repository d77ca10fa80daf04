//! Normalised token usage and the one rule for mapping each dialect onto it.
//!
//! The fields are disjoint: `input_tokens` counts only input that was neither read from nor
//! written to a prompt cache. So the whole prompt is `input + cache_read + cache_write`.
//!
//! - Anthropic reports it this way already (`input_tokens` excludes `cache_read_input_tokens` and
//!   `cache_creation_input_tokens`).
//! - OpenAI Chat and Responses count cached tokens *inside* `prompt_tokens` / `input_tokens`
//!   (`cached_tokens` is a subset), and report no cache writes. Decoding subtracts, clamped at zero;
//!   encoding adds back. See [`Usage::from_openai`] and [`Usage::openai_prompt_tokens`].
//! - `reasoning_tokens` is a subset of `output_tokens` in every dialect (informational, never added
//!   to cost separately).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
}

impl Usage {
    /// From OpenAI's shape, where `prompt_tokens` includes `cached_tokens`.
    pub fn from_openai(prompt_tokens: u64, cached_tokens: u64, completion_tokens: u64, reasoning_tokens: u64) -> Usage {
        let cache_read = cached_tokens.min(prompt_tokens);
        Usage {
            input_tokens: prompt_tokens - cache_read,
            output_tokens: completion_tokens,
            cache_read_tokens: cache_read,
            cache_write_tokens: 0,
            reasoning_tokens,
        }
    }

    /// OpenAI's `prompt_tokens`: everything that went in, cached or not.
    pub fn openai_prompt_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.cache_read_tokens).saturating_add(self.cache_write_tokens)
    }

    pub fn total_tokens(&self) -> u64 {
        self.openai_prompt_tokens().saturating_add(self.output_tokens)
    }

    /// Merges a later report into this one, field by field keeping the larger value. Streams
    /// report totals in pieces (Anthropic: input at `message_start`, output at `message_delta`).
    pub fn merge_max(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.max(other.input_tokens);
        self.output_tokens = self.output_tokens.max(other.output_tokens);
        self.cache_read_tokens = self.cache_read_tokens.max(other.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.max(other.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.max(other.reasoning_tokens);
    }

    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }
}
