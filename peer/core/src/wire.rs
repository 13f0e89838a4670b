//! The messages gateways send each other, one request and one response per QUIC stream.
//!
//! Versioning (SPEC 11; the rules in full are in `docs/protocol.md`). The pair of gateways on a
//! connection picks its protocol version in the TLS handshake: each offers the ALPN ids of every
//! version it speaks, newest first, and the accepting side takes its newest one the other
//! offered ([`ProtocolRange::alpn_ids`]). A pair with no version in common meets on
//! [`ALPN_VERSIONS`] instead, where the accepting side only states its range and closes, so the
//! dialing side can name both ranges; nothing else is ever sent on such a connection. Every
//! frame's header repeats the connection's version. Within a version the layout is fixed:
//! - an optional field goes into the frame's [`Extensions`] under a new tag: a peer that does not
//!   know the tag skips it, a peer that expects it treats its absence as "the old behaviour";
//! - a field every peer must understand needs a new protocol version; the older layout stays
//!   decodable (and is what that version's peers are sent) for as long as the version is spoken.
//!
//! Protocol 2 (this release) differs from 1 in two ways. The request and the answer travel in
//! an envelope, a kind number and the kind's own bytes, so a kind a receiver does not know is
//! still read whole: an unknown request is answered [`ProtocolFailure::UnknownRequest`] (it did
//! not run), an unknown answer is [`Response::Unknown`]. And a [`Hello`] carries the sender's
//! release. Protocol 1's layouts are kept in [`v1`].
//!
//! Every type derives serde and is encoded only through `ferry_peer::codec`.

use serde::{Deserialize, Serialize};

use ferry_names::{AppName, NameError, VaultName};
use ferry_ticket::{Ticket, VerbSet};

use crate::outcome::{NotCarriedOutReason, Refusal};
// The owner's answer lives with the outcomes it is one of (so `outcome` needs nothing from
// here); it travels in `Response::Write`.
pub use crate::outcome::WriteAnswer;

mod received;
pub mod v1;

pub use received::{Checked, Received};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 2;
/// The oldest version this build still speaks (SPEC 11: this one and the one before it).
pub const OLDEST_PROTOCOL_VERSION: u16 = 1;

/// This build's release, as a [`Hello`] states it and `ferry --version` prints it.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// The ALPN id of protocol 1, the first: `ferry/1`. Version N is `ferry/N`.
pub const ALPN: &[u8] = b"ferry/1";
/// The ALPN id two gateways with no version in common meet on (offered last by both sides):
/// the accepting side states its range ([`ProtocolRange::statement`]) on a unidirectional
/// stream and in its close ([`CLOSE_NO_COMMON_VERSION`]), and nothing else is sent. Releases
/// before protocol 2 do not offer it.
pub const ALPN_VERSIONS: &[u8] = b"ferry/versions";
/// Application close code on an [`ALPN_VERSIONS`] connection.
pub const CLOSE_NO_COMMON_VERSION: u32 = 0x3;

/// The protocol versions a gateway speaks, oldest to newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProtocolRange {
    pub oldest: u16,
    pub newest: u16,
}

impl ProtocolRange {
    /// What this build speaks.
    pub const THIS_BUILD: Self = Self {
        oldest: OLDEST_PROTOCOL_VERSION,
        newest: PROTOCOL_VERSION,
    };
    /// What every release before protocol 2 spoke (they say nothing of it).
    pub const FIRST_RELEASES: Self = Self {
        oldest: 1,
        newest: 1,
    };

    /// The ALPN ids to offer (and, on the accepting side, to prefer), newest first, then
    /// [`ALPN_VERSIONS`].
    pub fn alpn_ids(self) -> Vec<Vec<u8>> {
        (self.oldest..=self.newest)
            .rev()
            .map(alpn_of)
            .chain(std::iter::once(ALPN_VERSIONS.to_vec()))
            .collect()
    }

    /// What an accepting side says of itself on an [`ALPN_VERSIONS`] connection (always
    /// `A-B`, one version as `3-3`), at most a few dozen bytes.
    pub fn statement(self) -> String {
        format!(
            "ferry speaks {}-{} release {RELEASE}",
            self.oldest, self.newest
        )
    }

