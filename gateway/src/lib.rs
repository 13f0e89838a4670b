//! The Ferry gateway: the `ferry` binary's library.
//!
//! A tour, from the outside in:
//! - [`cli`]: the command line; thin, built on the kit (`ferry-kit`, the app library), with
//!   [`read_around`] plugged in so reads go around a stopped gateway.
//! - [`daemon`]: `ferry serve`: builds the [`gateway::Gateway`], listens, stops in order.
//! - [`api`]: the local HTTP API on loopback.
//! - [`gateway`]: the running gateway's state and the operations behind the API; writes run on
//!   tasks of their own ([`tasks`]) and are recorded in the [`call_log`] before they leave, so
//!   [`settlement`] can answer for any of them after any crash.
//! - [`service`]: what the gateway does with requests from peers.
//! - [`owner`]: the executor that carries out writes, and the verbs themselves.
//! - [`store`] and [`reader`]: SQLite (WAL, synchronous=FULL): vaults, records, trust, journal.
//! - [`discovery`], [`monitor`], [`tailnet`]: what mDNS tells, the route prober, this machine's
//!   tailnet addresses.
//! - [`reads`], [`replication`]: the read path (cache, owner, replicas, stale fallback) and
//!   replicas' sync jobs.
//! - [`peers`]: the trust book the TLS server consults, and who owns which vault.
//! - [`home`], [`config`], [`names`], [`metrics`]: the state directory, settings, validation of
//!   names, and counters.

pub mod api;
pub mod call_log;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod discovery;
pub mod gateway;
pub mod home;
pub mod metrics;
pub mod monitor;
pub mod names;
pub mod owner;
pub mod peers;
pub mod read_around;
pub mod reader;
pub mod reads;
pub mod replication;
pub mod service;
pub mod settlement;
pub mod store;
pub mod tailnet;
pub mod tasks;
