//! `GetServerConfig`: Keyhaven takes the official service's answer and may change only its
//! transport knob, `http2_config` (field 7, docs/cursor-wire.md §1.2); indexing keys, agent URLs
//! and everything else stay as the official service sent them, and nothing in it touches
//! entitlement.
//!
//! The change appends field 7 to the message bytes instead of re-encoding the message: for a
//! singular protobuf field the last value on the wire wins, so the client reads the new value and
//! every other byte (fields Keyhaven's proto does not know included) is the official one.

use crate::config::CursorHttp2;
use crate::cursor::protocol::aiserver::Http2Config;

/// `GetServerConfigResponse.http2_config`'s field number.
const HTTP2_CONFIG_FIELD: u32 = 7;

/// The value `[cursor] http2` forces, `None` for the official one.
pub fn forced(http2: CursorHttp2) -> Option<Http2Config> {
    match http2 {
        CursorHttp2::Official => None,
        CursorHttp2::Disabled => Some(Http2Config::ForceAllDisabled),
        CursorHttp2::Enabled => Some(Http2Config::ForceAllEnabled),
        CursorHttp2::BidiDisabled => Some(Http2Config::ForceBidiDisabled),
        CursorHttp2::BidiEnabled => Some(Http2Config::ForceBidiEnabled),
    }
}

/// The official `GetServerConfigResponse` bytes with `http2_config` set to `value`.
pub fn adjust(official: &[u8], value: Http2Config) -> Vec<u8> {
    let mut out = Vec::with_capacity(official.len() + 3);
    out.extend_from_slice(official);
    prost::encoding::int32::encode(HTTP2_CONFIG_FIELD, &(value as i32), &mut out);
    out
}

#[cfg(test)]
mod tests;
