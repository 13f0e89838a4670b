//! A vault of millions of records against one of 10,000, on one owner: what a point read, a
//! write and a page of keys cost on each, how long the owner takes to start with the big one,
//! how fast a fresh replica syncs it and catches up after a burst of changes, and the most
//! memory each gateway held throughout; then the same reads, writes and pages on the database
//! file with bare SQLite.
//!
//! The small vault is filled and measured first, alone in the database, so its figures are
//! those of a 10,000-record store; then the big one is filled beside it and measured. Both
//! are filled while their owner is stopped, by the gateway's own store functions
//! (`ferry_gateway::store`: the next revision, then the record, in transactions of
//! [`SEED_BATCH`]), so the rows are the ones writes through the API leave behind, without the
//! journal rows a write adds and collection removes. Writing 10 million records through the API
//! one at a time would take most of an hour on this machine; everything measured afterwards
//! goes through the API. The database was just written, so it is in the kernel's page cache:
//! these are warm figures.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_gateway::store::{self, records, vaults, StoreError};

use super::report::{BigVault, FloorOnVault, Latencies, OnVault, Placed, SqliteFloor};
use super::{wait_for_revision, Plan, APP};
use crate::ferry_procs::{self, Gateway, GatewayError, PATH_OWNER_CONFIG};
use crate::load::{self, Keys, Sample, Target, Verb, LIST_PAGE};
use crate::memory::PeakWatch;
use crate::placement::{self, Placements};

/// Keys like a photo library's metadata: `photos/library/IMG_0001234567`.
const KEY_PREFIX: &str = "photos/library/IMG_";
const BIG: &str = "big";
const SMALL: &str = "small";
/// Records per seeding transaction.
const SEED_BATCH: u64 = 50_000;
/// Unmeasured requests before each measured run of reads or writes, and of pages.
const WARMUP: usize = 100;
const PAGE_WARMUP: usize = 10;
/// Bound on each measured run.
const RUN_BOUND: Duration = Duration::from_secs(300);
/// A replica must sync at least this fast to finish within its bound (a tenth of the target).
const SLOWEST_SYNC_PER_S: u64 = 5_000;
/// Writers of the burst the replica catches up on.
const BURST_WRITERS: usize = 16;

/// The big-vault part, or why it could not finish.
pub fn measure(binary: &Path, plan: &Plan) -> Result<BigVault, String> {
    let watch = PeakWatch::start();
    let result = run(binary, plan, &watch);
    result.map(|mut figures| {
        figures.owner_peak_resident = watch.peak("owner");
        figures.replica_peak_resident = watch.peak("replica");
        figures
    })
}

