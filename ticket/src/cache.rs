//! The caller's ticket cache: tickets this gateway holds, one per (owner, app, vault).
//!
//! A gateway asks an owner for a ticket before its first write there and keeps it for the
//! following writes until shortly before it expires (SPEC section 3). This module owns that
//! keeping: which ticket to present, when one is too close to expiry to risk, dropping one the
//! owner refused at the door, and the bound on how many are kept. It does not fetch tickets;
//! the caller does that and inserts what it gets.

use std::collections::HashMap;

use crate::key::NodeId;
use crate::ticket::Ticket;

/// How long before its expiry a cached ticket stops being handed out: 30 seconds.
///
/// A ticket is checked at the owner's door, by the owner's clock, after the request has crossed
/// the network and maybe waited in a queue. Renewing this much early leaves room for that
/// transit and for ordinary clock skew, so a ticket the cache hands out does not expire on the
/// way. It is small next to the default lifetime of 10 minutes, so renewals stay rare.
pub const DEFAULT_REFRESH_MARGIN_MS: u64 = 30_000;

/// How many tickets the cache keeps by default. One per (owner, app, vault) in use; a
/// gateway rarely writes to more than a few dozen such combinations within a ticket lifetime.
pub const DEFAULT_MAX_TICKETS: usize = 1024;

/// What a ticket is cached under.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct TicketKey {
    owner: NodeId,
    app: String,
    vault: String,
}

impl TicketKey {
    fn new(owner: &NodeId, app: &str, vault: &str) -> Self {
        Self {
            owner: *owner,
            app: app.to_owned(),
            vault: vault.to_owned(),
        }
    }

    fn of(ticket: &Ticket) -> Self {
        Self::new(
            &ticket.claims.owner,
            &ticket.claims.app,
            &ticket.claims.vault,
        )
    }
}

/// Tickets held by this gateway, bounded in entries.
///
/// When full, inserting a ticket for a new (owner, app, vault) evicts the ticket that expires
/// soonest: it is the one closest to needing a renewal anyway, and an already expired one goes
/// first. Nothing here checks signatures; verify a ticket with [`Ticket::is_signed_by`]
/// before inserting it if it came from somewhere untrusted.
#[derive(Debug, Clone)]
pub struct TicketCache {
    tickets: HashMap<TicketKey, Ticket>,
    max_entries: usize,
    refresh_margin_ms: u64,
}

impl TicketCache {
    /// A cache keeping at most `max_entries` tickets (at least one, whatever is asked), handing
    /// each out only while more than `refresh_margin_ms` remains before its expiry.
    ///
    /// A margin as long as the owner's ticket lifetime means no ticket is ever handed out, so
    /// every write fetches a new one; keep it well below [`crate::DEFAULT_TICKET_LIFETIME_MS`].
    pub fn new(max_entries: usize, refresh_margin_ms: u64) -> Self {
        Self {
            tickets: HashMap::new(),
            max_entries: max_entries.max(1),
            refresh_margin_ms,
        }
    }

    /// The most tickets this cache keeps.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// How long before expiry a ticket stops being handed out.
    pub fn refresh_margin_ms(&self) -> u64 {
        self.refresh_margin_ms
    }

    /// The ticket to present for a write to `vault` of `owner` on behalf of `app`, if one is
    /// held and more than the refresh margin remains before it expires (strictly:
    /// `now_ms + refresh_margin < expires_at_ms`). `None` means: ask the owner for a new one.
    pub fn get(&self, owner: &NodeId, app: &str, vault: &str, now_ms: u64) -> Option<&Ticket> {
        self.tickets
            .get(&TicketKey::new(owner, app, vault))
            .filter(|ticket| self.is_usable(ticket, now_ms))
    }

    /// Keeps `ticket` under its own owner, app and vault, replacing any ticket held there:
    /// the one just fetched is the one the owner currently stands behind (after a rotation, an
    /// older ticket with a later expiry would only be refused).
    pub fn insert(&mut self, ticket: Ticket) {
        let key = TicketKey::of(&ticket);
        if !self.tickets.contains_key(&key) && self.tickets.len() >= self.max_entries {
            self.evict_soonest_expiring();
        }
        self.tickets.insert(key, ticket);
    }

    /// Drops the ticket for (owner, app, vault), returning it. Used after the owner refused it
    /// at the door, so the renewal fetches a new one instead of presenting it again.
    pub fn invalidate(&mut self, owner: &NodeId, app: &str, vault: &str) -> Option<Ticket> {
        self.tickets.remove(&TicketKey::new(owner, app, vault))
    }

