//! The Cursor agent backend (cursor-backend-design.md): what Keyhaven answers itself when the
//! intercepting proxy hands it decrypted Cursor traffic.
//!
//! - [`protocol`]: the generated `agent.v1` / `aiserver.v1` types and Connect framing (pure).
//! - [`transport`]: request id → transport handle; the seqno-ordered inbox for BidiAppends and
//!   the output hub that buffers, replays and closes a run's frames.
//! - [`services`]: non-agent-loop calls answered locally (the model catalog, server time,
//!   connectivity). Account calls are never answered here.
//! - [`turn`]: one streamed turn (`run_request` → provider → interaction updates → `turn_ended`).
//!
//! Invariant: `cursor` uses `model`, `provider`, `store` and the leaves; nothing below it
//! (`model`, `provider`, `store`, `run`) names `cursor`.

pub mod protocol;
pub mod services;
pub mod transport;
pub mod turn;
