//! Each local vault's newest committed revision, as a watch, and the long poll on it
//! ([`LongPoll`]): the change feed's (`GET /v1/vaults/{vault}/changes?wait=`) and the door's
//! for caught-up replicas wait on it instead of polling the database. The owner's executor
//! moves it after every batch that committed writes, a replica's sync after every page it
//! applied; a waiter subscribes before it reads the store, so a commit between its read and
//! its wait still wakes it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ferry_core::clock::Clock;
use ferry_peer::wire::ReadAnswer;
use tokio::sync::watch;

/// A vault's newest committed revision, and when it was committed here.
#[derive(Debug, Clone, Copy)]
pub struct Moved {
    pub revision: u64,
    pub at: Instant,
}

/// The vaults' revision watches, made on first use.
#[derive(Debug)]
pub struct Revisions {
    by_vault: Mutex<HashMap<String, watch::Sender<Moved>>>,
    /// Dates the commits (the executor's clock).
    clock: Arc<dyn Clock>,
}

impl Revisions {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            by_vault: Mutex::default(),
            clock,
        }
    }

    /// A receiver that sees `vault`'s revision move from now on.
    pub fn watch(&self, vault: &str) -> watch::Receiver<Moved> {
        let mut by_vault = self.by_vault.lock().unwrap_or_else(|p| p.into_inner());
        by_vault
            .entry(vault.to_string())
            .or_insert_with(|| {
                watch::channel(Moved {
                    revision: 0,
                    at: self.clock.now(),
                })
                .0
            })
            .subscribe()
    }

    /// Forgets `vault`'s watch (the replica was dropped): its waiters see it gone and answer
    /// at their deadline, and a replica of that name followed anew gets a fresh watch from
    /// revision 0, whose news would otherwise wake nobody until it passed the old revision.
    pub fn forget(&self, vault: &str) {
        self.by_vault
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(vault);
    }

    /// `vault` committed up to `revision`: wakes its waiters if that is news (a revision never
    /// goes back; an older one, from a copy answered from the journal, wakes nobody). Cheap when
    /// nobody waits: no waiter ever asked for this vault, no channel.
    pub fn advanced(&self, vault: &str, revision: u64) {
        let by_vault = self.by_vault.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = by_vault.get(vault) {
            sender.send_if_modified(|seen| {
                let news = revision > seen.revision;
                if news {
                    *seen = Moved {
                        revision,
                        at: self.clock.now(),
                    };
                }
                news
            });
        }
    }
}

/// Whether a read's answer is a change page with nothing past the cursor: what a long poll
/// waits on.
pub fn is_empty_page(answer: &ReadAnswer) -> bool {
    matches!(answer, ReadAnswer::Changes { changes, .. } if changes.is_empty())
}

/// One long poll of a vault's changes: reads until a read has news (anything but an empty
/// page), waiting between reads for the vault's revision to move, until `until`.
#[derive(Debug)]
pub struct LongPoll {
    moved: watch::Receiver<Moved>,
    stopping: watch::Receiver<bool>,
    until: tokio::time::Instant,
    /// No read before this (`crate::pacer::PushPacer`).
    not_before: Option<Instant>,
}

impl LongPoll {
    /// Subscribes to `vault`'s revision now, before any read.
    pub fn new(
        revisions: &Revisions,
        vault: &str,
        stopping: watch::Receiver<bool>,
        until: tokio::time::Instant,
    ) -> Self {
        Self {
            moved: revisions.watch(vault),
            stopping,
            until,
            not_before: None,
        }
    }

    /// Reads no sooner than `at` (never past the wait's end).
    pub fn not_before(mut self, at: Option<Instant>) -> Self {
        self.not_before = at;
        self
    }