fn run(binary: &Path, plan: &Plan, watch: &PeakWatch) -> Result<BigVault, String> {
    crate::progress(&format!(
        "big vault: an owner with {} records, then {} beside them",
        plan.small_records, plan.big_records
    ));
    let mut owner = ferry_procs::start(binary, "a", Some(PATH_OWNER_CONFIG))
        .map_err(fail("starting the owner"))?;
    for vault in [BIG, SMALL] {
        owner
            .cli_stdout(&["vault", "create", vault])
            .map_err(fail("creating the vaults"))?;
    }
    owner
        .stop_cleanly()
        .map_err(fail("stopping the owner to fill it"))?;
    let db = owner.home.as_path().join("ferry.db");

    // The small vault alone first: its figures are those of a database of 10,000 records,
    // not of a corner of the big one's tables.
    seed(&db, SMALL, plan.small_records).map_err(|err| format!("filling {SMALL}: {err}"))?;
    owner.try_restart().map_err(fail("restarting the owner"))?;
    watch.watch("owner", owner.process_id());
    let small = on_vault(&mut owner, watch, SMALL, plan.small_records, plan)?;
    watch.forget("owner");
    owner.stop_cleanly().map_err(fail("stopping the owner"))?;
    let small_floor = floor_on_vault(&db, SMALL, plan.small_records, plan)
        .map_err(|err| format!("the SQLite floor on {SMALL}: {err}"))?;

    let seed_started = Instant::now();
    seed(&db, BIG, plan.big_records).map_err(|err| format!("filling {BIG}: {err}"))?;
    let seed_s = seed_started.elapsed().as_secs_f64();
    let database_bytes = std::fs::metadata(&db).map(|m| m.len()).ok();

    crate::progress("big vault: starting the owner with the big vault");
    let start = owner.try_restart().map_err(fail("restarting the owner"))?;
    watch.watch("owner", owner.process_id());
    let big = on_vault(&mut owner, watch, BIG, plan.big_records, plan)?;
    crate::progress("big vault: pages of keys across the big vault");
    let pages = run_sequential(
        &owner,
        BIG,
        Verb::List,
        &page_starts(plan),
        PAGE_WARMUP,
        plan.pages,
    )?;

    crate::progress("big vault: a fresh replica syncing the big vault");
    let mut replica =
        ferry_procs::start(binary, "r", None).map_err(fail("starting the replica"))?;
    watch.watch("replica", replica.process_id());
    replica.try_trust(&owner).map_err(fail("trust"))?;
    owner.try_trust(&replica).map_err(fail("trust"))?;
    let synced_to = owner_revision(&owner)?;
    let sync_bound = Duration::from_secs(60 + synced_to / SLOWEST_SYNC_PER_S);
    let sync_started = Instant::now();
    replica
        .cli_stdout(&["vault", "follow", BIG, "--owner", &owner.label, "--detach"])
        .map_err(fail("following the big vault"))?;
    wait_for_revision(&replica, BIG, synced_to, sync_bound)?;
    let sync = sync_started.elapsed();

    crate::progress(&format!(
        "big vault: {} changes while the replica is stopped, then its catch-up",
        plan.catch_up_changes
    ));
    watch.forget("replica");
    replica
        .stop_cleanly()
        .map_err(fail("stopping the replica"))?;
    let burst = Arc::new(Keys::spread(KEY_PREFIX, 1, plan.big_records.max(2) - 1));
    let written = load::concurrent(
        &target(&owner, BIG),
        Verb::Write,
        &burst,
        BURST_WRITERS,
        plan.catch_up_changes,
        RUN_BOUND,
    )
    .map_err(|err| format!("the burst of changes: {err}"))?;
    if written.failures() > 0 {
        return Err(format!(
            "{} writes of the burst failed: {:?}",
            written.failures(),
            written.first_failure
        ));
    }
    let behind = owner_revision(&owner)?;
    let catch_up_started = Instant::now();
    replica
        .try_restart()
        .map_err(fail("restarting the replica"))?;
    watch.watch("replica", replica.process_id());
    wait_for_revision(&replica, BIG, behind, RUN_BOUND)?;
    let catch_up = catch_up_started.elapsed();

    watch.forget("replica");
    watch.forget("owner");
    let stopped = replica.stop_cleanly().and(owner.stop_cleanly());
    stopped.map_err(fail("stopping"))?;
    crate::progress("big vault: the same reads, writes and pages on bare SQLite");
    let floor = SqliteFloor {
        small: small_floor,
        big: floor_on_vault(&db, BIG, plan.big_records, plan)
            .map_err(|err| format!("the SQLite floor on {BIG}: {err}"))?,
        page: floor_pages(&db, plan).map_err(|err| format!("the SQLite floor's pages: {err}"))?,
    };
    Ok(BigVault {
        floor,
        records: plan.big_records,
        small_records: plan.small_records,
        seed_s,
        database_bytes,
        start_s: start.as_secs_f64(),
        small,
        big,
        page: Latencies::of(&pages),
        sync_records: plan.big_records,
        sync_revisions: synced_to,
        sync_s: sync.as_secs_f64(),
        catch_up_changes: written.ok() as u64,
        catch_up_s: catch_up.as_secs_f64(),
        owner_peak_resident: None,
        replica_peak_resident: None,
    })
}

/// The owner's revision of the big vault, which it must hold.
fn owner_revision(owner: &Gateway) -> Result<u64, String> {
    super::vault_revision(owner, BIG)?
        .ok_or_else(|| format!("the owner {} does not list {BIG}", owner.label))
}

/// Where the pages of keys start: spread over the big vault, each leaving a whole page after
/// it.
fn page_starts(plan: &Plan) -> Keys {
    Keys::spread(
        KEY_PREFIX,
        0,
        plan.big_records.saturating_sub(LIST_PAGE as u64 + 1),
    )
}