    /// Reads [`ProtocolRange::statement`] back: the range and the release. `None` for
    /// anything else.
    pub fn parse_statement(reason: &[u8]) -> Option<(Self, String)> {
        let text = std::str::from_utf8(reason).ok()?;
        let rest = text.strip_prefix("ferry speaks ")?;
        let (range, release) = rest.split_once(" release ")?;
        Some((Self::parse(range)?, release.chars().take(64).collect()))
    }

    /// A range as written: `3-4`, or `3` for `3-3`; versions start at 1 and `A <= B`.
    pub fn parse(text: &str) -> Option<Self> {
        let (oldest, newest) = text.split_once('-').unwrap_or((text, text));
        let range = Self {
            oldest: oldest.parse().ok()?,
            newest: newest.parse().ok()?,
        };
        (range.oldest >= 1 && range.oldest <= range.newest).then_some(range)
    }
}

impl std::fmt::Display for ProtocolRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.oldest == self.newest {
            write!(f, "{}", self.oldest)
        } else {
            write!(f, "{}-{}", self.oldest, self.newest)
        }
    }
}

/// The ALPN id of protocol `version`.
pub fn alpn_of(version: u16) -> Vec<u8> {
    format!("ferry/{version}").into_bytes()
}

/// The protocol version an ALPN id names; `None` for [`ALPN_VERSIONS`] and anything else.
pub fn version_of_alpn(id: &[u8]) -> Option<u16> {
    let digits = id.strip_prefix(b"ferry/")?;
    if digits.is_empty() || digits.len() > 5 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Optional fields added after a version was released: tag, then the field's own encoding.
/// Unknown tags are ignored by design.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extensions(pub Vec<Extension>);

/// Extension tag 1, on a read of a change page (`ReadVerb::Changes`): "if nothing is past my
/// cursor, wait up to this many milliseconds for the first change before answering" (a long
/// poll; value: the milliseconds as a little-endian `u32`). A peer that does not know it answers
/// at once, as before.
pub const EXT_WAIT_MS: u32 = 1;

/// Extension tag 2, on a heartbeat's answer: the answering gateway's wall clock when it
/// answered (milliseconds since the Unix epoch, a little-endian `u64`), so `ferry doctor` can
/// tell a peer whose clock is far off. A peer that does not send it is simply not judged.
pub const EXT_CLOCK_MS: u32 = 2;

/// Extension tag 3, on the answer to a long poll (a read with [`EXT_WAIT_MS`]) that carries
/// news: how long before the answer left the owner the commit that made the news happened
/// (microseconds, a little-endian `u64`), measured on the owner's own clock. With half the
/// connection's round trip and its own apply time, a follower knows a change's whole way from
/// the owner's commit to its own without comparing two machines' clocks. A peer that does not
/// send it is simply not counted.
pub const EXT_NEWS_AGE_US: u32 = 3;

/// Extension tag 4, on a settle query (`CallStatus`): the vault the caller's write under that
/// id was for, as the caller knows it from the write or its call log (its name, UTF-8, at most
/// [`MAX_EXT_VAULT`] bytes), so that a tombstone the query makes names its vault as a write's
/// journal row does: when vaults move to another owner (planned, `docs/ownership.md`), a
/// vault's fences can go with it. An owner that does not know the tag, or is sent a name it
/// does not own, tombstones with no vault, as before.
pub const EXT_VAULT: u32 = 4;

/// The longest vault name [`EXT_VAULT`] carries (vault names are 1 to 128 characters).
pub const MAX_EXT_VAULT: usize = 512;

impl Extensions {
    /// Extensions holding only a long-poll wait ([`EXT_WAIT_MS`]).
    pub fn wait(wait: std::time::Duration) -> Self {
        let ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        Extensions(vec![Extension {
            tag: EXT_WAIT_MS,
            value: ms.to_le_bytes().to_vec(),
        }])
    }

    /// Extensions holding only a wall clock reading ([`EXT_CLOCK_MS`]).
    pub fn clock(unix_ms: u64) -> Self {
        Extensions(vec![Extension {
            tag: EXT_CLOCK_MS,
            value: unix_ms.to_le_bytes().to_vec(),
        }])
    }

    /// Extensions holding only the age of a long poll's news ([`EXT_NEWS_AGE_US`]).
    pub fn news_age(age: std::time::Duration) -> Self {
        let us = u64::try_from(age.as_micros()).unwrap_or(u64::MAX);
        Extensions(vec![Extension {
            tag: EXT_NEWS_AGE_US,
            value: us.to_le_bytes().to_vec(),
        }])
    }

    /// Extensions holding only the vault of a settle query ([`EXT_VAULT`]).
    pub fn vault(vault: &VaultName) -> Self {
        Extensions(vec![Extension {
            tag: EXT_VAULT,
            value: vault.as_bytes().to_vec(),
        }])
    }

    /// The vault a settle query names, if any (too long, not UTF-8 or not a valid vault name
    /// is none: the owner then tombstones with no vault, as for a vault it does not own).
    pub fn vault_of(&self) -> Option<VaultName> {
        self.0
            .iter()
            .find(|e| e.tag == EXT_VAULT)
            .filter(|e| e.value.len() <= MAX_EXT_VAULT)
            .and_then(|e| std::str::from_utf8(&e.value).ok())
            .and_then(|name| VaultName::parse(name).ok())
    }

    /// The age of the news, if any (a malformed value is none).
    pub fn news_age_of(&self) -> Option<std::time::Duration> {
        self.0
            .iter()
            .find(|e| e.tag == EXT_NEWS_AGE_US)
            .and_then(|e| <[u8; 8]>::try_from(e.value.as_slice()).ok())
            .map(|us| std::time::Duration::from_micros(u64::from_le_bytes(us)))
    }

    /// The wall clock reading, if any (a malformed value is none).
    pub fn clock_ms(&self) -> Option<u64> {
        self.0
            .iter()
            .find(|e| e.tag == EXT_CLOCK_MS)
            .and_then(|e| <[u8; 8]>::try_from(e.value.as_slice()).ok())
            .map(u64::from_le_bytes)
    }

    /// The long-poll wait asked for, if any (a malformed value is no wait: ignored, as an
    /// unknown tag is).
    pub fn wait_ms(&self) -> Option<u32> {
        self.0
            .iter()
            .find(|e| e.tag == EXT_WAIT_MS)
            .and_then(|e| <[u8; 4]>::try_from(e.value.as_slice()).ok())
            .map(u32::from_le_bytes)
    }
}

/// One optional field: a tag from the registry in `docs/protocol.md`, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extension {
    pub tag: u32,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
}

