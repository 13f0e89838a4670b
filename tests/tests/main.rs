//! Ferry's integration tests, as one test binary: each module below was a test binary of its
//! own, and linking some thirty binaries of 80-100 MB each took a third of CI (issue 42). One
//! binary links once; its modules are the old files, unchanged but for their imports.
//!
//! Run one module with a filter: `cargo test -p ferry-tests --test integration lab_failover::`.
//! Gateways are started through `ferry_harness` (one `Gateway` type, on loopback or in a lab
//! host); `readme_tour` (the README's tour, read and run) is shared by modules here; the lab
//! and the campaign live in the package's library (`ferry_tests::lab`,
//! `ferry_tests::campaign`), where the campaign binary uses them too.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod readme_tour;

mod at_most_once;
mod backup_after_stop;
mod capacity;
mod change_feed;
mod chaos_writes;
mod compat;
mod crate_boundaries;
mod doctor;
mod durable_answers;
mod honest_edges;
mod hostile_frames;
mod kit;
mod kit_peer_read;
mod local_api_limits;
mod openapi;
mod plain_udp;
mod reads;
mod replication;
mod settle_survives;
mod simulation;
mod status_page;
mod stopping_owner;
mod two_gateways;
mod version_mismatch;
mod wine;
mod wire_fixtures;
mod zero_config;

// libtest starts tests in the order of their full names, each on a free thread of
// RUST_TEST_THREADS, and a lab test waiting for its turn in the lab (a timed one runs alone)
// waits on its thread. So the lab's tests are named to come late (`the_lab::`), after the
// simulation and all but a few quick loopback tests: named first, they would hold every
// thread waiting while the rest queued behind them, and the run would take the lab's time
// plus theirs instead of about the lab's alone (issue 42). Their own module names are kept,
// so a filter such as `lab_failover::` still selects them.
mod the_lab;
