//! The outbox's decisions (SPEC 10a, `docs/outbox.md`): which queued write the local gateway
//! sends next, and what becomes of each, with no IO in them. Not yet driven by the gateway
//! (issue 45): the store, the sender and the API are still to come.
//!
//! Writes wait in lanes, one per app and vault, in the order they were queued. A lane sends its
//! head only, and only once everything queued before it has a final state, so an app's later
//! write never overtakes its earlier one. A write leaves `queued` exactly once, by whichever of
//! the sender ([`Outbox::start`]), the app's cancel ([`Outbox::cancel`]) and its expiry
//! ([`Outbox::expire`]) comes first; the driver makes each such move one transaction, so
//! `cancelled` and `expired` are only ever said of a write of which nothing ran: never handed to
//! the sender, or handed and refused `busy` or `rate_limited` (the owner certifies nothing ran
//! and journals nothing), whose wire id is then never sent again.
//!
//! An app's request id is queued at most once, ever: the driver refuses to queue an id that may
//! already have left (sent directly: [`crate::capacity::send_gate::RecentIds`] and the sent
//! mark), and once a fate is forgotten ([`Outbox::forget`]) every id stamped up to the forgotten
//! one is refused, since a second row would get a second wire id.
//!
//! Each queued write is sent under a **wire id** the sender mints when it first starts it and
//! keeps for good (`docs/outbox.md`, "Two ids"): an owner's `busy` or `rate_limited` (nothing ran)
//! puts it back in its place with that wire id, and no path gives one queued write a second wire
//! id, so the owner's journal sees every copy of it as one request.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::wire::RequestId;

/// How long a queued write may wait by default before it expires: a week.
pub const DEFAULT_MAX_AGE_MS: u64 = 7 * 24 * 3600 * 1000;

/// The outbox's bounds; a write past any of them is refused at once, nothing queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxRules {
    /// Writes of one app waiting (queued or sending), every vault together.
    pub per_app_writes: u32,
    /// Their bytes.
    pub per_app_bytes: u64,
    /// Writes waiting, every app together.
    pub total_writes: u32,
    /// Their bytes.
    pub total_bytes: u64,
    /// The longest `max_age` an app may ask for.
    pub longest_max_age_ms: u64,
    /// How long a wire id stays good to send again after a `busy`: under the owner's journal
    /// retention (7 days by default), which refuses older ids as stale. A queued write whose
    /// wire id is older expires (nothing of it ran).
    pub wire_id_lasts_ms: u64,
}

impl Default for OutboxRules {
    /// Room for a person's offline days: ten thousand edits per app, a hundred thousand in all.
    fn default() -> Self {
        Self {
            per_app_writes: 10_000,
            per_app_bytes: 256 << 20,
            total_writes: 100_000,
            total_bytes: 1 << 30,
            longest_max_age_ms: 30 * 24 * 3600 * 1000,
            wire_id_lasts_ms: 6 * 24 * 3600 * 1000,
        }
    }
}

/// A queued write's final state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// The owner carried it out.
    Done { revision: u64 },
    /// The owner answered and did not carry it out, for good (a compare-and-swap that lost, a
    /// refused ticket, ...): its reason.
    Refused { reason: String },
    /// It may have left; the owner then certified it never ran and never will.
    NotCarriedOut,
    /// Nothing was sent: it waited past its `max_age`.
    Expired,
    /// Nothing was sent: the app withdrew it before the sender started it.
    Cancelled,
}

/// Where a queued write is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Waiting in its lane; never handed to the sender, or handed and refused `busy` (nothing
    /// ran).
    Queued,
    /// Handed to the sender under its wire id: it may have left, so only the owner's answer (or
    /// a settle of the wire id) ends it.
    Sending,
    Final(Fate),
}

/// One queued write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<A, V> {
    pub app: A,
    pub vault: V,
    /// The app's request id: the write's name here.
    pub id: RequestId,
    /// The id it is sent under, once the sender first started it.
    pub wire: Option<RequestId>,
    pub state: State,
    pub queued_at_ms: u64,
    pub expires_at_ms: u64,
    pub bytes: u64,
}

