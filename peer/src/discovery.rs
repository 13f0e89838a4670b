//! Finding peers on the LAN without config (SPEC 2, 8).
//!
//! A gateway announces itself with an [`Announcement`] (the TXT record of `_ferry._udp.local.`:
//! node id, protocol version, QUIC port, label hint, tailnet addresses) and hears others' as
//! [`DiscoveryEvent`]s. Every `Seen` is an upsert (resolves repeat as addresses arrive); `Gone`
//! is a goodbye. Discovery never decides trust: an announced key is only a candidate until the
//! admin trusts it, and liveness comes from QUIC and heartbeats, never from mDNS alone.
//!
//! The real implementation is [`crate::mdns::MdnsDiscovery`]; [`MemoryLan`] is its in-memory
//! twin for tests.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use ferry_core::discovered::in_tailnet_range;
use ferry_ticket::NodeId;
use tokio::sync::mpsc;

/// The mDNS service type.
pub const SERVICE_TYPE: &str = "_ferry._udp.local.";
/// The most tailnet addresses taken from one TXT record.
const MAX_TXT_TAILNET: usize = 8;
/// How many events may wait for the gateway before new ones are dropped (a later resolve
/// repeats them).
const EVENT_QUEUE: usize = 256;

/// What a gateway says about itself on the LAN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub node: NodeId,
    pub protocol: u16,
    pub quic_port: u16,
    pub label_hint: String,
    pub tailnet: Vec<SocketAddr>,
}

/// Why a TXT record is not a Ferry announcement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxtError {
    #[error("TXT record has no valid `{0}`")]
    Missing(&'static str),
}

impl Announcement {
    /// The TXT record's key/value pairs.
    pub fn to_txt(&self) -> Vec<(String, String)> {
        let tailnet: Vec<String> = self.tailnet.iter().map(ToString::to_string).collect();
        vec![
            ("id".into(), self.node.to_string()),
            ("v".into(), self.protocol.to_string()),
            ("port".into(), self.quic_port.to_string()),
            ("label".into(), self.label_hint.clone()),
            ("ts".into(), tailnet.join(",")),
        ]
    }

    /// Parses a TXT record defensively: the id, version and port must be valid; a bad label is
    /// dropped, bad or surplus tailnet addresses (or ones outside the tailnet's range) are
    /// skipped.
    pub fn from_txt(get: impl Fn(&str) -> Option<String>) -> Result<Self, TxtError> {
        let node = get("id")
            .and_then(|id| id.parse().ok())
            .ok_or(TxtError::Missing("id"))?;
        let protocol = get("v")
            .and_then(|v| v.parse().ok())
            .ok_or(TxtError::Missing("v"))?;
        let quic_port = get("port")
            .and_then(|p| p.parse().ok())
            .filter(|p| *p != 0)
            .ok_or(TxtError::Missing("port"))?;
        let label_hint = get("label")
            .filter(|l| {
                !l.is_empty()
                    && l.len() <= 64
                    && l.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            })
            .unwrap_or_default();
        let tailnet = get("ts")
            .map(|ts| {
                ts.split(',')
                    .filter_map(|a| a.trim().parse::<SocketAddr>().ok())
                    .filter(|a| in_tailnet_range(a.ip()))
                    .take(MAX_TXT_TAILNET)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            node,
            protocol,
            quic_port,
            label_hint,
            tailnet,
        })
    }
}

/// What discovery reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscoveryEvent {
    /// A gateway was seen at these LAN addresses (an upsert).
    Seen {
        announcement: Announcement,
        addrs: Vec<IpAddr>,
    },
    /// A gateway said goodbye.
    Gone { node: NodeId },
}

/// Why discovery could not start or announce.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The mDNS daemon could not start, browse or announce (`source` is mdns-sd's reason).
    #[error("mDNS failed: {source}; run with --no-mdns and add peers with `ferry trust --addr`")]
    Mdns { source: mdns_sd::Error },
}

/// A discovery mechanism: mDNS, or its in-memory twin.
pub trait Discovery: Send + Sync + std::fmt::Debug {
    /// Announces this gateway (again: a new announcement replaces the old one).
    fn announce(&self, me: &Announcement) -> Result<(), DiscoveryError>;
    /// The event stream; taken once.
    fn events(&self) -> Option<mpsc::Receiver<DiscoveryEvent>>;
    /// Says goodbye (peers see `Gone` at once) and stops.
    fn goodbye(&self);
}

/// An in-memory LAN: every member sees every other member's announcements.
#[derive(Debug, Default)]
pub struct MemoryLan {
    members: Mutex<Vec<Member>>,
}

#[derive(Debug)]
struct Member {
    id: usize,
    events: mpsc::Sender<DiscoveryEvent>,
    announced: Option<Announcement>,
}

