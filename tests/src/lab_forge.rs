//! A stranger on the LAN forging mDNS announcements (issue 43), run inside a lab host as
//! `ferry-lab-app` with `"mode": "mdns-forge"`: it sends unsolicited mDNS responses that
//! announce `_ferry._udp.local.` instances claiming a trusted peer's node id, each with an
//! address of the test's choosing, at a given rate, until told to stop. The packets are built
//! by hand (the DNS wire format, RFC 1035 and 6762): no mDNS library would announce addresses
//! that are not its own. Every address it is given must lie inside the lab (its subnets, or a
//! documentation range the lab's hosts have no route to).

// A test's tool: a panic here fails the test that started it, with its log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::lab_app::DRIVER_LIFETIME;

/// mDNS's multicast group and port.
const MDNS: (Ipv4Addr, u16) = (Ipv4Addr::new(224, 0, 0, 251), 5353);

/// What the forger was started with.
struct Settings {
    /// The node id every forged announcement claims.
    node: String,
    /// The QUIC port announced.
    port: u16,
    /// A records, one per announcement, taken in turn.
    lan: Vec<Ipv4Addr>,
    /// `ts` TXT entries (`HOST:PORT`), one per announcement, taken in turn.
    tailnet: Vec<String>,
    per_second: u32,
    /// Told to stop when this file exists.
    stop: PathBuf,
}

fn strings(settings: &Value, key: &str) -> Vec<String> {
    settings[key]
        .as_array()
        .unwrap_or_else(|| panic!("settings need {key:?}: {settings}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Runs the forger with `settings` (JSON: node, port, lan, tailnet, per_second, stop) until
/// the stop file exists; prints how many announcements it sent.
pub fn run(settings: &Value) {
    let settings = Settings {
        node: settings["node"].as_str().unwrap().to_string(),
        port: u16::try_from(settings["port"].as_u64().unwrap()).unwrap(),
        lan: strings(settings, "lan")
            .iter()
            .map(|a| a.parse().unwrap())
            .collect(),
        tailnet: strings(settings, "tailnet"),
        per_second: u32::try_from(settings["per_second"].as_u64().unwrap()).unwrap(),
        stop: PathBuf::from(settings["stop"].as_str().unwrap()),
    };
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    socket.set_multicast_ttl_v4(255).unwrap();
    let started = Instant::now();
    let gap = Duration::from_secs(1) / settings.per_second.max(1);
    let mut sent = 0u64;
    while !settings.stop.exists() {
        assert!(
            started.elapsed() < DRIVER_LIFETIME,
            "the forger was never told to stop"
        );
        let i = usize::try_from(sent).unwrap();
        let packet = announcement(
            &format!("forged-{sent}"),
            &settings.node,
            settings.port,
            settings.lan[i % settings.lan.len()],
            &settings.tailnet[i % settings.tailnet.len()],
        );
        socket.send_to(&packet, MDNS).unwrap();
        sent += 1;
        // Paced against the start, so a slow send does not lower the rate.
        let due = started + gap * u32::try_from(sent).unwrap_or(u32::MAX);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    println!(
        "forged {sent} announcements in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// One unsolicited mDNS response announcing instance `name` of `_ferry._udp.local.` as `node`
/// at `lan` (its A record) and `tailnet` (its TXT `ts`): PTR, SRV, TXT and A, uncompressed.
pub fn announcement(name: &str, node: &str, port: u16, lan: Ipv4Addr, tailnet: &str) -> Vec<u8> {
    const PTR: u16 = 12;
    const SRV: u16 = 33;
    const TXT: u16 = 16;
    const A: u16 = 1;
    // Class IN, with the cache-flush bit on the records that are the instance's alone.
    const SHARED: u16 = 1;
    const UNIQUE: u16 = 0x8001;
    let service = "_ferry._udp.local";
    let instance = format!("{name}.{service}");
    let host = format!("{name}.local");
    let mut packet = Vec::new();
    // Header: id 0, a response and authoritative, no questions, four answers.
    for field in [0u16, 0x8400, 0, 4, 0, 0] {
        packet.extend_from_slice(&field.to_be_bytes());
    }
    record(
        &mut packet,
        service,
        PTR,
        SHARED,
        4500,
        &encode_name(&instance),
    );
    let mut srv = vec![0, 0, 0, 0];
    srv.extend_from_slice(&port.to_be_bytes());
    srv.extend(encode_name(&host));
    record(&mut packet, &instance, SRV, UNIQUE, 120, &srv);
    let mut txt = Vec::new();
    for entry in [
        format!("id={node}"),
        "v=1".to_string(),
        format!("port={port}"),
        "label=forged".to_string(),
        format!("ts={tailnet}"),
    ] {
        txt.push(u8::try_from(entry.len()).unwrap());
        txt.extend_from_slice(entry.as_bytes());
    }
    record(&mut packet, &instance, TXT, UNIQUE, 4500, &txt);
    record(&mut packet, &host, A, UNIQUE, 120, &lan.octets());
    packet
}

fn encode_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(u8::try_from(label.len()).unwrap());
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}

fn record(packet: &mut Vec<u8>, name: &str, kind: u16, class: u16, ttl: u32, data: &[u8]) {
    packet.extend(encode_name(name));
    packet.extend_from_slice(&kind.to_be_bytes());
    packet.extend_from_slice(&class.to_be_bytes());
    packet.extend_from_slice(&ttl.to_be_bytes());
    packet.extend_from_slice(&u16::try_from(data.len()).unwrap().to_be_bytes());
    packet.extend_from_slice(data);
}