    /// Drops every ticket from `owner` (for example when it is untrusted), returning how many.
    pub fn invalidate_owner(&mut self, owner: &NodeId) -> usize {
        let before = self.tickets.len();
        self.tickets.retain(|key, _| key.owner != *owner);
        before - self.tickets.len()
    }

    /// Drops every ticket [`TicketCache::get`] would no longer hand out at `now_ms`, returning
    /// how many. Optional housekeeping: such tickets are also evicted first when the cache is
    /// full, but pruning keeps the admin listing to what is still useful.
    pub fn prune(&mut self, now_ms: u64) -> usize {
        let before = self.tickets.len();
        let margin = self.refresh_margin_ms;
        self.tickets
            .retain(|_, ticket| usable_with_margin(ticket, margin, now_ms));
        before - self.tickets.len()
    }

    /// How many tickets are held, usable or not.
    pub fn len(&self) -> usize {
        self.tickets.len()
    }

    /// Whether no ticket is held.
    pub fn is_empty(&self) -> bool {
        self.tickets.is_empty()
    }

    /// Every ticket held, usable or not, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Ticket> {
        self.tickets.values()
    }

    /// Every ticket held, usable or not, sorted by owner, app and vault: a stable order for
    /// the admin listing (`ferry tickets list`).
    pub fn list(&self) -> Vec<&Ticket> {
        let mut entries: Vec<(&TicketKey, &Ticket)> = self.tickets.iter().collect();
        entries.sort_unstable_by(|left, right| left.0.cmp(right.0));
        entries.into_iter().map(|(_, ticket)| ticket).collect()
    }

    fn is_usable(&self, ticket: &Ticket, now_ms: u64) -> bool {
        usable_with_margin(ticket, self.refresh_margin_ms, now_ms)
    }

    /// Removes the ticket that expires soonest. Ties go to the smallest key, so which ticket
    /// leaves does not depend on the hash map's iteration order.
    fn evict_soonest_expiring(&mut self) {
        let soonest = self
            .tickets
            .iter()
            .min_by(|left, right| {
                (left.1.claims.expires_at_ms, left.0).cmp(&(right.1.claims.expires_at_ms, right.0))
            })
            .map(|(key, _)| key.clone());
        if let Some(key) = soonest {
            self.tickets.remove(&key);
        }
    }
}

impl Default for TicketCache {
    /// [`DEFAULT_MAX_TICKETS`] entries, [`DEFAULT_REFRESH_MARGIN_MS`] margin.
    fn default() -> Self {
        Self::new(DEFAULT_MAX_TICKETS, DEFAULT_REFRESH_MARGIN_MS)
    }
}