/// What a caller sends on a new bidirectional stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFrame {
    pub body: Request,
    pub ext: Extensions,
}

/// What the owner (or any peer) answers on the same stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseFrame {
    pub body: Response,
    pub ext: Extensions,
}

/// The requests a peer may make. New variants are only ever appended.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// (Protocol 2 on.) A request of a kind this build does not know, read whole from its
    /// envelope: answered [`ProtocolFailure::UnknownRequest`], nothing runs. Never sent.
    Unknown { kind: u32 },
    /// A write, read or ticket request that names an invalid vault or app, read whole
    /// ([`Received`]): refused at the door with the name's error, nothing runs (a write's
    /// refusal is not journaled: every copy of the frame names the same invalid name and is
    /// refused the same way). Never sent.
    BadName {
        kind: NamedRequest,
        error: NameError,
    },
}

/// The requests that carry a vault and an app name, for [`Request::BadName`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedRequest {
    Write,
    Read,
    IssueTicket,
}

/// A heartbeat carries the interval it was sent at: its receiver may call the sender silent
/// after six of them (SPEC 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub interval_ms: u32,
}

/// The answers. New variants are only ever appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Hello(Hello),
    Write(WriteAnswer),
    Read(ReadAnswer),
    /// The request could not be understood or is not for this peer; nothing ran.
    Failed(ProtocolFailure),
    Ticket(TicketAnswer),
    CallStatus(CallState),
    Heartbeat(Heartbeat),
    /// (Protocol 2 on.) An answer of a kind this build does not know: the peer answered, and
    /// what it said cannot be read (to a write: the outcome is unknown and is settled later).
    /// Never sent.
    Unknown {
        kind: u32,
    },
}

