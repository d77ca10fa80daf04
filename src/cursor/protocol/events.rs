//! Live downstream messages: builders for the `AgentServerMessage` frames a run sends
//! (interaction updates), already framed as Connect envelopes.

use bytes::Bytes;
use prost::Message;

use crate::cursor::protocol::agent::{self, agent_server_message, interaction_update};
use crate::cursor::protocol::connect;

/// Wraps an interaction update in an `AgentServerMessage`.
pub fn update(message: interaction_update::Message) -> agent::AgentServerMessage {
    agent::AgentServerMessage {
        message: Some(agent_server_message::Message::InteractionUpdate(agent::InteractionUpdate {
            message: Some(message),
        })),
    }
}

pub fn text_delta(text: &str) -> agent::AgentServerMessage {
    update(interaction_update::Message::TextDelta(agent::TextDeltaUpdate {
        text: text.to_owned(),
        is_server_notice: false,
    }))
}

/// A notice for the user from Keyhaven (not model output): a text delta marked
/// `is_server_notice` (newer builds show it as a notice; older ones show the text inline, so it
/// is a quoted paragraph of its own).
pub fn notice(text: &str) -> agent::AgentServerMessage {
    update(interaction_update::Message::TextDelta(agent::TextDeltaUpdate {
        text: format!("> Keyhaven: {text}\n\n"),
        is_server_notice: true,
    }))
}

pub fn thinking_delta(text: &str) -> agent::AgentServerMessage {
    update(interaction_update::Message::ThinkingDelta(agent::ThinkingDeltaUpdate {
        text: text.to_owned(),
        thinking_style: None,
    }))
}

pub fn thinking_completed(duration_ms: i32) -> agent::AgentServerMessage {
    update(interaction_update::Message::ThinkingCompleted(agent::ThinkingCompletedUpdate {
        thinking_duration_ms: duration_ms,
    }))
}

pub fn token_delta(tokens: i32) -> agent::AgentServerMessage {
    update(interaction_update::Message::TokenDelta(agent::TokenDeltaUpdate { tokens }))
}

pub fn heartbeat() -> agent::AgentServerMessage {
    update(interaction_update::Message::Heartbeat(agent::HeartbeatUpdate {}))
}

/// Token counts for `turn_ended`; `None` leaves a field unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnUsage {
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cache_read_tokens: Option<i64>,
    pub cache_write_tokens: Option<i64>,
}

pub fn turn_ended(usage: TurnUsage) -> agent::AgentServerMessage {
    update(interaction_update::Message::TurnEnded(agent::TurnEndedUpdate {
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        cache_read_tokens: usage.cache_read_tokens,
        cache_write_tokens: usage.cache_write_tokens,
    }))
}

/// Frames a server message as one envelope.
pub fn frame(message: &agent::AgentServerMessage, compress: bool) -> Bytes {
    connect::encode_envelope(&message.encode_to_vec(), compress)
}

/// `tool_call_started`: the card with its arguments.
pub fn tool_call_started(call_id: &str, tool_call: agent::ToolCall, model_call_id: &str) -> agent::AgentServerMessage {
    update(interaction_update::Message::ToolCallStarted(agent::ToolCallStartedUpdate {
        call_id: call_id.to_owned(),
        tool_call: Some(tool_call),
        model_call_id: model_call_id.to_owned(),
    }))
}

/// `tool_call_completed`: the card with arguments and result.
pub fn tool_call_completed(
    call_id: &str,
    tool_call: agent::ToolCall,
    model_call_id: &str,
) -> agent::AgentServerMessage {
    update(interaction_update::Message::ToolCallCompleted(agent::ToolCallCompletedUpdate {
        call_id: call_id.to_owned(),
        tool_call: Some(tool_call),
        model_call_id: model_call_id.to_owned(),
    }))
}

/// `partial_tool_call`: the card appears (case set, arguments empty) or its argument text grows.
pub fn partial_tool_call(
    call_id: &str,
    tool_call: Option<agent::ToolCall>,
    args_text_delta: &str,
    model_call_id: &str,
) -> agent::AgentServerMessage {
    update(interaction_update::Message::PartialToolCall(agent::PartialToolCallUpdate {
        call_id: call_id.to_owned(),
        tool_call,
        args_text_delta: args_text_delta.to_owned(),
        model_call_id: model_call_id.to_owned(),
    }))
}

/// `tool_call_delta` with shell output, mirrored into the shell card while the command runs.
pub fn shell_delta(call_id: &str, stderr: bool, data: &str, model_call_id: &str) -> agent::AgentServerMessage {
    use agent::shell_tool_call_delta::Stream;
    let stream = if stderr {
        Stream::Stderr(agent::ShellStreamStderr { data: data.to_owned() })
    } else {
        Stream::Stdout(agent::ShellStreamStdout { data: data.to_owned() })
    };
    update(interaction_update::Message::ToolCallDelta(agent::ToolCallDeltaUpdate {
        call_id: call_id.to_owned(),
        tool_call_delta: Some(agent::ToolCallDelta {
            delta: Some(agent::tool_call_delta::Delta::ShellToolCallDelta(agent::ShellToolCallDelta {
                stream: Some(stream),
            })),
        }),
        model_call_id: model_call_id.to_owned(),
    }))
}

/// `tool_call_delta` with the next piece of a file's new text, streamed into the edit card while
/// the model writes it.
pub fn edit_delta(call_id: &str, text: &str, model_call_id: &str) -> agent::AgentServerMessage {
    update(interaction_update::Message::ToolCallDelta(agent::ToolCallDeltaUpdate {
        call_id: call_id.to_owned(),
        tool_call_delta: Some(agent::ToolCallDelta {
            delta: Some(agent::tool_call_delta::Delta::EditToolCallDelta(agent::EditToolCallDelta {
                stream_content_delta: text.to_owned(),
            })),
        }),
        model_call_id: model_call_id.to_owned(),
    }))
}

/// `step_started`: a model step (one model call and its tool round) begins.
pub fn step_started(step: u32) -> agent::AgentServerMessage {
    update(interaction_update::Message::StepStarted(agent::StepStartedUpdate { step_id: u64::from(step) }))
}

/// `step_completed`: the step's model call and tool round are done.
pub fn step_completed(step: u32, duration_ms: i64) -> agent::AgentServerMessage {
    update(interaction_update::Message::StepCompleted(agent::StepCompletedUpdate {
        step_id: u64::from(step),
        step_duration_ms: duration_ms,
    }))
}
