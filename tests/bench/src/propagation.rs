//! How fast a change reaches the replicas (issue 16): an owner and F followers on loopback
//! (real `ferry serve` processes), changes written one at a time on the owner through its
//! local API, and on every follower an app long-polling that follower's change feed
//! (`GET /v1/vaults/{vault}/changes?wait=`). The figure is the time from the owner's `200` to
//! the change showing in a follower's feed (clamped at zero: a feed may answer before the
//! writer has read its own 200). Also the owner's write latency with F followers against none,
//! and a frozen follower: the owner's write rate while one follower is SIGSTOPped, and that
//! follower's catch-up after SIGCONT.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_kit::{Kit, WriteOptions, WriteResult};
use serde::Serialize;

use crate::ferry_procs::{self, Gateway, GatewayError, PATH_OWNER_CONFIG};
use crate::load::percentile;
use crate::targets::{render_judged, Bound, Judged, Unit};
use crate::{progress, Options};

const VAULT: &str = "notes";

/// How much to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Changes written one at a time, per follower count.
    pub changes: usize,
    /// The follower counts measured (0 gives the owner's write latency alone).
    pub followers: Vec<usize>,
    /// Changes written while one follower is frozen.
    pub frozen_changes: usize,
}

impl Plan {
    pub fn quick() -> Self {
        Plan {
            changes: 100,
            followers: vec![0, 1, 5],
            frozen_changes: 500,
        }
    }

    pub fn full() -> Self {
        Plan {
            changes: 1_000,
            followers: vec![0, 1, 20],
            frozen_changes: 10_000,
        }
    }
}

/// One follower count's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub followers: usize,
    /// The owner's write latency (its local API), milliseconds: p50, p99.
    pub write_ms: [f64; 2],
    /// From the owner's 200 to the change in a follower's feed, over every follower and change
    /// (milliseconds): p50, p99, largest.
    pub propagation_ms: Option<[f64; 3]>,
    /// The mean of the same delays, milliseconds, beside the mean of what the followers'
    /// `ferry_propagation_seconds` counted (the owner's commit to each follower's apply, no
    /// clocks compared; one observation per page) and how many pages it
    /// counted: a check of the metric against the benchmark's own clock.
    pub propagation_mean_ms: Option<f64>,
    pub metric_mean_ms: Option<f64>,
    pub metric_count: u64,
    /// The owner process's CPU per write (microseconds, user and system): its own cost, apart
    /// from what the followers' processes take of the shared box.
    pub owner_cpu_us_per_write: Option<f64>,
    /// The owner process's CPU while its followers wait and nothing is written (percent of one
    /// core, over [`IDLE_SPAN`]).
    pub owner_idle_cpu_pct: Option<f64>,
}

/// How long the owner's idle CPU is measured, its followers waiting.
const IDLE_SPAN: Duration = Duration::from_secs(3);

/// The frozen follower's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Frozen {
    pub changes: usize,
    /// The owner's writes per second with all followers running, and with one frozen.
    pub writes_per_s_all_running: f64,
    pub writes_per_s_one_frozen: f64,
    /// From SIGCONT until the frozen follower held the owner's revision, and whether it then
    /// held exactly the owner's records.
    pub catch_up_ms: f64,
    pub nothing_missing: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub runs: Vec<Run>,
    pub frozen: Option<Frozen>,
    pub targets: Vec<Judged>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Starts an owner with `followers` followers of [`VAULT`], all caught up.
fn start(binary: &Path, followers: usize) -> Result<(Gateway, Vec<Gateway>), GatewayError> {
    let owner = ferry_procs::start(binary, "owner", Some(PATH_OWNER_CONFIG))?;
    owner.cli_stdout(&["vault", "create", VAULT])?;
    let mut list = Vec::new();
    for i in 0..followers {
        let follower = ferry_procs::start(binary, &format!("f{i}"), None)?;
        owner.try_trust(&follower)?;
        follower.try_trust(&owner)?;
        follower.cli_stdout(&["vault", "follow", VAULT, "--owner", "owner"])?;
        list.push(follower);
    }
    Ok((owner, list))
}

