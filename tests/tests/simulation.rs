//! The simulation of three whole gateways under random faults (issue 10): see
//! `tests/src/sim/mod.rs` for what runs, `tests/src/history.rs` for what is checked.
//!
//! `FERRY_SIM_SEED=N` runs seed N alone and prints its schedule and history;
//! `FERRY_SIM_SEEDS=N` runs N seeds (the default is what CI runs).

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ferry_tests::sim::{self, Options};

fn scratch() -> std::path::PathBuf {
    // tmpfs where there is one: the hosts' fsyncs cost nothing there.
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn bug_named(name: &str) -> ferry_core::bugs::Bug {
    use ferry_core::bugs::Bug;
    match name {
        "resend" => Bug::ResendAfterSend,
        "nothing-sent" => Bug::NothingSentAfterSend,
        "tombstone" => Bug::SkippedTombstone,
        "older-read" => Bug::OlderRead,
        "run-after-busy" => Bug::RunAfterBusy,
        other => panic!("FERRY_SIM_BUG={other}: use resend, nothing-sent, tombstone, older-read or run-after-busy"),
    }
}

#[test]
fn one_seed() {
    let seed: u64 = std::env::var("FERRY_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let bug = std::env::var("FERRY_SIM_BUG")
        .ok()
        .map(|name| bug_named(&name));
    let started = Instant::now();
    let report = sim::run(&Options {
        seed,
        workload: WORKLOAD,
        bug,
        scratch: scratch(),
    })
    .unwrap();
    eprintln!(
        "seed {seed}: {:?} simulated in {:?} wall; {:?}",
        report.simulated,
        started.elapsed(),
        report.counts
    );
    if std::env::var("FERRY_SIM_VERBOSE").is_ok() {
        eprintln!("{}", report.describe());
    }
    assert!(report.violations.is_empty(), "{}", report.describe());
}

/// Runs `seeds` on two threads; returns the reports, in seed order.
fn run_many(seeds: std::ops::Range<u64>, bug: Option<ferry_core::bugs::Bug>) -> Vec<sim::Report> {
    let seeds: Vec<u64> = seeds.collect();
    let halves: Vec<Vec<u64>> = seeds
        .chunks(seeds.len().div_ceil(2).max(1))
        .map(<[u64]>::to_vec)
        .collect();
    let handles: Vec<_> = halves
        .into_iter()
        .map(|mine| {
            std::thread::spawn(move || {
                // Virtual time: the seeds' results do not depend on the CPU they get.
                ferry_tests::yield_the_cpu_to_tests_that_measure_time();
                mine.into_iter()
                    .map(|seed| {
                        sim::run(&Options {
                            seed,
                            workload: WORKLOAD,
                            bug,
                            scratch: scratch(),
                        })
                        .unwrap_or_else(|err| panic!("seed {seed} could not run: {err}"))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut reports: Vec<sim::Report> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    reports.sort_by_key(|r| r.seed);
    reports
}

const WORKLOAD: Duration = Duration::from_secs(3);

/// Seeds every `cargo test` runs (1000 to 1999): about four minutes on two cores.
const CI_SEEDS: u64 = 1000;

#[test]
fn many_seeds() {
    let count: u64 = std::env::var("FERRY_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CI_SEEDS);
    let started = Instant::now();
    let reports = run_many(1000..1000 + count, None);
    assert!(!reports.is_empty(), "FERRY_SIM_SEEDS={count}: no seed ran");
    let mut totals = std::collections::BTreeMap::new();
    for report in &reports {
        for (name, n) in &report.counts {
            *totals.entry(name.clone()).or_insert(0) += n;
        }
    }
    eprintln!("{count} seeds in {:?}: {totals:?}", started.elapsed());
    for report in &reports {
        assert!(
            report.violations.is_empty(),
            "{}\nreplay it alone: FERRY_SIM_SEED={} cargo test -p ferry-tests --test integration simulation::one_seed -- --nocapture",
            report.describe(),
            report.seed
        );
    }
}

/// A seed is a replay: the same schedule, the same interleaving, the same history, to the
/// millisecond and the revision. Without this, a failing seed would be a rumour.
#[test]
fn a_seed_replays_exactly() {
    let first = run_many(1000..1004, None);
    let again = run_many(1000..1004, None);
    for (a, b) in first.iter().zip(&again) {
        assert_eq!(
            a.describe(),
            b.describe(),
            "seed {} ran differently the second time",
            a.seed
        );
    }
}

/// Runs seeds from `first` until the checker reports a violation that says `names` (the
/// promise the bug breaks) with `bug` switched on, at most `bound` of them; the seed that
/// caught it and the violation.
fn first_catch(
    bug: ferry_core::bugs::Bug,
    names: &str,
    first: u64,
    bound: u64,
) -> Option<(u64, String)> {
    let mut seed = first;
    while seed < first + bound {
        let batch = seed..(seed + 8).min(first + bound);
        for report in run_many(batch.clone(), Some(bug)) {
            if let Some(violation) = report.violations.iter().find(|v| v.0.contains(names)) {
                return Some((report.seed, violation.to_string()));
            }
        }
        seed = batch.end;
    }
    None
}

#[test]
fn the_checker_catches_each_injected_bug() {
    use ferry_core::bugs::Bug;
    // Each bug must be caught as the promise it breaks, not by a side effect.
    for (bug, names) in [
        // The app heard "nothing was sent" (or the settle query's fence) for a write that ran.
        (Bug::NothingSentAfterSend, "told NothingSent"),
        // The owner holds a request id no app sent.
        (Bug::ResendAfterSend, "no app sent it"),
        // Settling said "not carried out" for a write that ran (the owner answered a settle
        // query about an id it had not seen without fencing it, and the write arrived after).
        (Bug::SkippedTombstone, "settled NotCarriedOut"),
        // An app saw a revision go back.
        (Bug::OlderRead, "after it had seen"),
        // The owner said busy (not carried out) and ran it anyway.
        (Bug::RunAfterBusy, "Refused(\"busy\")"),
    ] {
        let caught = first_catch(bug, names, 1000, CI_SEEDS);
        eprintln!("{bug:?}: {caught:?}");
        assert!(
            caught.is_some(),
            "{bug:?} was not caught in the {CI_SEEDS} seeds CI runs"
        );
    }
}