impl<A, V> Entry<A, V> {
    /// Past its `max_age`, or holding a wire id older than `wire_id_lasts_ms` (which the owner
    /// would refuse as stale): if still queued, it expires rather than being sent.
    fn past_due(&self, wire_id_lasts_ms: u64, now_ms: u64) -> bool {
        self.expires_at_ms <= now_ms
            || self
                .wire
                .is_some_and(|w| w.unix_ms().saturating_add(wire_id_lasts_ms) <= now_ms)
    }
}

/// Which bound a write would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    PerAppWrites,
    PerAppBytes,
    TotalWrites,
    TotalBytes,
}

/// What [`Outbox::queue`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Queued {
    /// Queued now.
    New,
    /// The same id was queued before, for the same app and vault (an app's HTTP client that
    /// gave up before its `202` and sent it again): nothing new, here is where it is.
    Already(State),
}

/// Why [`Outbox::queue`] took nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueRefused {
    /// Past a bound: nothing queued, nothing sent.
    Full(Bound),
    /// The id names another app's or vault's queued write.
    IdInUse,
    /// The `max_age` asked for is zero or longer than the rules allow.
    BadMaxAge,
    /// The id is stamped no later than a write whose fate was forgotten: it may be that write.
    Forgotten,
}

/// What [`Outbox::cancel`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancel {
    /// It was queued and now never will be sent.
    Cancelled,
    /// Too late: the sender has it, or it has a final state.
    TooLate(State),
    Unknown,
}

/// A write for the sender to send now, under `wire`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start<A, V> {
    pub app: A,
    pub vault: V,
    pub id: RequestId,
    pub wire: RequestId,
}

/// How a send ended, as far as the outbox cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// A final state from the owner (or a settle of the wire id).
    Final(Fate),
    /// Nothing of it ran: the owner refused it `busy` or `rate_limited`, or nothing left at all
    /// (no route after all, the gateway stopping). Back to its place, keeping its wire id; its
    /// lane sends nothing before `retry_after_ms`.
    NotRun { retry_after_ms: u64 },
}

/// The outbox: every queued write not yet forgotten, and the lanes of those still waiting.
#[derive(Debug)]
pub struct Outbox<A: Ord + Clone, V: Ord + Clone> {
    rules: OutboxRules,
    entries: HashMap<RequestId, Entry<A, V>>,
    /// Per (app, vault): the ids not yet final, in queue order.
    lanes: BTreeMap<(A, V), VecDeque<RequestId>>,
    /// Per (app, vault): sends nothing before this.
    not_before_ms: BTreeMap<(A, V), u64>,
    /// Per app: writes and bytes waiting.
    per_app: BTreeMap<A, (u32, u64)>,
    total: (u32, u64),
    /// Ids stamped at or before this may have had a fate that was forgotten.
    forgotten_up_to_ms: u64,
}

impl<A: Ord + Clone, V: Ord + Clone> Outbox<A, V> {
    pub fn new(rules: OutboxRules) -> Self {
        Self {
            rules,
            entries: HashMap::new(),
            lanes: BTreeMap::new(),
            not_before_ms: BTreeMap::new(),
            per_app: BTreeMap::new(),
            total: (0, 0),
            forgotten_up_to_ms: 0,
        }
    }

    /// The outbox as its store left it: `entries` in queue order, and the stamp up to which
    /// fates were forgotten ([`Outbox::forgotten_up_to_ms`]). A write that was `Sending`
    /// when the gateway stopped may have left: it stays `Sending`, for the driver to settle by
    /// its wire id ([`Outbox::to_settle`]); it is never started again.
    pub fn restore(
        rules: OutboxRules,
        entries: impl IntoIterator<Item = Entry<A, V>>,
        forgotten_up_to_ms: u64,
    ) -> Self {
        let mut outbox = Self::new(rules);
        outbox.forgotten_up_to_ms = forgotten_up_to_ms;
        for entry in entries {
            outbox.enlist(entry);
        }
        outbox
    }

