//! Requests as received: the names in a write, a read or a ticket request are checked once the
//! request's bytes are read, so a frame that names an invalid vault or app still decodes, as a
//! [`Request::BadName`] the door refuses (nothing ran), and is never a malformed frame whose
//! stream is reset (which a write's caller could only take as `outcome_unknown`).
//!
//! Each request is first read into a mirror of its layout with the names as plain strings
//! ([`Checked::Raw`]); the layouts must stay the same field for field, which the round trips
//! in `ferry_peer::frames` and `tests/fixtures/wire` hold them to.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use ferry_names::{AppName, NameError, VaultName};
use ferry_ticket::{Ticket, VerbSet};

use super::{
    NamedRequest, Priority, ReadRequest, ReadVerb, Request, RequestId, TicketRequest, WriteRequest,
    WriteVerb,
};

/// A request whose names are checked after it is read.
pub trait Checked: Sized {
    /// The request's layout with its names as strings.
    type Raw: DeserializeOwned;
    /// Which request this is, for [`Request::BadName`].
    const KIND: NamedRequest;
    /// The request, if its names are valid.
    fn check(raw: Self::Raw) -> Result<Self, NameError>;
}

/// A request as read off the wire: valid, or naming an invalid vault or app. Decoded from the
/// request's own layout; never encoded.
#[derive(Debug)]
pub struct Received<T>(pub Result<T, NameError>);

impl<T: Checked> Received<T> {
    /// The request `wrap` makes of a valid one, or [`Request::BadName`].
    pub fn into_request(self, wrap: impl FnOnce(T) -> Request) -> Request {
        match self.0 {
            Ok(request) => wrap(request),
            Err(error) => Request::BadName {
                kind: T::KIND,
                error,
            },
        }
    }
}

impl<'de, T: Checked> Deserialize<'de> for Received<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::Raw::deserialize(deserializer).map(|raw| Self(T::check(raw)))
    }
}

/// The vault names of a hello, the invalid ones dropped: a hello only informs (which peer owns
/// or follows what), and no local call can name an invalid vault, so it is never refused for
/// one.
pub(super) fn valid_vaults<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<VaultName>, D::Error> {
    let names = Vec::<String>::deserialize(deserializer)?;
    Ok(names
        .into_iter()
        .filter_map(|name| VaultName::try_from(name).ok())
        .collect())
}

/// [`WriteRequest`]'s layout, field for field.
#[derive(Debug, Deserialize)]
pub struct RawWrite {
    request_id: RequestId,
    app: String,
    vault: String,
    verb: WriteVerb,
    deadline_ms: u32,
    priority: Priority,
    ticket: Ticket,
}

impl Checked for WriteRequest {
    type Raw = RawWrite;
    const KIND: NamedRequest = NamedRequest::Write;

    fn check(raw: RawWrite) -> Result<Self, NameError> {
        Ok(Self {
            request_id: raw.request_id,
            app: AppName::try_from(raw.app)?,
            vault: VaultName::try_from(raw.vault)?,
            verb: raw.verb,
            deadline_ms: raw.deadline_ms,
            priority: raw.priority,
            ticket: raw.ticket,
        })
    }
}

/// [`ReadRequest`]'s layout, field for field.
#[derive(Debug, Deserialize)]
pub struct RawRead {
    app: String,
    vault: String,
    verb: ReadVerb,
    deadline_ms: u32,
}

impl Checked for ReadRequest {
    type Raw = RawRead;
    const KIND: NamedRequest = NamedRequest::Read;

    fn check(raw: RawRead) -> Result<Self, NameError> {
        Ok(Self {
            app: AppName::try_from(raw.app)?,
            vault: VaultName::try_from(raw.vault)?,
            verb: raw.verb,
            deadline_ms: raw.deadline_ms,
        })
    }
}

/// [`TicketRequest`]'s layout, field for field.
#[derive(Debug, Deserialize)]
pub struct RawTicket {
    app: String,
    vault: String,
    verbs: VerbSet,
}

impl Checked for TicketRequest {
    type Raw = RawTicket;
    const KIND: NamedRequest = NamedRequest::IssueTicket;

    fn check(raw: RawTicket) -> Result<Self, NameError> {
        Ok(Self {
            app: AppName::try_from(raw.app)?,
            vault: VaultName::try_from(raw.vault)?,
            verbs: raw.verbs,
        })
    }
}
