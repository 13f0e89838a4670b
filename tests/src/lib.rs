//! Ferry's cross-crate and multi-process tests live in `tests/` of this package; the shared
//! harness is `tests/harness/mod.rs` (integration tests are where cargo tells us the path of
//! the binary under test). This library is intentionally empty.