/// A caller asks the owner for a ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketRequest {
    pub app: AppName,
    pub vault: VaultName,
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
///
/// An open enum, so that a later protocol can add a state (moving a vault's owner needs one,
/// `lost_with_owner`: see `docs/ownership.md`) without an older caller failing to decode the
/// answer. On the wire a state is its number followed by its fields, the four below exactly as
/// bincode's derive laid them out (so every frame so far is unchanged); a state numbered 4 or
/// more carries its fields as one length-prefixed byte string, which a build that does not
/// know the number skips whole and decodes as [`CallState::Unrecognized`]. In JSON (the calls
/// table) a state has the derive's form too.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// A state from a newer owner that this build does not know (its number). It settles
    /// nothing: the id may have run or not, so the call stays `outcome_unknown` and is never
    /// stored as settled. No owner of this build sends it.
    Unrecognized { number: u32 },
}

/// The first state number a build may not know; its fields travel as one byte string.
pub const FIRST_OPEN_CALL_STATE: u32 = 4;

impl CallState {
    /// Whether the state can never change, so a caller may keep it as the call's settlement:
    /// not `Running`, and not a state this build cannot read.
    pub fn is_final(&self) -> bool {
        match self {
            Self::Answered(_) | Self::NotCarriedOut { .. } | Self::Forgotten { .. } => true,
            Self::Running { .. } | Self::Unrecognized { .. } => false,
        }
    }
}

mod call_state_serde {
    //! [`CallState`]'s encoding by hand: the derive's for the known states, a skipped byte
    //! string for the others.

    use serde::de::{EnumAccess, Error as _, VariantAccess, Visitor};
    use serde::ser::SerializeStructVariant;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{CallState, NotCarriedOutReason, WriteAnswer, FIRST_OPEN_CALL_STATE};

    const NAME: &str = "CallState";
    const VARIANTS: &[&str] = &[
        "Answered",
        "Running",
        "NotCarriedOut",
        "Forgotten",
        "Unrecognized",
    ];

    /// The JSON form, read back: exactly what `#[derive]` gave the enum, plus the unknown
    /// state's number. (Written by the `Serialize` below, whose calls are the derive's.)
    #[derive(Deserialize)]
    #[serde(rename = "CallState")]
    enum Json {
        Answered(WriteAnswer),
        Running {
            since_ms: u64,
            heartbeat_age_ms: u64,
        },
        NotCarriedOut {
            reason: NotCarriedOutReason,
        },
        Forgotten {
            retention_ms: u64,
        },
        Unrecognized {
            number: u32,
        },
    }

    /// The known states' fields as bincode lays out a struct variant's: one after another.
    #[derive(Deserialize)]
    struct RunningFields {
        since_ms: u64,
        heartbeat_age_ms: u64,
    }

