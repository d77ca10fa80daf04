//! cargo-fuzz target: the openai_responses dialect's decoders (request, response, error, stream) and the
//! encoders that meet what they decode.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    keyhaven::dialect::fuzz::openai_responses(data);
});
