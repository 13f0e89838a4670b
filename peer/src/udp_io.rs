//! How the peer socket's datagrams go out and come in: through quinn-udp's socket state (ECN,
//! segmentation offload, the address a datagram came to), or as plain datagrams.
//!
//! quinn-udp sets its socket options when it takes a socket, and fails if the system refuses
//! one: Wine 8 refuses `IP_RECVECN`, and so may older Windows builds, so `ferry serve` could
//! not start there at all. Ferry then takes the plain path instead: one `send_to` per datagram
//! and one `recv_from` per read, no ECN marks and no offload. QUIC works the same over it
//! (ECN and offload only make it cheaper), a little more CPU per datagram. The gateway says
//! which path it took, once in its log and in `ferry doctor`.
//!
//! On a system that takes quinn-udp's options nothing changes, unless the plain path is forced
//! ([`PLAIN_UDP_VAR`]), which is how Linux tests and benchmarks run the path Windows under
//! Wine takes.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use quinn::udp::{RecvMeta, UdpSockRef, UdpSocketState};

/// Set to `1` to force the plain path (tests, benchmarks, a system that misbehaves with
/// quinn-udp's options without refusing them).
pub const PLAIN_UDP_VAR: &str = "FERRY_PLAIN_UDP";

/// Whether [`PLAIN_UDP_VAR`] asks for the plain path.
pub fn plain_forced() -> bool {
    std::env::var(PLAIN_UDP_VAR).is_ok_and(|value| value == "1")
}

/// Which path the peer socket took, and why, for the log and the doctor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UdpPath {
    /// quinn-udp's, with the ECN and offload the system allows.
    Full,
    /// Plain datagrams: forced, or because the system refused an option (its error).
    Plain { why: String },
}

/// The datagram IO of one socket.
#[derive(Debug)]
pub enum UdpIo {
    Full(UdpSocketState),
    Plain,
}

impl UdpIo {
    /// quinn-udp's state for `socket`, or the plain path if `force_plain` or the system
    /// refuses one of its options.
    pub fn for_socket(socket: &UdpSocket, force_plain: bool) -> (Self, UdpPath) {
        if force_plain {
            let why = format!("{PLAIN_UDP_VAR}=1 forces it");
            return (UdpIo::Plain, UdpPath::Plain { why });
        }
        match UdpSocketState::new(UdpSockRef::from(socket)) {
            Ok(state) => (UdpIo::Full(state), UdpPath::Full),
            Err(err) => {
                let why = format!("the system refused a socket option quinn-udp sets: {err}");
                (UdpIo::Plain, UdpPath::Plain { why })
            }
        }
    }

    /// The same path for another handle of the same socket (the catcher's copy): a state of
    /// its own on the full path, none on the plain one.
    pub fn for_copy(&self, socket: &UdpSocket) -> io::Result<Self> {
        match self {
            UdpIo::Full(_) => Ok(UdpIo::Full(UdpSocketState::new(UdpSockRef::from(socket))?)),
            UdpIo::Plain => Ok(UdpIo::Plain),
        }
    }

    pub fn may_fragment(&self) -> bool {
        match self {
            UdpIo::Full(state) => state.may_fragment(),
            // No don't-fragment option set: the system may fragment.
            UdpIo::Plain => true,
        }
    }

    pub fn max_gso_segments(&self) -> usize {
        match self {
            UdpIo::Full(state) => state.max_gso_segments(),
            UdpIo::Plain => 1,
        }
    }

    pub fn gro_segments(&self) -> usize {
        match self {
            UdpIo::Full(state) => state.gro_segments(),
            UdpIo::Plain => 1,
        }
    }
}

/// What quinn is told of a datagram read on the plain path: where it came from and its
/// length; no ECN mark, no address it came to.
pub fn plain_meta(addr: SocketAddr, len: usize) -> RecvMeta {
    RecvMeta {
        addr,
        len,
        stride: len,
        ..RecvMeta::default()
    }
}
