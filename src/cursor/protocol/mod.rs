//! Cursor's wire: the protobuf types generated from `proto/` (committed under `gen/`, refreshed by
//! `cargo run -p protogen`), Connect framing ([`connect`]) and the live downstream messages
//! ([`events`]).
//!
//! Invariant: pure. No I/O, no clock, no async; every decoder returns a typed error on bad input
//! and never panics.

pub mod connect;
pub mod events;

/// `agent.v1`: the agent service's messages.
#[expect(clippy::large_enum_variant, reason = "prost output: oneofs hold their messages inline")]
#[path = "gen/agent_v1.rs"]
pub mod agent;

/// `aiserver.v1`: BidiSse, errors, the model list and the other unary calls Keyhaven answers.
#[path = "gen/aiserver_v1.rs"]
pub mod aiserver;
