//! Counters and a latency histogram, rendered in the Prometheus text format at `/metrics`.
//! Plain atomics: recording is a few nanoseconds on any path.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ferry_core::capacity::Refused;
use ferry_peer::dials::DialCounts;
use ferry_peer::udp_catcher::CatcherCounts;
use ferry_peer::wire::Priority;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Write outcomes as the app sees them.
#[derive(Debug, Clone, Copy)]
pub enum WriteKind {
    Done,
    Refused,
    NotCarriedOut,
    Unavailable,
    OutcomeUnknown,
    BadRequest,
}

const WRITE_KINDS: [(&str, WriteKind); 6] = [
    ("done", WriteKind::Done),
    ("refused", WriteKind::Refused),
    ("not_carried_out", WriteKind::NotCarriedOut),
    ("unavailable", WriteKind::Unavailable),
    ("outcome_unknown", WriteKind::OutcomeUnknown),
    ("bad_request", WriteKind::BadRequest),
];

/// Where a read's answer came from.
#[derive(Debug, Clone, Copy)]
pub enum ReadSource {
    Local,
    Owner,
    Unavailable,
    Cache,
    Replica,
}

const READ_SOURCES: [(&str, ReadSource); 5] = [
    ("local", ReadSource::Local),
    ("owner", ReadSource::Owner),
    ("unavailable", ReadSource::Unavailable),
    ("cache", ReadSource::Cache),
    ("replica", ReadSource::Replica),
];

#[derive(Debug, Default)]
struct Histogram {
    /// Observations per bucket alone (not cumulative: one increment per observation, on a
    /// hot path shared by every core), the last past every bound; `render` adds them up as
    /// Prometheus wants, so `+Inf` and the count are the same running total.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    fn record(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let bucket = BUCKETS.partition_point(|bound| *bound < secs);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{bound}\"}} {cumulative}");
        }
        let count = cumulative + self.buckets[BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum{{{}}} {}",
            labels.trim_end_matches(','),
            self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "{name}_count{{{}}} {count}",
            labels.trim_end_matches(',')
        );
    }
}

/// All of the gateway's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    writes: [AtomicU64; WRITE_KINDS.len()],
    reads: [AtomicU64; READ_SOURCES.len()],
    write_latency: Histogram,
    read_latency: Histogram,
    peer_writes_served: AtomicU64,
    peer_reads_served: AtomicU64,
    ticket_renewals: AtomicU64,
    /// Writes answered `busy` by this calling gateway for the owner's cap, never sent.
    caller_cap_here: AtomicU64,
    saturated_here: AtomicU64,
    background_full_here: AtomicU64,
    tickets_issued: AtomicU64,
    door_refusals: AtomicU64,
    calls_settled: AtomicU64,
    cache_hits: AtomicU64,
    /// Change feed requests waiting for news now (long polls).
    feed_waiting: AtomicU64,
    /// Owner: from a commit to the change page carrying it leaving for a follower's long poll
    /// (pacing included; news already there when it asked: from its previous answer).
    feed_push: Histogram,
    /// Replica: from a change page's arrival to its changes committed here.
    replica_apply: Histogram,
    /// Replica: from the owner's commit to the change applied here, for news a long poll
    /// brought (the owner's age of it when its answer left, half the round trip, the apply).
    propagation: Histogram,
    owner: OwnerLoad,
}

/// A change feed request waiting for news, counted in `ferry_feed_waiting` until dropped (an
/// answer, or an app that gave up and closed its connection).
#[derive(Debug)]
pub struct FeedWaiter<'m>(&'m Metrics);

