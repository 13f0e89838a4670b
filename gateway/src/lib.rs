//! The Ferry gateway: the `ferry` binary's library.
//!
//! A tour, from the outside in:
//! - [`cli`]: the command line; thin, built on the kit (`ferry-kit`, the app library), with
//!   [`read_around`] plugged in so reads go around a stopped gateway.
//! - [`daemon`]: `ferry serve`: builds the [`gateway::Gateway`], serves the local [`api`], runs
//!   mDNS, stops in order.
//! - [`gateway`]: the composition root over an [`env`](mod@env) (clock, blocking work, side probe); it
//!   builds the components, each owning its state:
//!   [`vaults`] (the vaults held here), [`network`] (peers, routes, directory, discovery, the
//!   prober), [`owner`] (tickets, the executor: the store's one writer), [`door`] (what peers'
//!   requests are answered with, over the owner, the network and the vaults; followers' long
//!   polls wait on [`revisions`] and are paced by [`pacer`]), [`reads`] (the
//!   read path and its cache), [`writes`] (the write path: writes run on tasks of their own,
//!   [`tasks`], recorded in the [`call_log`] before they leave), [`settlement`] (settling by
//!   request id, after any crash), [`replication`] (replicas' sync, progress on the
//!   [`sync_board`]), [`admin`] (trust, vaults, rotation), and the [`lifecycle`] they share.
//!   Their decisions are `ferry-core`'s; these drive them.
//! - [`store`] and [`reader`]: SQLite (WAL, synchronous=FULL): vaults, records, trust, journal,
//!   calls, with a schema version.
//! - [`home`], [`config`], [`names`], [`metrics`], [`tailnet`]: the state directory, settings,
//!   validation of names, counters, this machine's tailnet addresses.

pub mod admin;
pub mod api;
pub mod call_log;
pub mod checksum;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod doctor;
pub mod door;
pub mod env;
pub mod gateway;
pub mod home;
pub mod human;
pub mod in_flight;
pub mod lifecycle;
pub mod metrics;
pub mod names;
pub mod network;
pub mod owner;
pub mod pacer;
pub mod platform;
pub mod read_around;
pub mod reader;
pub mod reads;
pub mod replication;
pub mod revisions;
pub mod settlement;
pub mod store;
pub mod sync_board;
pub mod tailnet;
pub mod tasks;
pub mod vaults;
pub mod writes;
