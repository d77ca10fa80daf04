//! Behaviour tests of the engine: one test binary. Real HTTP servers on port 0, real SQLite files.

mod support;

mod bad_input;
mod durability;
mod faults;
mod layering;
mod responses;
mod transcripts;
