//! Why a gateway could not be started, asked, or stopped: the one error of the harness's core.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Why a gateway could not be started, asked, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A program could not be started at all (no such binary, say).
    #[error("cannot run {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    /// A program ran past its bound; it was killed.
    #[error("{what} did not finish within {bound:?}; it was killed")]
    TimedOut { what: String, bound: Duration },
    /// A command exited unsuccessfully.
    #[error("{what} failed ({status}): {stderr}")]
    Failed {
        what: String,
        status: ExitStatus,
        stderr: String,
    },
    /// `ferry serve` exited before it listened (a bad config, a home in use); its log says why.
    #[error("ferry serve for {who} exited with {status} before listening; its log:\n{log}")]
    Exited {
        who: String,
        status: ExitStatus,
        log: String,
    },
    /// `ferry serve` did not write `api.addr` in time; it was killed.
    #[error("gave up after {bound:?} waiting for {who} to write api.addr; its log:\n{log}")]
    NotListening {
        who: String,
        bound: Duration,
        log: String,
    },
    /// The gateway's state directory could not be made, written or read.
    #[error("{who}'s home {path}: {source}")]
    Home {
        who: String,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The gateway answered, but not as a gateway should (no node id, an unreadable status).
    #[error("gateway {who}: {detail}")]
    Answer { who: String, detail: String },
    /// The gateway's process is not running (it was stopped or killed, and not restarted).
    #[error("{who} is not running")]
    NotRunning { who: String },
}
