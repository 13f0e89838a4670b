//! What discovery may put into the route table, and how often (issue 43).
//!
//! Nothing on mDNS is authenticated: anyone on the LAN can announce a trusted node id with
//! addresses of their choosing. Keys are pinned, so such a route never carries a call to anyone
//! else, but every route is probed, so each made-up address would have this gateway dial it.
//! The bounds here keep that cost small whatever a stranger sends:
//!
//! - a LAN address is taken only from the subnet of an interface its record arrived on
//!   ([`plausible_lan`]); a tailnet address only from the tailnet's range, and only when this
//!   machine is on a tailnet itself ([`plausible_tailnet`]);
//! - a peer keeps at most [`MAX_DISCOVERED_PER_PEER`] discovered routes, and the table at most
//!   [`MAX_UNPROVEN`] never heard (for all peers together); past that a new one is refused
//!   (configured routes are never counted nor displaced);
//! - a discovered route never heard carries no write, and is probed at a slowing pace
//!   ([`UNPROVEN_PACE_FIRST`] doubling): a dial to an on-link address where no host answers
//!   holds its packets in the kernel, charged to the socket every call shares, until address
//!   resolution gives up (about 3 s), and enough of them stall that socket for everyone;
//! - a discovered route never heard within [`PROVE_WINDOW`] of being added is forgotten, and
//!   one heard once is forgotten after [`UNHEARD_EXPIRY`] of silence;
//! - an announcement or a goodbye restarts a peer's probes at most once per [`REVIVE_EVERY`].
//!
//! The table applies the counts and times (`route_table`); the address rules are plain
//! functions of the address and this machine's interfaces, which the IO edge reads.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::routes::RouteKind;

/// The most discovered routes (mDNS and TXT together) kept for one peer. A gateway announces
/// one LAN address per interface and one or two tailnet addresses, so eight is room to spare.
pub const MAX_DISCOVERED_PER_PEER: usize = 8;

/// The most discovered routes never heard in the whole table, all peers together: what bounds
/// the dials to addresses strangers chose, however many peers are trusted. A real route is
/// heard within milliseconds of being added, so it leaves this count at once.
pub const MAX_UNPROVEN: usize = 8;

/// The wait after an unproven route's first heartbeat before its second; each next wait is
/// twice the last, up to [`UNPROVEN_PACE_CAP`]: heartbeats at 0, 1, 3 and 7 s of its
/// [`PROVE_WINDOW`], so at most two in any 3 s (one or two packets each).
pub const UNPROVEN_PACE_FIRST: Duration = Duration::from_secs(1);
pub const UNPROVEN_PACE_CAP: Duration = Duration::from_secs(4);

/// How long a newly discovered route has to answer a heartbeat before it is forgotten. A real
/// route answers its first heartbeat within milliseconds; a made-up one never does, and while it
/// is kept it holds a place of the peer's [`MAX_DISCOVERED_PER_PEER`] and is probed.
pub const PROVE_WINDOW: Duration = Duration::from_secs(10);

/// How long a discovered route that was heard once may go unheard before it is forgotten (the
/// peer moved, or left the LAN; its next announcement brings the route back).
pub const UNHEARD_EXPIRY: Duration = Duration::from_secs(600);

/// The least time between two restarts of a peer's probes by an unauthenticated sign (an mDNS
/// announcement or goodbye). A restart probes every route of the peer at once and resets its
/// backoff; a real restart of the peer is also seen through its hello and its closed
/// connections, so this only paces what strangers can cause.
pub const REVIVE_EVERY: Duration = Duration::from_secs(5);

/// One address of this machine: the interface it is on, and its prefix length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub interface: String,
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Link {
    /// Whether `ip` is inside this link's subnet.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(mine), IpAddr::V4(theirs)) => {
                let mask = v4_mask(self.prefix);
                u32::from(mine) & mask == u32::from(theirs) & mask
            }
            (IpAddr::V6(mine), IpAddr::V6(theirs)) => {
                let mask = match u32::from(self.prefix.min(128)) {
                    0 => 0,
                    bits => u128::MAX << (128 - bits),
                };
                u128::from(mine) & mask == u128::from(theirs) & mask
            }
            _ => false,
        }
    }
}

fn v4_mask(prefix: u8) -> u32 {
    match u32::from(prefix.min(32)) {
        0 => 0,
        bits => u32::MAX << (32 - bits),
    }
}

/// Whether `ip`, the address in a record that arrived on the interfaces named `arrived_on`, can
/// be a LAN address of the gateway that announced it: an IPv4 unicast address inside the subnet
/// of one of this machine's addresses on one of those interfaces, and neither that subnet's
/// network nor broadcast address. mDNS does not cross routers, so a gateway on the same segment
/// has an address there; anything else was made up (or leads off the segment, where this
/// gateway has no business sending heartbeats on a stranger's word). Tailnet addresses are not
/// LAN addresses.
pub fn plausible_lan(ip: IpAddr, arrived_on: &[String], links: &[Link]) -> bool {
    let IpAddr::V4(v4) = ip else {
        // mDNS runs over IPv4 only (IPv6 link-local addresses come back with the wrong scope).
        return false;
    };
    if v4.is_unspecified()
        || v4.is_multicast()
        || v4.is_broadcast()
        || RouteKind::guess(ip) == RouteKind::Tailnet
    {
        return false;
    }
    links
        .iter()
        .filter(|link| arrived_on.contains(&link.interface))
        .filter(|link| link.contains(ip))
        .any(|link| !is_network_or_broadcast(v4, link.prefix))
}