/// Writes `count` changes one at a time on `owner`; each write's revision, the instant its 200
/// was read, and its latency.
async fn write_all(
    owner: &Kit,
    count: usize,
    prefix: &str,
) -> Result<Vec<(u64, Instant, Duration)>, String> {
    let mut done = Vec::with_capacity(count);
    for i in 0..count {
        let started = Instant::now();
        match owner
            .put(
                VAULT,
                &format!("{prefix}-{i:06}"),
                &b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"[..],
                &WriteOptions::default(),
            )
            .await
        {
            WriteResult::Done { revision, .. } => {
                let at = Instant::now();
                done.push((revision, at, at - started));
            }
            other => return Err(format!("write {i} on the owner: {other:?}")),
        }
    }
    Ok(done)
}

/// Follows `kit`'s feed from revision `from` until `last` shows, noting when each revision
/// showed.
async fn watch(
    kit: Kit,
    from: u64,
    last: Arc<Mutex<Option<u64>>>,
    seen: Arc<Mutex<BTreeMap<u64, Instant>>>,
) -> Result<(), String> {
    let mut feed = ferry_kit::ChangeFeed::new(kit, VAULT, from, Duration::from_secs(5));
    let started = Instant::now();
    loop {
        let changes = feed.next().await.map_err(|e| e.to_string())?;
        let now = Instant::now();
        {
            let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            for change in changes {
                seen.insert(change.revision, now);
            }
        }
        let done = last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|last| feed.cursor() >= last);
        if done {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err("a follower's feed did not reach the last change in 10 minutes".into());
        }
    }
}