    /// An app asks to queue a write of `bytes` for `vault` under `id`.
    pub fn queue(
        &mut self,
        app: A,
        vault: V,
        id: RequestId,
        bytes: u64,
        max_age_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<Queued, QueueRefused> {
        if let Some(entry) = self.entries.get(&id) {
            return if entry.app == app && entry.vault == vault {
                Ok(Queued::Already(entry.state.clone()))
            } else {
                Err(QueueRefused::IdInUse)
            };
        }
        if self.forgotten_up_to_ms > 0 && id.unix_ms() <= self.forgotten_up_to_ms {
            return Err(QueueRefused::Forgotten);
        }
        let max_age_ms = max_age_ms.unwrap_or(DEFAULT_MAX_AGE_MS);
        if max_age_ms == 0 || max_age_ms > self.rules.longest_max_age_ms {
            return Err(QueueRefused::BadMaxAge);
        }
        let (app_writes, app_bytes) = self.per_app.get(&app).copied().unwrap_or_default();
        let rules = self.rules;
        let full = [
            (app_writes >= rules.per_app_writes, Bound::PerAppWrites),
            (
                app_bytes.saturating_add(bytes) > rules.per_app_bytes,
                Bound::PerAppBytes,
            ),
            (self.total.0 >= rules.total_writes, Bound::TotalWrites),
            (
                self.total.1.saturating_add(bytes) > rules.total_bytes,
                Bound::TotalBytes,
            ),
        ];
        if let Some((_, bound)) = full.into_iter().find(|(over, _)| *over) {
            return Err(QueueRefused::Full(bound));
        }
        self.enlist(Entry {
            app,
            vault,
            id,
            wire: None,
            state: State::Queued,
            queued_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(max_age_ms),
            bytes,
        });
        Ok(Queued::New)
    }

    /// The app withdraws `id`: done only while it is queued.
    pub fn cancel(&mut self, id: &RequestId) -> Cancel {
        match self.entries.get(id).map(|e| e.state.clone()) {
            None => Cancel::Unknown,
            Some(State::Queued) => {
                self.finish(id, Fate::Cancelled);
                Cancel::Cancelled
            }
            Some(state) => Cancel::TooLate(state),
        }
    }

    /// Queued writes past their `max_age`, or whose wire id is too old to send again, expire
    /// (nothing of them ran): their ids.
    pub fn expire(&mut self, now_ms: u64) -> Vec<RequestId> {
        let lasts = self.rules.wire_id_lasts_ms;
        let due: Vec<RequestId> = self
            .entries
            .values()
            .filter(|e| e.state == State::Queued && e.past_due(lasts, now_ms))
            .map(|e| e.id)
            .collect();
        for id in &due {
            self.finish(id, Fate::Expired);
        }
        due
    }

    /// What to send now: the head of every lane whose vault's owner has a proven route
    /// (`route_up`), that is queued, not told to wait and not past due. Each becomes `Sending`
    /// under its wire id, minted by `mint` the first time. A head past due waits for
    /// [`Outbox::expire`], which the driver calls first and whose fates it records; this looks
    /// at the heads only, since it runs at every send's end.
    pub fn start(
        &mut self,
        now_ms: u64,
        mut route_up: impl FnMut(&V) -> bool,
        mut mint: impl FnMut() -> RequestId,
    ) -> Vec<Start<A, V>> {
        let lasts = self.rules.wire_id_lasts_ms;
        let mut starts = Vec::new();
        for (lane, ids) in &self.lanes {
            if self.not_before_ms.get(lane).is_some_and(|&t| t > now_ms) || !route_up(&lane.1) {
                continue;
            }
            let Some(entry) = ids.front().and_then(|id| self.entries.get_mut(id)) else {
                continue;
            };
            if entry.state != State::Queued || entry.past_due(lasts, now_ms) {
                continue;
            }
            let wire = *entry.wire.get_or_insert_with(&mut mint);
            entry.state = State::Sending;
            starts.push(Start {
                app: entry.app.clone(),
                vault: entry.vault.clone(),
                id: entry.id,
                wire,
            });
        }
        starts
    }

    /// A send of `id` ended. Anything but a `Sending` write's end is ignored (a late answer
    /// after a restart settled it already).
    pub fn ended(&mut self, id: &RequestId, ended: Ended, now_ms: u64) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        if entry.state != State::Sending {
            return;
        }
        match ended {
            Ended::Final(fate) => self.finish(id, fate),
            Ended::NotRun { retry_after_ms } => {
                entry.state = State::Queued;
                let lane = (entry.app.clone(), entry.vault.clone());
                self.not_before_ms
                    .insert(lane, now_ms.saturating_add(retry_after_ms));
            }
        }
    }

