//! Known-wrong behaviours, switched on one at a time to show that the simulation's history
//! checker catches each (issue 10). Compiled only with the cargo feature `bug-injection` (the
//! test package turns it on; the shipped `ferry` never has it), and even then off unless a test
//! switches one on for the thread it runs on (the simulation runs a whole network on one
//! thread).

/// A bug a test can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// The caller sends a write whose outcome is unknown again, under a new request id.
    ResendAfterSend,
    /// The caller reports "nothing was sent" for a request that left.
    NothingSentAfterSend,
    /// The owner answers a settle query about an id it never saw without fencing it.
    SkippedTombstone,
    /// The read path gives an app an answer older than one it already saw.
    OlderRead,
    /// The owner answers `busy` for a write over its caller's cap, and queues it all the same.
    RunAfterBusy,
}

#[cfg(feature = "bug-injection")]
thread_local! {
    static INJECTED: std::cell::Cell<Option<Bug>> = const { std::cell::Cell::new(None) };
}

/// Switches `bug` on (or every bug off) for this thread.
#[cfg(feature = "bug-injection")]
pub fn inject(bug: Option<Bug>) {
    INJECTED.with(|injected| injected.set(bug));
}

/// Whether `bug` is switched on for this thread.
#[cfg(feature = "bug-injection")]
pub fn on(bug: Bug) -> bool {
    INJECTED.with(|injected| injected.get() == Some(bug))
}

/// Without the feature, no bug is ever on.
#[cfg(not(feature = "bug-injection"))]
#[inline(always)]
pub fn on(_bug: Bug) -> bool {
    false
}
