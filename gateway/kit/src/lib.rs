//! The Ferry kit: the library an app uses to call its own gateway (SPEC 5).
//!
//! A write's answer is a [`WriteResult`], one variant per case of SPEC 5's table. The kit
//! keeps one rule: [`WriteResult::LocalGatewayDown`] ("nothing was sent") only when the
//! connection to the local gateway could not be opened; any failure after that is
//! [`WriteResult::OutcomeUnknown`] with the request id, which the kit always sets itself when
//! the app gave none. An unknown outcome is settled with [`Kit::settle`], naming the vault, so
//! the gateway can ask the owner even after a crash that cost it its memory of the call.
//!
//! - [`contract`]: the local API's answers as types, shared with the gateway that serves them;
//!   [`admin`]: the admin API's (the CLI's) requests and answers, likewise;
//! - [`http`]: one exchange on a connection of its own (which is what makes "nothing was sent"
//!   exact);
//! - [`Kit`] in `client`: the calls; [`WriteResult`], [`Settlement`], [`ReadRecord`] and
//!   [`KitError`] in `outcome`.
//!
//! The kit links no QUIC, SQLite or HTTP server. Reading around a stopped gateway (straight from
//! a trusted peer) needs those, so it is a hook ([`ReadAround`]) the gateway crate fills.

pub mod admin;
mod client;
mod clock;
pub mod contract;
pub mod http;
mod outcome;

pub use client::{
    default_home, AroundError, AroundRead, ChangeFeed, Kit, ReadAround, RetryPolicy, WriteOptions,
    MAX_FEED_WAIT,
};
pub use outcome::{KitError, ReadRecord, Settlement, WriteResult};
// The names apps and the gateway share, valid by construction (`ferry_names`).
pub use ferry_names::{AppName, Label, NameError, VaultName};
