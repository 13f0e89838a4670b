//! Everything that crosses between gateways.
//!
//! - [`codec`]: the only module that knows bincode; length-capped, limit-decoded frames.
//! - [`wire`], [`outcome`], [`routes`], [`health`], [`route_table`], [`write_machine`]: the
//!   types and decisions, from `ferry-core` (no IO), re-exported.
//! - [`frames`]: request and answer frames in each protocol version this build speaks.
//! - [`tls`]: mutual TLS 1.3 with raw ed25519 public keys, pinned on both sides.
//! - [`transport`]: the QUIC endpoint, dialing under a connect timeout, frame IO on streams.
//! - [`udp_catcher`]: the peer socket, with a thread that reads it while the gateway is behind,
//!   and the hold that keeps new calls from sending until it has caught up.
//! - [`outcome`]: what became of a call, as types (answered, not carried out, not sent, unknown).
//! - [`routes`]: route kinds, parsing, and the preference order.
//! - [`health`]: one route's health as a state machine over time (heartbeats, silence, backoff).
//! - [`route_table`]: every route to every peer, its source and health; ranking for calls.
//! - [`discovery`]: announcements, events, the `Discovery` trait and its in-memory twin.
//! - [`mdns`]: discovery over mDNS (`_ferry._udp.local.`).
//! - [`probe`]: the UDP side probe that tells "gateway not running" from "host silent".
//! - [`pool`]: open connections and when each peer was last heard (write liveness).
//! - [`call`]: the caller's write (at most once) and read (retry, next route) paths.
//! - [`write_machine`]: the write's decisions (retry? renew? settle? which outcome?) as a pure
//!   state machine, tested exhaustively.
//! - [`door`]: the serving side: one request per stream, decoded under limits, then the service.

pub mod call;
pub mod clock;
pub mod codec;
pub mod dials;
pub mod discovery;
pub mod door;
pub mod frames;
pub mod mdns;
pub mod pool;
pub mod probe;
pub mod tls;
pub mod transport;
pub mod udp_catcher;
pub mod udp_io;

// The decisions and the types they speak live in `ferry-core` (no IO); they are re-exported
// here under their old names so the drivers read as before.
pub use ferry_core::write as write_machine;
pub use ferry_core::{health, liveness, outcome, route_table, routes, wire};

pub use ferry_ticket::{NodeId, NodeKey};
