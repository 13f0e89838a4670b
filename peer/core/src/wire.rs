//! The messages gateways send each other, one request and one response per QUIC stream.
//!
//! Versioning. The frame header carries the protocol version ([`PROTOCOL_VERSION`]); a gateway
//! accepts its own version and the one before it ([`OLDEST_PROTOCOL_VERSION`]). Inside a version
//! the layout is fixed, so fields are added in two ways that never break an older peer:
//! - an optional field goes into the frame's [`Extensions`] under a new tag: a peer that does not
//!   know the tag skips it, a peer that expects it treats its absence as "the old behaviour";
//! - a field every peer must understand needs a new protocol version, and both layouts are kept
//!   decodable for one release.
//!
//! Every type derives serde and is encoded only through `ferry_peer::codec`.

use serde::{Deserialize, Serialize};

use ferry_ticket::{Ticket, VerbSet};

use crate::outcome::{NotCarriedOutReason, Refusal};
// The owner's answer lives with the outcomes it is one of (so `outcome` needs nothing from
// here); it travels in `Response::Write`.
pub use crate::outcome::WriteAnswer;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 1;
/// The oldest version this build still accepts (SPEC 11: this one and the one before it).
pub const OLDEST_PROTOCOL_VERSION: u16 = 1;

/// The ALPN protocol id on every Ferry QUIC connection.
pub const ALPN: &[u8] = b"ferry/1";

/// Optional fields added after a version was released: tag, then the field's own encoding.
/// Unknown tags are ignored by design.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extensions(pub Vec<Extension>);

/// One optional field: a tag from the registry in `docs/protocol.md`, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extension {
    pub tag: u32,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
}

/// What a caller sends on a new bidirectional stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestFrame {
    pub body: Request,
    pub ext: Extensions,
}

/// What the owner (or any peer) answers on the same stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseFrame {
    pub body: Response,
    pub ext: Extensions,
}

/// The requests a peer may make. New variants are only ever appended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// "Here is who I am and which vaults I own and follow; tell me yours." Sent when a
    /// connection opens and again when the vault list changes.
    Hello(Hello),
    /// A write verb for a vault the receiver owns. Sent at most once. Boxed: it carries the
    /// value and a ticket, far larger than the other requests (the encoding is the same).
    Write(Box<WriteRequest>),
    /// A read verb. Safe to repeat.
    Read(ReadRequest),
    /// "May my app use these verbs on this vault?" Answered with a signed ticket. Safe to repeat.
    IssueTicket(TicketRequest),
    /// "What became of my request id?" A read (safe to repeat); the owner tombstones an id it
    /// has never seen so it can never run afterwards.
    CallStatus(CallStatusRequest),
    /// A route heartbeat, answered at once by the door itself.
    Heartbeat(Heartbeat),
}

/// A heartbeat carries the interval it was sent at: its receiver may call the sender silent
/// after six of them (SPEC 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub interval_ms: u32,
}

/// The answers. New variants are only ever appended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Hello(Hello),
    Write(WriteAnswer),
    Read(ReadAnswer),
    /// The request could not be understood or is not for this peer; nothing ran.
    Failed(ProtocolFailure),
    Ticket(TicketAnswer),
    CallStatus(CallState),
    Heartbeat(Heartbeat),
}

/// A caller asks the owner for a ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketRequest {
    pub app: String,
    pub vault: String,
    pub verbs: VerbSet,
}

/// The owner's answer to a ticket request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TicketAnswer {
    Issued(Ticket),
    Refused(Refusal),
}

/// A caller asks what became of one of its request ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallStatusRequest {
    pub request_id: RequestId,
}

