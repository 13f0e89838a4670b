//! Replays every committed corpus file of every fuzz target (`fuzz/corpus/<target>/`) through
//! its body, so what the fuzzers learned (and every finding, once fixed) is checked by every
//! `cargo test`, with no fuzzer installed.

use ferry_names::{AppName, VaultName};
use std::path::{Path, PathBuf};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

#[test]
fn every_corpus_file_of_every_target_parses_or_is_refused_without_a_panic() {
    for (target, body) in ferry_fuzzing::TARGETS {
        let dir = corpus_dir(target);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|err| panic!("no corpus for {target} at {}: {err}", dir.display()));
        let mut replayed = 0;
        for entry in entries {
            let path = entry.expect("a corpus entry").path();
            let bytes = std::fs::read(&path).expect("a readable corpus file");
            let outcome = std::panic::catch_unwind(|| body(&bytes));
            assert!(
                outcome.is_ok(),
                "{target}: {} made the body panic; replay it with \
                 `cargo fuzz run -s none {target} {}`",
                path.display(),
                path.display()
            );
            replayed += 1;
        }
        assert!(
            replayed > 0,
            "{target}: the corpus at {} is empty",
            dir.display()
        );
        eprintln!("{target}: {replayed} corpus files replayed");
    }
}

/// Writes the seed corpus: the wire fixtures of both protocol versions, a real ticket, and a
/// hand-written example of each other input. Run once when a target is added
/// (`cargo test -p ferry-fuzzing --test corpus -- --ignored`); the fuzzers grow the rest.
#[test]
#[ignore]
fn write_the_seed_corpus() {
    use ferry_ticket::{NodeKey, Ticket, TicketClaims, Verb, VerbSet};
    let seed = |target: &str, name: &str, bytes: &[u8]| {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).expect("the corpus directory");
        std::fs::write(dir.join(name), bytes).expect("a seed written");
    };
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/wire");
    for version in ["v1", "v2"] {
        for entry in std::fs::read_dir(fixtures.join(version)).expect("the wire fixtures") {
            let path = entry.expect("a fixture").path();
            let name = path
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .to_string();
            let bytes = std::fs::read(&path).expect("a fixture read");
            let target = if name.starts_with("request-") {
                "peer_request"
            } else {
                "peer_response"
            };
            seed(target, &format!("{version}-{name}"), &bytes);
        }
    }
    let owner = NodeKey::from_secret_bytes([1; 32]);
    let holder = NodeKey::from_secret_bytes([2; 32]).node_id();
    let ticket = Ticket::sign_claims(
        &owner,
        TicketClaims {
            owner: owner.node_id(),
            holder,
            app: "notes".into(),
            vault: "alpha".into(),
            verbs: VerbSet::from_verbs(&[Verb::Put, Verb::Delete]),
            issued_at_ms: 1_764_600_000_000,
            expires_at_ms: 1_764_603_600_000,
            epoch: 1,
        },
    );
    seed(
        "ticket",
        "signed",
        &ferry_peer::codec::encode_body(&ticket).expect("a ticket encodes"),
    );
    let id = owner.node_id();
    seed(
        "mdns_txt",
        "announcement",
        format!("id={id}\nv=2\nport=7420\nlabel=studio\nts=100.64.0.7:7420,100.64.0.8:7420\n")
            .as_bytes(),
    );
    seed(
        "config",
        "every-section",
        b"api = \"127.0.0.1:7420\"\nlisten = \"0.0.0.0:7421\"\nwrite_liveness_ms = 1000\n\
          [capacity]\nper_caller = 4\nrate_per_minute = 600\n",
    );
    seed(
        "tailnet_status",
        "self",
        br#"{"Self": {"TailscaleIPs": ["100.101.102.103", "fd7a:115c:a1e0::1"]}, "Peer": {}}"#,
    );
    {
        use ferry_gateway::call_log::slots;
        use ferry_gateway::store::calls::{CallRow, RowState};
        let row = CallRow {
            request_id: ferry_core::wire::RequestId::generate(),
            owner: id,
            owner_label: ferry_names::Label::from_static("studio"),
            vault: VaultName::from_static("alpha"),
            app: AppName::from_static("notes"),
            state: RowState::InFlight,
            since_ms: 1_764_600_000_000,
        };
        let mut slot = vec![0u8];
        slot.extend_from_slice(&slots::encode(&row));
        seed("state_files", "slot", &slot);
        let mut marks = vec![1u8];
        let mut file = Vec::new();
        ferry_gateway::owner::marks::encode_into(
            &mut file,
            [
                (id, row.request_id, "alpha"),
                (holder, ferry_core::wire::RequestId::generate(), ""),
            ],
        );
        marks.extend_from_slice(&file);
        seed("state_files", "marks", &marks);
    }
    for (selector, text) in [
        (0u8, "alpha"),
        (1, "notes"),
        (2, "dir/a key with spaces/%2F"),
        (3, "studio-mac"),
        (4, "0192b7a5-6c1e-7cc3-8d4b-3f6a2b1c0d9e"),
        (5, "2500"),
        (6, "100.64.0.7:7420,tailnet"),
    ] {
        let mut bytes = vec![selector];
        bytes.extend_from_slice(text.as_bytes());
        seed("api_inputs", &format!("selector-{selector}"), &bytes);
    }
}
