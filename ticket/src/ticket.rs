//! Tickets: short-lived capabilities an owner signs for one holder, app and vault.
//!
//! This module owns what a ticket claims, the canonical bytes the owner's signature covers,
//! issuing a ticket, and the door: the check an owner runs on a ticket before any verb runs.
//! Nothing here reads a clock or touches the network; the time is always an argument
//! (`now_ms`, milliseconds since the Unix epoch), so the same ticket, door and time always give
//! the same answer.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::key::{NodeId, NodeKey};

/// How long a ticket lives unless the owner's config says otherwise: 10 minutes (SPEC section 3).
pub const DEFAULT_TICKET_LIFETIME_MS: u64 = 600_000;

/// The first bytes of every ticket's signed message.
///
/// A node key signs more than tickets. Starting the message with a tag that nothing else uses
/// means a signature made for some other purpose can never be passed off as a ticket, and the
/// version in the tag lets a later layout coexist with this one. The trailing NUL ends the tag,
/// so no tag can be a prefix of another.
pub const TICKET_SIGNING_DOMAIN: &[u8] = b"ferry-ticket-v1\0";

/// The length of a ticket signature in bytes (an ed25519 signature).
pub const TICKET_SIGNATURE_LEN: usize = 64;

/// What a call asks the owner to do. Only writes need a ticket, so only writes are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// Store a value under a key.
    Put,
    /// Remove a key.
    Delete,
}

impl Verb {
    /// Every verb, in bit order.
    pub const ALL: [Verb; 2] = [Verb::Put, Verb::Delete];

    /// The verb's name as the SPEC and the wire spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verb::Put => "put",
            Verb::Delete => "delete",
        }
    }

    /// The verb's bit in a [`VerbSet`].
    ///
    /// These bits are signed into every ticket and carried on the wire: a bit, once given to a
    /// verb, must never be reused or moved, or old tickets would grant the wrong verbs.
    const fn bit(self) -> u8 {
        match self {
            Verb::Put => 1 << 0,
            Verb::Delete => 1 << 1,
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verbs a ticket allows, as a bitset (one byte on the wire).
///
/// Bits this version does not know are kept, not dropped: they are part of what the owner
/// signed, so clearing them on decode would break the signature of a ticket a newer owner
/// issued. [`VerbSet::contains`] only ever answers for verbs this version knows.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VerbSet(u8);

impl VerbSet {
    /// No verbs at all.
    pub const fn empty() -> Self {
        Self(0)
    }

    /// Every write verb: what an owner grants a trusted peer by default.
    pub const fn all_writes() -> Self {
        Self(Verb::Put.bit() | Verb::Delete.bit())
    }

    /// The set of the given verbs (duplicates are harmless).
    pub fn from_verbs(verbs: &[Verb]) -> Self {
        verbs.iter().copied().collect()
    }

    /// Wraps raw bits as carried on the wire, unknown bits included.
    pub const fn from_bits(bits: u8) -> Self {
        Self(bits)
    }

    /// The raw bits, as signed and carried on the wire.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether `verb` is allowed.
    pub const fn contains(self, verb: Verb) -> bool {
        self.0 & verb.bit() != 0
    }

    /// This set with `verb` added.
    #[must_use]
    pub const fn with(self, verb: Verb) -> Self {
        Self(self.0 | verb.bit())
    }

    /// Whether no bit at all is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The known verbs in the set, in bit order.
    pub fn iter(self) -> impl Iterator<Item = Verb> {
        Verb::ALL
            .into_iter()
            .filter(move |verb| self.contains(*verb))
    }

    /// The bits no verb of this version stands for.
    fn unknown_bits(self) -> u8 {
        self.0 & !Self::all_writes().0
    }
}

impl From<&[Verb]> for VerbSet {
    fn from(verbs: &[Verb]) -> Self {
        Self::from_verbs(verbs)
    }
}

impl FromIterator<Verb> for VerbSet {
    fn from_iter<I: IntoIterator<Item = Verb>>(verbs: I) -> Self {
        verbs.into_iter().fold(Self::empty(), Self::with)
    }
}

impl fmt::Display for VerbSet {
    /// Comma-separated verb names (`put,delete`), then any unknown bits in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for verb in self.iter() {
            if !first {
                f.write_str(",")?;
            }
            f.write_str(verb.as_str())?;
            first = false;
        }
        let unknown = self.unknown_bits();
        if unknown != 0 {
            if !first {
                f.write_str(",")?;
            }
            write!(f, "unknown:{unknown:#04x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for VerbSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VerbSet({self})")
    }
}

/// An owner's ed25519 signature over a ticket's claims.
///
/// A newtype because serde has no impl for `[u8; 64]`. Text formats (JSON, for the admin
/// listing) carry it as 128 hex digits; binary formats carry it as exactly 64 bytes with no
/// length prefix, since the length never varies.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TicketSignature([u8; TICKET_SIGNATURE_LEN]);

impl TicketSignature {
    /// Wraps raw signature bytes.
    pub const fn from_bytes(bytes: [u8; TICKET_SIGNATURE_LEN]) -> Self {
        Self(bytes)
    }

    /// The raw signature bytes.
    pub const fn as_bytes(&self) -> &[u8; TICKET_SIGNATURE_LEN] {
        &self.0
    }
}

impl fmt::Debug for TicketSignature {
    /// The first eight bytes are plenty to tell signatures apart in a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TicketSignature({}…)", hex::encode(&self.0[..8]))
    }
}

