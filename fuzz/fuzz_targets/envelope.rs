//! cargo-fuzz target: the Connect envelope decoder (split input, gzip frames, end-stream JSON).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    keyhaven::cursor::protocol::connect::fuzz::envelopes(data);
});
