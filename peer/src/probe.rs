//! A side probe for "process down, host up" (see `shared/notes/netlab.md`): quinn ignores
//! ICMP, so a dead gateway on a live host looks exactly like a slow one until an idle timeout.
//! A connected UDP socket sees the host's ICMP "port unreachable" as `ConnectionRefused`
//! within a millisecond, so one datagram tells the two apart.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

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
        return err.kind() == std::io::ErrorKind::ConnectionRefused;
    }
    let mut buf = [0u8; 16];
    matches!(
        tokio::time::timeout(wait, socket.recv(&mut buf)).await,
        Ok(Err(err)) if err.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
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