    impl Serialize for CallState {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            match self {
                Self::Answered(answer) => {
                    serializer.serialize_newtype_variant(NAME, 0, VARIANTS[0], answer)
                }
                Self::Running {
                    since_ms,
                    heartbeat_age_ms,
                } => {
                    let mut fields =
                        serializer.serialize_struct_variant(NAME, 1, VARIANTS[1], 2)?;
                    fields.serialize_field("since_ms", since_ms)?;
                    fields.serialize_field("heartbeat_age_ms", heartbeat_age_ms)?;
                    fields.end()
                }
                Self::NotCarriedOut { reason } => {
                    let mut fields =
                        serializer.serialize_struct_variant(NAME, 2, VARIANTS[2], 1)?;
                    fields.serialize_field("reason", reason)?;
                    fields.end()
                }
                Self::Forgotten { retention_ms } => {
                    let mut fields =
                        serializer.serialize_struct_variant(NAME, 3, VARIANTS[3], 1)?;
                    fields.serialize_field("retention_ms", retention_ms)?;
                    fields.end()
                }
                // In JSON (never stored, but printable): its number, as `Json` reads it.
                Self::Unrecognized { number } if serializer.is_human_readable() => {
                    let mut fields =
                        serializer.serialize_struct_variant(NAME, 4, VARIANTS[4], 1)?;
                    fields.serialize_field("number", number)?;
                    fields.end()
                }
                // Only tests send it (as a newer owner would send a state of its own): the
                // number and an empty byte string. Never under a known state's number, where
                // the empty string would read as that state's fields (2 then 0 is a fence).
                Self::Unrecognized { number } if *number < FIRST_OPEN_CALL_STATE => {
                    Err(serde::ser::Error::custom(format!(
                        "call state {number} is a known state's number"
                    )))
                }
                Self::Unrecognized { number } => serializer.serialize_newtype_variant(
                    NAME,
                    *number,
                    VARIANTS[4],
                    &Vec::<u8>::new(),
                ),
            }
        }
    }

    impl<'de> Deserialize<'de> for CallState {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            if deserializer.is_human_readable() {
                return Json::deserialize(deserializer).map(Self::from);
            }
            deserializer.deserialize_enum(NAME, VARIANTS, ByNumber)
        }
    }

    struct ByNumber;

    impl<'de> Visitor<'de> for ByNumber {
        type Value = CallState;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a call state: its number, then its fields")
        }

        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<CallState, A::Error> {
            let (number, fields): (u32, _) = data.variant()?;
            // A struct variant's fields and a newtype of a struct with the same fields are the
            // same bytes in bincode (the only binary codec this meets: `ferry_peer::codec`).
            match number {
                0 => fields.newtype_variant().map(CallState::Answered),
                1 => fields
                    .newtype_variant::<RunningFields>()
                    .map(|running| CallState::Running {
                        since_ms: running.since_ms,
                        heartbeat_age_ms: running.heartbeat_age_ms,
                    }),
                2 => fields
                    .newtype_variant()
                    .map(|reason| CallState::NotCarriedOut { reason }),
                3 => fields
                    .newtype_variant()
                    .map(|retention_ms| CallState::Forgotten { retention_ms }),
                number if number >= FIRST_OPEN_CALL_STATE => {
                    // Read whole (the decoder's length cap applies) and dropped.
                    let _skipped: Vec<u8> = fields.newtype_variant()?;
                    Ok(CallState::Unrecognized { number })
                }
                number => Err(A::Error::custom(format!("call state {number}"))),
            }
        }
    }

    impl From<Json> for CallState {
        fn from(state: Json) -> Self {
            match state {
                Json::Answered(answer) => Self::Answered(answer),
                Json::Running {
                    since_ms,
                    heartbeat_age_ms,
                } => Self::Running {
                    since_ms,
                    heartbeat_age_ms,
                },
                Json::NotCarriedOut { reason } => Self::NotCarriedOut { reason },
                Json::Forgotten { retention_ms } => Self::Forgotten { retention_ms },
                Json::Unrecognized { number } => Self::Unrecognized { number },
            }
        }
    }
}

/// A gateway's account of itself, exchanged on connect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The label this gateway gives itself: free text, a hint only (the admin's label for a
    /// peer is the one Ferry uses; nothing reads this as a label).
    pub label_hint: String,
    /// Vaults this gateway owns: it carries out their writes. A name that is not a valid vault
    /// name is dropped as the hello is read ([`received::valid_vaults`]): no local call can
    /// name it, and a hello is never refused for it.
    #[serde(deserialize_with = "received::valid_vaults")]
    pub owned_vaults: Vec<VaultName>,
    /// Vaults this gateway holds a replica of (read as `owned_vaults` is).
    #[serde(deserialize_with = "received::valid_vaults")]
    pub replicated_vaults: Vec<VaultName>,
    /// (Protocol 2 on.) The sender's release ([`RELEASE`]); `None` from a protocol 1 peer,
    /// whose hello has no such field.
    pub release: Option<String>,
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
pub struct RequestId([u8; 16]);

