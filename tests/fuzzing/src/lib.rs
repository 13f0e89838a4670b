//! The bodies of Ferry's fuzz targets: each one hands bytes from outside (a peer, a file, the
//! network, the tailnet client, an app) to one of Ferry's parsers. A parser may refuse the
//! bytes with an error; it must never panic, allocate without bound, or accept something it
//! cannot give back the same way.
//!
//! The targets themselves are thin wrappers in `fuzz/` (built and run with `cargo fuzz run -s
//! none <target>`); the bodies live here, in the workspace, so that `cargo test` replays every
//! committed corpus file through them on every run (`tests/corpus.rs`) without cargo-fuzz.

use ferry_peer::{codec, frames};

/// A target's body: bytes in, a panic only for a finding.
pub type Body = fn(&[u8]);

/// Every target, by the name of its directory under `fuzz/corpus/`.
pub const TARGETS: &[(&str, Body)] = &[
    ("peer_request", peer_request),
    ("peer_response", peer_response),
    ("ticket", ticket),
    ("mdns_txt", mdns_txt),
    ("config", config),
    ("tailnet_status", tailnet_status),
    ("api_inputs", api_inputs),
    ("state_files", state_files),
];

/// A request frame as it arrives on a stream (header included). What decodes must encode to
/// bytes that decode and encode to the same bytes again.
pub fn peer_request(data: &[u8]) {
    round_trip(
        data,
        frames::decode_request_frame,
        frames::encode_request,
        "a request",
    );
}

/// An answer frame as it arrives on a stream (header included), with the same round trip.
pub fn peer_response(data: &[u8]) {
    round_trip(
        data,
        frames::decode_response_frame,
        frames::encode_response,
        "an answer",
    );
}

type Decode<F> = fn(&[u8]) -> Result<(u16, F), codec::DecodeError>;
type Encode<F> = fn(u16, &F) -> Result<Vec<u8>, codec::EncodeError>;

fn round_trip<F>(data: &[u8], decode: Decode<F>, encode: Encode<F>, what: &str) {
    let Ok((version, frame)) = decode(data) else {
        return;
    };
    // A request of a kind this build does not know decodes (to be answered) but is never sent.
    let Ok(bytes) = encode(version, &frame) else {
        return;
    };
    let (again_version, again) = match decode(&bytes) {
        Ok(decoded) => decoded,
        Err(err) => panic!("{what} this build encoded does not decode: {err}"),
    };
    assert_eq!(again_version, version);
    assert_eq!(
        encode(version, &again).ok(),
        Some(bytes),
        "{what} does not encode the same after a round trip"
    );
}

/// A ticket as a peer presents it, checked at the door of an owner that did not sign it and
/// of the owner it names: a forged ticket is refused, and nothing in it makes the check panic.
pub fn ticket(data: &[u8]) {
    use ferry_ticket::{DoorContext, NodeKey, Ticket, Verb};
    let Ok(ticket) = codec::decode_body::<Ticket>(data) else {
        return;
    };
    let _ = ticket.claims.signing_bytes();
    let stranger = NodeKey::from_secret_bytes([7; 32]).node_id();
    let door = DoorContext {
        owner: &stranger,
        connection_peer: &ticket.claims.holder,
        app: &ticket.claims.app,
        vault: &ticket.claims.vault,
        verb: Verb::Put,
        now_ms: ticket.claims.issued_at_ms,
        current_epoch: ticket.claims.epoch,
    };
    // No fuzzer finds the stranger's signature: a ticket checked at its door is refused.
    assert!(
        ticket.check_at_door(&door).is_err(),
        "a ticket nobody signed was accepted"
    );
    let named = DoorContext {
        owner: &ticket.claims.owner,
        ..door
    };
    let _ = ticket.check_at_door(&named);
}

