//! Known-wrong behaviours, switched on one at a time to show that the history checkers catch
//! each: the simulation's (issue 10) and the fault campaign's (issue 14). Compiled only with the
//! cargo feature `bug-injection` (the test package turns it on; the shipped `ferry` never has
//! it), and even then off unless a test switches one on: for the thread it runs on (the
//! simulation runs a whole network on one thread), or for the whole process (a real gateway
//! started by the campaign with [`BUG_VAR`] set).

/// The environment variable a test build of the gateway reads at start for a bug to switch on
/// for the whole process (its name as [`Bug::name`] gives it).
pub const BUG_VAR: &str = "FERRY_INJECT_BUG";

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
    /// The owner answers a batch of writes before their transaction commits, and commits a
    /// moment later: a crash in between loses writes it acknowledged.
    AnswerBeforeCommit,
    /// A replica applying a page of changes skips some (and moves its cursor past them).
    ReplicaSkipsChange,
}

impl Bug {
    pub const ALL: [Bug; 7] = [
        Bug::ResendAfterSend,
        Bug::NothingSentAfterSend,
        Bug::SkippedTombstone,
        Bug::OlderRead,
        Bug::RunAfterBusy,
        Bug::AnswerBeforeCommit,
        Bug::ReplicaSkipsChange,
    ];

    /// Its name on command lines and in [`BUG_VAR`].
    pub fn name(self) -> &'static str {
        match self {
            Bug::ResendAfterSend => "resend_after_send",
            Bug::NothingSentAfterSend => "nothing_sent_after_send",
            Bug::SkippedTombstone => "skipped_tombstone",
            Bug::OlderRead => "older_read",
            Bug::RunAfterBusy => "run_after_busy",
            Bug::AnswerBeforeCommit => "answer_before_commit",
            Bug::ReplicaSkipsChange => "replica_skips_change",
        }
    }

    /// The bug named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|bug| bug.name() == name)
    }
}

#[cfg(feature = "bug-injection")]
thread_local! {
    static INJECTED: std::cell::Cell<Option<Bug>> = const { std::cell::Cell::new(None) };
}

/// The bug switched on for the whole process: its index in [`Bug::ALL`] plus one, 0 for none.
#[cfg(feature = "bug-injection")]
static PROCESS_BUG: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Switches `bug` on (or every bug off) for this thread.
#[cfg(feature = "bug-injection")]
pub fn inject(bug: Option<Bug>) {
    INJECTED.with(|injected| injected.set(bug));
}

/// Switches `bug` on (or off) for every thread of this process.
#[cfg(feature = "bug-injection")]
pub fn inject_process(bug: Option<Bug>) {
    let index = bug.and_then(|bug| Bug::ALL.iter().position(|b| *b == bug));
    PROCESS_BUG.store(
        index.map_or(0, |i| i + 1),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Whether `bug` is switched on for this thread (or for the whole process).
#[cfg(feature = "bug-injection")]
pub fn on(bug: Bug) -> bool {
    let process = PROCESS_BUG.load(std::sync::atomic::Ordering::Relaxed);
    (process > 0 && Bug::ALL.get(process - 1) == Some(&bug))
        || INJECTED.with(|injected| injected.get() == Some(bug))
}

/// Without the feature, no bug is ever on.
#[cfg(not(feature = "bug-injection"))]
#[inline(always)]
pub fn on(_bug: Bug) -> bool {
    false
}
