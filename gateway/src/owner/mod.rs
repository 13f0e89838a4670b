//! The owner: the one place a vault's writes are carried out.
//!
//! - [`executor`]: a single writer thread that runs verbs in group-committed SQLite
//!   transactions, each verb together with its journal record.
//! - [`fault`]: test-only crash and stall points (cargo feature `fault-injection`).
//! - [`verbs`]: what one write does to the store, as a plain function of the store and time.

pub mod executor;
pub mod fault;
pub mod verbs;
