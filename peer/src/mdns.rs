//! Discovery over mDNS (mdns-sd): announces `_ferry._udp.local.` on LAN interfaces and turns
//! resolves and goodbyes into [`DiscoveryEvent`]s.
//!
//! Interfaces: IPv4 only (IPv6 link-local addresses come back with the wrong scope); by
//! default every interface except loopback and tailnet ones (tailnets carry no multicast);
//! or exactly the configured ones. No probing for name conflicts: instance names are made from
//! the node id, so they cannot collide by accident, and probing would delay discovery by
//! 750 ms.
//!
//! Anyone on the LAN can announce anything, so the addresses of an announcement are sifted
//! here, where it is known which interface each record came in on (`ferry_core::discovered`):
//! a LAN address must be on the subnet of that interface, a tailnet address in the tailnet's
//! range while this machine is on a tailnet, and at most [`MAX_ANNOUNCED_LAN`] LAN addresses
//! are kept from one announcement.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferry_core::discovered::{plausible_lan, plausible_tailnet, Link};
use mdns_sd::{IfKind, ResolvedService, ScopedIp, ServiceDaemon, ServiceEvent, ServiceInfo};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::discovery::{
    Announcement, Discovery, DiscoveryError, DiscoveryEvent, InstanceNames, SERVICE_TYPE,
};
use crate::routes::RouteKind;

/// How long a goodbye may take before the daemon is shut down anyway.
const GOODBYE_BOUND: Duration = Duration::from_millis(500);
/// The most LAN addresses taken from one announcement (a gateway has one per interface).
pub const MAX_ANNOUNCED_LAN: usize = 8;
/// How long this machine's addresses, read for sifting announcements, are used before they are
/// read again: interfaces change seldom, announcements can come thousands a second.
const LINKS_FRESH: Duration = Duration::from_secs(1);

/// mDNS discovery.
pub struct MdnsDiscovery {
    daemon: ServiceDaemon,
    registered: Mutex<Option<String>>,
    events: Mutex<Option<mpsc::Receiver<DiscoveryEvent>>>,
    forwarder: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for MdnsDiscovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MdnsDiscovery")
            .field("registered", &self.registered)
            .finish_non_exhaustive()
    }
}

fn mdns_error(source: mdns_sd::Error) -> DiscoveryError {
    DiscoveryError::Mdns { source }
}

impl MdnsDiscovery {
    /// Starts the daemon on `interfaces` (empty: every non-loopback, non-tailnet interface)
    /// and starts browsing. Must run inside a tokio runtime.
    pub fn start(interfaces: &[String]) -> Result<Self, DiscoveryError> {
        let daemon = ServiceDaemon::new().map_err(mdns_error)?;
        daemon.disable_interface(IfKind::IPv6).map_err(mdns_error)?;
        if interfaces.is_empty() {
            for name in tailnet_interfaces() {
                daemon
                    .disable_interface(IfKind::Name(name))
                    .map_err(mdns_error)?;
            }
        } else {
            // Order matters: the later call wins.
            daemon.disable_interface(IfKind::All).map_err(mdns_error)?;
            for name in interfaces {
                daemon
                    .enable_interface(IfKind::Name(name.clone()))
                    .map_err(mdns_error)?;
            }
        }
        let browse = daemon.browse(SERVICE_TYPE).map_err(mdns_error)?;
        let (tx, rx) = mpsc::channel(256);
        let forwarder = tokio::spawn(async move {
            let mut names = InstanceNames::default();
            let mut links = Links::default();
            while let Ok(event) = browse.recv_async().await {
                let event = match event {
                    ServiceEvent::ServiceResolved(info) => {
                        let parsed = Announcement::from_txt(|key| {
                            info.get_property_val_str(key).map(str::to_string)
                        });
                        match parsed {
                            Ok(mut announcement) => {
                                names.learn(info.get_fullname(), announcement.node);
                                let links = links.current();
                                announcement
                                    .tailnet
                                    .retain(|addr| plausible_tailnet(addr.ip(), links));
                                DiscoveryEvent::Seen {
                                    announcement,
                                    addrs: lan_addresses(&info, links),
                                }
                            }
                            Err(err) => {
                                debug!(instance = info.get_fullname(), %err, "ignoring a malformed announcement");
                                continue;
                            }
                        }
                    }
                    ServiceEvent::ServiceRemoved(_, instance) => match names.forget(&instance) {
                        Some(node) => DiscoveryEvent::Gone { node },
                        None => continue,
                    },
                    _ => continue,
                };
                if tx.try_send(event).is_err() {
                    // Full or closed: a later resolve repeats what was dropped.
                    debug!("discovery event dropped");
                }
            }
        });
        Ok(Self {
            daemon,
            registered: Mutex::new(None),
            events: Mutex::new(Some(rx)),
            forwarder: Mutex::new(Some(forwarder)),
        })
    }
}

