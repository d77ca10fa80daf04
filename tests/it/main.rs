//! Behaviour tests of the engine: one test binary. Real HTTP servers on port 0, real SQLite files.

mod support;

mod bad_input;
mod codex;
mod control;
mod count_tokens;
mod cursor_sim;
mod durability;
mod emulation;
mod faults;
mod layering;
mod lingma;
mod proxy;
mod responses;
mod routing;
mod setup;
mod supervisor;
mod transcripts;