    /// Reads with `read` until `is_empty` says an answer is not an empty page, the wait ends or
    /// the gateway stops; the last answer, and when the commit that first woke the wait was
    /// made (`None`: the first read answered). A read still running at `until` is given up and
    /// the one before it answered: the caller is owed an answer by then, and an empty one says
    /// only "nothing yet". Only news ends the wait early (a wake-up for a commit the first read
    /// already saw reads again and waits on), so an empty answer means "nothing for the whole
    /// wait": a replica tells an owner that holds its questions open from one that does not by
    /// that.
    pub async fn run<A, F, Fut>(
        mut self,
        mut read: F,
        is_empty: impl Fn(&A) -> bool,
    ) -> (A, Option<Instant>)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = A>,
    {
        self.paced().await;
        let mut answer = read().await;
        let mut woken_at = None;
        while is_empty(&answer) {
            tokio::select! {
                biased;
                () = async { let _ = self.stopping.wait_for(|stopping| *stopping).await; } => break,
                changed = self.moved.changed() => if changed.is_err() {
                    // The watch is gone (never, while the gateway runs): nothing will wake us.
                    tokio::time::sleep_until(self.until).await;
                    break;
                },
                () = tokio::time::sleep_until(self.until) => break,
            }
            woken_at.get_or_insert(self.moved.borrow().at);
            self.paced().await;
            answer = match tokio::time::timeout_at(self.until, read()).await {
                Ok(next) => next,
                Err(_) => break,
            };
        }
        (answer, woken_at)
    }

    /// Waits until `not_before` (not past `until`; a stopping gateway does not wait).
    async fn paced(&mut self) {
        let Some(at) = self.not_before else {
            return;
        };
        let at = tokio::time::Instant::from_std(at).min(self.until);
        tokio::select! {
            biased;
            _ = self.stopping.wait_for(|stopping| *stopping) => {}
            () = tokio::time::sleep_until(at) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_peer::clock::{now, tokio_now, TokioClock};
    use std::time::Duration;

    #[tokio::test]
    async fn a_paced_long_poll_reads_news_no_sooner_than_its_time_and_a_quiet_one_on_news() {
        let revisions = Revisions::new(Arc::new(TokioClock::system()));
        let (_stop, stopping) = watch::channel(false);
        let started = tokio_now();
        let until = started + Duration::from_secs(5);
        let gather = Duration::from_millis(30);
        // News already there, but the follower was answered just now: read after the gather.
        let paced = LongPoll::new(&revisions, "v", stopping.clone(), until)
            .not_before(Some(now() + gather));
        let read_at = || async { tokio_now() };
        let (at, woken) = paced.run(read_at, |_| false).await;
        assert!(at - started >= gather, "read after {:?}", at - started);
        assert_eq!(woken, None);
        // Nothing yet, not paced: the first commit wakes it and it reads at once.
        let started = tokio_now();
        let quiet = LongPoll::new(&revisions, "v", stopping, until);
        let reads = std::sync::atomic::AtomicUsize::new(0);
        let read = || {
            let n = reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { (n, tokio_now()) }
        };
        let commit = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            revisions.advanced("v", 1);
        };
        let ((answer, woken), ()) = tokio::join!(quiet.run(read, |(n, _)| *n == 0), commit);
        // Read twice: once at once (nothing), once woken by the commit, not before it.
        assert_eq!(answer.0, 1);
        assert!(answer.1 - started >= Duration::from_millis(100));
        assert!(woken.is_some());
        // A stopping gateway does not hold news for pacing.
        let (stop, stopping) = watch::channel(false);
        let _ = stop.send(true);
        let started = tokio_now();
        let held = LongPoll::new(&revisions, "v", stopping, until)
            .not_before(Some(now() + Duration::from_secs(4)));
        let (at, _) = held.run(read_at, |_| false).await;
        assert!(at - started < Duration::from_secs(4));
    }

    #[tokio::test]
    async fn a_waiter_wakes_on_news_only() {
        let revisions = Revisions::new(Arc::new(TokioClock::system()));
        // Nobody waits: nothing is kept.
        revisions.advanced("v", 3);
        let mut rx = revisions.watch("v");
        revisions.advanced("v", 5);
        rx.changed().await.unwrap();
        assert_eq!(rx.borrow_and_update().revision, 5);
        // An older revision (a journal copy) and another vault wake nobody.
        revisions.advanced("v", 4);
        revisions.advanced("w", 9);
        assert!(!rx.has_changed().unwrap());
        revisions.advanced("v", 6);
        assert!(rx.has_changed().unwrap());
    }
}