/// An mDNS TXT record as another machine on the LAN announces it: `key=value` entries, one per
/// line. Parsed or refused; a parsed one names a valid node, a port and at most a few routes.
pub fn mdns_txt(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let entries: Vec<(&str, &str)> = text
        .split('\n')
        .filter_map(|line| line.split_once('='))
        .collect();
    let get = |key: &str| {
        entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
    };
    if let Ok(announcement) = ferry_peer::discovery::Announcement::from_txt(get) {
        assert_ne!(announcement.quic_port, 0);
        assert!(announcement.label_hint.len() <= 64);
    }
}

/// The gateway's `config.toml`. A file that parses and validates gives settings whose
/// conversions do not panic.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = toml::from_str::<ferry_gateway::config::Config>(text) else {
        return;
    };
    if config.validate().is_ok() {
        let _ = config.write_liveness();
    }
}

/// `tailscale status --json` as the tailnet client prints it: anything unexpected gives fewer
/// addresses, never an error or a panic, and never more addresses than the document lists.
pub fn tailnet_status(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let addrs = ferry_gateway::tailnet::addrs_from_status(&text, 7420);
    assert!(addrs
        .iter()
        .all(|addr| addr.port() == 7420 && addr.is_ipv4()));
}

/// `text` parsed as a name of type `N`: `FromStr` and serde agree, and an accepted name
/// prints and encodes as the text it was parsed from.
fn name_round_trips<N>(text: &str)
where
    N: std::str::FromStr + serde::de::DeserializeOwned + serde::Serialize + AsRef<str>,
    N: std::fmt::Debug + PartialEq,
{
    let parsed = text.parse::<N>().ok();
    let json = serde_json::to_string(text).unwrap_or_default();
    let decoded = serde_json::from_str::<N>(&json).ok();
    assert_eq!(parsed, decoded, "FromStr and serde disagree on {text:?}");
    if let Some(name) = parsed {
        assert_eq!(name.as_ref(), text);
        assert_eq!(serde_json::to_string(&name).ok(), Some(json));
    }
}

/// What an app puts in a local API request besides the body: a vault, app or key name, a
/// request id, a timeout or wait header, a route. The first byte picks which; the rest is the
/// text.
pub fn api_inputs(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match selector % 7 {
        // The names' parsers, through `FromStr` (the CLI's, the API's) and serde (the wire's,
        // the config's, a body's): the two agree, and what they accept round trips.
        0 => name_round_trips::<ferry_names::VaultName>(&text),
        1 => name_round_trips::<ferry_names::AppName>(&text),
        2 => {
            if ferry_gateway::names::check_key(&text).is_ok() {
                assert!(!text.is_empty());
            }
        }
        3 => name_round_trips::<ferry_names::Label>(&text),
        4 => {
            if let Ok(id) = ferry_core::wire::RequestId::parse(&text) {
                assert_eq!(
                    ferry_core::wire::RequestId::parse(&id.to_string()).ok(),
                    Some(id)
                );
            }
        }
        5 => {
            let _ = ferry_kit::contract::parse_timeout(&text);
            let _ = ferry_kit::contract::parse_wait(&text);
        }
        _ => {
            let _ = ferry_core::routes::Route::parse(&text);
        }
    }
}

/// A file the gateway wrote and reads back at its next start, damaged by a crash or by hand:
/// the first byte picks the call log's slot (`calls.slots`) or the owner's running marks
/// (`owner.marks`); the rest is the file. A record that decodes encodes to bytes that decode
/// to the same record.
pub fn state_files(data: &[u8]) {
    use ferry_gateway::call_log::slots;
    use ferry_gateway::owner::marks;
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    if selector % 2 == 0 {
        if let Some(row) = slots::decode(rest) {
            let again = slots::decode(&slots::encode(&row));
            assert_eq!(again.as_ref(), Some(&row), "a slot does not round-trip");
        }
    } else if let Some(found) = marks::decode(rest) {
        let mut bytes = Vec::new();
        marks::encode_into(&mut bytes, found.iter().map(marks::Mark::parts));
        assert_eq!(
            marks::decode(&bytes),
            Some(found),
            "marks do not round-trip"
        );
    }
}
