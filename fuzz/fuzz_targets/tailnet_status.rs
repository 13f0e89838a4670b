#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzzing::tailnet_status(data));
