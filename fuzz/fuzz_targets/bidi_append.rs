//! cargo-fuzz target: BidiAppend decoding (hex or binary data) and the AgentClientMessage inside.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    keyhaven::cursor::protocol::connect::fuzz::bidi_append(data);
});
