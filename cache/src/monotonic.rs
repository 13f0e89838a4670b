//! Monotonic reads (SPEC section 9): this gateway never answers an app with a revision of a
//! record older than one it already gave that app.
//!
//! It owns the memory of what each app was given: per `(app, vault, key)`, the highest revision
//! handed out, bounded in entries and evicted least recently used first. The read path asks
//! [`MonotonicReads::admit`] before it answers; on [`Admission::Older`] it must not give that
//! answer and moves on to the next source (in the end the owner, or `503 unavailable`).
//!
//! # Forgetting safely
//!
//! Evicting a mark would forget what the app saw, and a lagging replica could then roll the app
//! back. So an evicted mark is folded into a floor for its `(app, vault)`: the highest revision
//! ever evicted there. A record with no mark is admitted only at or above the floor, which is at
//! least the revision the app was given for it. Revisions are one increasing sequence per vault
//! (SPEC section 4), so one number per vault can bound every forgotten key of that vault.
//!
//! The floors are bounded as well, since app names come from a request header. An evicted floor
//! is folded into a floor per vault shared by all apps: stricter for the other apps, still sound.
//! That last map has one number per vault this gateway has read, a set bounded by the vaults its
//! trusted peers own.
//!
//! # What the floors cost
//!
//! A record's revision is that of its last write, so an old, unchanged record can sit below the
//! floor, and [`MonotonicReads::admit`] then refuses it although the app never saw anything newer.
//! The answer of the owner itself goes through [`MonotonicReads::admit_from_owner`], which skips
//! the floors: the owner holds the newest state there is, so its answer to a read that started
//! after an earlier answer was given is at least as new as that earlier answer, for every key.
//! The exact mark of the record still applies there, which catches an owner answer that raced
//! with a newer one. So a forgotten key costs a round trip to the owner, or a `503` while the
//! owner is unreachable, never a rolled-back answer and never a refusal that outlasts the owner's
//! next answer.

use std::collections::HashMap;

use lru::LruCache;

use crate::composite_key::{KeyParts, OwnedKey};

/// Default bound on remembered `(app, vault, key)` marks.
pub const DEFAULT_MAX_MARKS: usize = 100_000;

/// Default bound on remembered `(app, vault)` floors.
pub const DEFAULT_MAX_APP_FLOORS: usize = 4_096;

/// Whether an answer may be given to the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Not older than anything this app was given for the record; now remembered as given.
    Fresh,
    /// The app may already hold a newer revision: do not give it this answer.
    ///
    /// `seen` is the revision the app was given for this record or, when that record was
    /// forgotten, the floor kept for the app and vault (an upper bound on what it was given).
    Older { seen: u64 },
}

/// Whether [`MonotonicReads`] compares an answer for a forgotten record with the floors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Floors {
    Apply,
    Skip,
}

/// The highest revision this gateway gave each app for each record, bounded in entries.
#[derive(Debug)]
pub struct MonotonicReads {
    /// `(app, vault, key)` to the highest revision given.
    marks: LruCache<OwnedKey<3>, u64>,
    max_marks: usize,
    /// `(app, vault)` to the highest revision of a mark evicted for them.
    app_floors: LruCache<OwnedKey<2>, u64>,
    max_app_floors: usize,
    /// Vault to the highest floor evicted for it, for all apps. Never evicted.
    vault_floors: HashMap<String, u64>,
}

impl Default for MonotonicReads {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_MARKS, DEFAULT_MAX_APP_FLOORS)
    }
}

impl MonotonicReads {
    /// Remembers at most `max_marks` records and `max_app_floors` `(app, vault)` floors. Zero is
    /// allowed for either: everything then goes straight to the next, coarser level, which is
    /// sound but refuses more answers from sources other than the owner.
    pub fn new(max_marks: usize, max_app_floors: usize) -> Self {
        Self {
            marks: LruCache::unbounded(),
            max_marks,
            app_floors: LruCache::unbounded(),
            max_app_floors,
            vault_floors: HashMap::new(),
        }
    }

