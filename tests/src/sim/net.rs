//! The simulated network's edge: quinn's `AsyncUdpSocket` over a turmoil UDP socket, with two
//! routes per pair of hosts.
//!
//! turmoil gives each host one IP address, and its faults (partition, hold, loss, latency) act
//! on pairs of hosts. Ferry needs two routes to each peer (a LAN one and a tailnet one, with
//! faults of their own), so every gateway listens on one turmoil port, [`BASE_PORT`], and its
//! peers know it at two addresses: `ip:BASE_PORT` (route 0, `lan`) and `ip:BASE_PORT + 1`
//! (route 1, `tailnet`). The socket carries the route in a one-byte prefix of each datagram and
//! shows quinn the address the route stands for, in both directions, so each route is a path
//! of its own to quinn. [`Links`] cuts or slows one route between two hosts.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

/// The port every simulated gateway listens on (route 0); route 1 is the next port.
pub const BASE_PORT: u16 = 7420;
/// Routes between each pair of hosts.
pub const ROUTES: u8 = 2;

/// The kind of each route, by number.
pub fn route_kind(route: u8) -> &'static str {
    if route == 0 {
        "lan"
    } else {
        "tailnet"
    }
}

/// The faults on single routes: cut (datagrams dropped) or slowed (each datagram delayed).
/// Shared by every host's socket; keyed by (from ip, to ip, route), one direction each.
#[derive(Debug, Default)]
pub struct Links {
    cut: Mutex<HashSet<(IpAddr, IpAddr, u8)>>,
    slow: Mutex<HashMap<(IpAddr, IpAddr, u8), Duration>>,
}

impl Links {
    /// Cuts `route` between `a` and `b`, both ways.
    pub fn cut(&self, a: IpAddr, b: IpAddr, route: u8) {
        let mut cut = self.cut.lock().unwrap_or_else(|p| p.into_inner());
        cut.insert((a, b, route));
        cut.insert((b, a, route));
    }

    /// Delays every datagram on `route` between `a` and `b`, both ways, by `delay`.
    pub fn slow(&self, a: IpAddr, b: IpAddr, route: u8, delay: Duration) {
        let mut slow = self.slow.lock().unwrap_or_else(|p| p.into_inner());
        slow.insert((a, b, route), delay);
        slow.insert((b, a, route), delay);
    }

    /// Ends a cut of `route` between `a` and `b`.
    pub fn uncut(&self, a: IpAddr, b: IpAddr, route: u8) {
        let mut cut = self.cut.lock().unwrap_or_else(|p| p.into_inner());
        cut.remove(&(a, b, route));
        cut.remove(&(b, a, route));
    }

    /// Ends the slowness of `route` between `a` and `b`.
    pub fn unslow(&self, a: IpAddr, b: IpAddr, route: u8) {
        let mut slow = self.slow.lock().unwrap_or_else(|p| p.into_inner());
        slow.remove(&(a, b, route));
        slow.remove(&(b, a, route));
    }

    /// Heals every route fault.
    pub fn heal_all(&self) {
        self.cut.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.slow.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn is_cut(&self, from: IpAddr, to: IpAddr, route: u8) -> bool {
        self.cut
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(from, to, route))
    }

    fn delay(&self, from: IpAddr, to: IpAddr, route: u8) -> Option<Duration> {
        self.slow
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(from, to, route))
            .copied()
    }
}

type Readable = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

/// quinn's socket over a turmoil one.
pub struct SimSocket {
    socket: Arc<turmoil::net::UdpSocket>,
    local: SocketAddr,
    links: Arc<Links>,
    /// The pending wait for a datagram, kept across polls.
    readable: Mutex<Option<Readable>>,
}

impl std::fmt::Debug for SimSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimSocket")
            .field("local", &self.local)
            .finish()
    }
}

impl SimSocket {
    /// Binds [`BASE_PORT`] on the current host (inside its software).
    pub async fn bind(ip: IpAddr, links: Arc<Links>) -> io::Result<Self> {
        let local = SocketAddr::new(ip, BASE_PORT);
        // turmoil binds only the unspecified address; datagrams leave from the host's own.
        let any = SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), BASE_PORT);
        let socket = turmoil::net::UdpSocket::bind(any).await?;
        Ok(Self {
            socket: Arc::new(socket),
            local,
            links,
            readable: Mutex::new(None),
        })
    }
}

/// turmoil's UDP sockets have no back-pressure: always writable.
#[derive(Debug)]
struct AlwaysWritable;

impl UdpPoller for AlwaysWritable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncUdpSocket for SimSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(AlwaysWritable)
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let destination = transmit.destination;
        let route = destination
            .port()
            .checked_sub(BASE_PORT)
            .filter(|route| *route < u16::from(ROUTES))
            .ok_or_else(|| io::Error::other(format!("{destination} is no simulated route")))?
            as u8;
        let real = SocketAddr::new(destination.ip(), BASE_PORT);
        if self.links.is_cut(self.local.ip(), real.ip(), route) {
            // A cut cable: the datagram is lost, and nobody says so.
            return Ok(());
        }
        let mut datagram = Vec::with_capacity(transmit.contents.len() + 1);
        datagram.push(route);
        datagram.extend_from_slice(transmit.contents);
        match self.links.delay(self.local.ip(), real.ip(), route) {
            None => {
                let _ = self.socket.try_send_to(&datagram, real);
            }
            Some(delay) => {
                let socket = self.socket.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = socket.try_send_to(&datagram, real);
                });
            }
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let mut scratch = [0u8; 65_536];
        loop {
            match self.socket.try_recv_from(&mut scratch) {
                Ok((len, from)) => {
                    let Some((&route, payload)) = scratch[..len].split_first() else {
                        continue;
                    };
                    if route >= ROUTES || self.links.is_cut(from.ip(), self.local.ip(), route) {
                        continue;
                    }
                    let (Some(buf), Some(slot)) = (bufs.first_mut(), meta.first_mut()) else {
                        return Poll::Ready(Ok(0));
                    };
                    let n = payload.len().min(buf.len());
                    buf[..n].copy_from_slice(&payload[..n]);
                    *slot = RecvMeta {
                        addr: SocketAddr::new(from.ip(), BASE_PORT + u16::from(route)),
                        len: n,
                        stride: n,
                        ecn: None,
                        dst_ip: Some(self.local.ip()),
                    };
                    return Poll::Ready(Ok(1));
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    let mut readable = self.readable.lock().unwrap_or_else(|p| p.into_inner());
                    let waiting = readable.get_or_insert_with(|| {
                        let socket = self.socket.clone();
                        Box::pin(async move { socket.readable().await })
                    });
                    match waiting.as_mut().poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(result) => {
                            *readable = None;
                            result?;
                        }
                    }
                }
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn may_fragment(&self) -> bool {
        false
    }
}
