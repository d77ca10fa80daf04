//! The emulated reply turned back into canonical events: text passes through the block
//! [`Scanner`], action blocks become `ToolCallStart`/`ToolCallDelta`/`ToolCallEnd`, and the stop
//! reason becomes `ToolUse` when a call was made. Decides when one corrective retry is due.

use crate::model::{StopReason, StreamEvent, ToolChoice, Usage};
use crate::provider::emulation::parse::{ToolNames, is_refusal, parse_block};
use crate::provider::emulation::scan::{Scanner, Segment};

/// How a reply ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// Everything was emitted.
    Done,
    /// The reply broke the contract and nothing of it reached the client: ask again once, with
    /// `reason` in the corrective instruction and `reply` as the model's previous turn.
    Retry { reason: String, reply: String },
}

/// Turns one emulated call's upstream events into the client's canonical events.
#[derive(Debug)]
pub struct Emulator {
    names: ToolNames,
    id_prefix: String,
    /// Non-streaming clients: keep every event until the reply is complete (so a retry can
    /// replace it). Streaming clients: release at once.
    hold_all: bool,
    must_call: bool,
    scanner: Scanner,
    next_index: u32,
    held: Vec<StreamEvent>,
    released_content: bool,
    sent_start: bool,
    stop: Option<(StopReason, Option<String>)>,
    reply_text: String,
    /// Set once a retry is certain; the rest of the reply is dropped.
    retrying: Option<String>,
    retry_available: bool,
    prior_usage: Usage,
    attempt_usage: Usage,
}

fn add_usage(a: &Usage, b: &Usage) -> Usage {
    Usage {
        input_tokens: a.input_tokens.saturating_add(b.input_tokens),
        output_tokens: a.output_tokens.saturating_add(b.output_tokens),
        cache_read_tokens: a.cache_read_tokens.saturating_add(b.cache_read_tokens),
        cache_write_tokens: a.cache_write_tokens.saturating_add(b.cache_write_tokens),
        reasoning_tokens: a.reasoning_tokens.saturating_add(b.reasoning_tokens),
    }
}

fn is_content(ev: &StreamEvent) -> bool {
    !matches!(ev, StreamEvent::MessageStart { .. } | StreamEvent::Usage { .. } | StreamEvent::Stop { .. })
}

impl Emulator {
    /// `id_prefix` makes tool-call ids unique per call (`{id_prefix}_{n}`); `retry` allows the one
    /// corrective retry.
    pub fn new(
        names: ToolNames,
        id_prefix: String,
        hold_all: bool,
        choice: Option<&ToolChoice>,
        retry: bool,
    ) -> Emulator {
        Emulator {
            names,
            id_prefix,
            hold_all,
            must_call: matches!(choice, Some(ToolChoice::Required | ToolChoice::Tool { .. })),
            scanner: Scanner::new(),
            next_index: 0,
            held: Vec::new(),
            released_content: false,
            sent_start: false,
            stop: None,
            reply_text: String::new(),
            retrying: None,
            retry_available: retry,
            prior_usage: Usage::default(),
            attempt_usage: Usage::default(),
        }
    }

    /// True once something the client can see (beyond the message start) left the emulator.
    pub fn released(&self) -> bool {
        self.released_content
    }

    fn can_retry(&self) -> bool {
        self.retry_available && (self.hold_all || !self.released_content)
    }

    fn emit(&mut self, ev: StreamEvent, out: &mut Vec<StreamEvent>) {
        if self.retrying.is_some() && !matches!(ev, StreamEvent::Usage { .. }) {
            return;
        }
        if self.hold_all {
            self.held.push(ev);
        } else {
            if is_content(&ev) {
                self.released_content = true;
            }
            out.push(ev);
        }
    }

    pub fn push(&mut self, ev: StreamEvent, out: &mut Vec<StreamEvent>) {
        match ev {
            StreamEvent::MessageStart { .. } => {
                if !self.sent_start {
                    self.sent_start = true;
                    // The head is not content: it never blocks a retry.
                    if self.hold_all { self.held.push(ev) } else { out.push(ev) }
                }
            }
            StreamEvent::TextDelta { text } => {
                self.reply_text.push_str(&text);
                let mut segs = Vec::new();
                self.scanner.push(&text, &mut segs);
                self.segments(segs, out);
            }
            StreamEvent::Stop { reason, stop_sequence } => self.stop = Some((reason, stop_sequence)),
            StreamEvent::Usage { usage } => {
                self.attempt_usage.merge_max(&usage);
                let total = add_usage(&self.prior_usage, &self.attempt_usage);
                self.emit(StreamEvent::Usage { usage: total }, out);
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                // A native call despite the prompt: pass it on, numbered after ours.
                let index = self.next_index + index;
                self.emit(StreamEvent::ToolCallStart { index, id, name }, out);
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                let index = self.next_index + index;
                self.emit(StreamEvent::ToolCallDelta { index, arguments }, out);
            }
            StreamEvent::ToolCallEnd { index } => {
                let index = self.next_index + index;
                self.emit(StreamEvent::ToolCallEnd { index }, out);
            }
            StreamEvent::Error { .. } => {
                self.abort(out);
                self.retrying = None;
                self.emit(ev, out);
                self.flush_held(out);
            }
            other => self.emit(other, out),
        }
    }

