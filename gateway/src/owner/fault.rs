//! Test-only fault points in the owner's write path. Compiled in only with the cargo feature
//! `fault-injection` (the test package turns it on; `cargo build -p ferry-gateway` never does,
//! a workspace-wide build does through feature unification), and even then inert unless
//! `FERRY_DANGEROUS_FAULT` names a point:
//!
//! `FERRY_DANGEROUS_FAULT=before_commit=crash` (or `after_commit`; the action
//! `crash` aborts the process like a power cut, `stall:MS` blocks the owner thread for MS ms).
//! On the calling side, `sent_mark=fail` and `call_log=fail` make the home's sent mark or the
//! call log refuse every write after the start, as a full or failing disk would.
//! The other `FERRY_DANGEROUS_*` variables below play a gateway of another release.

/// `FERRY_DANGEROUS_FAULT` as the process started: read once, since `fails` is asked on every
/// write a calling gateway sends.
#[cfg(feature = "fault-injection")]
fn spec() -> &'static str {
    static SPEC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| std::env::var("FERRY_DANGEROUS_FAULT").unwrap_or_default())
}

/// A named place in the write path where a test may crash or stall the owner.
#[cfg(feature = "fault-injection")]
pub fn point(name: &str) {
    for item in spec().split(',') {
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

/// Whether a test asked that the write at `name` fail (`FERRY_DANGEROUS_FAULT=NAME=fail`).
#[cfg(feature = "fault-injection")]
pub fn fails(name: &str) -> bool {
    spec()
        .split(',')
        .any(|item| item.split_once('=') == Some((name, "fail")))
}

/// The protocol versions to speak instead of this build's (`FERRY_DANGEROUS_PROTOCOLS=3-4`), so
/// a test can play a gateway of another release; `None` without the variable or the feature.
#[cfg(feature = "fault-injection")]
pub fn protocols() -> Option<ferry_peer::wire::ProtocolRange> {
    let spec = std::env::var("FERRY_DANGEROUS_PROTOCOLS").ok()?;
    let Some(range) = ferry_peer::wire::ProtocolRange::parse(&spec) else {
        tracing::warn!(%spec, "FERRY_DANGEROUS_PROTOCOLS is not a range A-B with 0 < A <= B; ignored");
        return None;
    };
    tracing::warn!(%range, "fault injection: speaking other protocol versions than this build's");
    Some(range)
}

/// How far to set this gateway's wall clock off (`FERRY_DANGEROUS_CLOCK_OFFSET_MS=600000`: ten
/// minutes ahead; negative: behind), so a test can play a machine whose clock is wrong; `None`
/// without the variable or the feature. Only the wall clock moves (request ids, stored times,
/// tickets, the clock heartbeats report); deadlines and intervals are monotonic and stay.
#[cfg(feature = "fault-injection")]
pub fn clock_offset_ms() -> Option<i64> {
    let spec = std::env::var("FERRY_DANGEROUS_CLOCK_OFFSET_MS").ok()?;
    let Ok(offset) = spec.parse::<i64>() else {
        tracing::warn!(%spec, "FERRY_DANGEROUS_CLOCK_OFFSET_MS is not a number of milliseconds; ignored");
        return None;
    };
    tracing::warn!(
        offset,
        "fault injection: this gateway's wall clock is set off"
    );
    Some(offset)
}

/// The settle state number to answer every peer's settle query with instead of the journal's
/// (`FERRY_DANGEROUS_SETTLE_STATE=4`), so a test can play an owner of a newer release with a
/// state this one does not know; `None` without the variable or the feature.
#[cfg(feature = "fault-injection")]
pub fn settle_state() -> Option<u32> {
    let number: u32 = std::env::var("FERRY_DANGEROUS_SETTLE_STATE")
        .ok()?
        .parse()
        .ok()?;
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
