//! Cursor Tab (`aiserver.v1.AiService/StreamCpp`) answered with the user's own fill-in-the-middle
//! model (docs/cursor-tab.md).
//!
//! - [`prompt`]: the request → a FIM prompt (windows bounded by tokens and cut at line
//!   boundaries, language from the extension, single- or multi-line mode) and the completion →
//!   the replacement of the cursor line (pure).
//! - [`Supersede`]: one suggestion in flight per editor; a newer request cancels the older one's
//!   provider call at once.
//! - [`answer`]: one request's frames: `model_info{}` → `range_to_replace{L+1, L+1}` → `text` →
//!   `done_stream` → end-stream `{}` (the non-fused sequence, each in its own frame); no range
//!   and no text when there is nothing to suggest; a Connect error in the end-stream frame for
//!   file sync (FILE_NOT_FOUND, so the client re-sends the buffer) and provider failures.
//!
//! Account, plan and config calls (`CppConfig`, `CppService/AvailableModels`, file sync,
//! telemetry) are never answered here: `api::cursor` forwards them unchanged, so when the
//! official config turns Tab off, the client sends no StreamCpp and Keyhaven's Tab stays off.

pub mod prompt;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use prost::Message;
use tokio_util::sync::CancellationToken;

use crate::config::CursorTabConfig;
use crate::cursor::protocol::aiserver;
use crate::cursor::protocol::connect::{self, Code, ERROR_DETAILS_TYPE, EndStream, ErrorBody, ErrorDetail};
use crate::model::StreamEvent;
use crate::provider::{CallContext, Gateway, Route};

/// The client name Tab calls are recorded with.
pub const CLIENT: &str = "cursor-tab";

/// One suggestion in flight per editor (its identity digest and workspace). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Supersede {
    inner: Arc<SupersedeInner>,
}

#[derive(Debug, Default)]
struct SupersedeInner {
    inflight: Mutex<HashMap<[u8; 32], (u64, CancellationToken)>>,
    next: AtomicU64,
}

/// A request's place in [`Supersede`]: its token is cancelled when a newer request from the same
/// editor arrives. Leaves the table when dropped (unless already replaced).
#[derive(Debug)]
pub struct Ticket {
    inner: Arc<SupersedeInner>,
    key: [u8; 32],
    seq: u64,
    pub cancel: CancellationToken,
}

impl Supersede {
    /// Registers a new request for `editor`, cancelling the one before it.
    pub fn begin(&self, editor: [u8; 32], parent: &CancellationToken) -> Ticket {
        let seq = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let cancel = parent.child_token();
        if let Ok(mut map) = self.inner.inflight.lock()
            && let Some((_, older)) = map.insert(editor, (seq, cancel.clone()))
        {
            older.cancel();
        }
        Ticket { inner: self.inner.clone(), key: editor, seq, cancel }
    }

    /// Requests in flight (tests, diagnostics).
    pub fn in_flight(&self) -> usize {
        self.inner.inflight.lock().map_or(0, |m| m.len())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Ok(mut map) = self.inner.inflight.lock()
            && map.get(&self.key).is_some_and(|(seq, _)| *seq == self.seq)
        {
            map.remove(&self.key);
        }
    }
}

/// The editor key of a request: the client's identity digest and the workspace.
pub fn editor_key(binding: &[u8; 32], req: &aiserver::StreamCppRequest) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(binding);
    if let Some(f) = &req.current_file {
        h.update(f.workspace_root_path.as_bytes());
    }
    h.finalize().into()
}

fn frame(msg: &aiserver::StreamCppResponse) -> Bytes {
    connect::encode_envelope(&msg.encode_to_vec(), false)
}

/// The frames of an answer: the suggestion (if any), `done_stream`, and the end-stream `{}`.
pub fn frames(suggestion: Option<&prompt::Suggestion>) -> Vec<Bytes> {
    let mut out = vec![frame(&aiserver::StreamCppResponse {
        model_info: Some(aiserver::CppModelInfo::default()),
        ..Default::default()
    })];
    if let Some(s) = suggestion {
        let line = i32::try_from(s.line).unwrap_or(i32::MAX);
        out.push(frame(&aiserver::StreamCppResponse {
            range_to_replace: Some(aiserver::LineRange { start_line_number: line, end_line_number_inclusive: line }),
            ..Default::default()
        }));
        out.push(frame(&aiserver::StreamCppResponse { text: s.text.clone(), ..Default::default() }));
    }
    out.push(frame(&aiserver::StreamCppResponse { done_stream: Some(true), ..Default::default() }));
    out.push(connect::encode_end_stream(&EndStream::default()));
    out
}

