//! Tool-call emulation for chat-only models (`tools = "emulated"`, or `"auto"` on a model without
//! `capabilities.tools`).
//!
//! It works on canonical types, so every inbound dialect gets it:
//! - **Request** ([`rewrite`]): the native `tools`/`tool_choice` fields are removed and the tools
//!   are described in the system prompt with a contract: a call is a fenced ```` ```json action ````
//!   block holding `{"tool": NAME, "parameters": {...}}`. Earlier tool calls are replayed as the
//!   action blocks the model wrote, and tool results as a user message
//!   `Tool result for NAME (call ID): ...` followed by [`CONTINUATION`], on every turn. When a
//!   client stops sending `tools` after the first turn, the names used in the history keep the
//!   contract alive.
//! - **Reply** ([`Emulator`]): the text goes through a streaming [`Scanner`] that holds back only
//!   what may become an action block; blocks are parsed ([`parse_block`], lenient about the
//!   variants models produce) into `ToolCallStart`/`ToolCallDelta`/`ToolCallEnd`, and the stop
//!   reason becomes `ToolUse`. Tool names are mapped onto the declared ones ([`ToolNames`]:
//!   exact, case-insensitive, then the synonym table in `aliases.txt`).
//! - **One corrective retry** for a malformed action block, a refusal to use tools, or no call
//!   when one was required; only while nothing of the reply reached the client: always for
//!   non-streaming clients (the reply is held until complete), and for streaming clients only
//!   when nothing but the message head was released yet (in practice: a malformed block at the
//!   start of the reply; a refusal in prose has already streamed and is left as it is).
//!
//! Call ids are `call_emu_<8 hex of SHA-256 of the request id>_<n>`: deterministic per call,
//! stable across the stream, distinct across turns.

mod parse;
mod prompt;
mod scan;
mod stream;

pub use parse::{Malformed, ParsedCall, ToolNames, is_refusal, parse_block};
pub use prompt::{
    CONTINUATION, CONTRACT_HEADER, action_block, contract, corrective, effective_tools, involves_tools, rewrite,
};
pub use scan::{Scanner, Segment};
pub use stream::{Emulator, Finish};

use sha2::{Digest, Sha256};

use crate::config::ToolsMode;
use crate::model::Request;
use crate::provider::ModelEntry;

/// Whether calls to `model` use emulated tools.
pub fn emulates(model: &ModelEntry) -> bool {
    match model.tools {
        ToolsMode::Native => false,
        ToolsMode::Emulated => true,
        ToolsMode::Auto => !model.capabilities.tools,
    }
}

/// Whether this request to `model` is emulated: the model emulates, and the request has tools
/// (declared or in its history). Plain chat goes through unchanged.
pub fn applies(model: &ModelEntry, req: &Request) -> bool {
    emulates(model) && involves_tools(req)
}

/// The prefix of the emulated call ids of one gateway call.
pub fn id_prefix(call_id: &str) -> String {
    let digest = Sha256::digest(call_id.as_bytes());
    format!("call_emu_{}", hex::encode(&digest[..4]))
}

/// The emulator for one call of `req` (already known to be emulated).
pub fn emulator_for(req: &Request, call_id: &str) -> Emulator {
    let names = effective_tools(req).into_iter().map(|t| t.name).collect();
    Emulator::new(ToolNames::new(names), id_prefix(call_id), !req.stream, req.tool_choice.as_ref(), true)
}

#[cfg(test)]
mod tests;