    fn segments(&mut self, segs: Vec<Segment>, out: &mut Vec<StreamEvent>) {
        for seg in segs {
            match seg {
                Segment::Text(text) => {
                    if self.next_index > 0 && text.trim().is_empty() {
                        continue;
                    }
                    self.emit(StreamEvent::TextDelta { text }, out);
                }
                Segment::Block { raw, body, tagged, closed } => match parse_block(&body, tagged, &self.names) {
                    Ok(Some(calls)) => {
                        for call in calls {
                            let index = self.next_index;
                            self.next_index += 1;
                            let id = format!("{}_{index}", self.id_prefix);
                            let arguments = serde_json::to_string(&call.arguments).unwrap_or_else(|_| "{}".into());
                            self.emit(StreamEvent::ToolCallStart { index, id, name: call.name }, out);
                            self.emit(StreamEvent::ToolCallDelta { index, arguments }, out);
                            self.emit(StreamEvent::ToolCallEnd { index }, out);
                        }
                    }
                    Ok(None) => self.emit(StreamEvent::TextDelta { text: raw }, out),
                    Err(m) => {
                        let what = if closed { m.0 } else { format!("{} (the block was not closed)", m.0) };
                        tracing::info!(reason = %what, "emulated tool call: malformed action block");
                        if self.can_retry() && self.retrying.is_none() {
                            self.retrying = Some(format!("your action block could not be read: {what}"));
                        } else {
                            self.emit(StreamEvent::TextDelta { text: raw }, out);
                        }
                    }
                },
            }
        }
    }

    /// Releases held text (as text) after an error: nothing more will come.
    fn abort(&mut self, out: &mut Vec<StreamEvent>) {
        let mut segs = Vec::new();
        self.scanner.finish(&mut segs);
        for seg in segs {
            let text = match seg {
                Segment::Text(t) => t,
                Segment::Block { raw, .. } => raw,
            };
            self.emit(StreamEvent::TextDelta { text }, out);
        }
    }

    fn flush_held(&mut self, out: &mut Vec<StreamEvent>) {
        out.append(&mut self.held);
    }

    /// The upstream ended cleanly: emits the rest, or asks for the retry.
    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Finish {
        let mut segs = Vec::new();
        self.scanner.finish(&mut segs);
        self.segments(segs, out);
        if let Some(reason) = self.retrying.take() {
            return Finish::Retry { reason, reply: std::mem::take(&mut self.reply_text) };
        }
        if self.next_index == 0 && self.can_retry() && !self.names.declared().is_empty() {
            let reason = if is_refusal(&self.reply_text) {
                Some("you said you cannot use tools, but you can: through action blocks".to_owned())
            } else if self.must_call {
                Some("a tool call is required in this reply, and it made none".to_owned())
            } else {
                None
            };
            if let Some(reason) = reason {
                tracing::info!(%reason, "emulated tool call: refusal");
                return Finish::Retry { reason, reply: std::mem::take(&mut self.reply_text) };
            }
        }
        if let Some((reason, stop_sequence)) = self.stop.take() {
            let reason = if self.next_index > 0 { StopReason::ToolUse } else { reason };
            self.emit(StreamEvent::Stop { reason, stop_sequence }, out);
        }
        self.flush_held(out);
        Finish::Done
    }

    /// Starts over for the corrective attempt: the previous reply is discarded (it never reached
    /// the client), its usage is kept and added to the new one.
    pub fn restart(&mut self) {
        self.prior_usage = add_usage(&self.prior_usage, &self.attempt_usage);
        self.attempt_usage = Usage::default();
        self.scanner = Scanner::new();
        self.next_index = 0;
        self.held.retain(|e| matches!(e, StreamEvent::MessageStart { .. }));
        self.stop = None;
        self.reply_text.clear();
        self.retrying = None;
        self.retry_available = false;
    }
}
