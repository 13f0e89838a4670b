//! The gateways of the overload benchmark, all real `ferry serve` processes on loopback: two
//! owners, `a` with the capacity rules on and `a-off` with them off, each owning a vault; two
//! calling gateways `b` and `c` trusting both; and `d`, a replica-to-be trusting `a`. Also what
//! the benchmark reads from them: vault revisions, the owner's metrics.
//!
//! Every gateway is killed when it drops; [`Mesh::stop`] asks for the ordered stop first.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cpu_quota::{CpuQuota, QuotaError, Throttling};
use crate::ferry_procs::{self, Gateway, GatewayError};
use crate::load::{self, LoadError};
use crate::overload::report::SocketDrops;
use crate::overload::traffic::{self, Endpoint};

/// The vault `a` owns (rules on), the one `a-off` owns (rules off), and the one `a` owns for
/// the replica to catch up with.
pub const VAULT_ON: &str = "overload";
pub const VAULT_OFF: &str = "overload-off";
pub const VAULT_CATCH_UP: &str = "catch-up";

/// `a`'s capacity rules: on, with the shipped per-caller cap, aging and queue bound, and no
/// rate limit (a rate limit would refuse a closed-loop writer within seconds, so every figure
/// would measure it alone). No per-node cap: the benchmark's apps stand for apps of many
/// machines, though they all write through `b` and `c`, and the shipped cap of 16 writes per
/// calling node would hold its peak (32 writes out through each) to half.
pub const CONFIG_ON: &str = "[capacity]\nenabled = true\nper_caller = 4\nper_node = 0\n\
                             rate_per_minute = 0\naging_ms = 10000\nqueue_depth = 4096\n";
/// `a-off`'s: one first-come-first-served queue, no per-caller cap, no rate limit (deadlines and
/// the queue bound still hold).
pub const CONFIG_OFF: &str = "[capacity]\nenabled = false\n";

/// How long a caller may take to write to an owner once trusted, and how often to try.
const READY_BOUND: Duration = Duration::from_secs(20);
const READY_POLL: Duration = Duration::from_millis(100);
/// `/metrics` is longer than an answer to a record call.
const METRICS_BYTES: usize = 4 * 1024 * 1024;
const LOG_TAIL_LINES: usize = 20;

/// Why the gateways could not be set up, or a figure read from them.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    #[error(transparent)]
    Proc(#[from] GatewayError),
    #[error(transparent)]
    Http(#[from] LoadError),
    #[error("holding the owners to a CPU quota: {0}")]
    Quota(#[from] QuotaError),
    #[error(
        "{caller} still cannot write to vault {vault} after {READY_BOUND:?} (last answer: \
         {last}); it may never have learned the route to the owner or that the owner holds the \
         vault.\n{caller}'s log ends:\n{caller_log}\nthe owner's log ends:\n{owner_log}"
    )]
    NotReady {
        caller: String,
        vault: String,
        last: String,
        caller_log: String,
        owner_log: String,
    },
    #[error("{gateway}: GET {path} answered {status}: {body}")]
    Unexpected {
        gateway: String,
        path: &'static str,
        status: u16,
        body: String,
    },
}

/// The five gateways.
#[derive(Debug)]
pub struct Mesh {
    /// Owner of [`VAULT_ON`] and [`VAULT_CATCH_UP`], rules on.
    pub a: Gateway,
    /// Owner of [`VAULT_OFF`], rules off.
    pub a_off: Gateway,
    pub b: Gateway,
    pub c: Gateway,
    /// Trusts `a` and is trusted by it; follows [`VAULT_CATCH_UP`] when asked.
    pub d: Gateway,
    /// The owners' CPU quotas (`a`'s, then `a-off`'s), if they run under one. Declared after
    /// the gateways, so they are dropped (and their groups removed) after the processes.
    pub quotas: Vec<CpuQuota>,
}