/// The plausible LAN addresses of a resolved service (each on the subnet of an interface its
/// record came in on), lowest first, at most [`MAX_ANNOUNCED_LAN`].
fn lan_addresses(info: &ResolvedService, links: &[Link]) -> Vec<IpAddr> {
    let mut addrs: Vec<IpAddr> = info
        .get_addresses()
        .iter()
        .filter_map(|scoped| match scoped {
            ScopedIp::V4(v4) => {
                let ip = IpAddr::V4(*v4.addr());
                let arrived_on: Vec<String> = v4
                    .interface_ids()
                    .iter()
                    .map(|id| id.name.clone())
                    .collect();
                plausible_lan(ip, &arrived_on, links).then_some(ip)
            }
            // IPv6 is disabled on the daemon.
            _ => None,
        })
        .collect();
    addrs.sort();
    addrs.truncate(MAX_ANNOUNCED_LAN);
    addrs
}

/// This machine's addresses, read again once they are [`LINKS_FRESH`] old.
#[derive(Debug, Default)]
struct Links {
    read_at: Option<Instant>,
    links: Vec<Link>,
}

impl Links {
    fn current(&mut self) -> &[Link] {
        let now = crate::clock::now();
        if self
            .read_at
            .is_none_or(|at| now.saturating_duration_since(at) >= LINKS_FRESH)
        {
            self.links = if_addrs::get_if_addrs()
                .unwrap_or_default()
                .into_iter()
                .map(|i| Link {
                    addr: i.ip(),
                    prefix: match &i.addr {
                        if_addrs::IfAddr::V4(v4) => v4.prefixlen,
                        if_addrs::IfAddr::V6(v6) => v6.prefixlen,
                    },
                    interface: i.name,
                })
                .collect();
            self.read_at = Some(now);
        }
        &self.links
    }
}

/// Interfaces carrying a tailnet address (100.64.0.0/10): no multicast there.
fn tailnet_interfaces() -> Vec<String> {
    if_addrs::get_if_addrs()
        .map(|interfaces| {
            interfaces
                .into_iter()
                .filter(|i| RouteKind::guess(i.ip()) == RouteKind::Tailnet)
                .map(|i| i.name)
                .collect()
        })
        .unwrap_or_default()
}

impl Discovery for MdnsDiscovery {
    fn announce(&self, me: &Announcement) -> Result<(), DiscoveryError> {
        let short = me.node.short();
        let txt = me.to_txt();
        let txt: Vec<(&str, &str)> = txt.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut info = ServiceInfo::new(
            SERVICE_TYPE,
            &format!("ferry-{short}"),
            &format!("ferry-{short}.local."),
            "",
            me.quic_port,
            &txt[..],
        )
        .map_err(mdns_error)?
        .enable_addr_auto();
        info.set_requires_probe(false);
        let fullname = info.get_fullname().to_string();
        self.daemon.register(info).map_err(mdns_error)?;
        *self.registered.lock().unwrap_or_else(|p| p.into_inner()) = Some(fullname);
        Ok(())
    }

    fn events(&self) -> Option<mpsc::Receiver<DiscoveryEvent>> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn goodbye(&self) {
        let registered = self
            .registered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(fullname) = registered {
            match self.daemon.unregister(&fullname) {
                Ok(status) => {
                    if status.recv_timeout(GOODBYE_BOUND).is_err() {
                        warn!("mDNS goodbye not confirmed in time");
                    }
                }
                Err(err) => warn!(%err, "mDNS goodbye failed"),
            }
        }
        if let Ok(status) = self.daemon.shutdown() {
            let _ = status.recv_timeout(GOODBYE_BOUND);
        }
        if let Some(forwarder) = self
            .forwarder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            forwarder.abort();
        }
    }
}
