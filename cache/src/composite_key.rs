//! Composite string keys, `(vault, key)` and `(app, vault, key)`, that the caches look up with
//! borrowed `&str`s, so a lookup allocates nothing.
//!
//! `LruCache::get` takes any `Q` the stored key can `Borrow` as. A tuple of `String`s can only
//! borrow as itself, which would cost two or three `String` allocations on every cache hit. Here
//! the stored [`OwnedKey`] and a borrowed `[&str; N]` both present themselves as
//! `dyn KeyParts<N>`, whose `Hash` and `Eq` look only at the parts, so either finds the same entry.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::OnceLock;

/// Anything that is `N` strings in a fixed order: a stored key or a borrowed probe.
pub(crate) trait KeyParts<const N: usize> {
    fn parts(&self) -> [&str; N];

    /// What the key presents to a hash table (see [`parts_hash`]).
    fn parts_hash(&self) -> u64 {
        parts_hash(self.parts())
    }
}

/// The hash of a key's parts, the only thing any form of a key feeds a table's hasher.
///
/// An [`OwnedKey`] works it out once, when made, and keeps it: a table that grows (a cache
/// filling to its bound, 100,000 keys by default) rehashes every key it holds, which walked
/// each key's text through the hasher again and took 3% of the calling gateway's CPU per
/// write while the caches filled (`docs/history/performance-log.md`, "The call log's slots in
/// mapped memory"), in pauses of milliseconds on the one runtime thread. Now a rehash reads a number.
///
/// Keyed at random once per process: apps choose keys, and a hash they could predict would let
/// one choose keys that all collide.
fn parts_hash<const N: usize>(parts: [&str; N]) -> u64 {
    static KEYED: OnceLock<lru::DefaultHasher> = OnceLock::new();
    KEYED.get_or_init(Default::default).hash_one(parts)
}

/// The stored form of a composite key: its parts end to end in one allocation, and where each
/// ends.
///
/// One allocation rather than a `String` per part: a write through the gateway stores a
/// `(vault, key)` and an `(app, vault, key)`, which took five allocations (and five frees when
/// evicted) and 120 bytes of string headers; now two, and 72 bytes.
#[derive(Debug, Clone)]
pub(crate) struct OwnedKey<const N: usize> {
    text: Box<str>,
    ends: [usize; N],
    /// [`parts_hash`] of the parts.
    hash: u64,
}

impl<const N: usize> OwnedKey<N> {
    pub(crate) fn new(parts: [&str; N]) -> Self {
        let mut text = String::with_capacity(parts.iter().map(|part| part.len()).sum());
        let ends = parts.map(|part| {
            text.push_str(part);
            text.len()
        });
        Self {
            text: text.into_boxed_str(),
            ends,
            hash: parts_hash(parts),
        }
    }
}

impl<const N: usize> KeyParts<N> for OwnedKey<N> {
    fn parts(&self) -> [&str; N] {
        let mut start = 0;
        self.ends.map(|end| {
            // Every end was a part's end when the text was built, so each range is a whole
            // `str`; `get` keeps even a broken invariant from panicking.
            let part = self.text.get(start..end).unwrap_or_default();
            start = end;
            part
        })
    }

    fn parts_hash(&self) -> u64 {
        self.hash
    }
}

impl<const N: usize> KeyParts<N> for [&str; N] {
    fn parts(&self) -> [&str; N] {
        *self
    }
}

// `Borrow` requires the owned and the borrowed form to hash and compare alike, so all four impls
// below go through `parts()` (or `parts_hash()`, which is the hash of the parts) and nothing else.

impl<const N: usize> Hash for dyn KeyParts<N> + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.parts_hash());
    }
}

impl<const N: usize> PartialEq for dyn KeyParts<N> + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl<const N: usize> Eq for dyn KeyParts<N> + '_ {}

impl<const N: usize> Hash for OwnedKey<N> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl<const N: usize> PartialEq for OwnedKey<N> {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl<const N: usize> Eq for OwnedKey<N> {}

impl<'a, const N: usize> Borrow<dyn KeyParts<N> + 'a> for OwnedKey<N> {
    fn borrow(&self) -> &(dyn KeyParts<N> + 'a) {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn borrowed_probe_finds_owned_key() {
        let mut map = HashMap::new();
        map.insert(OwnedKey::new(["notes", "todo"]), 1);
        let probe: &dyn KeyParts<2> = &["notes", "todo"];
        assert_eq!(map.get(probe), Some(&1));
    }

    #[test]
    fn an_owned_key_gives_back_its_parts_empty_and_multibyte_ones_too() {
        let key = OwnedKey::new(["ünï", "", "ключ/ü"]);
        assert_eq!(key.parts(), ["ünï", "", "ключ/ü"]);
        assert_eq!(OwnedKey::new(["", ""]).parts(), ["", ""]);
    }

    #[test]
    fn an_owned_key_keeps_the_hash_its_borrowed_probe_presents() {
        let hash_of = |key: &dyn KeyParts<3>| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            key.hash(&mut hasher);
            hasher.finish()
        };
        let owned = OwnedKey::new(["app", "notes", "ключ"]);
        let probe: &dyn KeyParts<3> = &["app", "notes", "ключ"];
        assert_eq!(owned.parts_hash(), probe.parts_hash());
        assert_eq!(hash_of(&owned), hash_of(probe));
        // Its `Hash` as an owned key (how the table stores it) is its `Hash` as a probe.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        owned.hash(&mut hasher);
        assert_eq!(hasher.finish(), hash_of(probe));
        let other: &dyn KeyParts<3> = &["app", "notes", "ключи"];
        assert_ne!(owned.parts_hash(), other.parts_hash());
    }

    #[test]
    fn a_table_that_grows_still_finds_every_key() {
        let mut map = HashMap::new();
        for n in 0..5_000 {
            map.insert(OwnedKey::new(["vault", &format!("key-{n}")]), n);
        }
        for n in 0..5_000 {
            let key = format!("key-{n}");
            let probe: &dyn KeyParts<2> = &["vault", &key];
            assert_eq!(map.get(probe), Some(&n));
        }
    }

    #[test]
    fn part_boundaries_matter() {
        // ("ab", "c") and ("a", "bc") concatenate alike but are different keys.
        let mut map = HashMap::new();
        map.insert(OwnedKey::new(["ab", "c"]), 1);
        let probe: &dyn KeyParts<2> = &["a", "bc"];
        assert_eq!(map.get(probe), None);
    }
}