impl Mesh {
    /// Starts every gateway, each owner under its own quota of `owner_cores` if given, sets up
    /// trust and the vaults, and waits (bounded) until `b` and `c` can write to both owners'
    /// vaults.
    pub fn start(binary: &Path, owner_cores: Option<f64>) -> Result<Self, MeshError> {
        let a = ferry_procs::start(binary, "a", Some(CONFIG_ON))?;
        let a_off = ferry_procs::start(binary, "a-off", Some(CONFIG_OFF))?;
        let mut quotas = Vec::new();
        if let Some(cores) = owner_cores {
            for owner in [&a, &a_off] {
                let quota = CpuQuota::create(&format!("ferry-bench-{}", owner.label), cores)?;
                if let Some(pid) = owner.process_id() {
                    quota.admit(pid)?;
                }
                quotas.push(quota);
            }
        }
        let b = ferry_procs::start(binary, "b", None)?;
        let c = ferry_procs::start(binary, "c", None)?;
        let d = ferry_procs::start(binary, "d", None)?;
        for owner in [&a, &a_off] {
            for caller in [&b, &c] {
                owner.try_trust(caller)?;
                caller.try_trust(owner)?;
            }
        }
        a.try_trust(&d)?;
        d.try_trust(&a)?;
        a.cli_stdout(&["vault", "create", VAULT_ON])?;
        a.cli_stdout(&["vault", "create", VAULT_CATCH_UP])?;
        a_off.cli_stdout(&["vault", "create", VAULT_OFF])?;
        let mesh = Self {
            a,
            a_off,
            b,
            c,
            d,
            quotas,
        };
        for caller in [&mesh.b, &mesh.c] {
            mesh.wait_until_writes(caller, &mesh.a, VAULT_ON)?;
            mesh.wait_until_writes(caller, &mesh.a, VAULT_CATCH_UP)?;
            mesh.wait_until_writes(caller, &mesh.a_off, VAULT_OFF)?;
        }
        Ok(mesh)
    }

    /// The calling gateways' APIs: `b` then `c`.
    pub fn callers(&self) -> Vec<Endpoint> {
        [&self.b, &self.c].into_iter().map(endpoint).collect()
    }

    /// Waits (bounded) until one write through `caller` to `vault` is done.
    fn wait_until_writes(
        &self,
        caller: &Gateway,
        owner: &Gateway,
        vault: &str,
    ) -> Result<(), MeshError> {
        let started = Instant::now();
        let mut n = 0;
        loop {
            let spec = traffic::Spec {
                endpoints: vec![endpoint(caller)],
                vault: vault.to_string(),
                key_prefix: format!("ready-{}-{n}-", caller.label),
                groups: vec![traffic::Group {
                    name: "ready",
                    apps: vec![(0, "bench-ready".into())],
                    pace: traffic::Pace::Closed { per_app: 1 },
                    class: traffic::Class::Interactive,
                    timeout: Duration::from_secs(5),
                    resend_refused: false,
                }],
                window: Duration::from_secs(10),
                max_writes: Some(1),
                max_outstanding: 1,
            };
            n += 1;
            let run = traffic::run(spec)?;
            let tally = run.group("ready");
            if tally.counts.done == 1 {
                return Ok(());
            }
            if started.elapsed() >= READY_BOUND {
                let last = tally
                    .first
                    .values()
                    .next()
                    .cloned()
                    .unwrap_or_else(|| format!("{:?}", tally.counts));
                return Err(MeshError::NotReady {
                    caller: caller.label.clone(),
                    vault: vault.to_string(),
                    last,
                    caller_log: caller.log_tail(LOG_TAIL_LINES),
                    owner_log: owner.log_tail(LOG_TAIL_LINES),
                });
            }
            std::thread::sleep(READY_POLL);
        }
    }

    /// Datagrams each gateway's peer socket has dropped (a full receive buffer, almost always),
    /// read while they run: a closed socket's count is gone. A gateway whose port is not found
    /// is left out; empty where `/proc/net/udp` is not there.
    pub fn udp_drops(&self) -> Vec<SocketDrops> {
        let by_port = crate::udp_drops::udp_drops_by_port();
        [&self.a, &self.a_off, &self.b, &self.c, &self.d]
            .into_iter()
            .filter_map(|gateway| {
                let port: u16 = gateway.quic.rsplit(':').next()?.parse().ok()?;
                // A build without the catcher, the hold or shared dials has no such series.
                let counter = |series| gateway.try_metric(series).ok().flatten().map(|n| n as u64);
                Some(SocketDrops {
                    gateway: gateway.label.clone(),
                    drops: *by_port.get(&port)?,
                    caught: counter("ferry_peer_datagrams_caught_total"),
                    held: counter("ferry_peer_calls_held_total"),
                    dials: counter("ferry_peer_dials_total"),
                    dials_joined: counter("ferry_peer_dials_joined_total"),
                })
            })
            .collect()
    }

