//! The Cursor agent backend (docs/cursor-backend.md): what Keyhaven answers itself when the
//! intercepting proxy hands it decrypted Cursor traffic.
//!
//! - [`protocol`]: the generated `agent.v1` / `aiserver.v1` types and Connect framing (pure).
//! - [`transport`]: request id → transport handle; the seqno-ordered inbox for BidiAppends and
//!   the output hub that buffers, replays and closes a run's frames.
//! - [`services`]: non-agent-loop calls answered locally (the model catalog, server time,
//!   connectivity). Account calls are never answered here.
//! - [`turn`]: the backend and its run driver (`run_request` → agent turn → exactly one terminal).
//! - [`agent`]: one agent turn on the generic run engine (`crate::run`): run request compilation,
//!   the system prompt, run events → interaction updates, client messages → the run.
//! - [`conversation`]: conversation id → transcript and current run (loaded from the store).
//! - [`tools`]: the tool catalog, the exec channel and the per-tool dispatch with its cards.
//! - [`blobs`]: the KV channel (SHA-256 addressed blobs on the client, `set_blob_args` /
//!   `get_blob_args`).
//! - [`checkpoint`]: `ConversationStateStructure` from the transcript (blobs, trimming), its
//!   publication during a run, and restoring a transcript from an incoming state.
//! - [`guard`]: the update guard (Cursor versions seen, their self-test, pass-through of a
//!   version that failed it until the user retries).
//!
//! Invariant: `cursor` uses `model`, `provider`, `store`, `run` and the leaves; nothing below it
//! (`model`, `provider`, `store`, `run`) names `cursor`.

pub mod agent;
pub mod blobs;
pub mod checkpoint;
pub mod conversation;
pub mod guard;
pub mod protocol;
pub mod services;
pub mod tab;
pub mod tools;
pub mod transport;
pub mod turn;