impl RequestId {
    /// The id whose 16 raw bytes these are, unchecked ([`Self::check`] says whether they are a
    /// UUIDv7): ids arrive as raw bytes from peers and the call log.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The id's 16 raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

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
    pub app: AppName,
    pub vault: VaultName,
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
    pub app: AppName,
    pub vault: VaultName,
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
    /// (Protocol 2 on.) The request is of a kind the receiver does not know (it is older than
    /// the sender); nothing ran.
    UnknownRequest { kind: u32 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_reading_round_trips_and_a_malformed_one_is_none() {
        assert_eq!(
            Extensions::clock(1_764_000_000_123).clock_ms(),
            Some(1_764_000_000_123)
        );
        assert_eq!(Extensions::default().clock_ms(), None);
        let short = Extensions(vec![Extension {
            tag: EXT_CLOCK_MS,
            value: vec![1, 2, 3],
        }]);
        assert_eq!(short.clock_ms(), None);
        // A clock is not a wait, nor a wait a clock.
        assert_eq!(Extensions::clock(5).wait_ms(), None);
        assert_eq!(
            Extensions::wait(std::time::Duration::from_millis(5)).clock_ms(),
            None
        );
    }

    #[test]
    fn a_settle_querys_vault_round_trips_and_a_malformed_one_is_none() {
        let notes = VaultName::parse("notes").unwrap();
        assert_eq!(Extensions::vault(&notes).vault_of(), Some(notes.clone()));
        assert_eq!(Extensions::default().vault_of(), None);
        let empty = Extensions(vec![Extension {
            tag: EXT_VAULT,
            value: vec![],
        }]);
        assert_eq!(empty.vault_of(), None);
        let not_a_name = Extensions(vec![Extension {
            tag: EXT_VAULT,
            value: b"../x".to_vec(),
        }]);
        assert_eq!(not_a_name.vault_of(), None);
        let not_utf8 = Extensions(vec![Extension {
            tag: EXT_VAULT,
            value: vec![0xff, 0xfe],
        }]);
        assert_eq!(not_utf8.vault_of(), None);
        let too_long = Extensions(vec![Extension {
            tag: EXT_VAULT,
            value: vec![b'v'; MAX_EXT_VAULT + 1],
        }]);
        assert_eq!(too_long.vault_of(), None);
        assert_eq!(Extensions::vault(&notes).clock_ms(), None);
    }

    #[test]
    fn a_news_age_round_trips_in_microseconds_and_a_malformed_one_is_none() {
        let age = std::time::Duration::from_micros(1_234);
        assert_eq!(Extensions::news_age(age).news_age_of(), Some(age));
        assert_eq!(Extensions::default().news_age_of(), None);
        let short = Extensions(vec![Extension {
            tag: EXT_NEWS_AGE_US,
            value: vec![1; 4],
        }]);
        assert_eq!(short.news_age_of(), None);
        assert_eq!(Extensions::news_age(age).clock_ms(), None);
        assert_eq!(Extensions::clock(5).news_age_of(), None);
    }

    #[test]
    fn alpn_ids_offer_every_spoken_version_newest_first_then_the_version_exchange() {
        let ids = ProtocolRange {
            oldest: 1,
            newest: 3,
        }
        .alpn_ids();
        assert_eq!(
            ids,
            vec![
                b"ferry/3".to_vec(),
                b"ferry/2".to_vec(),
                b"ferry/1".to_vec(),
                ALPN_VERSIONS.to_vec()
            ]
        );
        assert_eq!(alpn_of(1), ALPN.to_vec());
        for (id, version) in [
            (&b"ferry/1"[..], Some(1)),
            (b"ferry/12", Some(12)),
            (b"ferry/versions", None),
            (b"ferry/", None),
            (b"ferry/-1", None),
            (b"ferry/999999", None),
            (b"h3", None),
        ] {
            assert_eq!(version_of_alpn(id), version, "{id:?}");
        }
    }

    #[test]
    fn a_versions_statement_names_the_range_and_release_and_reads_back() {
        for range in [
            ProtocolRange {
                oldest: 3,
                newest: 3,
            },
            ProtocolRange {
                oldest: 1,
                newest: 2,
            },
        ] {
            let reason = range.statement();
            assert_eq!(
                ProtocolRange::parse_statement(reason.as_bytes()),
                Some((range, RELEASE.to_string())),
                "{reason}"
            );
        }
        assert_eq!(
            ProtocolRange::parse_statement(b"ferry speaks 4 release 0.9.0"),
            Some((
                ProtocolRange {
                    oldest: 4,
                    newest: 4
                },
                "0.9.0".to_string()
            ))
        );
        for bad in [
            &b"ferry speaks 2-1 release x"[..],
            b"ferry speaks a-b release x",
            b"going away",
            b"\xff\xfe",
        ] {
            assert_eq!(ProtocolRange::parse_statement(bad), None, "{bad:?}");
        }
        assert_eq!(ProtocolRange::THIS_BUILD.to_string(), "1-2");
    }

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
