//! Data-driven tests of the OpenAI Chat codec.
