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
mod lab_campaign;
mod lab_discovery;
mod lab_doctor;
mod lab_failover;
mod lab_live_sync;
mod lab_routes;
mod lab_smoke;
mod lab_upgrade;
mod local_api_limits;
mod openapi;
mod reads;
mod replication;
mod settle_survives;
mod simulation;
mod status_page;
mod stopping_owner;
mod two_gateways;
mod version_mismatch;
mod wire_fixtures;
mod zero_config;