impl Serialize for TicketSignature {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&hex::encode(self.0))
        } else {
            let mut tuple = serializer.serialize_tuple(TICKET_SIGNATURE_LEN)?;
            for byte in &self.0 {
                tuple.serialize_element(byte)?;
            }
            tuple.end()
        }
    }
}

impl<'de> Deserialize<'de> for TicketSignature {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_str(TicketSignatureVisitor)
        } else {
            deserializer.deserialize_tuple(TICKET_SIGNATURE_LEN, TicketSignatureVisitor)
        }
    }
}

/// Accepts a signature as hex text, as a byte string, or as a sequence of 64 bytes, so
/// whichever shape a format hands over is read without allocating more than 64 bytes.
struct TicketSignatureVisitor;

impl<'de> Visitor<'de> for TicketSignatureVisitor {
    type Value = TicketSignature;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a {TICKET_SIGNATURE_LEN}-byte ed25519 signature (or {} hex digits)",
            TICKET_SIGNATURE_LEN * 2
        )
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        let mut bytes = [0u8; TICKET_SIGNATURE_LEN];
        hex::decode_to_slice(text, &mut bytes)
            .map_err(|_| E::invalid_value(de::Unexpected::Str(text), &self))?;
        Ok(TicketSignature(bytes))
    }

    fn visit_bytes<E: de::Error>(self, given: &[u8]) -> Result<Self::Value, E> {
        let bytes: [u8; TICKET_SIGNATURE_LEN] = given
            .try_into()
            .map_err(|_| E::invalid_length(given.len(), &self))?;
        Ok(TicketSignature(bytes))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut bytes = [0u8; TICKET_SIGNATURE_LEN];
        for (index, slot) in bytes.iter_mut().enumerate() {
            *slot = seq
                .next_element()?
                .ok_or_else(|| de::Error::invalid_length(index, &self))?;
        }
        // A longer sequence is not a signature with some padding; it is not a signature.
        if seq.next_element::<u8>()?.is_some() {
            return Err(de::Error::invalid_length(TICKET_SIGNATURE_LEN + 1, &self));
        }
        Ok(TicketSignature(bytes))
    }
}

/// What a ticket says: who issued it, to whom, for what, and for how long.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TicketClaims {
    /// The owner that issued the ticket and whose door accepts it.
    pub owner: NodeId,
    /// The caller's node id: the only key the ticket is good for on a TLS connection.
    pub holder: NodeId,
    /// The app on the holder's machine the ticket is for.
    pub app: String,
    /// The vault the ticket is for.
    pub vault: String,
    /// The verbs the ticket allows.
    pub verbs: VerbSet,
    /// When the owner issued it, by the owner's clock (ms since the Unix epoch). Informational:
    /// the door does not check it (see [`Ticket::check_at_door`]).
    pub issued_at_ms: u64,
    /// The first instant, by the owner's clock, at which the ticket is no longer accepted.
    pub expires_at_ms: u64,
    /// The owner's ticket epoch at issue; `ferry tickets rotate` moves the owner's epoch on.
    pub epoch: u64,
}

impl TicketClaims {
    /// The canonical bytes the owner's signature covers.
    ///
    /// Layout, in this order and never to be reordered (live tickets depend on it):
    /// [`TICKET_SIGNING_DOMAIN`], owner (32 bytes), holder (32 bytes), app and vault (each a
    /// u32 big-endian byte length then the UTF-8 bytes), verbs (1 byte), issued_at_ms,
    /// expires_at_ms and epoch (each u64 big-endian).
    ///
    /// Built by hand rather than by a serde format so that the signed bytes cannot change when
    /// a dependency or the wire encoding changes. Every field has a fixed width or a length
    /// prefix, so the bytes can be read back in exactly one way: two different claim sets never
    /// give the same bytes (for example, `app = "ab", vault = "c"` and `app = "a", vault = "bc"`).
    pub fn signing_bytes(&self) -> Vec<u8> {
        let capacity = TICKET_SIGNING_DOMAIN.len()
            + 2 * crate::key::NODE_ID_LEN
            + 2 * 4
            + self.app.len()
            + self.vault.len()
            + 1
            + 3 * 8;
        let mut bytes = Vec::with_capacity(capacity);
        bytes.extend_from_slice(TICKET_SIGNING_DOMAIN);
        bytes.extend_from_slice(self.owner.as_bytes());
        bytes.extend_from_slice(self.holder.as_bytes());
        push_length_prefixed(&mut bytes, self.app.as_bytes());
        push_length_prefixed(&mut bytes, self.vault.as_bytes());
        bytes.push(self.verbs.bits());
        bytes.extend_from_slice(&self.issued_at_ms.to_be_bytes());
        bytes.extend_from_slice(&self.expires_at_ms.to_be_bytes());
        bytes.extend_from_slice(&self.epoch.to_be_bytes());
        bytes
    }

    /// Whether the claims allow `verb` on `vault` for `app`. Names must match exactly: no case
    /// folding, no wildcards.
    pub fn covers(&self, app: &str, vault: &str, verb: Verb) -> bool {
        self.app == app && self.vault == vault && self.verbs.contains(verb)
    }