/// What the owner's journal says about a request id (SPEC 5, settling).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CallState {
    /// The owner answered it: the first answer, verbatim (done or refused).
    Answered(WriteAnswer),
    /// The owner is carrying it out now.
    Running {
        since_ms: u64,
        heartbeat_age_ms: u64,
    },
    /// Not carried out, and guaranteed never to be.
    NotCarriedOut { reason: NotCarriedOutReason },
    /// The id is older than the owner's journal keeps and the journal has no row for it: if it
    /// ever ran, that was more than `retention_ms` ago, and nothing more can be learned. (It
    /// can never run again: the owner refuses ids that old.)
    Forgotten { retention_ms: u64 },
}

/// A gateway's account of itself, exchanged on connect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The label this gateway gives itself (a hint; the admin's label for a peer wins).
    pub label_hint: String,
    /// Vaults this gateway owns: it carries out their writes.
    pub owned_vaults: Vec<String>,
    /// Vaults this gateway holds a replica of.
    pub replicated_vaults: Vec<String>,
}

/// How urgent a write is; the owner's queue serves interactive work first (SPEC 7 rule 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Priority {
    /// An app is waiting for the answer.
    Interactive,
    /// Replication, bulk loads: may wait.
    Background,
}

/// A request id: a UUIDv7 (RFC 9562) in its 16 raw bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId(pub [u8; 16]);

impl RequestId {
    /// Parses the usual hyphenated text form, accepting only version 7 UUIDs with the
    /// RFC 9562 variant.
    pub fn parse(text: &str) -> Result<Self, RequestIdError> {
        let uuid = uuid::Uuid::try_parse(text).map_err(|_| RequestIdError::NotUuid)?;
        // Only the hyphenated form is the contract (SPEC 1); uuid also accepts braces and urns.
        if uuid.hyphenated().to_string() != text.to_ascii_lowercase() {
            return Err(RequestIdError::NotUuid);
        }
        let id = Self(*uuid.as_bytes());
        id.check()?;
        Ok(id)
    }

    /// Whether these bytes are a UUIDv7 with the RFC 9562 variant (bits `10` at the top of
    /// byte 8). Ids arrive from peers as raw bytes, so the owner checks them too.
    pub fn check(&self) -> Result<(), RequestIdError> {
        let uuid = uuid::Uuid::from_bytes(self.0);
        if uuid.get_version_num() != 7 {
            return Err(RequestIdError::NotVersion7 {
                version: uuid.get_version_num(),
            });
        }
        if uuid.get_variant() != uuid::Variant::RFC4122 {
            return Err(RequestIdError::WrongVariant);
        }
        Ok(())
    }

    /// A fresh UUIDv7 stamped with the current time (the system's clock).
    pub fn generate() -> Self {
        Self(*uuid::Uuid::now_v7().as_bytes())
    }

    /// A fresh UUIDv7 stamped `unix_ms` (a clock of the caller's: a simulation's is virtual).
    pub fn at(unix_ms: u64) -> Self {
        let timestamp = uuid::Timestamp::from_unix(
            uuid::NoContext,
            unix_ms / 1000,
            ((unix_ms % 1000) * 1_000_000) as u32,
        );
        Self(*uuid::Uuid::new_v7(timestamp).as_bytes())
    }

    /// The Unix time in milliseconds embedded in the id.
    pub fn unix_ms(&self) -> u64 {
        // UUIDv7: the first 48 bits are the Unix time in milliseconds.
        let mut ms = [0u8; 8];
        ms[2..].copy_from_slice(&self.0[..6]);
        u64::from_be_bytes(ms)
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        uuid::Uuid::from_bytes(self.0).hyphenated().fmt(f)
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RequestId({self})")
    }
}

/// Why a string is not a request id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestIdError {
    #[error("a request id is a UUID in its hyphenated text form (8-4-4-4-12 hex digits)")]
    NotUuid,
    #[error("a request id must be a UUIDv7 (this one is version {version}); omit the header and the gateway makes one")]
    NotVersion7 { version: usize },
    #[error("a request id must carry the RFC 9562 variant (its 17th hex digit is 8, 9, a or b); omit the header and the gateway makes one")]
    WrongVariant,
}

