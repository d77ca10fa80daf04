//! Tests of the Anthropic codec.