    /// Whether the ticket is past its expiry at `now_ms`. The expiry instant itself counts as
    /// expired, so a lifetime of N ms means exactly N ms of validity.
    pub fn is_expired_at(&self, now_ms: u64) -> bool {
        now_ms >= self.expires_at_ms
    }
}

/// Appends `field` with its length in front, as a u32 big-endian.
///
/// A name of 4 GiB or more cannot reach this code: app and vault names arrive in length-capped
/// frames and local requests, far below that. Should one ever get here, the length saturates
/// rather than wrapping or panicking; the result is still deterministic, just no longer
/// guaranteed to be unambiguous, which is why callers cap names long before.
fn push_length_prefixed(bytes: &mut Vec<u8>, field: &[u8]) {
    let length = u32::try_from(field.len()).unwrap_or(u32::MAX);
    bytes.extend_from_slice(&length.to_be_bytes());
    bytes.extend_from_slice(field);
}

/// A ticket: the claims and the owner's signature over [`TicketClaims::signing_bytes`].
///
/// The fields are public because a ticket is plain data that travels in frames and caches; a
/// ticket whose fields were changed after signing simply fails the door with
/// [`DoorRefusal::BadSignature`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ticket {
    /// What the ticket says.
    pub claims: TicketClaims,
    /// The owner's signature over the claims' canonical bytes.
    pub signature: TicketSignature,
}

impl Ticket {
    /// Issues a ticket signed by `owner_key`, valid from `now_ms` for `lifetime_ms`
    /// (normally [`DEFAULT_TICKET_LIFETIME_MS`]) at the owner's current `epoch`.
    ///
    /// Deciding whether the holder deserves the ticket is the caller's business (trust store and
    /// config); this only writes and signs it. The expiry saturates instead of overflowing.
    #[allow(
        clippy::too_many_arguments,
        reason = "each argument is a distinct claim; a builder would only rename them"
    )]
    pub fn issue(
        owner_key: &NodeKey,
        holder: NodeId,
        app: impl Into<String>,
        vault: impl Into<String>,
        verbs: VerbSet,
        now_ms: u64,
        lifetime_ms: u64,
        epoch: u64,
    ) -> Ticket {
        let claims = TicketClaims {
            owner: owner_key.node_id(),
            holder,
            app: app.into(),
            vault: vault.into(),
            verbs,
            issued_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(lifetime_ms),
            epoch,
        };
        Self::sign_claims(owner_key, claims)
    }

    /// Signs claims exactly as given.
    ///
    /// Unlike [`Ticket::issue`] this does not set `claims.owner` to the signing key's id; a
    /// ticket whose `owner` is not the signer is refused at every door. Meant for tests and
    /// for re-signing claims built elsewhere.
    pub fn sign_claims(owner_key: &NodeKey, claims: TicketClaims) -> Ticket {
        let signature = TicketSignature(owner_key.sign(&claims.signing_bytes()));
        Ticket { claims, signature }
    }

    /// Whether this ticket names `owner` and carries `owner`'s valid signature over its claims.
    ///
    /// A caller can use this on a ticket it has just been given, before caching it, with the
    /// id of the owner it asked.
    pub fn is_signed_by(&self, owner: &NodeId) -> bool {
        self.claims.owner == *owner
            && owner
                .verify(&self.claims.signing_bytes(), self.signature.as_bytes())
                .is_ok()
    }

    /// The door: the owner's checks of a ticket before any verb runs (SPEC section 7, rule 1).
    ///
    /// The checks run in this order, and the first failure is the answer:
    ///
    /// 1. **Signature** ([`DoorRefusal::BadSignature`]): the ticket names this owner and this
    ///    owner's key signed exactly these claims. First, because until the signature holds,
    ///    the claims are whatever the sender chose to write: answering anything more specific
    ///    to a forged or altered ticket would let a forger probe which claims the door likes.
    /// 2. **Holder** ([`DoorRefusal::WrongHolder`]): the holder is the key on this TLS
    ///    connection. Before coverage and time, so a peer presenting someone else's ticket
    ///    learns nothing about what that ticket allows or how long it lives.
    /// 3. **Coverage** ([`DoorRefusal::NotCovered`]): app, vault and verb are in the ticket.
    /// 4. **Epoch** ([`DoorRefusal::OldEpoch`]): the ticket was issued at the current epoch.
    /// 5. **Expiry** ([`DoorRefusal::Expired`]): `now_ms < expires_at_ms`.
    ///
    /// Epoch and expiry come last because they are the ordinary, curable reasons: a fresh
    /// ticket fixes them. Reporting them only when everything else holds means that when the
    /// caller renews once after one of them, the renewed ticket really will pass. Epoch goes
    /// before expiry because a rotation is the rarer and more telling event for an operator.
    ///
    /// The epoch must be equal, not merely not older: a ticket from a *later* epoch than the
    /// owner's current one means the owner's epoch went backwards (a restored database, say),
    /// and the tickets of that lost future must not come back to life.
    ///
    /// `issued_at_ms` is not checked: the owner's own clock wrote it, and refusing tickets
    /// "from the future" after a clock step back would only add a failure no caller can fix.
    pub fn check_at_door(&self, door: &DoorContext<'_>) -> Result<(), DoorRefusal> {
        if !self.is_signed_by(door.owner) {
            return Err(DoorRefusal::BadSignature);
        }
        self.check_claims_at_door(door)
    }

    /// [`Ticket::check_at_door`], with signatures already verified remembered in `verified`:
    /// a caller presents the same ticket for every write until it renews, and an ed25519
    /// verification costs tens of microseconds. The memory is keyed by the whole ticket
    /// (claims and signature), so a ticket differing in any byte is verified afresh; the
    /// claims checks run every time.
    pub fn check_at_door_remembering(
        &self,
        door: &DoorContext<'_>,
        verified: &mut VerifiedTickets,
    ) -> Result<(), DoorRefusal> {
        if self.claims.owner != *door.owner {
            return Err(DoorRefusal::BadSignature);
        }
        if !verified.contains(self) {
            if !self.is_signed_by(door.owner) {
                return Err(DoorRefusal::BadSignature);
            }
            verified.insert(self.clone());
        }
        self.check_claims_at_door(door)
    }

    /// Checks 2-5 of the door, for a ticket whose signature holds.
    fn check_claims_at_door(&self, door: &DoorContext<'_>) -> Result<(), DoorRefusal> {
        let claims = &self.claims;
        if claims.holder != *door.connection_peer {
            return Err(DoorRefusal::WrongHolder);
        }
        if !claims.covers(door.app, door.vault, door.verb) {
            return Err(DoorRefusal::NotCovered);
        }
        if claims.epoch != door.current_epoch {
            return Err(DoorRefusal::OldEpoch);
        }
        if claims.is_expired_at(door.now_ms) {
            return Err(DoorRefusal::Expired);
        }
        Ok(())
    }
}