impl Drop for FeedWaiter<'_> {
    fn drop(&mut self) {
        self.0.feed_waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The owner's queue (SPEC 7 rule 7), by class: what waits, how long it waited, what was
/// refused and for whom.
#[derive(Debug, Default)]
struct OwnerLoad {
    queued: [AtomicU64; 2],
    waits: [Histogram; 2],
    /// Refusals by reason and caller app; apps past [`MAX_APP_LABELS`] count as `other`, so a
    /// caller inventing app names cannot grow this without bound.
    refusals: Mutex<BTreeMap<&'static str, BTreeMap<String, u64>>>,
}

/// Caller apps named in the refusal counters before the rest count as `other`.
const MAX_APP_LABELS: usize = 256;

const CLASSES: [(&str, Priority); 2] = [
    ("interactive", Priority::Interactive),
    ("background", Priority::Background),
];

fn class_slot(class: Priority) -> usize {
    match class {
        Priority::Interactive => 0,
        Priority::Background => 1,
    }
}

impl Metrics {
    pub fn write(&self, kind: WriteKind, elapsed: Duration) {
        self.writes[kind as usize].fetch_add(1, Ordering::Relaxed);
        self.write_latency.record(elapsed);
    }

    pub fn read(&self, source: ReadSource, elapsed: Duration) {
        self.reads[source as usize].fetch_add(1, Ordering::Relaxed);
        self.read_latency.record(elapsed);
    }

    pub fn peer_write_served(&self) {
        self.peer_writes_served.fetch_add(1, Ordering::Relaxed);
    }

    pub fn peer_read_served(&self) {
        self.peer_reads_served.fetch_add(1, Ordering::Relaxed);
    }

    /// The caller renewed a ticket after a `401 ticket_refused` at the door.
    pub fn ticket_renewal(&self) {
        self.ticket_renewals.fetch_add(1, Ordering::Relaxed);
    }

    /// A write answered `busy` here for the owner's cap, as last learned; nothing was sent.
    pub fn caller_cap_here(&self) {
        self.caller_cap_here.fetch_add(1, Ordering::Relaxed);
    }

    /// A write answered `busy` here for the owner's wait bound, as last learned; nothing was
    /// sent.
    pub fn saturated_here(&self) {
        self.saturated_here.fetch_add(1, Ordering::Relaxed);
    }

    /// A background write answered `busy` here for the owner's bound beside interactive
    /// writes, as last learned; nothing was sent.
    pub fn background_full_here(&self) {
        self.background_full_here.fetch_add(1, Ordering::Relaxed);
    }

    pub fn ticket_issued(&self) {
        self.tickets_issued.fetch_add(1, Ordering::Relaxed);
    }

    pub fn door_refusal(&self) {
        self.door_refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// A read was answered from the cache without asking anyone.
    pub fn cache_hit(&self) {
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    /// A change feed request starts waiting for news; it stops when the guard drops.
    pub fn feed_waiter(&self) -> FeedWaiter<'_> {
        self.feed_waiting.fetch_add(1, Ordering::Relaxed);
        FeedWaiter(self)
    }

    /// A follower's long poll was answered with news `after` it was committed (at most).
    pub fn feed_push(&self, after: Duration) {
        self.feed_push.record(after);
    }

    /// A replica applied a page `after` it arrived.
    pub fn replica_apply(&self, after: Duration) {
        self.replica_apply.record(after);
    }

    /// News a long poll brought reached this replica's store `after` the owner committed it.
    pub fn propagation(&self, after: Duration) {
        self.propagation.record(after);
    }

    /// A remembered `outcome_unknown` call got its definite answer.
    pub fn call_settled(&self) {
        self.calls_settled.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes waiting in the owner's queue, by class (interactive, background).
    pub fn owner_queued(&self, (interactive, background): (usize, usize)) {
        self.owner.queued[0].store(interactive as u64, Ordering::Relaxed);
        self.owner.queued[1].store(background as u64, Ordering::Relaxed);
    }

    /// A write left the owner's queue after waiting `waited`.
    pub fn owner_wait(&self, class: Priority, waited: Duration) {
        self.owner.waits[class_slot(class)].record(waited);
    }

    /// The owner refused a write of `app` for its capacity budget.
    pub fn owner_refusal(&self, why: Refused, app: &str) {
        let mut refusals = self
            .owner
            .refusals
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // On the refusal path of an overloaded owner: no allocation once an app is named.
        let named: usize = refusals.values().map(BTreeMap::len).sum();
        let by_app = refusals.entry(why.name()).or_default();
        if let Some(count) = by_app.get_mut(app) {
            *count += 1;
            return;
        }
        let app = if named < MAX_APP_LABELS { app } else { "other" };
        // "other" is counted once it exists, allocating nothing more.
        match by_app.get_mut(app) {
            Some(count) => *count += 1,
            None => {
                by_app.insert(app.to_string(), 1);
            }
        }
    }

    fn render_owner(&self, out: &mut String) {
        out.push_str("# HELP ferry_owner_queue_depth Writes waiting in this owner's queue, by class.\n# TYPE ferry_owner_queue_depth gauge\n");
        for ((name, _), queued) in CLASSES.iter().zip(&self.owner.queued) {
            let _ = writeln!(
                out,
                "ferry_owner_queue_depth{{class=\"{name}\"}} {}",
                queued.load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP ferry_owner_queue_wait_seconds How long writes waited in this owner's queue, by class.\n# TYPE ferry_owner_queue_wait_seconds histogram\n");
        for ((name, _), waits) in CLASSES.iter().zip(&self.owner.waits) {
            waits.render(
                out,
                "ferry_owner_queue_wait_seconds",
                &format!("class=\"{name}\","),
            );
        }
        out.push_str("# HELP ferry_owner_refusals_total Writes this owner refused for its capacity budget (busy or rate_limited), by reason and caller app.\n# TYPE ferry_owner_refusals_total counter\n");
        let refusals = self
            .owner
            .refusals
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (reason, app, count) in refusals
            .iter()
            .flat_map(|(reason, apps)| apps.iter().map(move |(app, count)| (reason, app, count)))
        {
            let _ = writeln!(
                out,
                "ferry_owner_refusals_total{{reason=\"{reason}\",app=\"{}\"}} {count}",
                escape_label(app)
            );
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP ferry_writes_total Writes answered to local apps, by outcome.\n# TYPE ferry_writes_total counter\n");
        for ((name, _), count) in WRITE_KINDS.iter().zip(&self.writes) {
            let _ = writeln!(
                out,
                "ferry_writes_total{{outcome=\"{name}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP ferry_reads_total Reads answered to local apps, by source.\n# TYPE ferry_reads_total counter\n");
        for ((name, _), count) in READ_SOURCES.iter().zip(&self.reads) {
            let _ = writeln!(
                out,
                "ferry_reads_total{{source=\"{name}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP ferry_feed_waiting Change feed requests waiting for news (long polls).\n# TYPE ferry_feed_waiting gauge\nferry_feed_waiting {}",
            self.feed_waiting.load(Ordering::Relaxed)
        );
        out.push_str("# HELP ferry_peer_requests_served_total Requests from peers this gateway served.\n# TYPE ferry_peer_requests_served_total counter\n");
        let _ = writeln!(
            out,
            "ferry_peer_requests_served_total{{kind=\"write\"}} {}",
            self.peer_writes_served.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "ferry_peer_requests_served_total{{kind=\"read\"}} {}",
            self.peer_reads_served.load(Ordering::Relaxed)
        );
        for (name, help, counter) in [
            (
                "ferry_ticket_renewals_total",
                "Tickets renewed after a refusal at the owner's door.",
                &self.ticket_renewals,
            ),
            (
                "ferry_caller_cap_here_total",
                "Writes this calling gateway answered busy for the owner's cap, as the owner's last caller_cap refusal taught it; never sent.",
                &self.caller_cap_here,
            ),
            (
                "ferry_saturated_here_total",
                "Interactive writes this calling gateway answered busy for the owner's wait bound, as the owner's last saturated refusal taught it; never sent.",
                &self.saturated_here,
            ),
            (
                "ferry_background_full_here_total",
                "Background writes this calling gateway answered busy for the owner's bound on background work beside interactive writes, as the owner's last background_full refusal taught it; never sent.",
                &self.background_full_here,
            ),
            (
                "ferry_tickets_issued_total",
                "Tickets this owner issued.",
                &self.tickets_issued,
            ),
            (
                "ferry_door_refusals_total",
                "Writes this owner refused at the door (ticket_refused).",
                &self.door_refusals,
            ),
            (
                "ferry_calls_settled_total",
                "Remembered outcome_unknown calls that got a definite answer.",
                &self.calls_settled,
            ),
            (
                "ferry_cache_hits_total",
                "Reads answered from the cache without asking anyone.",
                &self.cache_hits,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP ferry_call_latency_seconds Latency of local API calls.\n# TYPE ferry_call_latency_seconds histogram\n");
        self.write_latency
            .render(&mut out, "ferry_call_latency_seconds", "call=\"write\",");
        self.read_latency
            .render(&mut out, "ferry_call_latency_seconds", "call=\"read\",");
        out.push_str("# HELP ferry_feed_push_seconds Owner: from a commit to the change page carrying it leaving for a follower's long poll (pacing included; news already there when it asked: from its previous answer, an upper bound).\n# TYPE ferry_feed_push_seconds histogram\n");
        self.feed_push
            .render(&mut out, "ferry_feed_push_seconds", "");
        out.push_str("# HELP ferry_replica_apply_seconds Replica: from a change page's arrival to its changes committed here.\n# TYPE ferry_replica_apply_seconds histogram\n");
        self.replica_apply
            .render(&mut out, "ferry_replica_apply_seconds", "");
        out.push_str("# HELP ferry_propagation_seconds Replica: from the owner's commit to the change committed here, for news a long poll brought: the owner's age of the news when its answer left, plus half the connection's smoothed round trip, plus the apply here (no clocks compared).\n# TYPE ferry_propagation_seconds histogram\n");
        self.propagation
            .render(&mut out, "ferry_propagation_seconds", "");
        self.render_owner(&mut out);
        out
    }
}

/// The peer socket's catcher (`ferry_peer::udp_catcher`): datagrams it took in while this
/// gateway was behind, which the kernel would otherwise have dropped once its buffer filled.
pub fn render_catcher(out: &mut String, counts: CatcherCounts) {
    render_counters(
        out,
        &[
        (
            "ferry_peer_datagrams_caught_total",
            "Peer datagrams the socket's catcher read while this gateway was behind reading them.",
            counts.caught,
        ),
        (
            "ferry_peer_socket_catches_total",
            "Times the socket's catcher found this gateway behind with datagrams waiting.",
            counts.catches,
        ),
        (
            "ferry_peer_datagrams_caught_oversized_total",
            "Datagrams the socket's catcher read that were larger than the endpoint takes, dropped.",
            counts.dropped,
        ),
        (
            "ferry_peer_calls_held_total",
            "Calls to peers that waited to send while this gateway was behind reading its socket.",
            counts.held,
        ),
        (
            "ferry_peer_socket_catcher_looks_total",
            "Times the socket's catcher woke to look for datagrams this gateway is behind on.",
            counts.looks,
        ),
        (
            "ferry_peer_socket_catcher_rests_total",
            "Times the socket's catcher rested on a quiet socket until a datagram came.",
            counts.rests,
        ),
        ],
    );
}

/// The caller's dials (`ferry_peer::dials`): connections it set out to make, and calls that
/// joined one already under way instead of making their own.
pub fn render_dials(out: &mut String, counts: DialCounts) {
    render_counters(
        out,
        &[
            (
                "ferry_peer_dials_total",
                "Connections to peers this gateway set out to make.",
                counts.started,
            ),
            (
                "ferry_peer_dials_joined_total",
                "Calls that wanted a fresh connection and joined a dial already under way.",
                counts.joined,
            ),
        ],
    );
}

/// Plain counters without labels, each with its help line.
fn render_counters(out: &mut String, counters: &[(&str, &str, u64)]) {
    for (name, help, value) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
}

/// A Prometheus label value: backslash, quote and newline escaped (app names come from apps).
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_histograms_render() {
        let metrics = Metrics::default();
        metrics.write(WriteKind::Done, Duration::from_micros(700));
        metrics.write(WriteKind::OutcomeUnknown, Duration::from_secs(2));
        let text = metrics.render();
        assert!(
            text.contains("ferry_writes_total{outcome=\"done\"} 1"),
            "{text}"
        );
        assert!(text.contains("ferry_writes_total{outcome=\"outcome_unknown\"} 1"));
        assert!(text.contains("ferry_call_latency_seconds_bucket{call=\"write\",le=\"0.001\"} 1"));
        assert!(text.contains("ferry_call_latency_seconds_count{call=\"write\"} 2"));
    }

    #[test]
    fn the_catchers_counts_render_as_counters() {
        let mut text = String::new();
        render_catcher(
            &mut text,
            CatcherCounts {
                caught: 9_808,
                catches: 12,
                dropped: 0,
                held: 40,
                looks: 7,
                rests: 2,
            },
        );
        assert!(
            text.contains("# TYPE ferry_peer_datagrams_caught_total counter\nferry_peer_datagrams_caught_total 9808\n"),
            "{text}"
        );
        assert!(
            text.contains("ferry_peer_socket_catches_total 12\n"),
            "{text}"
        );
        assert!(text.contains("ferry_peer_calls_held_total 40\n"), "{text}");
    }

    #[test]
    fn the_dial_counts_render_as_counters() {
        let mut text = String::new();
        render_dials(
            &mut text,
            DialCounts {
                started: 3,
                joined: 61,
            },
        );
        assert!(
            text.contains("# TYPE ferry_peer_dials_total counter\nferry_peer_dials_total 3\n"),
            "{text}"
        );
        assert!(
            text.contains("ferry_peer_dials_joined_total 61\n"),
            "{text}"
        );
    }

    #[test]
    fn owner_refusals_render_by_reason_and_app_with_odd_names_escaped() {
        let metrics = Metrics::default();
        metrics.owner_refusal(Refused::CallerCap, "notes");
        metrics.owner_refusal(Refused::CallerCap, "notes");
        metrics.owner_refusal(Refused::RateLimited, "a\"b");
        metrics.owner_queued((3, 1));
        metrics.owner_wait(Priority::Background, Duration::from_millis(3));
        let text = metrics.render();
        assert!(
            text.contains("ferry_owner_refusals_total{reason=\"caller_cap\",app=\"notes\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("reason=\"rate_limited\",app=\"a\\\"b\"} 1"),
            "{text}"
        );
        assert!(text.contains("ferry_owner_queue_depth{class=\"interactive\"} 3"));
        assert!(text.contains("ferry_owner_queue_wait_seconds_count{class=\"background\"} 1"));
        for n in 0..MAX_APP_LABELS + 5 {
            metrics.owner_refusal(Refused::QueueFull, &format!("app{n}"));
        }
        assert!(metrics.render().contains("app=\"other\"} "));
    }

    #[test]
    fn histogram_buckets_render_cumulative_from_one_increment_each() {
        let metrics = Metrics::default();
        for micros in [500, 700, 3_000, 2_000_000_000] {
            metrics.read(ReadSource::Owner, Duration::from_micros(micros));
        }
        let text = metrics.render();
        let bucket = |le: &str| {
            let prefix = format!("ferry_call_latency_seconds_bucket{{call=\"read\",le=\"{le}\"}} ");
            text.lines()
                .find_map(|line| line.strip_prefix(prefix.as_str()))
                .and_then(|n| n.parse::<u64>().ok())
        };
        assert_eq!(bucket("0.001"), Some(2), "{text}");
        assert_eq!(bucket("0.005"), Some(3), "{text}");
        // Past the largest bound: only in +Inf.
        assert_eq!(bucket("+Inf"), Some(4), "{text}");
        let bounds: Vec<u64> = BUCKETS
            .iter()
            .filter_map(|b| bucket(&b.to_string()))
            .collect();
        assert_eq!(bounds.len(), BUCKETS.len(), "{text}");
        assert!(
            bounds.windows(2).all(|w| w[0] <= w[1]),
            "not cumulative: {bounds:?}"
        );
        assert_eq!(bounds.last(), Some(&3));
    }
}
