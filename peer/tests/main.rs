//! The peer crate's integration tests, as one test binary (one link instead of one per file):
//! each module was a test binary of its own. `common` holds what they share (endpoints on
//! loopback, the service stubs, bounded waits).
//!
//! Run one module with a filter: `cargo test -p ferry-peer --test integration stopping::`.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod codec_props;
mod door_streams;
mod shared_dials;
mod stopping;
mod tls_pinning;
mod versions;
