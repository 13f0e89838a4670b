//! A side probe for "process down, host up" (see `shared/notes/netlab.md`): quinn ignores
//! ICMP, so a dead gateway on a live host looks exactly like a slow one until an idle timeout.
//! A connected UDP socket sees the host's ICMP "port unreachable" as `ConnectionRefused`
//! within a millisecond, so one datagram tells the two apart.

use std::future::Future;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::time::Duration;

/// The side probe as a seam: the real one sends a datagram and listens for ICMP; a simulated
/// network, which has no ICMP, uses [`NoProbe`].
pub trait PortProbe: Send + Sync + std::fmt::Debug {
    /// Whether the port at `addr` refuses datagrams, within `wait`.
    fn refuses(
        &self,
        addr: SocketAddr,
        wait: Duration,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'static>>;
}

/// The real probe ([`port_refuses`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct UdpProbe;

impl PortProbe for UdpProbe {
    fn refuses(
        &self,
        addr: SocketAddr,
        wait: Duration,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'static>> {
        Box::pin(port_refuses(addr, wait))
    }
}

/// A probe that never learns anything (a network without ICMP): silence decides, as it would
/// for a host that is off.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProbe;

impl PortProbe for NoProbe {
    fn refuses(
        &self,
        _addr: SocketAddr,
        wait: Duration,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'static>> {
        Box::pin(async move {
            tokio::time::sleep(wait).await;
            false
        })
    }
}

/// Whether the port at `addr` refuses datagrams (nothing listens there). `false` also when the
/// answer does not come within `wait`: a cut cable and a live gateway both stay silent.
pub async fn port_refuses(addr: SocketAddr, wait: Duration) -> bool {
    let local: SocketAddr = if addr.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let Ok(socket) = tokio::net::UdpSocket::bind(local).await else {
        return false;
    };
    if socket.connect(addr).await.is_err() {
        return false;
    }
    // One byte is no QUIC packet: a live endpoint drops it without a word.
    if let Err(err) = socket.send(&[0]).await {
        return means_port_unreachable(&err);
    }
    let mut buf = [0u8; 16];
    matches!(
        tokio::time::timeout(wait, socket.recv(&mut buf)).await,
        Ok(Err(err)) if means_port_unreachable(&err)
    )
}

/// How the socket layer reports an ICMP "port unreachable" on a connected UDP socket: unix
/// says `ECONNREFUSED`; Windows says `WSAECONNRESET` (found running the unit tests under Wine).
fn means_port_unreachable(err: &std::io::Error) -> bool {
    let windows_reset = cfg!(windows) && err.kind() == std::io::ErrorKind::ConnectionReset;
    err.kind() == std::io::ErrorKind::ConnectionRefused || windows_reset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    #[cfg_attr(
        windows,
        ignore = "Wine passes no ICMP errors to UDP sockets; Windows says WSAECONNRESET, untried"
    )]
    async fn a_closed_port_refuses_and_a_bound_one_does_not() {
        let closed = {
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            socket.local_addr().unwrap()
        };
        assert!(port_refuses(closed, Duration::from_millis(500)).await);
        let open = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!port_refuses(open.local_addr().unwrap(), Duration::from_millis(100)).await);
    }
}
