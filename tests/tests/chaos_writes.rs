//! A randomized end-to-end check of the promise at the edge (issue 9): several writers call
//! the caller gateway `b` through the kit while, from a seed, `b` is killed and restarted and
//! the owner `a` is frozen and thawed at random moments; some writers give up on their HTTP
//! call early. Then everything is healed, every unknown outcome is settled by its request id,
//! and the history is checked against the owner's database:
//! - every write answered or settled `done` is on the owner with that revision and its value;
//! - no write answered "nothing was sent" (`local_gateway_down`, `unavailable`, refused before
//!   sending) or settled `not_carried_out` is on the owner;
//! - every `outcome_unknown` settles;
//! - no request id ran twice: the vault's revision equals the writes settled `done` (each
//!   write has its own key, so a second run would add a revision and no key).
//!
//! Seeds are fixed; `FERRY_CHAOS_SEED=N` runs one seed alone and prints its schedule.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_core::rng::Rng;
use ferry_harness::{pair_with_notes, wait_for, Gateway, SIGCONT, SIGSTOP};
use ferry_kit::contract::ErrorCode;
use ferry_kit::{Kit, Settlement, WriteOptions, WriteResult};

const SEEDS: [u64; 2] = [7, 1009];
const RUN_FOR: Duration = Duration::from_secs(6);
const WRITERS: usize = 4;
const SEED_VAR: &str = "FERRY_CHAOS_SEED";

/// One write as the app saw it.
#[derive(Debug, Clone)]
struct Write {
    key: String,
    result: WriteResult,
}

/// How a write ended, all told.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Final {
    Done(u64),
    NotRun,
}

fn run_seed(seed: u64) -> String {
    let mut rng = Rng::new(seed);
    // The writers are one app writing as fast as they can: the owner's rate limit would refuse
    // most of them (honestly, and counted so below), which is not what this test is about.
    let (a, b) = pair_with_notes(
        Gateway::start_with_config("a", "[capacity]\nrate_per_minute = 0\n"),
        Gateway::start("b"),
    );
    let (status, body) = b.put("notes", "warm-up", b"x", &[]);
    assert_eq!(status, 200, "{body}");
    let kit = Kit::from_home(b.home.clone(), "chaos");
    let b = Arc::new(Mutex::new(b));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(Vec::<Write>::new()));
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let (kit, stop, history) = (kit.clone(), stop.clone(), history.clone());
        let gives_up_every = 3 + writer as u64;
        writers.push(runtime.spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w{writer}-{i}");
                let options = WriteOptions {
                    timeout: Some("2".into()),
                    // Some writes are given up by the app at 300 ms.
                    client_timeout: i
                        .is_multiple_of(gives_up_every)
                        .then(|| Duration::from_millis(300)),
                    ..WriteOptions::default()
                };
                let result = kit
                    .put("notes", &key, key.clone().into_bytes(), &options)
                    .await;
                let down = matches!(result, WriteResult::LocalGatewayDown { .. });
                history.lock().unwrap().push(Write { key, result });
                if down {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                i += 1;
            }
        }));
    }

    let mut schedule = Vec::new();
    let started = Instant::now();
    while started.elapsed() < RUN_FOR {
        let quiet = rng.millis(100, 600);
        std::thread::sleep(quiet);
        match rng.below(4) {
            0 => {
                let down_for = rng.millis(50, 400);
                schedule.push(format!("{:?}: kill b for {down_for:?}", started.elapsed()));
                b.lock().unwrap().kill();
                std::thread::sleep(down_for);
                b.lock().unwrap().restart();
            }
            1 => {
                let frozen_for = rng.millis(100, 1500);
                schedule.push(format!(
                    "{:?}: freeze a for {frozen_for:?}",
                    started.elapsed()
                ));
                a.signal(SIGSTOP);
                std::thread::sleep(frozen_for);
                a.signal(SIGCONT);
            }
            _ => {}
        }
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        runtime.block_on(writer).unwrap();
    }

    // Heal (both are running now) and settle every unknown outcome by its request id.
    let history = history.lock().unwrap().clone();
    let mut finals = BTreeMap::new();
    let mut counts = BTreeMap::<&str, usize>::new();
    for write in &history {
        let (name, settled) = match &write.result {
            WriteResult::Done { revision, .. } => ("done", Final::Done(*revision)),
            WriteResult::OutcomeUnknown { request_id, .. } => {
                let settled = wait_for(
                    &format!("{request_id} to settle (seed {seed})"),
                    Duration::from_secs(60),
                    || {
                        match runtime.block_on(kit.settle(request_id, Some("notes"), Some(Duration::from_secs(5)))) {
                        Ok(Settlement::Done { revision }) => Some(Final::Done(revision)),
                        Ok(Settlement::NotCarriedOut { .. }) => Some(Final::NotRun),
                        Ok(Settlement::Refused { code, .. }) => panic!("{request_id} settled refused ({code}) (seed {seed})"),
                        Ok(Settlement::NeverSent { detail }) => panic!("{request_id}: unknown_call after outcome_unknown: {detail} (seed {seed})"),
                        Ok(Settlement::Running | Settlement::Unavailable { .. }) | Err(_) => None,
                    }
                    },
                );
                ("outcome_unknown", settled)
            }
            WriteResult::NotCarriedOut { .. } => ("not_carried_out", Final::NotRun),
            WriteResult::Unavailable { .. } => ("unavailable", Final::NotRun),
            WriteResult::LocalGatewayDown { .. } => ("local_gateway_down", Final::NotRun),
            WriteResult::Invalid { .. } => ("refused_before_sending", Final::NotRun),
            // The owner's capacity budget (all writers are one app): not run, and checked so
            // below like every other "not carried out".
            WriteResult::Refused {
                code: ErrorCode::Busy | ErrorCode::RateLimited,
                ..
            } => ("busy_or_rate_limited", Final::NotRun),
            WriteResult::Refused { code, .. } => {
                panic!(
                    "{}: refused {code} (seed {seed}): {:?}",
                    write.key, write.result
                )
            }
        };
        *counts.entry(name).or_default() += 1;
        finals.insert(write.key.clone(), (settled, write.result.clone()));
    }

    let mut done = 0u64;
    for (key, (settled, result)) in &finals {
        let stored = a.stored("notes", key);
        match settled {
            Final::Done(revision) => {
                done += 1;
                assert_eq!(
                    stored,
                    Some((Some(key.clone().into_bytes()), *revision)),
                    "{key} is done at {revision} but the owner holds {stored:?} (seed {seed}): {result:?}"
                );
            }
            Final::NotRun => assert_eq!(
                stored, None,
                "{key} was reported not carried out, but the owner ran it (seed {seed}): {result:?}"
            ),
        }
    }
    assert_eq!(
        a.vault_revision("notes"),
        1 + done,
        "a request ran twice, or ran without being reported (seed {seed})"
    );
    format!(
        "seed {seed}: {} writes {counts:?}; {} faults: {}",
        history.len(),
        schedule.len(),
        schedule.join("; ")
    )
}

#[test]
fn writers_through_the_kit_survive_a_killed_caller_and_a_frozen_owner() {
    let seeds: Vec<u64> = match std::env::var(SEED_VAR) {
        Ok(seed) => vec![seed.parse().expect("FERRY_CHAOS_SEED is a number")],
        Err(_) => SEEDS.to_vec(),
    };
    for seed in seeds {
        let report = run_seed(seed);
        eprintln!("{report}");
        assert!(
            !report.contains(" 0 writes"),
            "the writers wrote nothing (seed {seed})"
        );
    }
}
