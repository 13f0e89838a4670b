//! Live sync in the lab (issue 16): h1 owns `notes`, h2 follows it over the LAN and the tailnet.
//! While h1 writes a stream of changes, h2's LAN cable is cut (its replica must keep following
//! over the tailnet), then h2 loses both links (powered off), then everything heals; the replica
//! must converge to exactly the owner's records, and the test prints how long after the heal.
//!
//! Run: `cargo test -p ferry-tests --test integration lab_live_sync:: -- --nocapture` (as root).

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ferry_harness::vault_revision;
use ferry_harness::{wait_for, Gateway};
use ferry_tests::lab::{trust_all, Lab};
use ferry_tests::owner_db::{open_read_only, records};

/// Changes written in each phase (before the cut, while cut off, ...), at least.
const PHASE: u64 = 40;

/// A bound on the writer, whatever happens to the test.
const MAX_CHANGES: u64 = 100_000;

fn revision(gateway: &Gateway) -> u64 {
    vault_revision(&open_read_only(&gateway.home.join("ferry.db")), "notes")
}

#[test]
fn a_replica_follows_a_stream_of_changes_through_a_cut_and_converges_after_the_heal() {
    let Some(lab) = Lab::new(2) else { return };
    let h1 = lab.start_ferry(1, "h1", &["--no-mdns"]);
    let h2 = lab.start_ferry(2, "h2", &["--no-mdns"]);
    trust_all(&[&h1, &h2]);
    assert!(h1.cli(&["vault", "create", "notes"]).status.success());
    wait_for("h2 to follow notes", Duration::from_secs(30), || {
        h2.cli(&["vault", "follow", "notes", "--owner", "h1"])
            .status
            .success()
            .then_some(())
    });
    // The writer writes until told to stop, so every phase below has writes in it however
    // fast this machine is.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (cli, stop) = (h1.cli_handle(), stop.clone());
        std::thread::spawn(move || {
            let mut written = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && written < MAX_CHANGES {
                let key = format!("k{written:05}");
                let (code, out) = cli.run(&["put", "notes", &key, &key]);
                assert_eq!(code, 0, "put {key} on the owner: {out}");
                written += 1;
            }
            written
        })
    };
    let bound = Duration::from_secs(60);
    wait_for("h2 to follow the first changes", bound, || {
        (revision(&h2) >= PHASE).then_some(())
    });
    // The LAN cable goes: the replica goes on over the tailnet.
    lab.cut_cable(2);
    let cut = Instant::now();
    let cut_at = revision(&h1);
    // How long the replica's questions take to leave the dead LAN path (a long poll is not a
    // call, so the routes are not at the in-use heartbeat: docs/decisions.md).
    let switched = wait_for("h2's first change after the cut", bound, || {
        (revision(&h2) > cut_at).then(|| cut.elapsed())
    });
    wait_for(
        "h2 to follow over the tailnet while its LAN cable is cut",
        bound,
        || (revision(&h2) >= cut_at + PHASE / 4).then_some(()),
    );
    let over_tailnet = revision(&h2) - cut_at;
    // Both links go: the replica falls behind while the owner goes on.
    lab.power_off(2);
    let off_at = revision(&h1);
    wait_for("the owner to write on without h2", bound, || {
        (revision(&h1) >= off_at + PHASE).then_some(())
    });
    lab.power_on(2);
    lab.heal_cable(2);
    let healed = Instant::now();
    let healed_at = revision(&h1);
    wait_for("the owner to write on after the heal", bound, || {
        (revision(&h1) >= healed_at + PHASE / 2).then_some(())
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let changes = writer.join().unwrap();
    let written = Instant::now();
    let converged = wait_for("h2 to converge after the heal", bound, || {
        (revision(&h2) == changes).then(|| (healed.elapsed(), written.elapsed()))
    });
    assert_eq!(revision(&h1), changes, "every change ran once on the owner");
    let (on_h1, on_h2) = (
        records(&open_read_only(&h1.home.join("ferry.db")), "notes"),
        records(&open_read_only(&h2.home.join("ferry.db")), "notes"),
    );
    assert_eq!(
        on_h2, on_h1,
        "the replica holds exactly the owner's records"
    );
    eprintln!(
        "figure: live sync through a LAN cut (the first change after it arrived {switched:?} \
         after the cut, {over_tailnet}+ followed over the tailnet) and a power-off: converged \
         {:?} after the heal, {:?} after the last write",
        converged.0, converged.1
    );
}