    /// How each owner's quota held it back so far, by label (empty without quotas).
    pub fn throttling(&self) -> BTreeMap<String, Throttling> {
        [&self.a, &self.a_off]
            .into_iter()
            .zip(&self.quotas)
            .filter_map(|(owner, quota)| Some((owner.label.clone(), quota.throttling()?)))
            .collect()
    }

    /// Stops every gateway (callers first); each is stopped or killed whatever happens.
    pub fn stop(mut self) -> Vec<String> {
        let mut notes = Vec::new();
        for gateway in [
            &mut self.d,
            &mut self.b,
            &mut self.c,
            &mut self.a,
            &mut self.a_off,
        ] {
            if let Err(err) = gateway.stop_cleanly() {
                notes.push(format!("{} did not stop cleanly: {err}", gateway.label));
            }
        }
        notes
    }
}

/// A gateway's local API as the traffic calls it.
pub fn endpoint(gateway: &Gateway) -> Endpoint {
    Endpoint {
        api: gateway.api_addr(),
        token: gateway.token.clone(),
    }
}

/// What `GET /v1/vaults` on `gateway` says of `vault`: its revision (for a replica, how far it
/// has applied), `None` if the vault is not held there (yet).
pub fn revision(gateway: &Gateway, vault: &str) -> Result<Option<u64>, MeshError> {
    let json = get_json(gateway, "/v1/vaults")?;
    Ok(json.as_array().and_then(|rows| {
        rows.iter()
            .find(|row| row["name"] == vault && row["role"] != "remote")
            .and_then(|row| row["revision"].as_u64())
    }))
}

fn get_json(gateway: &Gateway, path: &'static str) -> Result<serde_json::Value, MeshError> {
    let (status, body) = load::request_once(gateway.api_addr(), "GET", path, &gateway.token, None)?;
    let unexpected = || MeshError::Unexpected {
        gateway: gateway.label.clone(),
        path,
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    if status != 200 {
        return Err(unexpected());
    }
    serde_json::from_slice(&body).map_err(|_| unexpected())
}

/// The owner-side counters the report reads from `/metrics`, as of one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OwnerCounters {
    /// `ferry_owner_refusals_total`, summed over apps, by reason.
    pub refusals: BTreeMap<String, u64>,
    /// `ferry_owner_queue_wait_seconds_bucket` by class: cumulative counts by upper bound
    /// (`+Inf` as infinity), in the order given.
    pub waits: BTreeMap<String, Vec<(f64, u64)>>,
}

/// What the owner's queue wait histogram says of one class over a phase. The histogram has
/// buckets, so each figure is a bucket's upper bound: the wait was at most this.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Waits {
    /// Writes of the class that left the queue.
    pub count: u64,
    /// `null`: more than the largest bound (5 s), or nothing counted.
    pub p50_at_most_s: Option<f64>,
    pub p99_at_most_s: Option<f64>,
    pub max_at_most_s: Option<f64>,
}

