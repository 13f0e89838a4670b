//! Each local vault's newest committed revision, as a watch: the change feed's long polls
//! (`GET /v1/vaults/{vault}/changes?wait=`) wait on it instead of polling the database. The
//! owner's executor moves it after every batch that committed writes, a replica's sync after
//! every page it applied; a waiter subscribes before it reads the store, so a commit between
//! its read and its wait still wakes it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::watch;

/// A vault's newest committed revision, and when it was committed here.
#[derive(Debug, Clone, Copy)]
pub struct Moved {
    pub revision: u64,
    pub at: Instant,
}

/// The vaults' revision watches, made on first use.
#[derive(Debug, Default)]
pub struct Revisions {
    by_vault: Mutex<HashMap<String, watch::Sender<Moved>>>,
}

impl Revisions {
    /// A receiver that sees `vault`'s revision move from now on.
    pub fn watch(&self, vault: &str) -> watch::Receiver<Moved> {
        let mut by_vault = self.by_vault.lock().unwrap_or_else(|p| p.into_inner());
        by_vault
            .entry(vault.to_string())
            .or_insert_with(|| {
                watch::channel(Moved {
                    revision: 0,
                    at: Instant::now(),
                })
                .0
            })
            .subscribe()
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
                        at: Instant::now(),
                    };
                }
                news
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_wakes_on_news_only() {
        let revisions = Revisions::default();
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