/// Point reads, then writes over existing records, spread over all of `vault`'s `records`, on
/// each of `plan.starts_per_vault` starts of the owner (it is running at the first; the later
/// ones restart it), in each placement of the benchmark's client against the owner
/// ([`crate::placement`]): the placement, not the vault, decides whether a read's p50 is
/// about 0.02 or about 0.09 ms on this VM, so the two vaults are compared placement by
/// placement. Each placement pools its starts' requests; each start's p50 is kept too.
fn on_vault(
    owner: &mut Gateway,
    watch: &PeakWatch,
    vault: &str,
    records: u64,
    plan: &Plan,
) -> Result<OnVault, String> {
    let keys = Keys::spread(KEY_PREFIX, 0, records);
    let starts = plan.starts_per_vault.max(1);
    let placements = Placements::here("big vault");
    // Per placement, per start: reads, writes.
    let mut samples: Vec<(Vec<Sample>, Vec<Sample>)> =
        vec![Default::default(); placements.each.len()];
    for start in 0..starts {
        if start > 0 {
            watch.forget("owner");
            owner
                .stop_cleanly()
                .map_err(fail("stopping the owner between starts"))?;
            owner
                .try_restart()
                .map_err(fail("restarting the owner between starts"))?;
            watch.watch("owner", owner.process_id());
        }
        let pid = owner
            .process_id()
            .ok_or_else(|| "the owner is not running".to_string())?;
        // Alternate starts take the placements in turn in the other order, so neither always
        // meets a freshly started owner.
        let mut order: Vec<usize> = (0..placements.each.len()).collect();
        if start % 2 == 1 {
            order.reverse();
        }
        for index in order {
            let placement = &placements.each[index];
            let (reads, writes) = &mut samples[index];
            let name = placement::name(*placement);
            crate::progress(&format!(
                "big vault: reads and writes on {vault}, owner start {} of {starts}, {name}",
                start + 1
            ));
            let _pinned = placements
                .pin(*placement, &[pid])
                .map_err(|why| format!("pinning {name}: {why}"))?;
            reads.push(run_sequential(
                owner,
                vault,
                Verb::Read,
                &keys,
                WARMUP,
                plan.reads,
            )?);
            writes.push(run_sequential(
                owner,
                vault,
                Verb::Write,
                &keys,
                WARMUP,
                plan.writes,
            )?);
        }
    }
    let p50s = |samples: &[Sample]| -> Vec<f64> {
        samples
            .iter()
            .filter_map(|s| Latencies::of(s).p50_ms)
            .collect()
    };
    let placed: Vec<Placed> = placements
        .each
        .iter()
        .zip(samples)
        .map(|(placement, (reads, writes))| Placed {
            placement: *placement,
            read_p50_by_start_ms: p50s(&reads),
            write_p50_by_start_ms: p50s(&writes),
            read: Latencies::of(&Sample::pooled(reads)),
            write: Latencies::of(&Sample::pooled(writes)),
        })
        .collect();
    Ok(OnVault { placed })
}

/// One request at a time on the owner's API; every one must succeed.
fn run_sequential(
    owner: &Gateway,
    vault: &str,
    verb: Verb,
    keys: &Keys,
    warmup: usize,
    count: usize,
) -> Result<Sample, String> {
    let sample = load::sequential(&target(owner, vault), verb, keys, warmup, count, RUN_BOUND)
        .map_err(|err| format!("{verb:?} on {vault}: {err}"))?;
    if sample.failures() > 0 || sample.ok() < count {
        return Err(format!(
            "{verb:?} on {vault}: {} of {count} done, {} failed; first failure: {:?}",
            sample.ok(),
            sample.failures(),
            sample.first_failure
        ));
    }
    Ok(sample)
}

/// What a failed step of the setup says: the step, then why.
fn fail(what: &'static str) -> impl Fn(GatewayError) -> String {
    move |err| format!("{what}: {err}")
}

fn target(gateway: &Gateway, vault: &str) -> Target {
    Target {
        api: gateway.api_addr(),
        token: gateway.token.clone(),
        app: APP.into(),
        vault: vault.into(),
    }
}