/// A Connect error whose detail carries Cursor's error kind, marked expected and not shown.
fn tab_error(code: Code, kind: aiserver::error_details::Error, message: &str) -> ErrorBody {
    let details = aiserver::ErrorDetails {
        error: kind as i32,
        details: Some(aiserver::CustomErrorDetails {
            title: "Keyhaven Tab".to_owned(),
            detail: message.to_owned(),
            is_retryable: Some(true),
            show_request_id: Some(false),
            should_show_immediate_error: Some(false),
            ..Default::default()
        }),
        is_expected: Some(true),
    };
    ErrorBody {
        code,
        message: message.to_owned(),
        details: vec![ErrorDetail {
            type_name: ERROR_DETAILS_TYPE.to_owned(),
            value: base64::engine::general_purpose::STANDARD_NO_PAD.encode(details.encode_to_vec()),
        }],
    }
}

/// The end-stream that makes the client re-send the request with the full buffer.
pub fn file_sync_error() -> ErrorBody {
    tab_error(Code::NotFound, aiserver::error_details::Error::FileNotFound, "file not synced here; send the contents")
}

/// The end-stream of a failed provider call (nothing is shown).
pub fn provider_error(message: &str) -> ErrorBody {
    tab_error(Code::Unavailable, aiserver::error_details::Error::ProviderError, message)
}

/// The end-stream of a request a newer one replaced.
pub fn superseded_error() -> ErrorBody {
    tab_error(Code::Canceled, aiserver::error_details::Error::UserAbortedRequest, "superseded by a newer request")
}

/// An end-stream frame carrying `error`.
pub fn error_frame(error: ErrorBody) -> Bytes {
    connect::encode_end_stream(&EndStream { error: Some(error), ..EndStream::default() })
}

/// What one Tab request needs besides the request itself.
#[derive(Debug)]
pub struct TabCall<'a> {
    pub gateway: &'a Gateway,
    pub route: &'a Route,
    pub settings: &'a CursorTabConfig,
    /// The client's `x-request-id` (recorded on the call row).
    pub request_id: Option<String>,
}

/// Answers one StreamCpp request: the frames to send, in order. The provider call stops when
/// `cancel` fires (a newer request) or when this future is dropped (the client went away).
pub async fn answer(call: TabCall<'_>, req: &aiserver::StreamCppRequest, cancel: CancellationToken) -> Vec<Bytes> {
    let prompt = match prompt::build(req, call.settings, &call.route.model.name) {
        Ok(p) => p,
        Err(prompt::PromptError::FileSync) => return vec![error_frame(file_sync_error())],
        Err(e) => {
            tracing::debug!(error = %e, "Tab request without a usable file: no suggestion");
            return frames(None);
        }
    };
    let ctx = CallContext {
        id: format!("kh-tab-{:016x}", rand::random::<u64>()),
        dialect: "fim",
        client: CLIENT.to_owned(),
        request_body: None,
        cancel: cancel.clone(),
        conversation_id: None,
        request_id: call.request_id,
        session_id: None,
    };
    let timeout = Duration::from_millis(call.settings.timeout);
    let mut stream = match call.gateway.fim(prompt.request.clone(), ctx, timeout).await {
        Ok(s) => s,
        Err(_) if cancel.is_cancelled() => return vec![error_frame(superseded_error())],
        Err(f) => return vec![error_frame(provider_error(&f.error.to_string()))],
    };
    let mut completion = String::new();
    while let Some(ev) = stream.next().await {
        match ev {
            StreamEvent::TextDelta { text } => completion.push_str(&text),
            StreamEvent::Error { .. } if cancel.is_cancelled() => return vec![error_frame(superseded_error())],
            StreamEvent::Error { error } => return vec![error_frame(provider_error(&error.message))],
            _ => {}
        }
    }
    frames(prompt::suggestion(&prompt, &completion).as_ref())
}

#[cfg(test)]
mod tests;