async fn one_run(binary: &Path, followers: usize, changes: usize) -> Result<Run, String> {
    progress(&format!(
        "propagation: {followers} followers, {changes} changes"
    ));
    let (mut owner, mut list) = start(binary, followers).map_err(|e| e.to_string())?;
    let owner_kit = Kit::from_home(owner.home.clone(), "bench-writer");
    // Warm up: one change through to every follower, so each is caught up and asking.
    let warm = write_all(&owner_kit, 1, "warm-up").await?;
    let warm = warm.last().map_or(0, |w| w.0);
    for follower in &list {
        let kit = Kit::from_home(follower.home.clone(), "bench-watcher");
        let asked = Instant::now();
        while kit
            .changes(VAULT, 0, None, Duration::ZERO)
            .await
            .map_err(|e| e.to_string())?
            .vault_revision
            < warm
        {
            if asked.elapsed() > Duration::from_secs(60) {
                return Err(format!("{} did not follow in a minute", follower.label));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let last = Arc::new(Mutex::new(None));
    let mut watchers = Vec::new();
    let mut seen_by = Vec::new();
    for follower in &list {
        let seen = Arc::new(Mutex::new(BTreeMap::new()));
        let kit = Kit::from_home(follower.home.clone(), "bench-watcher");
        // From the warm-up's revision, known before any measured write.
        watchers.push(tokio::spawn(watch(kit, warm, last.clone(), seen.clone())));
        seen_by.push(seen);
    }
    // Settled first: a follower's catch-up counts as a call to its owner, whose routes then
    // heartbeat at the pace of a peer in use (every 50 ms) for `ACTIVE_FOR`; a caught-up
    // follower's long polls do not. What follows is the steady state of live sync.
    tokio::time::sleep(ferry_peer::health::ACTIVE_FOR + Duration::from_secs(1)).await;
    // The owner's own cost of its followers while nothing is written (their long polls,
    // heartbeats and routes), so the CPU per write below can be read apart from it.
    let idle_before = owner.process_id().and_then(crate::cpu::process_cpu);
    tokio::time::sleep(IDLE_SPAN).await;
    let owner_idle_cpu_pct = owner
        .process_id()
        .and_then(crate::cpu::process_cpu)
        .zip(idle_before)
        .map(|(after, before)| {
            after.saturating_sub(before).as_secs_f64() * 100.0 / IDLE_SPAN.as_secs_f64()
        });
    let owner_cpu_before = owner.process_id().and_then(crate::cpu::process_cpu);
    let written = write_all(&owner_kit, changes, "k").await?;
    *last.lock().unwrap_or_else(|p| p.into_inner()) = written.last().map(|w| w.0);
    for watcher in watchers {
        watcher
            .await
            .map_err(|e| format!("a watcher panicked: {e}"))??;
    }
    let owner_cpu = owner
        .process_id()
        .and_then(crate::cpu::process_cpu)
        .zip(owner_cpu_before)
        .map(|(after, before)| after.saturating_sub(before).as_secs_f64() * 1e6 / changes as f64);
    let mut writes: Vec<Duration> = written.iter().map(|w| w.2).collect();
    writes.sort_unstable();
    let mut delays = Vec::new();
    for seen in &seen_by {
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        for (revision, at, _) in &written {
            let shown = seen
                .get(revision)
                .ok_or_else(|| format!("revision {revision} never showed in a follower's feed"))?;
            delays.push(shown.saturating_duration_since(*at));
        }
    }
    delays.sort_unstable();
    let pick = |sorted: &[Duration], p: f64| percentile(sorted, p).map_or(f64::NAN, ms);
    let (mut metric_sum_s, mut metric_count) = (0.0, 0.0);
    for follower in &list {
        let metric = |series: &str| follower.try_metric(series).map_err(|e| e.to_string());
        metric_sum_s += metric("ferry_propagation_seconds_sum{}")?.unwrap_or(0.0);
        metric_count += metric("ferry_propagation_seconds_count{}")?.unwrap_or(0.0);
    }
    let propagation_mean_ms = (!delays.is_empty())
        .then(|| delays.iter().map(|d| ms(*d)).sum::<f64>() / delays.len() as f64);
    for follower in &mut list {
        let _ = follower.stop();
    }
    let _ = owner.stop();
    Ok(Run {
        followers,
        write_ms: [pick(&writes, 50.0), pick(&writes, 99.0)],
        propagation_ms: (!delays.is_empty()).then(|| {
            [
                pick(&delays, 50.0),
                pick(&delays, 99.0),
                delays.last().map_or(f64::NAN, |d| ms(*d)),
            ]
        }),
        propagation_mean_ms,
        metric_mean_ms: (metric_count > 0.0).then(|| metric_sum_s * 1e3 / metric_count),
        metric_count: metric_count as u64,
        owner_cpu_us_per_write: owner_cpu,
        owner_idle_cpu_pct,
    })
}

/// Writes with two followers running, then with one frozen; then thaws it and times its
/// catch-up.
async fn frozen_run(binary: &Path, changes: usize) -> Result<Frozen, String> {
    progress(&format!(
        "propagation: a frozen follower, {changes} changes"
    ));
    let (mut owner, mut list) = start(binary, 2).map_err(|e| e.to_string())?;
    let owner_kit = Kit::from_home(owner.home.clone(), "bench-writer");
    let rate = |written: &[(u64, Instant, Duration)], took: Duration| {
        written.len() as f64 / took.as_secs_f64()
    };
    let started = Instant::now();
    let all_running = write_all(&owner_kit, changes, "running").await?;
    let all_running_rate = rate(&all_running, started.elapsed());
    let frozen_pid = list[1]
        .process_id()
        .ok_or("the follower to freeze is not running")?;
    signal(frozen_pid, "STOP")?;
    let started = Instant::now();
    let frozen = write_all(&owner_kit, changes, "frozen").await;
    let took = started.elapsed();
    signal(frozen_pid, "CONT")?;
    let frozen = frozen?;
    let frozen_rate = rate(&frozen, took);
    let target = frozen.last().map_or(0, |w| w.0);
    let thawed = Instant::now();
    let follower_kit = Kit::from_home(list[1].home.clone(), "bench-watcher");
    loop {
        let page = follower_kit
            .changes(VAULT, target.saturating_sub(1), Some(1), Duration::ZERO)
            .await
            .map_err(|e| e.to_string())?;
        if page.vault_revision >= target {
            break;
        }
        if thawed.elapsed() > Duration::from_secs(300) {
            return Err("the thawed follower did not catch up in 5 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let catch_up = thawed.elapsed();
    // Nothing missing: the follower's feed from the start holds every key the owner's does.
    let listed = |kit: Kit| async move {
        let mut keys = Vec::new();
        let mut after = 0;
        loop {
            let page = kit
                .changes(VAULT, after, None, Duration::ZERO)
                .await
                .map_err(|e| e.to_string())?;
            keys.extend(page.changes.iter().map(|c| (c.key.clone(), c.revision)));
            if !page.more {
                return Ok::<_, String>(keys);
            }
            after = page.next;
        }
    };
    let on_owner = listed(owner_kit.clone()).await?;
    let on_follower = listed(follower_kit).await?;
    for follower in &mut list {
        let _ = follower.stop();
    }
    let _ = owner.stop();
    Ok(Frozen {
        changes,
        writes_per_s_all_running: all_running_rate,
        writes_per_s_one_frozen: frozen_rate,
        catch_up_ms: ms(catch_up),
        nothing_missing: on_owner == on_follower,
    })
}

fn signal(pid: u32, name: &str) -> Result<(), String> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .map_err(|e| format!("kill -{name} {pid}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -{name} {pid} failed"))
    }
}

pub fn run(options: &Options<Plan>) -> Result<Report, Box<dyn std::error::Error>> {
    let (binary, built) = ferry_procs::prepare_binary(options.ferry_binary.clone(), options.build);
    built?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let plan = &options.plan;
    let mut runs = Vec::new();
    for followers in &plan.followers {
        runs.push(runtime.block_on(one_run(&binary, *followers, plan.changes))?);
    }
    let frozen = Some(runtime.block_on(frozen_run(&binary, plan.frozen_changes))?);
    let with = |n: usize| runs.iter().find(|r| r.followers == n);
    let most = plan.followers.iter().copied().max().unwrap_or(0);
    let one = with(1).and_then(|r| r.propagation_ms);
    let many = with(most).and_then(|r| r.propagation_ms);
    let write_ratio = with(most)
        .zip(with(0))
        .map(|(many, none)| many.write_ms[0] / none.write_ms[0]);
    let targets = vec![
        Judged::new(
            "propagation_p50_ms_one_follower",
            Unit::Millis,
            Bound::AtMost(5.0),
            one.map(|p| p[0]),
        ),
        Judged::new(
            "propagation_p99_ms_one_follower",
            Unit::Millis,
            Bound::AtMost(50.0),
            one.map(|p| p[1]),
        ),
        Judged::new(
            "propagation_p99_ms_many_followers",
            Unit::Millis,
            Bound::AtMost(100.0),
            many.map(|p| p[1]),
        ),
        Judged::new(
            "owner_write_p50_ratio_many_followers_to_none",
            Unit::Ratio,
            Bound::AtMost(1.2),
            write_ratio,
        ),
        Judged::new(
            "owner_write_rate_with_a_frozen_follower_share",
            Unit::Share,
            Bound::AtLeast(0.9),
            frozen
                .as_ref()
                .map(|f| f.writes_per_s_one_frozen / f.writes_per_s_all_running),
        ),
    ];
    Ok(Report {
        runs,
        frozen,
        targets,
    })
}

impl Report {
    /// A run is clean when the frozen follower missed nothing.
    pub fn clean(&self) -> bool {
        self.frozen.as_ref().is_none_or(|f| f.nothing_missing)
    }

    pub fn render(&self) -> String {
        let mut out = String::from("# Propagation: a change from the owner to the replicas\n\n");
        let _ = writeln!(
            out,
            "| followers | owner write p50 | p99 | owner CPU per write | owner idle CPU | to a follower's feed p50 | p99 | largest |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
        for run in &self.runs {
            let p = run
                .propagation_ms
                .map_or(["-".to_string(), "-".into(), "-".into()], |p| {
                    p.map(|v| format!("{v:.2} ms"))
                });
            let cpu = run
                .owner_cpu_us_per_write
                .map_or("-".to_string(), |us| format!("{us:.0} us"));
            let idle = run
                .owner_idle_cpu_pct
                .map_or("-".to_string(), |pct| format!("{pct:.1}%"));
            let _ = writeln!(
                out,
                "| {} | {:.2} ms | {:.2} ms | {cpu} | {idle} | {} | {} | {} |",
                run.followers, run.write_ms[0], run.write_ms[1], p[0], p[1], p[2]
            );
        }
        let _ = writeln!(
            out,
            "\nThe followers' own metric, `ferry_propagation_seconds` (the owner's age of the news when its answer left, half the round trip, the apply; no clocks compared), against this benchmark's clock (the owner's `200` to the change in a follower's feed):\n\n| followers | measured here, mean per change | the metric, mean per page | pages the metric counted |\n|---|---|---|---|"
        );
        for run in &self.runs {
            let mean = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2} ms"));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                run.followers,
                mean(run.propagation_mean_ms),
                mean(run.metric_mean_ms),
                run.metric_count
            );
        }
        if let Some(f) = &self.frozen {
            let _ = writeln!(
                out,
                "\nA follower frozen (SIGSTOP) while {} changes were written: the owner wrote {:.0}/s with both followers running and {:.0}/s with one frozen; after SIGCONT it caught up in {:.0} ms, {}.\n",
                f.changes,
                f.writes_per_s_all_running,
                f.writes_per_s_one_frozen,
                f.catch_up_ms,
                if f.nothing_missing { "missing nothing" } else { "MISSING CHANGES" }
            );
        }
        out.push('\n');
        render_judged(&mut out, &self.targets);
        out
    }
}
