//! The peer socket's plain path (`ferry_peer::udp_io`: one datagram per send and per read, no
//! ECN, no offload), which a gateway takes where the system refuses quinn-udp's socket options
//! (Windows under Wine), forced here on Linux with `FERRY_PLAIN_UDP=1`: two gateways on it
//! write, read and settle through each other as on the full path, and each says which path it
//! took, once in its log and in `ferry doctor`. A gateway on the full path says nothing of it.

use std::time::Duration;

use ferry_harness::{fresh_request_id, pair_with_notes, Gateway};
use ferry_peer::udp_io::PLAIN_UDP_VAR;

fn plain(label: &str) -> Gateway {
    Gateway::start_with_env(label, &[(PLAIN_UDP_VAR, "1")])
}

#[test]
fn two_gateways_on_the_plain_path_write_read_and_settle_and_say_which_path_they_took() {
    let (a, b) = pair_with_notes(plain("a"), plain("b"));
    for gateway in [&a, &b] {
        gateway.wait_for_log_line(&["plain datagrams", PLAIN_UDP_VAR], Duration::from_secs(5));
        let doctor = gateway.cli(&["doctor"]);
        let text = String::from_utf8_lossy(&doctor.stdout);
        assert!(
            text.contains("udp path") && text.contains("plain datagrams"),
            "{}'s doctor does not name the plain path:\n{text}",
            gateway.label
        );
    }

    // A write from b runs on a (b -> QUIC -> a), and its id settles through b.
    let id = fresh_request_id();
    let (status, body) = b.put(
        "notes",
        "over-plain-udp",
        b"v1",
        &[("x-ferry-request-id", id.as_str())],
    );
    assert_eq!(status, 200, "{body}");
    let revision = body["revision"].as_u64().expect("a revision");
    let (status, settled) = b.settle(&id, None);
    assert_eq!(status, 200, "{settled}");
    assert_eq!(settled["state"], "done", "{settled}");
    assert_eq!(settled["revision"].as_u64(), Some(revision), "{settled}");

    // A read on b of a key written on a, which b never saw, asks the owner.
    let (status, body) = a.put("notes", "written-on-a", b"v2", &[]);
    assert_eq!(status, 200, "{body}");
    let (status, value, read_revision, source) = b.get("notes", "written-on-a");
    assert_eq!(
        (status, value.as_slice(), read_revision, source.as_deref()),
        (200, &b"v2"[..], Some(revision + 1), Some("owner"))
    );
}

#[test]
fn a_gateway_on_the_full_path_says_nothing_of_the_udp_path() {
    let a = Gateway::start("a");
    let doctor = a.cli(&["doctor"]);
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("listening for peers"), "{text}");
    assert!(!text.contains("udp path"), "{text}");
    assert!(!a.log().contains("plain datagrams"), "{}", a.log());
}
