//! Test-only fault points in the owner's write path and a few other places. Compiled in only
//! with the cargo feature `fault-injection` (the test package turns it on; the workspace's
//! default members, which a root `cargo build` builds, never do), and even then inert until
//! the process arms them (`arm`). Only the test build's `main` (`ferry-under-test`) does, from
//! its `FERRY_DANGEROUS_*` variables: nothing in this library reads them, so no `ferry` binary
//! obeys them, even one from a workspace-wide build where feature unification compiles these
//! points in (docs/decisions.md, "The shipped binary has no fault points").
//!
//! The points: `before_commit=crash` (or `after_commit`; the action `crash` aborts the process
//! like a power cut, `stall:MS` blocks the owner thread for MS ms). On the calling side,
//! `sent_mark=fail` and `call_log=fail` make the home's sent mark or the call log refuse every
//! write after the start, as a full or failing disk would. The other settings play a gateway
//! of another release.

/// What a test asked of this process's fault points: nothing until [`arm`] is called.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Default)]
pub struct Faults {
    /// `point=action` items, comma-separated: `before_commit=crash`, `after_commit=stall:MS`,
    /// `sent_mark=fail`, `call_log=fail`.
    pub points: String,
    /// The protocol versions to speak instead of this build's.
    pub protocols: Option<ferry_peer::wire::ProtocolRange>,
    /// How far to set this gateway's wall clock off, in milliseconds (negative: behind).
    pub clock_offset_ms: Option<i64>,
    /// The settle state number to answer every peer's settle query with.
    pub settle_state: Option<u32>,
}

#[cfg(feature = "fault-injection")]
static ARMED: std::sync::OnceLock<Faults> = std::sync::OnceLock::new();

/// Arms the fault points for the rest of the process, before the gateway starts; `false` if
/// they were armed already (the first arming stays).
#[cfg(feature = "fault-injection")]
pub fn arm(faults: Faults) -> bool {
    ARMED.set(faults).is_ok()
}

#[cfg(feature = "fault-injection")]
fn armed() -> Option<&'static Faults> {
    ARMED.get()
}

/// A named place in the write path where a test may crash or stall the owner.
#[cfg(feature = "fault-injection")]
pub fn point(name: &str) {
    let Some(faults) = armed() else {
        return;
    };
    for item in faults.points.split(',') {
        let Some((point, action)) = item.split_once('=') else {
            continue;
        };
        if point != name {
            continue;
        }
        if action == "crash" {
            tracing::warn!(point, "fault injection: crashing the owner");
            std::process::abort();
        }
        if let Some(ms) = action.strip_prefix("stall:").and_then(|ms| ms.parse().ok()) {
            tracing::warn!(point, ms, "fault injection: stalling the owner");
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
}

/// Whether a test asked that the write at `name` fail (`NAME=fail` among the points).
#[cfg(feature = "fault-injection")]
pub fn fails(name: &str) -> bool {
    armed().is_some_and(|faults| {
        faults
            .points
            .split(',')
            .any(|item| item.split_once('=') == Some((name, "fail")))
    })
}

/// The protocol versions to speak instead of this build's, so a test can play a gateway of
/// another release; `None` unless armed with them.
#[cfg(feature = "fault-injection")]
pub fn protocols() -> Option<ferry_peer::wire::ProtocolRange> {
    let range = armed()?.protocols?;
    tracing::warn!(%range, "fault injection: speaking other protocol versions than this build's");
    Some(range)
}

/// How far to set this gateway's wall clock off, so a test can play a machine whose clock is
/// wrong; `None` unless armed with it. Only the wall clock moves (request ids, stored times,
/// tickets, the clock heartbeats report); deadlines and intervals are monotonic and stay.
#[cfg(feature = "fault-injection")]
pub fn clock_offset_ms() -> Option<i64> {
    let offset = armed()?.clock_offset_ms?;
    tracing::warn!(
        offset,
        "fault injection: this gateway's wall clock is set off"
    );
    Some(offset)
}

/// The settle state number to answer every peer's settle query with instead of the journal's,
/// so a test can play an owner of a newer release with a state this one does not know; `None`
/// unless armed with one.
#[cfg(feature = "fault-injection")]
pub fn settle_state() -> Option<u32> {
    let number = armed()?.settle_state?;
    // Below it are the known states' numbers, not a newer release's (and the encoder refuses
    // them).
    if number < ferry_peer::wire::FIRST_OPEN_CALL_STATE {
        return None;
    }
    tracing::warn!(
        number,
        "fault injection: answering a settle query with a state from a newer release"
    );
    Some(number)
}

/// Without the feature, settle queries are answered from the journal.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn settle_state() -> Option<u32> {
    None
}

/// Without the feature, the clock is the system's.
#[cfg(not(feature = "fault-injection"))]
pub fn clock_offset_ms() -> Option<i64> {
    None
}

/// Without the feature, no other protocol versions.
#[cfg(not(feature = "fault-injection"))]
pub fn protocols() -> Option<ferry_peer::wire::ProtocolRange> {
    None
}

/// Without the feature, fault points compile to nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn point(_name: &str) {}

/// Without the feature, nothing is asked to fail.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn fails(_name: &str) -> bool {
    false
}