/// One write, as the owner receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRequest {
    pub request_id: RequestId,
    pub app: String,
    pub vault: String,
    pub verb: WriteVerb,
    /// What is left of the caller's deadline, in milliseconds, when the frame was built. The
    /// owner refuses (`busy`) a request whose deadline passes before it starts.
    pub deadline_ms: u32,
    pub priority: Priority,
    /// The owner-signed capability; checked at the door before anything else.
    pub ticket: Ticket,
}

/// The write verbs (SPEC 4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteVerb {
    Put {
        key: String,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        /// Compare-and-swap: the revision the record must have (0 = must not exist).
        if_revision: Option<u64>,
    },
    Delete {
        key: String,
        if_revision: Option<u64>,
    },
}

impl WriteVerb {
    pub fn key(&self) -> &str {
        match self {
            Self::Put { key, .. } | Self::Delete { key, .. } => key,
        }
    }
}

/// One read, to the owner or to any replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRequest {
    pub app: String,
    pub vault: String,
    pub verb: ReadVerb,
    pub deadline_ms: u32,
}

/// The read verbs (SPEC 4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadVerb {
    Get {
        key: String,
        /// The revision the caller already holds; an unchanged record is answered without a body.
        known_revision: Option<u64>,
    },
    List {
        prefix: String,
        after: Option<String>,
        limit: u32,
    },
    Changes {
        since_revision: u64,
        limit: u32,
    },
}

/// A record as it travels: its key, revision and value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRecord {
    pub key: String,
    pub revision: u64,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
}

/// One entry of a vault's change log: the latest state of a key after `revision`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireChange {
    pub key: String,
    pub revision: u64,
    /// `None` means the key was deleted at `revision`.
    #[serde(with = "serde_bytes")]
    pub value: Option<Vec<u8>>,
}

/// One key of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRevision {
    pub key: String,
    pub revision: u64,
}

/// The answer to a read. `vault_revision` is the answering store's latest revision, so a
/// caller can tell how far behind a replica is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadAnswer {
    Record {
        record: WireRecord,
        vault_revision: u64,
    },
    /// The caller's `known_revision` is still current; no body.
    NotModified {
        revision: u64,
        vault_revision: u64,
    },
    NotFound {
        vault_revision: u64,
    },
    Page {
        keys: Vec<KeyRevision>,
        more: bool,
        vault_revision: u64,
    },
    Changes {
        changes: Vec<WireChange>,
        more: bool,
        vault_revision: u64,
    },
    Refused(Refusal),
}

/// Why a peer could not act on a request at all (as opposed to refusing it on its merits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProtocolFailure {
    /// The frame's protocol version is outside what this peer speaks.
    UnsupportedVersion { oldest: u16, newest: u16 },
    /// The receiver is stopping and takes no new work; nothing ran.
    GoingAway,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_needs_version_7_and_the_rfc_9562_variant() {
        let good = "01a22e97-95d7-7abc-8def-0123456789ab";
        assert!(RequestId::parse(good).is_ok());
        for (bad, why) in [
            (
                "01a22e97-95d7-7abc-cdef-0123456789ab",
                RequestIdError::WrongVariant,
            ),
            (
                "01a22e97-95d7-7abc-0def-0123456789ab",
                RequestIdError::WrongVariant,
            ),
            (
                "01a22e97-95d7-7abc-edef-0123456789ab",
                RequestIdError::WrongVariant,
            ),
            (
                "01a22e97-95d7-4abc-8def-0123456789ab",
                RequestIdError::NotVersion7 { version: 4 },
            ),
        ] {
            assert_eq!(RequestId::parse(bad), Err(why), "{bad}");
        }
        assert_eq!(
            RequestId::parse("{01a22e97-95d7-7abc-8def-0123456789ab}"),
            Err(RequestIdError::NotUuid)
        );
    }
}