impl MemoryLan {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A new member; it hears the announcements already made.
    pub fn join(self: &Arc<Self>) -> MemoryDiscovery {
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        let id = members.len();
        for member in members.iter() {
            if let Some(announcement) = &member.announced {
                let _ = tx.try_send(seen(announcement));
            }
        }
        members.push(Member {
            id,
            events: tx,
            announced: None,
        });
        MemoryDiscovery {
            lan: self.clone(),
            id,
            events: Mutex::new(Some(rx)),
        }
    }
}

fn seen(announcement: &Announcement) -> DiscoveryEvent {
    DiscoveryEvent::Seen {
        announcement: announcement.clone(),
        addrs: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
    }
}

/// One member of a [`MemoryLan`].
#[derive(Debug)]
pub struct MemoryDiscovery {
    lan: Arc<MemoryLan>,
    id: usize,
    events: Mutex<Option<mpsc::Receiver<DiscoveryEvent>>>,
}

impl Discovery for MemoryDiscovery {
    fn announce(&self, me: &Announcement) -> Result<(), DiscoveryError> {
        let mut members = self.lan.members.lock().unwrap_or_else(|p| p.into_inner());
        for member in members.iter_mut() {
            if member.id == self.id {
                member.announced = Some(me.clone());
            } else {
                let _ = member.events.try_send(seen(me));
            }
        }
        Ok(())
    }

    fn events(&self) -> Option<mpsc::Receiver<DiscoveryEvent>> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn goodbye(&self) {
        let mut members = self.lan.members.lock().unwrap_or_else(|p| p.into_inner());
        let node = members
            .iter()
            .find(|m| m.id == self.id)
            .and_then(|m| m.announced.as_ref().map(|a| a.node));
        members.retain(|m| m.id != self.id);
        if let Some(node) = node {
            for member in members.iter() {
                let _ = member.events.try_send(DiscoveryEvent::Gone { node });
            }
        }
    }
}

/// Remembers which service instance is which node, so a goodbye (which names only the
/// instance) can say who left.
#[derive(Debug, Default)]
pub(crate) struct InstanceNames(HashMap<String, NodeId>);

impl InstanceNames {
    pub(crate) fn learn(&mut self, instance: &str, node: NodeId) {
        self.0.insert(instance.to_string(), node);
    }

    pub(crate) fn forget(&mut self, instance: &str) -> Option<NodeId> {
        self.0.remove(instance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_ticket::NodeKey;

    fn announcement(seed: u8) -> Announcement {
        Announcement {
            node: NodeKey::from_secret_bytes([seed; 32]).node_id(),
            protocol: 1,
            quic_port: 7420,
            label_hint: format!("h{seed}"),
            tailnet: vec!["100.77.0.1:7420".parse().unwrap()],
        }
    }

    #[test]
    fn txt_round_trips_and_hostile_records_are_refused_or_trimmed() {
        let a = announcement(1);
        let txt: HashMap<String, String> = a.to_txt().into_iter().collect();
        assert_eq!(Announcement::from_txt(|k| txt.get(k).cloned()), Ok(a));
        let bad: HashMap<&str, &str> = [("id", "nope"), ("v", "1"), ("port", "7420")].into();
        assert_eq!(
            Announcement::from_txt(|k| bad.get(k).map(|v| v.to_string())),
            Err(TxtError::Missing("id"))
        );
        let id = NodeKey::from_secret_bytes([2; 32]).node_id().to_string();
        let many = (0..50)
            .map(|i| format!("100.64.0.{i}:1"))
            .collect::<Vec<_>>()
            .join(",")
            + ",garbage";
        let many = format!("203.0.113.1:1,10.0.0.1:1,{many}");
        let odd: HashMap<&str, String> = [
            ("id", id),
            ("v", "1".into()),
            ("port", "7420".into()),
            ("label", "bad label!".into()),
            ("ts", many),
        ]
        .into();
        let parsed = Announcement::from_txt(|k| odd.get(k).cloned()).unwrap();
        assert_eq!(
            (parsed.label_hint.as_str(), parsed.tailnet.len()),
            ("", MAX_TXT_TAILNET)
        );
        // Off-range addresses are skipped, not counted: the tailnet ones after them are kept.
        assert_eq!(parsed.tailnet[0], "100.64.0.0:1".parse().unwrap());
    }

    #[tokio::test]
    async fn members_of_a_memory_lan_see_each_other_and_their_goodbyes() {
        let lan = MemoryLan::new();
        let one = lan.join();
        one.announce(&announcement(1)).unwrap();
        let two = lan.join();
        two.announce(&announcement(2)).unwrap();
        let mut one_events = one.events().unwrap();
        let mut two_events = two.events().unwrap();
        assert!(
            matches!(two_events.recv().await, Some(DiscoveryEvent::Seen { announcement, .. }) if announcement.label_hint == "h1")
        );
        assert!(
            matches!(one_events.recv().await, Some(DiscoveryEvent::Seen { announcement, .. }) if announcement.label_hint == "h2")
        );
        two.goodbye();
        assert_eq!(
            one_events.recv().await,
            Some(DiscoveryEvent::Gone {
                node: announcement(2).node
            })
        );
    }
}