/// The same reads and writes on the stopped owner's database with nothing on top: point reads
/// and writes (an upsert per durable commit, as SQLite alone would do it) at the same keys, one
/// at a time on this thread.
fn floor_on_vault(
    db: &Path,
    vault: &str,
    records: u64,
    plan: &Plan,
) -> Result<FloorOnVault, String> {
    let text = |err: rusqlite::Error| err.to_string();
    let conn = crate::sqlite::open_durable(db).map_err(text)?;
    let mut read = conn
        .prepare("SELECT value FROM records WHERE vault = ?1 AND key = ?2")
        .map_err(text)?;
    let mut write = conn
        .prepare(
            "INSERT INTO records (vault, key, revision, value) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (vault, key) DO UPDATE SET revision = excluded.revision, value = excluded.value",
        )
        .map_err(text)?;
    let value = load::value();
    let keys = Keys::spread(KEY_PREFIX, 0, records);
    let read = timed(plan.reads, WARMUP, &keys, |key| {
        read.query_row(rusqlite::params![vault, key], |row| {
            row.get::<_, Vec<u8>>(0)
        })
        .map(drop)
        .map_err(text)
    })?;
    let write = timed(plan.writes, WARMUP, &keys, |key| {
        write
            .execute(rusqlite::params![vault, key, i64::MAX, &value[..]])
            .map(drop)
            .map_err(text)
    })?;
    Ok(FloorOnVault { read, write })
}

/// The owner's page query on the stopped owner's database, at the places the API was asked.
fn floor_pages(db: &Path, plan: &Plan) -> Result<Latencies, String> {
    let text = |err: rusqlite::Error| err.to_string();
    let conn = crate::sqlite::open_durable(db).map_err(text)?;
    let mut page = conn
        .prepare(
            "SELECT key, revision FROM records WHERE vault = ?1 AND key > ?2 \
             AND value IS NOT NULL ORDER BY key LIMIT ?3",
        )
        .map_err(text)?;
    timed(plan.pages, PAGE_WARMUP, &page_starts(plan), |key| {
        let rows = page
            .query_map(rusqlite::params![BIG, key, LIST_PAGE as i64], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })
            .map_err(text)?
            .count();
        if rows == LIST_PAGE {
            Ok(())
        } else {
            Err(format!("a page of {rows} keys, not {LIST_PAGE}"))
        }
    })
}

/// `count` calls of `one` after `warmup` unmeasured ones (as many as the API's runs had, so
/// both are measured at the same keys), each with the next of `keys`, timed one by one.
fn timed(
    count: usize,
    warmup: usize,
    keys: &Keys,
    mut one: impl FnMut(&str) -> Result<(), String>,
) -> Result<Latencies, String> {
    let mut latencies = Vec::with_capacity(warmup + count);
    let started = Instant::now();
    for _ in 0..warmup + count {
        let key = keys.next_key();
        let at = Instant::now();
        one(&key)?;
        latencies.push(at.elapsed());
    }
    latencies.drain(..warmup);
    Ok(Latencies::of(&Sample::from_latencies(
        latencies,
        started.elapsed(),
    )))
}

/// Fills `vault` with records `0..count` (keys [`KEY_PREFIX`] and the number, the load
/// generator's 64-byte value), each at the vault's next revision, in transactions of
/// [`SEED_BATCH`]; then moves the write-ahead log into the database, as a stopped gateway
/// leaves it.
fn seed(db: &Path, vault: &str, count: u64) -> Result<(), StoreError> {
    const SAY_EVERY: u64 = 1_000_000;
    let conn = store::open(db)?;
    let value = load::value();
    let mut next = 0;
    while next < count {
        let end = (next + SEED_BATCH).min(count);
        store::in_transaction(&conn, |tx| {
            for n in next..end {
                let revision = vaults::next_revision(tx, vault)?;
                records::set(tx, vault, &Keys::key(KEY_PREFIX, n), revision, Some(&value))?;
            }
            Ok(())
        })?;
        if end / SAY_EVERY > next / SAY_EVERY {
            crate::progress(&format!("big vault: {vault} filled to {end} of {count}"));
        }
        next = end;
    }
    drop(conn);
    store::checkpoint(db)?;
    Ok(())
}
