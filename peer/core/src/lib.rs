//! Ferry's decisions, with no IO in them: what a write does next, where a read looks next, when
//! a route is down and which one to take, what the owner admits. Every function here takes the
//! time as an argument and returns what to do (and when to be woken); the drivers in
//! `ferry-peer` and `ferry-gateway` do the IO and sleep until the instant asked for. This crate
//! depends on neither tokio, quinn, rusqlite nor axum, so the compiler keeps it that way.
//!
//! quinn's split between `quinn-proto` (a state machine taking `now`) and `quinn` (a thin async
//! driver) is the model.
//!
//! - [`write`](mod@write): one write, at most once (SPEC 6): ticket, send (with the failover race), the
//!   one renewal, settle at once after a break, settle backoff, the outcome.
//! - [`read`]: one record read (SPEC 9): cache, owner, hedge to replicas, stale fallback; and
//!   the attempts of any call that is safe to repeat (pooled, then fresh).
//! - [`liveness`]: when a connection counts as alive for a write, and as dead to a call.
//! - [`health`], [`routes`], [`route_table`]: route health over time, ranking, the table.
//! - [`discovered`]: what an unauthenticated announcement may add to the table, and how often.
//! - [`capacity`]: whether the owner takes and starts a request (its budget: the deadline, the
//!   per-caller cap, the rate limit, the two classes with aging).
//! - [`settle`]: what the answers of every gateway that could have received an id add up to.
//! - [`outbox`]: which queued write is sent next and what becomes of each (SPEC 10a; not yet
//!   driven by the gateway).
//! - [`clock`]: the clock seam.
//! - [`rng`]: the seeded random numbers of the tests, the simulation and the benchmarks.
//! - [`bugs`]: known-wrong behaviours a test may switch on (feature `bug-injection`).
//! - [`wire`], [`outcome`]: the types the decisions speak (the codec is `ferry-peer`'s).

pub mod bugs;
pub mod capacity;
pub mod clock;
pub mod discovered;
pub mod health;
pub mod liveness;
pub mod outbox;
pub mod outcome;
pub mod read;
pub mod rng;
pub mod route_table;
pub mod routes;
pub mod settle;
pub mod wire;
pub mod write;

pub use ferry_ticket::{NodeId, NodeKey};
