//! Data-driven tests of the OpenAI Responses codec.
