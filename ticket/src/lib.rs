//! Who a gateway is and what it may do, with no IO.
//!
//! - [`key`]: node keys and node ids (ed25519), with printable and short forms.
//! - [`ticket`]: owner-signed tickets, their canonical signed bytes, and the door check.
//! - [`cache`]: the caller's cache of tickets per owner, app and vault.
//!
//! Everything here is pure: time, when it matters, is passed in as an argument.

pub mod cache;
pub mod key;
pub mod ticket;

pub use cache::{TicketCache, DEFAULT_MAX_TICKETS, DEFAULT_REFRESH_MARGIN_MS};
pub use key::{KeyGenError, NodeId, NodeKey, ParseNodeIdError, SignatureError};
pub use ticket::{
    DoorContext, DoorRefusal, Ticket, TicketClaims, TicketSignature, Verb, VerbSet,
    VerifiedTickets, DEFAULT_TICKET_LIFETIME_MS, TICKET_SIGNATURE_LEN, TICKET_SIGNING_DOMAIN,
};
