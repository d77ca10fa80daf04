//! Behaviour tests of the engine: one test binary. Real HTTP servers on port 0, real SQLite files.

mod support;

mod bad_input;
mod budgets;
mod checkpoint_recovery;
mod clients;
mod codex;
mod compaction;
mod connect_wire;
mod control;
mod conversation_delivery;
mod count_tokens;
mod cursor_actions;
mod cursor_binding;
mod cursor_context;
mod cursor_guard;
mod cursor_sim;
mod doctor;
mod durability;
mod emulation;
mod error_lifecycle;
mod export;
mod faults;
#[cfg(unix)]
mod files;
mod interaction;
mod interrupt;
mod key_origins;
mod layering;
mod lingma;
mod local_endpoints;
mod metrics;
mod passthrough;
mod prefix_stability;
mod proxy;
mod reasoning_memory;
mod responses;
mod retry_classes;
mod routing;
mod setup;
mod supervisor;
mod tool_faults;
mod tool_round;
mod transcripts;
mod ui_e2e;
mod web_tools;