/// Tickets whose signature this owner has verified (see
/// [`Ticket::check_at_door_remembering`]). Bounded: when full it forgets everything, which only
/// costs one verification per live ticket.
#[derive(Debug, Default)]
pub struct VerifiedTickets {
    seen: std::collections::HashSet<Ticket>,
}

impl VerifiedTickets {
    /// The most tickets remembered (one per caller, app and vault is typical).
    pub const MAX: usize = 4096;

    fn contains(&self, ticket: &Ticket) -> bool {
        self.seen.contains(ticket)
    }

    fn insert(&mut self, ticket: Ticket) {
        if self.seen.len() >= Self::MAX {
            self.seen.clear();
        }
        self.seen.insert(ticket);
    }
}

/// What the owner knows at the door when a write arrives: who it is, who is on the connection,
/// what the write asks for, and the time and epoch by its own reckoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoorContext<'a> {
    /// This owner's node id; only tickets it signed are accepted.
    pub owner: &'a NodeId,
    /// The node key the peer presented on the TLS connection the write arrived on.
    pub connection_peer: &'a NodeId,
    /// The app the write is for.
    pub app: &'a str,
    /// The vault the write is for.
    pub vault: &'a str,
    /// The verb the write asks for.
    pub verb: Verb,
    /// The owner's clock, ms since the Unix epoch.
    pub now_ms: u64,
    /// The owner's current ticket epoch.
    pub current_epoch: u64,
}

/// Why the door refused a ticket. Every refusal is `401 ticket_refused` with `at_door: true`
/// and the [`DoorRefusal::code`] as its reason; it certifies that no verb ran.
///
/// The SPEC lets the caller renew its ticket once after any door refusal and send the same
/// request id again; the variants say when that can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DoorRefusal {
    /// The ticket's expiry has passed by the owner's clock. The caller should drop it from its
    /// cache and ask for a new one; if a fresh ticket is refused as expired too, the two
    /// machines' clocks or the owner's configured lifetime need fixing.
    #[error("the ticket has expired; ask the owner for a new one (if a new one expires at once, check both machines' clocks)")]
    Expired,
    /// The ticket was not signed by this owner's node key over exactly these claims: it names
    /// another owner, was altered, or was forged. The caller should drop it and ask this owner
    /// for a ticket of its own; if it keeps happening, the caller is sending tickets to the
    /// wrong machine or something on the way changes them.
    #[error("the ticket was not signed by this owner's key over these claims; ask this owner for a new ticket")]
    BadSignature,
    /// The ticket is for another node than the key on this connection. The caller should ask
    /// for a ticket in its own name; a ticket is never lent between machines.
    #[error("the ticket was issued to a different node than the one on this connection; ask the owner for a ticket in your own name")]
    WrongHolder,
    /// The ticket does not allow this app, vault or verb. A renewal only helps if the caller
    /// sent the wrong cached ticket; otherwise the owner's config must allow the write.
    #[error("the ticket does not cover this app, vault or verb; ask the owner for a ticket that does, or change the owner's config to allow it")]
    NotCovered,
    /// The ticket was issued before the owner last rotated its tickets (`ferry tickets
    /// rotate`). The caller should drop it and ask for a new one, which will carry the new
    /// epoch.
    #[error(
        "the ticket was issued before the owner rotated its tickets; ask the owner for a new one"
    )]
    OldEpoch,
}

impl DoorRefusal {
    /// Every reason, in the order the door checks them.
    pub const ALL: [DoorRefusal; 5] = [
        DoorRefusal::BadSignature,
        DoorRefusal::WrongHolder,
        DoorRefusal::NotCovered,
        DoorRefusal::OldEpoch,
        DoorRefusal::Expired,
    ];