/// Whether more than `margin_ms` remains before `ticket` expires at `now_ms`. Saturating, so a
/// huge margin or clock value means "not usable" rather than wrapping into "usable".
fn usable_with_margin(ticket: &Ticket, margin_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_add(margin_ms) < ticket.claims.expires_at_ms
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::NodeKey;
    use crate::ticket::{VerbSet, DEFAULT_TICKET_LIFETIME_MS};

    const NOW_MS: u64 = 1_700_000_000_000;

    fn owner_key() -> NodeKey {
        NodeKey::from_secret_bytes([1; 32])
    }

    fn other_owner_key() -> NodeKey {
        NodeKey::from_secret_bytes([4; 32])
    }

    fn ticket_from(owner: &NodeKey, vault: &str, issued_at_ms: u64) -> Ticket {
        Ticket::issue(
            owner,
            NodeKey::from_secret_bytes([2; 32]).node_id(),
            "notes",
            vault,
            VerbSet::all_writes(),
            issued_at_ms,
            DEFAULT_TICKET_LIFETIME_MS,
            0,
        )
    }

    fn ticket(vault: &str, issued_at_ms: u64) -> Ticket {
        ticket_from(&owner_key(), vault, issued_at_ms)
    }

    #[test]
    fn a_ticket_is_handed_out_until_the_refresh_margin_and_not_at_it() {
        let mut cache = TicketCache::default();
        let held = ticket("journal", NOW_MS);
        let expires_at = held.claims.expires_at_ms;
        cache.insert(held.clone());
        let owner = owner_key().node_id();

        assert_eq!(cache.get(&owner, "notes", "journal", NOW_MS), Some(&held));
        let last_usable = expires_at - DEFAULT_REFRESH_MARGIN_MS - 1;
        assert_eq!(
            cache.get(&owner, "notes", "journal", last_usable),
            Some(&held)
        );
        let at_margin = expires_at - DEFAULT_REFRESH_MARGIN_MS;
        assert_eq!(cache.get(&owner, "notes", "journal", at_margin), None);
        assert_eq!(cache.get(&owner, "notes", "journal", u64::MAX), None);
        // Not handed out, but still listed for the admin until pruned.
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn lookups_match_owner_app_and_vault_exactly() {
        let mut cache = TicketCache::default();
        cache.insert(ticket("journal", NOW_MS));
        let owner = owner_key().node_id();
        assert!(cache.get(&owner, "notes", "journal", NOW_MS).is_some());
        assert!(cache.get(&owner, "mail", "journal", NOW_MS).is_none());
        assert!(cache.get(&owner, "notes", "inbox", NOW_MS).is_none());
        assert!(cache
            .get(&other_owner_key().node_id(), "notes", "journal", NOW_MS)
            .is_none());
    }

    #[test]
    fn invalidate_drops_the_ticket_so_the_next_write_renews() {
        let mut cache = TicketCache::default();
        let held = ticket("journal", NOW_MS);
        cache.insert(held.clone());
        cache.insert(ticket("inbox", NOW_MS));
        let owner = owner_key().node_id();

        assert_eq!(cache.invalidate(&owner, "notes", "journal"), Some(held));
        assert_eq!(cache.get(&owner, "notes", "journal", NOW_MS), None);
        assert!(cache.get(&owner, "notes", "inbox", NOW_MS).is_some());
        assert_eq!(cache.invalidate(&owner, "notes", "journal"), None);
    }

    #[test]
    fn invalidate_owner_drops_only_that_owners_tickets() {
        let mut cache = TicketCache::default();
        cache.insert(ticket("journal", NOW_MS));
        cache.insert(ticket("inbox", NOW_MS));
        cache.insert(ticket_from(&other_owner_key(), "journal", NOW_MS));
        assert_eq!(cache.invalidate_owner(&owner_key().node_id()), 2);
        assert_eq!(cache.len(), 1);
        assert!(cache
            .get(&other_owner_key().node_id(), "notes", "journal", NOW_MS)
            .is_some());
    }

    #[test]
    fn a_new_ticket_replaces_the_old_one_for_the_same_key() {
        let mut cache = TicketCache::new(1, DEFAULT_REFRESH_MARGIN_MS);
        cache.insert(ticket("journal", NOW_MS));
        let renewed = ticket("journal", NOW_MS + 5_000);
        cache.insert(renewed.clone());
        assert_eq!(cache.len(), 1);
        assert_eq!(
            cache.get(&owner_key().node_id(), "notes", "journal", NOW_MS),
            Some(&renewed)
        );
    }

    #[test]
    fn a_full_cache_evicts_the_soonest_expiring_ticket() {
        let mut cache = TicketCache::new(2, DEFAULT_REFRESH_MARGIN_MS);
        cache.insert(ticket("later", NOW_MS + 1_000));
        cache.insert(ticket("sooner", NOW_MS));
        cache.insert(ticket("newest", NOW_MS + 2_000));
        assert_eq!(cache.len(), 2);
        let owner = owner_key().node_id();
        assert!(cache.get(&owner, "notes", "sooner", NOW_MS).is_none());
        assert!(cache.get(&owner, "notes", "later", NOW_MS).is_some());
        assert!(cache.get(&owner, "notes", "newest", NOW_MS).is_some());
    }

    #[test]
    fn a_zero_bound_still_keeps_one_ticket() {
        let mut cache = TicketCache::new(0, DEFAULT_REFRESH_MARGIN_MS);
        assert_eq!(cache.max_entries(), 1);
        cache.insert(ticket("journal", NOW_MS));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn prune_drops_only_tickets_past_their_refresh_margin() {
        let mut cache = TicketCache::default();
        cache.insert(ticket("old", NOW_MS));
        cache.insert(ticket("fresh", NOW_MS + DEFAULT_TICKET_LIFETIME_MS));
        let later = NOW_MS + DEFAULT_TICKET_LIFETIME_MS - DEFAULT_REFRESH_MARGIN_MS;
        assert_eq!(cache.prune(later), 1);
        let listed: Vec<&str> = cache
            .iter()
            .map(|held| held.claims.vault.as_str())
            .collect();
        assert_eq!(listed, vec!["fresh"]);
    }

    #[test]
    fn the_admin_listing_is_sorted_by_owner_app_and_vault() {
        let mut cache = TicketCache::default();
        for vault in ["c", "a", "b"] {
            cache.insert(ticket(vault, NOW_MS));
        }
        let listed: Vec<&str> = cache
            .list()
            .into_iter()
            .map(|held| held.claims.vault.as_str())
            .collect();
        assert_eq!(listed, vec!["a", "b", "c"]);
    }
}
