#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| wirelint::fuzz::frame_decoder(data));