impl OwnerCounters {
    /// What happened between `self` (before) and `later`.
    pub fn until(&self, later: &OwnerCounters) -> OwnerCounters {
        let refusals = later
            .refusals
            .iter()
            .map(|(reason, n)| {
                let before = self.refusals.get(reason).copied().unwrap_or(0);
                (reason.clone(), n.saturating_sub(before))
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        let waits = later
            .waits
            .iter()
            .map(|(class, buckets)| {
                let before = self.waits.get(class);
                let delta = buckets
                    .iter()
                    .map(|(bound, n)| {
                        let was = before
                            .and_then(|b| b.iter().find(|(x, _)| x == bound))
                            .map_or(0, |(_, n)| *n);
                        (*bound, n.saturating_sub(was))
                    })
                    .collect();
                (class.clone(), delta)
            })
            .collect();
        OwnerCounters { refusals, waits }
    }

    /// The waits of `class`.
    pub fn waits(&self, class: &str) -> Waits {
        let Some(buckets) = self.waits.get(class) else {
            return Waits::default();
        };
        let total = buckets.last().map_or(0, |(_, n)| *n);
        // The smallest finite bound holding `share` of the waits.
        let at_most = |share: f64| {
            if total == 0 {
                return None;
            }
            let needed = (share * total as f64).ceil() as u64;
            buckets
                .iter()
                .find(|(_, n)| *n >= needed.max(1))
                .map(|(bound, _)| *bound)
                .filter(|bound| bound.is_finite())
        };
        Waits {
            count: total,
            p50_at_most_s: at_most(0.5),
            p99_at_most_s: at_most(0.99),
            max_at_most_s: at_most(1.0),
        }
    }
}

/// Reads the owner's counters from its `/metrics`.
pub fn owner_counters(owner: &Gateway) -> Result<OwnerCounters, MeshError> {
    let (status, body) = load::request_once_limited(
        owner.api_addr(),
        "GET",
        "/metrics",
        &owner.token,
        None,
        METRICS_BYTES,
    )?;
    if status != 200 {
        return Err(MeshError::Unexpected {
            gateway: owner.label.clone(),
            path: "/metrics",
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
        });
    }
    Ok(parse_owner_counters(&String::from_utf8_lossy(&body)))
}

/// The counters of [`OwnerCounters`] in Prometheus text.
fn parse_owner_counters(text: &str) -> OwnerCounters {
    let mut counters = OwnerCounters::default();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if let Some(labels) = series.strip_prefix("ferry_owner_refusals_total{") {
            if let Some(reason) = label(labels, "reason") {
                *counters.refusals.entry(reason.to_string()).or_default() += value as u64;
            }
        } else if let Some(labels) = series.strip_prefix("ferry_owner_queue_wait_seconds_bucket{") {
            let Some(class) = label(labels, "class") else {
                continue;
            };
            let bound = match label(labels, "le") {
                Some("+Inf") => f64::INFINITY,
                Some(bound) => match bound.parse() {
                    Ok(bound) => bound,
                    Err(_) => continue,
                },
                None => continue,
            };
            counters
                .waits
                .entry(class.to_string())
                .or_default()
                .push((bound, value as u64));
        }
    }
    counters
}

/// The value of `name="..."` in a series' labels (no escapes in the labels read here).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = labels.get(start..)?;
    rest.get(..rest.find('"')?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_counters_are_read_from_prometheus_text() {
        let text = "\
# HELP ferry_owner_refusals_total x
ferry_owner_refusals_total{reason=\"caller_cap\",app=\"a1\"} 3
ferry_owner_refusals_total{reason=\"caller_cap\",app=\"a2\"} 4
ferry_owner_refusals_total{reason=\"deadline\",app=\"a1\"} 1
ferry_owner_queue_wait_seconds_bucket{class=\"interactive\",le=\"0.5\"} 9
ferry_owner_queue_wait_seconds_bucket{class=\"background\",le=\"0.5\"} 2
ferry_owner_queue_wait_seconds_bucket{class=\"background\",le=\"5\"} 5
ferry_owner_queue_wait_seconds_bucket{class=\"background\",le=\"+Inf\"} 5
ferry_owner_queue_wait_seconds_sum{class=\"background\"} 1.5
";
        let counters = parse_owner_counters(text);
        assert_eq!(
            counters.refusals,
            BTreeMap::from([("caller_cap".into(), 7), ("deadline".into(), 1)])
        );
        assert_eq!(
            counters.waits["background"],
            vec![(0.5, 2), (5.0, 5), (f64::INFINITY, 5)]
        );
        let waits = counters.waits("background");
        assert_eq!(
            (waits.count, waits.p50_at_most_s, waits.max_at_most_s),
            (5, Some(5.0), Some(5.0))
        );
        assert_eq!(counters.waits("interactive").p99_at_most_s, Some(0.5));
        let before = OwnerCounters {
            refusals: BTreeMap::from([("caller_cap".into(), 7)]),
            waits: BTreeMap::from([(
                "background".into(),
                vec![(0.5, 2), (5.0, 2), (f64::INFINITY, 2)],
            )]),
        };
        let delta = before.until(&counters);
        assert_eq!(delta.refusals, BTreeMap::from([("deadline".into(), 1)]));
        let waits = delta.waits("background");
        assert_eq!((waits.count, waits.p50_at_most_s), (3, Some(5.0)));
        assert_eq!(
            OwnerCounters::default().waits("background"),
            Waits::default()
        );
        let late = OwnerCounters {
            refusals: BTreeMap::new(),
            waits: BTreeMap::from([("background".into(), vec![(5.0, 1), (f64::INFINITY, 2)])]),
        };
        assert_eq!(late.waits("background").max_at_most_s, None);
        assert_eq!(late.waits("background").p50_at_most_s, Some(5.0));
    }
}