    /// The reason as the SPEC and the wire spell it (the same names serde uses).
    pub const fn code(&self) -> &'static str {
        match self {
            DoorRefusal::Expired => "expired",
            DoorRefusal::BadSignature => "bad_signature",
            DoorRefusal::WrongHolder => "wrong_holder",
            DoorRefusal::NotCovered => "not_covered",
            DoorRefusal::OldEpoch => "old_epoch",
        }
    }

    /// The reason a code names, for a caller reading a refusal off the wire; `None` for a code
    /// this version does not know.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.code() == code)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde::de::value::{
        BytesDeserializer, Error as ValueError, SeqDeserializer, StrDeserializer,
    };
    use serde::de::IntoDeserializer;

    use super::*;

    const NOW_MS: u64 = 1_700_000_000_000;
    const EPOCH: u64 = 3;

    fn owner_key() -> NodeKey {
        NodeKey::from_secret_bytes([1; 32])
    }

    fn holder_key() -> NodeKey {
        NodeKey::from_secret_bytes([2; 32])
    }

    fn stranger_key() -> NodeKey {
        NodeKey::from_secret_bytes([3; 32])
    }

    fn good_ticket() -> Ticket {
        Ticket::issue(
            &owner_key(),
            holder_key().node_id(),
            "notes",
            "journal",
            VerbSet::all_writes(),
            NOW_MS,
            DEFAULT_TICKET_LIFETIME_MS,
            EPOCH,
        )
    }

    /// Runs the door as the owner would for a write matching `good_ticket`, after `change`
    /// has adjusted what the door sees.
    fn door_answer(
        ticket: &Ticket,
        change: impl FnOnce(&mut DoorFields),
    ) -> Result<(), DoorRefusal> {
        let mut fields = DoorFields {
            owner: owner_key().node_id(),
            connection_peer: holder_key().node_id(),
            app: "notes".to_owned(),
            vault: "journal".to_owned(),
            verb: Verb::Put,
            now_ms: NOW_MS + 1_000,
            current_epoch: EPOCH,
        };
        change(&mut fields);
        ticket.check_at_door(&DoorContext {
            owner: &fields.owner,
            connection_peer: &fields.connection_peer,
            app: &fields.app,
            vault: &fields.vault,
            verb: fields.verb,
            now_ms: fields.now_ms,
            current_epoch: fields.current_epoch,
        })
    }

    /// Owned stand-ins for a [`DoorContext`]'s borrowed fields, so tests can tweak one.
    struct DoorFields {
        owner: NodeId,
        connection_peer: NodeId,
        app: String,
        vault: String,
        verb: Verb,
        now_ms: u64,
        current_epoch: u64,
    }

    fn assert_refused(answer: Result<(), DoorRefusal>, expected: DoorRefusal, code: &str) {
        assert_eq!(answer, Err(expected));
        assert_eq!(expected.code(), code);
    }

    #[test]
    fn a_good_ticket_passes_the_door_for_every_verb_it_allows() {
        let ticket = good_ticket();
        assert_eq!(door_answer(&ticket, |_| {}), Ok(()));
        assert_eq!(
            door_answer(&ticket, |door| door.verb = Verb::Delete),
            Ok(())
        );
        assert!(ticket.is_signed_by(&owner_key().node_id()));
        assert_eq!(ticket.claims.issued_at_ms, NOW_MS);
        assert_eq!(
            ticket.claims.expires_at_ms,
            NOW_MS + DEFAULT_TICKET_LIFETIME_MS
        );
    }

    #[test]
    fn an_expired_ticket_is_refused_as_expired() {
        let ticket = good_ticket();
        let answer = door_answer(&ticket, |door| {
            door.now_ms = NOW_MS + 2 * DEFAULT_TICKET_LIFETIME_MS
        });
        assert_refused(answer, DoorRefusal::Expired, "expired");
    }

    #[test]
    fn the_expiry_instant_itself_is_expired_and_the_one_before_is_not() {
        let ticket = good_ticket();
        let expires_at = ticket.claims.expires_at_ms;
        assert_eq!(
            door_answer(&ticket, |door| door.now_ms = expires_at - 1),
            Ok(())
        );
        assert_refused(
            door_answer(&ticket, |door| door.now_ms = expires_at),
            DoorRefusal::Expired,
            "expired",
        );
    }

    #[test]
    fn a_claim_changed_after_signing_is_refused_as_bad_signature() {
        let mut ticket = good_ticket();
        ticket.claims.expires_at_ms ^= 1 << 40;
        assert_refused(
            door_answer(&ticket, |_| {}),
            DoorRefusal::BadSignature,
            "bad_signature",
        );
    }

    #[test]
    fn a_flipped_signature_bit_is_refused_as_bad_signature() {
        let mut ticket = good_ticket();
        let mut bytes = *ticket.signature.as_bytes();
        bytes[17] ^= 0x04;
        ticket.signature = TicketSignature::from_bytes(bytes);
        assert_refused(
            door_answer(&ticket, |_| {}),
            DoorRefusal::BadSignature,
            "bad_signature",
        );
    }

    #[test]
    fn a_ticket_naming_this_owner_but_signed_by_another_key_is_bad_signature() {
        let claims = good_ticket().claims;
        let forged = Ticket::sign_claims(&stranger_key(), claims);
        assert_refused(
            door_answer(&forged, |_| {}),
            DoorRefusal::BadSignature,
            "bad_signature",
        );
    }

    #[test]
    fn another_owners_genuine_ticket_is_bad_signature_at_this_door() {
        let elsewhere = Ticket::issue(
            &stranger_key(),
            holder_key().node_id(),
            "notes",
            "journal",
            VerbSet::all_writes(),
            NOW_MS,
            DEFAULT_TICKET_LIFETIME_MS,
            EPOCH,
        );
        assert!(elsewhere.is_signed_by(&stranger_key().node_id()));
        assert_refused(
            door_answer(&elsewhere, |_| {}),
            DoorRefusal::BadSignature,
            "bad_signature",
        );
    }

    #[test]
    fn a_forged_ticket_gets_bad_signature_even_when_everything_else_is_wrong_too() {
        let mut ticket = good_ticket();
        ticket.claims.vault = "secrets".to_owned();
        let answer = door_answer(&ticket, |door| {
            door.connection_peer = stranger_key().node_id();
            door.now_ms = u64::MAX;
            door.current_epoch = EPOCH + 1;
        });
        assert_refused(answer, DoorRefusal::BadSignature, "bad_signature");
    }

    #[test]
    fn a_ticket_presented_by_another_node_is_wrong_holder() {
        let ticket = good_ticket();
        let answer = door_answer(&ticket, |door| {
            door.connection_peer = stranger_key().node_id()
        });
        assert_refused(answer, DoorRefusal::WrongHolder, "wrong_holder");
    }

    #[test]
    fn a_different_app_vault_or_verb_is_not_covered() {
        let put_only = Ticket::issue(
            &owner_key(),
            holder_key().node_id(),
            "notes",
            "journal",
            VerbSet::from_verbs(&[Verb::Put]),
            NOW_MS,
            DEFAULT_TICKET_LIFETIME_MS,
            EPOCH,
        );
        assert_eq!(door_answer(&put_only, |_| {}), Ok(()));
        for answer in [
            door_answer(&put_only, |door| door.app = "mail".to_owned()),
            door_answer(&put_only, |door| door.vault = "Journal".to_owned()),
            door_answer(&put_only, |door| door.verb = Verb::Delete),
        ] {
            assert_refused(answer, DoorRefusal::NotCovered, "not_covered");
        }
    }

    #[test]
    fn a_ticket_from_before_a_rotation_is_old_epoch() {
        let ticket = good_ticket();
        let answer = door_answer(&ticket, |door| door.current_epoch = EPOCH + 1);
        assert_refused(answer, DoorRefusal::OldEpoch, "old_epoch");
    }

    #[test]
    fn a_ticket_from_an_epoch_the_owner_never_reached_is_old_epoch() {
        let ticket = good_ticket();
        let answer = door_answer(&ticket, |door| door.current_epoch = EPOCH - 1);
        assert_refused(answer, DoorRefusal::OldEpoch, "old_epoch");
    }

    #[test]
    fn the_door_reports_the_first_failure_in_its_documented_order() {
        let ticket = good_ticket();
        let stranger = stranger_key().node_id();
        let everything_wrong = |door: &mut DoorFields| {
            door.connection_peer = stranger;
            door.verb = Verb::Delete;
            door.app = "mail".to_owned();
            door.current_epoch = EPOCH + 1;
            door.now_ms = u64::MAX;
        };
        assert_eq!(
            door_answer(&ticket, everything_wrong),
            Err(DoorRefusal::WrongHolder)
        );
        assert_eq!(
            door_answer(&ticket, |door| {
                everything_wrong(door);
                door.connection_peer = holder_key().node_id();
            }),
            Err(DoorRefusal::NotCovered)
        );
        assert_eq!(
            door_answer(&ticket, |door| {
                everything_wrong(door);
                door.connection_peer = holder_key().node_id();
                door.app = "notes".to_owned();
            }),
            Err(DoorRefusal::OldEpoch)
        );
        assert_eq!(
            door_answer(&ticket, |door| {
                everything_wrong(door);
                door.connection_peer = holder_key().node_id();
                door.app = "notes".to_owned();
                door.current_epoch = EPOCH;
            }),
            Err(DoorRefusal::Expired)
        );
    }

    #[test]
    fn moving_bytes_between_app_and_vault_changes_what_is_signed() {
        let ab_c = TicketClaims {
            app: "ab".to_owned(),
            vault: "c".to_owned(),
            ..good_ticket().claims
        };
        let a_bc = TicketClaims {
            app: "a".to_owned(),
            vault: "bc".to_owned(),
            ..ab_c.clone()
        };
        assert_ne!(ab_c.signing_bytes(), a_bc.signing_bytes());

        let signed = Ticket::sign_claims(&owner_key(), ab_c);
        let resplit = Ticket {
            claims: a_bc,
            signature: signed.signature,
        };
        assert_ne!(
            signed.signature,
            Ticket::sign_claims(&owner_key(), resplit.claims.clone()).signature
        );
        assert!(signed.is_signed_by(&owner_key().node_id()));
        assert!(!resplit.is_signed_by(&owner_key().node_id()));
    }

    #[test]
    fn signing_bytes_follow_the_documented_layout() {
        let claims = TicketClaims {
            owner: NodeId::from_bytes([0xaa; 32]),
            holder: NodeId::from_bytes([0xbb; 32]),
            app: "app".to_owned(),
            vault: "vault".to_owned(),
            verbs: VerbSet::from_verbs(&[Verb::Delete]),
            issued_at_ms: 0x0102_0304_0506_0708,
            expires_at_ms: 0x1112_1314_1516_1718,
            epoch: 9,
        };
        let mut expected = b"ferry-ticket-v1\0".to_vec();
        expected.extend([0xaa; 32]);
        expected.extend([0xbb; 32]);
        expected.extend([0, 0, 0, 3]);
        expected.extend(b"app");
        expected.extend([0, 0, 0, 5]);
        expected.extend(b"vault");
        expected.push(0b10);
        expected.extend([1, 2, 3, 4, 5, 6, 7, 8]);
        expected.extend([0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
        expected.extend([0, 0, 0, 0, 0, 0, 0, 9]);
        assert_eq!(claims.signing_bytes(), expected);
    }

    #[test]
    fn issue_saturates_an_expiry_past_the_end_of_time() {
        let ticket = Ticket::issue(
            &owner_key(),
            holder_key().node_id(),
            "notes",
            "journal",
            VerbSet::all_writes(),
            u64::MAX - 5,
            DEFAULT_TICKET_LIFETIME_MS,
            EPOCH,
        );
        assert_eq!(ticket.claims.expires_at_ms, u64::MAX);
    }

    #[test]
    fn verb_sets_contain_what_they_were_built_from() {
        let empty = VerbSet::empty();
        assert!(empty.is_empty());
        assert!(!empty.contains(Verb::Put) && !empty.contains(Verb::Delete));

        let put = VerbSet::from(&[Verb::Put, Verb::Put][..]);
        assert!(put.contains(Verb::Put) && !put.contains(Verb::Delete));
        assert_eq!(put.iter().collect::<Vec<_>>(), vec![Verb::Put]);

        let all = VerbSet::all_writes();
        assert_eq!(all, VerbSet::from_verbs(&Verb::ALL));
        assert_eq!(all, put.with(Verb::Delete));
        assert_eq!(all.to_string(), "put,delete");
        assert_eq!(VerbSet::from_bits(all.bits()), all);
    }

    #[test]
    fn unknown_verb_bits_are_kept_but_grant_nothing_known() {
        let from_a_newer_owner = VerbSet::from_bits(0b1000_0001);
        assert_eq!(from_a_newer_owner.bits(), 0b1000_0001);
        assert!(from_a_newer_owner.contains(Verb::Put));
        assert!(!from_a_newer_owner.contains(Verb::Delete));
        assert_eq!(from_a_newer_owner.to_string(), "put,unknown:0x80");
    }

    #[test]
    fn refusal_codes_are_distinct_and_read_back() {
        let codes: Vec<&str> = DoorRefusal::ALL.iter().map(DoorRefusal::code).collect();
        assert_eq!(
            codes,
            vec![
                "bad_signature",
                "wrong_holder",
                "not_covered",
                "old_epoch",
                "expired"
            ]
        );
        for reason in DoorRefusal::ALL {
            assert_eq!(DoorRefusal::from_code(reason.code()), Some(reason));
            let from_serde =
                DoorRefusal::deserialize(StrDeserializer::<ValueError>::new(reason.code()));
            assert_eq!(from_serde, Ok(reason));
        }
        assert_eq!(DoorRefusal::from_code("tired"), None);
    }

    #[test]
    fn signatures_decode_from_hex_bytes_or_a_sequence_of_exactly_64() {
        let signature = good_ticket().signature;
        let bytes = *signature.as_bytes();

        let hex_text = hex::encode(bytes);
        let from_hex = TicketSignature::deserialize(StrDeserializer::<ValueError>::new(&hex_text));
        assert_eq!(from_hex, Ok(signature));

        let from_bytes = TicketSignature::deserialize(BytesDeserializer::<ValueError>::new(&bytes));
        assert_eq!(from_bytes, Ok(signature));

        let from_seq =
            TicketSignature::deserialize(SeqDeserializer::<_, ValueError>::new(bytes.into_iter()));
        assert_eq!(from_seq, Ok(signature));

        let short: Vec<u8> = bytes[..63].to_vec();
        assert!(TicketSignature::deserialize(short.into_deserializer())
            .map_err(|err: ValueError| err)
            .is_err());
        let long: Vec<u8> = bytes.iter().copied().chain([0]).collect();
        assert!(TicketSignature::deserialize(long.into_deserializer())
            .map_err(|err: ValueError| err)
            .is_err());
        assert!(TicketSignature::deserialize(StrDeserializer::<ValueError>::new("abcd")).is_err());
    }

    /// One change to one claim field, always to a different value.
    #[derive(Debug, Clone)]
    enum ClaimMutation {
        Owner { byte: usize, flip: u8 },
        Holder { byte: usize, flip: u8 },
        App(String),
        Vault(String),
        Verbs { flip: u8 },
        IssuedAt { flip: u64 },
        ExpiresAt { flip: u64 },
        Epoch { flip: u64 },
    }

    impl ClaimMutation {
        fn apply(&self, claims: &mut TicketClaims) {
            match self {
                ClaimMutation::Owner { byte, flip } => {
                    let mut bytes = *claims.owner.as_bytes();
                    bytes[*byte] ^= flip;
                    claims.owner = NodeId::from_bytes(bytes);
                }
                ClaimMutation::Holder { byte, flip } => {
                    let mut bytes = *claims.holder.as_bytes();
                    bytes[*byte] ^= flip;
                    claims.holder = NodeId::from_bytes(bytes);
                }
                ClaimMutation::App(app) => claims.app = different_text(&claims.app, app),
                ClaimMutation::Vault(vault) => claims.vault = different_text(&claims.vault, vault),
                ClaimMutation::Verbs { flip } => {
                    claims.verbs = VerbSet::from_bits(claims.verbs.bits() ^ flip)
                }
                ClaimMutation::IssuedAt { flip } => claims.issued_at_ms ^= flip,
                ClaimMutation::ExpiresAt { flip } => claims.expires_at_ms ^= flip,
                ClaimMutation::Epoch { flip } => claims.epoch ^= flip,
            }
        }
    }

    /// `wanted`, unless that is what the field already holds.
    fn different_text(current: &str, wanted: &str) -> String {
        if wanted == current {
            format!("{wanted}x")
        } else {
            wanted.to_owned()
        }
    }

    fn claim_mutation() -> impl Strategy<Value = ClaimMutation> {
        prop_oneof![
            (0..32usize, 1..=u8::MAX).prop_map(|(byte, flip)| ClaimMutation::Owner { byte, flip }),
            (0..32usize, 1..=u8::MAX).prop_map(|(byte, flip)| ClaimMutation::Holder { byte, flip }),
            ".{0,16}".prop_map(ClaimMutation::App),
            ".{0,16}".prop_map(ClaimMutation::Vault),
            (1..=u8::MAX).prop_map(|flip| ClaimMutation::Verbs { flip }),
            (1..=u64::MAX).prop_map(|flip| ClaimMutation::IssuedAt { flip }),
            (1..=u64::MAX).prop_map(|flip| ClaimMutation::ExpiresAt { flip }),
            (1..=u64::MAX).prop_map(|flip| ClaimMutation::Epoch { flip }),
        ]
    }

    proptest! {
        #[test]
        fn any_single_claim_changed_after_signing_is_bad_signature(
            app in ".{0,16}",
            vault in ".{0,16}",
            verb_bits in 1..=3u8,
            now_ms in 0..=u64::MAX / 2,
            lifetime_ms in 1..=DEFAULT_TICKET_LIFETIME_MS,
            epoch in any::<u64>(),
            mutation in claim_mutation(),
        ) {
            let verbs = VerbSet::from_bits(verb_bits);
            let verb = verbs.iter().next().unwrap_or(Verb::Put);
            let ticket = Ticket::issue(
                &owner_key(), holder_key().node_id(), app.clone(), vault.clone(), verbs,
                now_ms, lifetime_ms, epoch,
            );
            let owner = owner_key().node_id();
            let holder = holder_key().node_id();
            let door = DoorContext {
                owner: &owner,
                connection_peer: &holder,
                app: &app,
                vault: &vault,
                verb,
                now_ms,
                current_epoch: epoch,
            };
            prop_assert_eq!(ticket.check_at_door(&door), Ok(()));

            let mut changed = ticket.clone();
            mutation.apply(&mut changed.claims);
            prop_assert_ne!(&changed.claims, &ticket.claims);
            prop_assert_eq!(changed.check_at_door(&door), Err(DoorRefusal::BadSignature));
        }
    }
}

#[cfg(test)]
mod remembering_tests {
    use super::*;

    #[test]
    fn a_remembered_ticket_still_gets_every_claims_check_and_a_changed_one_is_verified_again() {
        let owner = NodeKey::from_secret_bytes([1; 32]);
        let holder = NodeKey::from_secret_bytes([2; 32]).node_id();
        let ticket = Ticket::issue(
            &owner,
            holder,
            "app",
            "v",
            VerbSet::all_writes(),
            0,
            1_000,
            0,
        );
        let owner_id = owner.node_id();
        let door = |now_ms, epoch| DoorContext {
            owner: &owner_id,
            connection_peer: &holder,
            app: "app",
            vault: "v",
            verb: Verb::Put,
            now_ms,
            current_epoch: epoch,
        };
        let mut verified = VerifiedTickets::default();
        assert_eq!(
            ticket.check_at_door_remembering(&door(1, 0), &mut verified),
            Ok(())
        );
        assert_eq!(
            ticket.check_at_door_remembering(&door(1, 0), &mut verified),
            Ok(())
        );
        assert_eq!(
            ticket.check_at_door_remembering(&door(1, 1), &mut verified),
            Err(DoorRefusal::OldEpoch)
        );
        assert_eq!(
            ticket.check_at_door_remembering(&door(2_000, 0), &mut verified),
            Err(DoorRefusal::Expired)
        );
        let mut forged = ticket.clone();
        forged.claims.expires_at_ms = u64::MAX;
        assert_eq!(
            forged.check_at_door_remembering(&door(2_000, 0), &mut verified),
            Err(DoorRefusal::BadSignature)
        );
    }
}