/// The first and last address of a subnet of `prefix` bits (subnets of /31 and /32 have none:
/// every address in them is a host's).
fn is_network_or_broadcast(ip: Ipv4Addr, prefix: u8) -> bool {
    if prefix >= 31 {
        return false;
    }
    let host_bits = !v4_mask(prefix) & u32::from(ip);
    host_bits == 0 || host_bits == !v4_mask(prefix)
}

/// Whether `ip` is in a tailnet's range (100.64.0.0/10, fd7a:115c:a1e0::/48): the only
/// addresses a tailnet route (from a TXT record) may have.
pub fn in_tailnet_range(ip: IpAddr) -> bool {
    RouteKind::guess(ip) == RouteKind::Tailnet
}

/// Whether `ip`, a tailnet address from a TXT record, is worth probing: in the tailnet's range,
/// and this machine has an address of the same family in that range (it is on a tailnet).
/// Without one, 100.64.0.0/10 is carrier-grade NAT space that leads out through the default
/// route into an ISP's network.
pub fn plausible_tailnet(ip: IpAddr, links: &[Link]) -> bool {
    in_tailnet_range(ip)
        && !ip.is_unspecified()
        && links
            .iter()
            .any(|link| in_tailnet_range(link.addr) && link.addr.is_ipv4() == ip.is_ipv4())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(interface: &str, addr: &str, prefix: u8) -> Link {
        Link {
            interface: interface.into(),
            addr: addr.parse().unwrap(),
            prefix,
        }
    }

    fn lan(ip: &str, arrived_on: &[&str], links: &[Link]) -> bool {
        let arrived_on: Vec<String> = arrived_on.iter().map(|s| s.to_string()).collect();
        plausible_lan(ip.parse().unwrap(), &arrived_on, links)
    }

    #[test]
    fn a_lan_address_must_be_on_the_subnet_of_the_interface_it_arrived_on() {
        let links = [
            link("eth0", "192.168.1.10", 24),
            link("bridge0", "169.254.3.1", 16),
            link("tailscale0", "100.101.1.2", 32),
        ];
        assert!(lan("192.168.1.20", &["eth0"], &links));
        assert!(
            lan("169.254.9.9", &["bridge0"], &links),
            "link-local, on-link"
        );
        // Another gateway on this machine announces this machine's own address.
        assert!(lan("192.168.1.10", &["eth0"], &links));
        // On a subnet of this machine, but the record came in on another interface.
        assert!(!lan("192.168.1.20", &["bridge0"], &links));
        assert!(!lan("192.168.1.20", &[], &links));
        // Off every subnet: another network, the internet, a documentation range.
        for off in ["192.168.2.20", "10.0.0.1", "8.8.8.8", "192.0.2.7"] {
            assert!(!lan(off, &["eth0", "bridge0"], &links), "{off}");
        }
        // The subnet's own network and broadcast addresses, and never-unicast ones.
        for odd in [
            "192.168.1.0",
            "192.168.1.255",
            "0.0.0.0",
            "224.0.0.251",
            "255.255.255.255",
        ] {
            assert!(!lan(odd, &["eth0"], &links), "{odd}");
        }
        // A tailnet address is no LAN address, even on the tailnet's own interface.
        assert!(!lan("100.101.1.3", &["tailscale0"], &links));
        assert!(!lan("fe80::1", &["eth0"], &links), "mDNS is IPv4 only");
    }

    #[test]
    fn point_to_point_subnets_have_no_network_or_broadcast_address() {
        let links = [link("p2p", "10.9.0.0", 31), link("host", "10.8.0.5", 32)];
        assert!(lan("10.9.0.1", &["p2p"], &links));
        assert!(lan("10.8.0.5", &["host"], &links));
        assert!(!lan("10.8.0.6", &["host"], &links));
    }

    #[test]
    fn a_tailnet_address_must_be_in_the_tailnet_range_and_this_machine_on_a_tailnet() {
        let on_tailnet = [
            link("eth0", "192.168.1.10", 24),
            link("tailscale0", "100.101.1.2", 32),
            link("tailscale0", "fd7a:115c:a1e0::1", 128),
        ];
        let ts = |ip: &str, links: &[Link]| plausible_tailnet(ip.parse().unwrap(), links);
        assert!(ts("100.64.0.1", &on_tailnet));
        assert!(ts("100.127.255.254", &on_tailnet));
        assert!(ts("fd7a:115c:a1e0:ab12::9", &on_tailnet));
        for off in [
            "100.63.255.255",
            "100.128.0.1",
            "192.168.1.20",
            "203.0.113.9",
            "fd7a:115c:a1e1::1",
            "::",
        ] {
            assert!(!ts(off, &on_tailnet), "{off}");
        }
        // No tailnet address here: 100.64.0.0/10 would be the ISP's carrier-grade NAT.
        let off_tailnet = [link("eth0", "192.168.1.10", 24)];
        assert!(!ts("100.64.0.1", &off_tailnet));
        // On an IPv4 tailnet only: its IPv6 addresses lead nowhere.
        assert!(!ts("fd7a:115c:a1e0::9", &on_tailnet[..2]));
    }
}