    /// Decides whether an answer at `revision` from a source that may lag (a replica, the cache,
    /// a stale fallback) may be given to `app`, and if so remembers it as given.
    pub fn admit(&mut self, app: &str, vault: &str, key: &str, revision: u64) -> Admission {
        self.admit_with(app, vault, key, revision, Floors::Apply)
    }

    /// Like [`admit`](Self::admit), for an answer the owner gave to a read that started after
    /// the app's earlier reads were answered. Skips the floors (see the module docs): only an
    /// exact memory of a newer revision for this record refuses it.
    pub fn admit_from_owner(
        &mut self,
        app: &str,
        vault: &str,
        key: &str,
        revision: u64,
    ) -> Admission {
        self.admit_with(app, vault, key, revision, Floors::Skip)
    }

    /// The lowest revision [`admit`](Self::admit) would take for this record now: its mark, else
    /// the floor. Changes nothing, not even the LRU order.
    pub fn lowest_admissible(&self, app: &str, vault: &str, key: &str) -> u64 {
        match self.marks.peek(mark_probe(&[app, vault, key])) {
            Some(&given) => given,
            None => self.floor(app, vault),
        }
    }

    /// Number of records remembered exactly.
    pub fn len(&self) -> usize {
        self.marks.len()
    }

    /// Whether no record is remembered exactly (floors may still be set).
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    fn admit_with(
        &mut self,
        app: &str,
        vault: &str,
        key: &str,
        revision: u64,
        floors: Floors,
    ) -> Admission {
        if let Some(given) = self.marks.get_mut(mark_probe(&[app, vault, key])) {
            if revision < *given {
                return Admission::Older { seen: *given };
            }
            *given = revision;
            return Admission::Fresh;
        }
        if floors == Floors::Apply {
            // Keep the floors of active apps from being folded into the coarser vault floor.
            self.app_floors.promote(floor_probe(&[app, vault]));
            let floor = self.floor(app, vault);
            if revision < floor {
                return Admission::Older { seen: floor };
            }
        }
        self.marks.push(OwnedKey::new([app, vault, key]), revision);
        self.trim_marks();
        Admission::Fresh
    }

    /// The floor for a record of `vault` this gateway has no mark for.
    fn floor(&self, app: &str, vault: &str) -> u64 {
        let app_floor = self
            .app_floors
            .peek(floor_probe(&[app, vault]))
            .copied()
            .unwrap_or(0);
        let vault_floor = self.vault_floors.get(vault).copied().unwrap_or(0);
        app_floor.max(vault_floor)
    }

    fn trim_marks(&mut self) {
        while self.marks.len() > self.max_marks {
            let Some((mark_key, given)) = self.marks.pop_lru() else {
                break;
            };
            let [app, vault, _] = mark_key.parts();
            self.raise_app_floor(app, vault, given);
        }
    }

    fn raise_app_floor(&mut self, app: &str, vault: &str, revision: u64) {
        if let Some(floor) = self.app_floors.get_mut(floor_probe(&[app, vault])) {
            *floor = (*floor).max(revision);
            return;
        }
        self.app_floors.push(OwnedKey::new([app, vault]), revision);
        while self.app_floors.len() > self.max_app_floors {
            let Some((floor_key, floor)) = self.app_floors.pop_lru() else {
                break;
            };
            let [_, floor_vault] = floor_key.parts();
            self.raise_vault_floor(floor_vault, floor);
        }
    }

    fn raise_vault_floor(&mut self, vault: &str, revision: u64) {
        match self.vault_floors.get_mut(vault) {
            Some(floor) => *floor = (*floor).max(revision),
            None => {
                self.vault_floors.insert(vault.to_owned(), revision);
            }
        }
    }
}

fn mark_probe<'a>(parts: &'a [&'a str; 3]) -> &'a (dyn KeyParts<3> + 'a) {
    parts
}

fn floor_probe<'a>(parts: &'a [&'a str; 2]) -> &'a (dyn KeyParts<2> + 'a) {
    parts
}

#[cfg(test)]
mod tests;