    /// The writes that may have left and have no final state: what the driver settles by wire
    /// id after a restart.
    pub fn to_settle(&self) -> Vec<(RequestId, RequestId)> {
        self.entries
            .values()
            .filter(|e| e.state == State::Sending)
            .filter_map(|e| Some((e.id, e.wire?)))
            .collect()
    }

    pub fn entry(&self, id: &RequestId) -> Option<&Entry<A, V>> {
        self.entries.get(id)
    }

    /// Forgets a write with a final state (the driver keeps fates as long as it promises to);
    /// from then on no id stamped up to it is queued ([`QueueRefused::Forgotten`]).
    pub fn forget(&mut self, id: &RequestId) -> bool {
        if matches!(
            self.entries.get(id).map(|e| &e.state),
            Some(State::Final(_))
        ) {
            self.entries.remove(id);
            self.forgotten_up_to_ms = self.forgotten_up_to_ms.max(id.unix_ms());
            return true;
        }
        false
    }

    /// The stamp up to which fates were forgotten, for the store to keep.
    pub fn forgotten_up_to_ms(&self) -> u64 {
        self.forgotten_up_to_ms
    }

    /// The lanes with writes waiting, each with its ids in queue order.
    pub fn lanes(&self) -> impl Iterator<Item = (&(A, V), &VecDeque<RequestId>)> {
        self.lanes.iter()
    }

    /// Writes and bytes waiting, every app together.
    pub fn waiting(&self) -> (u32, u64) {
        self.total
    }

    /// `entry` joins the outbox, at the back of its lane and holding its room unless final.
    fn enlist(&mut self, entry: Entry<A, V>) {
        if !matches!(entry.state, State::Final(_)) {
            let held = self.per_app.entry(entry.app.clone()).or_default();
            held.0 += 1;
            held.1 = held.1.saturating_add(entry.bytes);
            self.total.0 += 1;
            self.total.1 = self.total.1.saturating_add(entry.bytes);
            self.lanes
                .entry((entry.app.clone(), entry.vault.clone()))
                .or_default()
                .push_back(entry.id);
        }
        self.entries.insert(entry.id, entry);
    }

    /// `id` takes its final state: out of its lane, its room given back.
    fn finish(&mut self, id: &RequestId, fate: Fate) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        entry.state = State::Final(fate);
        let lane = (entry.app.clone(), entry.vault.clone());
        let (app, bytes) = (entry.app.clone(), entry.bytes);
        if let Some(ids) = self.lanes.get_mut(&lane) {
            ids.retain(|queued| queued != id);
            if ids.is_empty() {
                self.lanes.remove(&lane);
                self.not_before_ms.remove(&lane);
            }
        }
        if let Some(held) = self.per_app.get_mut(&app) {
            held.0 = held.0.saturating_sub(1);
            held.1 = held.1.saturating_sub(bytes);
            if held.0 == 0 {
                self.per_app.remove(&app);
            }
        }
        self.total.0 = self.total.0.saturating_sub(1);
        self.total.1 = self.total.1.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests;
