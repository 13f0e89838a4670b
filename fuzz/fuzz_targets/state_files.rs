#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzzing::state_files(data));
