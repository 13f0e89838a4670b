//! The load generator and the percentile math.
//!
//! The same generator drives every system under test, so they are compared on equal terms: a
//! hyper HTTP/1.1 client on its own OS thread and single-threaded tokio runtime, one keep-alive
//! TCP connection per client (`TCP_NODELAY`), every request with the bearer token and
//! `X-Ferry-App`. A [`Verb::Write`] is a `PUT` of a 64-byte value under a fresh, increasing key
//! and counts only if answered `200` with a revision; a [`Verb::Read`] is a `GET` of a key from
//! [`Keys`] and counts only if answered `200` with the 64-byte value (its `X-Ferry-Source` is
//! tallied). Every other answer is counted by status, and a request that got no answer (broken
//! connection, timeout) is counted as a transport error.
//!
//! Every loop is bounded twice, by a count and by a time; every request by a timeout.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::client::conn::http1;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::{JoinHandle, JoinSet};

use crate::cpu::{Sides, Usage};

/// The size of every value written.
pub const VALUE_BYTES: usize = 64;
/// The most one request may take before it counts as a transport error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Answers are a few dozen bytes; anything past this is not an answer we sent for.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// A client whose connection cannot be re-established this many times in a row stops.
const MAX_CONNECT_FAILURES: u32 = 3;

/// Where writes go and how they are labelled.
#[derive(Debug, Clone)]
pub struct Target {
    pub api: SocketAddr,
    pub token: String,
    pub app: String,
    pub vault: String,
}

/// Why a measurement could not run at all (failures of single requests are counted instead).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot connect to {addr}: {detail}")]
    Connect { addr: SocketAddr, detail: String },
    #[error("cannot start the load generator's runtime: {0}")]
    Runtime(std::io::Error),
    #[error("the load generator's thread panicked")]
    Panicked,
    /// A phase's result was asked for before the phase ran: a mistake in the orchestration.
    #[error("the {0} phase was never run")]
    NotRun(&'static str),
    #[error("{method} {path} on {addr} failed: {detail}")]
    Request {
        method: &'static str,
        path: String,
        addr: SocketAddr,
        detail: String,
    },
}

/// Keys `<prefix><n:010>`: fresh and increasing (like the time-ordered ids Ferry uses), unique
/// within a run, from `first` on; or cycling through `len` of them from `first`, for reading the
/// same few keys again and again.
#[derive(Debug)]
pub struct Keys {
    prefix: String,
    next: AtomicU64,
    first: u64,
    cycle: Option<u64>,
    /// How far apart consecutive keys of a cycle are (1: neighbours).
    stride: u64,
}

impl Keys {
    /// `<prefix>0000000000`, `<prefix>0000000001`, ...
    pub fn new(prefix: impl Into<String>) -> Self {
        Self::starting_at(prefix, 0)
    }

    /// Fresh keys from number `first` on.
    pub fn starting_at(prefix: impl Into<String>, first: u64) -> Self {
        Self {
            prefix: prefix.into(),
            next: AtomicU64::new(0),
            first,
            cycle: None,
            stride: 1,
        }
    }

    /// Numbers `first .. first + len`, then again from `first`. `len` is at least 1.
    pub fn cycling(prefix: impl Into<String>, first: u64, len: u64) -> Self {
        Self {
            cycle: Some(len.max(1)),
            ..Self::starting_at(prefix, first)
        }
    }

    /// Numbers `first .. first + len` in an order that jumps across the whole range (each key
    /// about 0.618 of the range from the one before, so no two in a row share a page of the
    /// store), every one once before any repeats. `len` is at least 1.
    pub fn spread(prefix: impl Into<String>, first: u64, len: u64) -> Self {
        let len = len.max(1);
        Self {
            stride: spread_stride(len),
            ..Self::cycling(prefix, first, len)
        }
    }

    /// The key with number `n`.
    pub fn key(prefix: &str, n: u64) -> String {
        format!("{prefix}{n:010}")
    }

    pub fn next_key(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let n = match self.cycle {
            Some(len) => ((u128::from(n) * u128::from(self.stride)) % u128::from(len)) as u64,
            None => n,
        };
        Self::key(&self.prefix, self.first + n)
    }
}

/// The stride of [`Keys::spread`]: near `len` times the golden ratio's fraction, and
/// coprime with `len`, so a cycle visits every number once.
fn spread_stride(len: u64) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let mut stride = ((len as f64 * 0.618_033_988_7) as u64).max(1);
    while gcd(stride, len) != 1 {
        stride += 1;
    }
    stride
}

/// What every request of a measurement does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `PUT` a 64-byte value under the next key: done when answered `200` with a revision.
    Write,
    /// `GET` the next key: done when answered `200` with the 64-byte value.
    Read,
    /// `GET` a page of [`LIST_PAGE`] keys after the next key: done when answered `200` with a
    /// full page.
    List,
}

/// The keys a [`Verb::List`] asks for (the local API's largest page).
pub const LIST_PAGE: usize = 1000;
/// A page of keys is about 60 bytes a key.
const MAX_LIST_ANSWER_BYTES: usize = 1024 * 1024;

/// The value every write carries (and every read expects back).
static VALUE: [u8; VALUE_BYTES] = [b'v'; VALUE_BYTES];

/// The value every write carries, without a copy.
pub fn value() -> Bytes {
    Bytes::from_static(&VALUE)
}

/// What one measurement saw.
#[derive(Debug, Default, Clone)]
pub struct Sample {
    /// The latency of every successful request, sorted.
    latencies: Vec<Duration>,
    /// Wall time of the measured part.
    pub elapsed: Duration,
    /// Answers other than the expected `200`, by status.
    pub non_200: BTreeMap<u16, u64>,
    /// Successful answers by their `X-Ferry-Source` header (`-` when there was none).
    pub sources: BTreeMap<String, u64>,
    /// Requests that got no answer at all.
    pub transport_errors: u64,
    /// The first failure seen, for the report.
    pub first_failure: Option<String>,
}

impl Sample {
    /// A sample of successes only.
    pub fn from_latencies(mut latencies: Vec<Duration>, elapsed: Duration) -> Self {
        latencies.sort_unstable();
        Self {
            latencies,
            elapsed,
            ..Self::default()
        }
    }

    pub fn ok(&self) -> usize {
        self.latencies.len()
    }

    /// Several samples as one: every latency, failure and source of each, over their summed
    /// wall time.
    pub fn pooled(samples: Vec<Sample>) -> Self {
        let mut all = Sample::default();
        for sample in samples {
            all.latencies.extend(sample.latencies);
            all.elapsed += sample.elapsed;
            for (status, n) in sample.non_200 {
                *all.non_200.entry(status).or_default() += n;
            }
            for (source, n) in sample.sources {
                *all.sources.entry(source).or_default() += n;
            }
            all.transport_errors += sample.transport_errors;
            all.first_failure = all.first_failure.or(sample.first_failure);
        }
        all.latencies.sort_unstable();
        all
    }

    pub fn failures(&self) -> u64 {
        self.non_200.values().sum::<u64>() + self.transport_errors
    }

    /// The `p`th percentile (nearest rank) of successful requests' latency.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        percentile(&self.latencies, p)
    }

    /// Successful requests per second of wall time.
    pub fn per_second(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ok() as f64 / secs
        } else {
            0.0
        }
    }

    fn record(&mut self, answer: Answer, took: Duration) {
        match answer {
            Answer::Done { source } => {
                self.latencies.push(took);
                let source = source.unwrap_or_else(|| NO_SOURCE.to_string());
                *self.sources.entry(source).or_default() += 1;
            }
            Answer::Status(status, detail) => {
                *self.non_200.entry(status).or_default() += 1;
                self.note(|| format!("HTTP {status}: {detail}"));
            }
            Answer::Broken(detail) => {
                self.transport_errors += 1;
                self.note(|| detail);
            }
        }
    }

    fn note(&mut self, detail: impl FnOnce() -> String) {
        if self.first_failure.is_none() {
            self.first_failure = Some(detail());
        }
    }

    fn merge(&mut self, other: Sample) {
        self.latencies.extend(other.latencies);
        for (status, n) in other.non_200 {
            *self.non_200.entry(status).or_default() += n;
        }
        for (source, n) in other.sources {
            *self.sources.entry(source).or_default() += n;
        }
        self.transport_errors += other.transport_errors;
        if self.first_failure.is_none() {
            self.first_failure = other.first_failure;
        }
    }

    fn finish(mut self, elapsed: Duration) -> Self {
        self.latencies.sort_unstable();
        self.elapsed = elapsed;
        self
    }
}

/// The nearest-rank percentile of sorted values: the smallest value with at least `p`% of the
/// values at or below it. `None` for no values.
pub fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 100.0);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// How [`Sample::sources`] counts an answer without `X-Ferry-Source`.
pub const NO_SOURCE: &str = "-";

/// How one request ended.
#[derive(Debug)]
enum Answer {
    /// What was asked for: a write answered `200` with a revision (durable), or a read answered
    /// `200` with the value; with the answer's `X-Ferry-Source`, if any.
    Done { source: Option<String> },
    /// Any other answer.
    Status(u16, String),
    /// No answer.
    Broken(String),
}

/// One keep-alive HTTP/1.1 connection.
#[derive(Debug)]
pub struct Conn {
    pub sender: http1::SendRequest<Full<Bytes>>,
    driver: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Opens a keep-alive connection to `addr` (`TCP_NODELAY`), bounded by the connect timeout.
pub async fn connect(addr: SocketAddr) -> Result<Conn, String> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("no connection within {CONNECT_TIMEOUT:?}"))?
        .map_err(|err| err.to_string())?;
    stream.set_nodelay(true).map_err(|err| err.to_string())?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|err| err.to_string())?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(Conn { sender, driver })
}

async fn exchange(conn: &mut Conn, target: &Target, verb: Verb, key: &str) -> Answer {
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange_inner(conn, target, verb, key)).await {
        Ok(answer) => answer,
        Err(_) => Answer::Broken(format!("no answer within {REQUEST_TIMEOUT:?}")),
    }
}

async fn exchange_inner(conn: &mut Conn, target: &Target, verb: Verb, key: &str) -> Answer {
    let path = format!("/v1/vaults/{}/records/{key}", target.vault);
    let (builder, body) = match verb {
        Verb::Write => (Request::put(path), value()),
        Verb::Read => (Request::get(path), Bytes::new()),
        // The bench's keys need no escaping in a query.
        Verb::List => (
            Request::get(format!(
                "/v1/vaults/{}/records?after={key}&limit={LIST_PAGE}",
                target.vault
            )),
            Bytes::new(),
        ),
    };
    let max_answer = match verb {
        Verb::List => MAX_LIST_ANSWER_BYTES,
        Verb::Write | Verb::Read => MAX_ANSWER_BYTES,
    };
    let request = builder
        .header(hyper::header::HOST, target.api.to_string())
        .header(
            hyper::header::AUTHORIZATION,
            format!("Bearer {}", target.token),
        )
        .header("x-ferry-app", target.app.as_str())
        .body(Full::new(body));
    let request = match request {
        Ok(request) => request,
        Err(err) => return Answer::Broken(format!("cannot build the request: {err}")),
    };
    if let Err(err) = conn.sender.ready().await {
        return Answer::Broken(format!("connection closed: {err}"));
    }
    let response = match conn.sender.send_request(request).await {
        Ok(response) => response,
        Err(err) => return Answer::Broken(format!("request failed: {err}")),
    };
    let status = response.status().as_u16();
    let source = response
        .headers()
        .get("x-ferry-source")
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let body = match Limited::new(response.into_body(), max_answer)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(err) => return Answer::Broken(format!("answer body broke: {err}")),
    };
    if status != 200 {
        return Answer::Status(status, String::from_utf8_lossy(&body).into_owned());
    }
    match verb {
        Verb::Write => {
            let revision = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|json| json.get("revision").and_then(serde_json::Value::as_u64));
            match revision {
                Some(_) => Answer::Done { source },
                None => Answer::Status(
                    200,
                    format!("200 without a revision: {}", String::from_utf8_lossy(&body)),
                ),
            }
        }
        Verb::Read if body.len() == VALUE_BYTES => Answer::Done { source },
        Verb::Read => Answer::Status(
            200,
            format!(
                "200 with {} bytes instead of the {VALUE_BYTES}-byte value",
                body.len()
            ),
        ),
        // Counted, not parsed: this check is inside the timed interval, and counting entries
        // costs a small part of what parsing 60 KB of JSON would.
        Verb::List => match listed_keys(&body) {
            LIST_PAGE => Answer::Done { source },
            n => Answer::Status(200, format!("200 with {n} keys, not {LIST_PAGE}")),
        },
    }
}

/// How many keys a page of the local API's listing holds: the objects that open with `key`.
fn listed_keys(body: &[u8]) -> usize {
    const ENTRY: &[u8] = b"{\"key\":";
    body.windows(ENTRY.len()).filter(|w| *w == ENTRY).count()
}

/// Runs `make()`'s future to completion on a new OS thread with its own single-threaded
/// runtime, so the load generator never shares a thread with the system under test.
fn on_own_thread<T, F, Fut>(name: &str, make: F) -> Result<T, LoadError>
where
    T: Send,
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = T>,
{
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(scope, || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(LoadError::Runtime)?;
                Ok(runtime.block_on(make()))
            })
            .map_err(LoadError::Runtime)?;
        thread.join().map_err(|_| LoadError::Panicked)?
    })
}

/// A client's connection, re-established after a failure (bounded).
struct Client<'a> {
    target: &'a Target,
    verb: Verb,
    conn: Option<Conn>,
    connect_failures: u32,
}

impl<'a> Client<'a> {
    fn new(target: &'a Target, verb: Verb, conn: Option<Conn>) -> Self {
        Self {
            target,
            verb,
            conn,
            connect_failures: 0,
        }
    }

    /// Sends one request for `key`; `None` once the client has given up reconnecting.
    async fn send(&mut self, key: &str) -> Option<(Answer, Duration)> {
        let mut conn = match self.conn.take() {
            Some(conn) => conn,
            None => {
                if self.connect_failures >= MAX_CONNECT_FAILURES {
                    return None;
                }
                match connect(self.target.api).await {
                    Ok(conn) => conn,
                    Err(detail) => {
                        self.connect_failures += 1;
                        return Some((Answer::Broken(detail), Duration::ZERO));
                    }
                }
            }
        };
        self.connect_failures = 0;
        let started = Instant::now();
        let answer = exchange(&mut conn, self.target, self.verb, key).await;
        let took = started.elapsed();
        // A request with no answer leaves the connection in an unknown state: start afresh.
        if !matches!(answer, Answer::Broken(_)) {
            self.conn = Some(conn);
        }
        Some((answer, took))
    }
}

/// Requests one at a time on one keep-alive connection: `warmup` unmeasured ones, then at most
/// `count` measured ones, all within `bound`.
pub fn sequential(
    target: &Target,
    verb: Verb,
    keys: &Keys,
    warmup: usize,
    count: usize,
    bound: Duration,
) -> Result<Sample, LoadError> {
    on_own_thread("bench-load-seq", || async move {
        let deadline = Instant::now() + bound;
        let first = connect(target.api)
            .await
            .map_err(|detail| LoadError::Connect {
                addr: target.api,
                detail,
            })?;
        let mut client = Client::new(target, verb, Some(first));
        let mut warm = Sample::default();
        one_at_a_time(&mut client, keys, warmup, deadline, &mut warm).await;
        // A warm-up that failed is reported, not hidden: its first failure leads the sample's.
        let mut sample = Sample {
            first_failure: warm.first_failure.map(|f| format!("(warm-up) {f}")),
            ..Sample::default()
        };
        let started = Instant::now();
        one_at_a_time(&mut client, keys, count, deadline, &mut sample).await;
        Ok(sample.finish(started.elapsed()))
    })?
}

/// At most `count` requests one at a time into `sample`, stopping at `deadline` or when the
/// client gives up reconnecting. The warm-up and the measured part of [`sequential`].
async fn one_at_a_time(
    client: &mut Client<'_>,
    keys: &Keys,
    count: usize,
    deadline: Instant,
    sample: &mut Sample,
) {
    for _ in 0..count {
        if Instant::now() >= deadline {
            break;
        }
        let Some((answer, took)) = client.send(&keys.next_key()).await else {
            break;
        };
        sample.record(answer, took);
    }
}

/// `clients` clients at once, each on its own keep-alive connection, until `max_total` requests
/// were started or `bound` passed. Connections are opened before the clock starts.
pub fn concurrent(
    target: &Target,
    verb: Verb,
    keys: &Arc<Keys>,
    clients: usize,
    max_total: u64,
    bound: Duration,
) -> Result<Sample, LoadError> {
    on_own_thread("bench-load-conc", || async move {
        let mut conns = Vec::with_capacity(clients);
        for _ in 0..clients {
            let conn = connect(target.api)
                .await
                .map_err(|detail| LoadError::Connect {
                    addr: target.api,
                    detail,
                })?;
            conns.push(conn);
        }
        let started = Instant::now();
        let deadline = started + bound;
        let issued = Arc::new(AtomicU64::new(0));
        let mut tasks = JoinSet::new();
        for conn in conns {
            let (target, keys, issued) = (target.clone(), keys.clone(), issued.clone());
            tasks.spawn(async move {
                let mut client = Client::new(&target, verb, Some(conn));
                let mut sample = Sample::default();
                while Instant::now() < deadline
                    && issued.fetch_add(1, Ordering::Relaxed) < max_total
                {
                    let Some((answer, took)) = client.send(&keys.next_key()).await else {
                        break;
                    };
                    sample.record(answer, took);
                }
                sample
            });
        }
        let mut total = Sample::default();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(sample) => total.merge(sample),
                Err(_) => return Err(LoadError::Panicked),
            }
        }
        Ok(total.finish(started.elapsed()))
    })?
}

/// [`concurrent`], with the CPU each of `sides` used over it (snapshots taken right before and
/// right after), where `/proc` could tell.
pub fn concurrent_with_cpu(
    sides: Option<&Sides>,
    target: &Target,
    verb: Verb,
    keys: &Arc<Keys>,
    clients: usize,
    max_total: u64,
    bound: Duration,
) -> Result<(Sample, Option<Usage>), LoadError> {
    let before = sides.and_then(Sides::snapshot);
    let sample = concurrent(target, verb, keys, clients, max_total, bound);
    let after = sides.and_then(Sides::snapshot);
    let cpu = before
        .zip(after)
        .map(|(before, after)| before.until(&after));
    sample.map(|sample| (sample, cpu))
}

/// One request with the token, on a fresh connection: the status and the body.
/// For setup and checks, not for measuring.
pub fn request_once(
    api: SocketAddr,
    method: &'static str,
    path: &str,
    token: &str,
    app: Option<&str>,
) -> Result<(u16, Bytes), LoadError> {
    request_once_limited(api, method, path, token, app, MAX_ANSWER_BYTES)
}

/// [`request_once`], reading an answer of up to `max_bytes` (`/metrics` is longer than an
/// answer to a record call).
pub fn request_once_limited(
    api: SocketAddr,
    method: &'static str,
    path: &str,
    token: &str,
    app: Option<&str>,
    max_bytes: usize,
) -> Result<(u16, Bytes), LoadError> {
    let fail = |detail: String| LoadError::Request {
        method,
        path: path.to_string(),
        addr: api,
        detail,
    };
    on_own_thread("bench-request", || async {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(api))
            .await
            .map_err(|_| fail("connect timed out".into()))?
            .map_err(|err| fail(err.to_string()))?;
        let (mut sender, connection) = http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(|err| fail(err.to_string()))?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, api.to_string())
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        if let Some(app) = app {
            request = request.header("x-ferry-app", app);
        }
        let request = request
            .body(Empty::new())
            .map_err(|err| fail(err.to_string()))?;
        let exchange = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|err| fail(err.to_string()))?;
            let status = response.status().as_u16();
            let body = Limited::new(response.into_body(), max_bytes)
                .collect()
                .await
                .map_err(|err| fail(err.to_string()))?
                .to_bytes();
            Ok((status, body))
        };
        let result = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| fail(format!("no answer within {REQUEST_TIMEOUT:?}")))?;
        driver.abort();
        result
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().copied().map(Duration::from_millis).collect()
    }

    #[test]
    fn spread_keys_visit_every_number_once_far_apart() {
        for len in [1u64, 7, 1000, 10_000] {
            let keys = Keys::spread("k", 5, len);
            let seen: Vec<u64> = (0..len)
                .map(|_| keys.next_key()[1..].parse::<u64>().unwrap())
                .collect();
            let distinct: std::collections::BTreeSet<_> = seen.iter().copied().collect();
            assert_eq!(distinct.len() as u64, len, "every number once, len {len}");
            assert!(seen.iter().all(|n| (5..5 + len).contains(n)));
            if len >= 1000 {
                let jump = seen[1].abs_diff(seen[0]);
                assert!(jump > len / 4, "neighbours far apart: {jump} of {len}");
            }
            // Then the cycle starts again.
            assert_eq!(keys.next_key(), Keys::key("k", seen[0]));
        }
    }

    #[test]
    fn a_page_of_keys_is_counted_by_its_entries() {
        let page = serde_json::json!({
            "keys": [{"key": "a", "revision": 1}, {"key": "b", "revision": 2}],
            "more": true, "next_after": "b", "vault_revision": 9,
        });
        assert_eq!(listed_keys(&serde_json::to_vec(&page).unwrap()), 2);
        assert_eq!(listed_keys(b"{\"keys\":[]}"), 0);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let sorted = ms(&(1..=100).collect::<Vec<_>>());
        assert_eq!(percentile(&sorted, 50.0), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&sorted, 99.0), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&sorted, 100.0), Some(Duration::from_millis(100)));
        assert_eq!(percentile(&sorted, 0.0), Some(Duration::from_millis(1)));
        let few = ms(&[10, 20, 30]);
        assert_eq!(percentile(&few, 50.0), Some(Duration::from_millis(20)));
        assert_eq!(percentile(&few, 99.0), Some(Duration::from_millis(30)));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn samples_sort_count_and_merge() {
        let mut a = Sample::default();
        a.record(
            Answer::Done {
                source: Some("cache".into()),
            },
            Duration::from_millis(3),
        );
        a.record(Answer::Status(503, "busy".into()), Duration::ZERO);
        let mut b = Sample::default();
        b.record(Answer::Done { source: None }, Duration::from_millis(1));
        b.record(Answer::Broken("reset".into()), Duration::ZERO);
        a.merge(b);
        let a = a.finish(Duration::from_secs(2));
        assert_eq!(a.ok(), 2);
        assert_eq!(a.failures(), 2);
        assert_eq!(a.non_200.get(&503), Some(&1));
        assert_eq!(a.percentile(50.0), Some(Duration::from_millis(1)));
        assert_eq!(a.per_second(), 1.0);
        assert_eq!(a.first_failure.as_deref(), Some("HTTP 503: busy"));
        assert_eq!(
            a.sources,
            BTreeMap::from([("-".to_string(), 1), ("cache".to_string(), 1)])
        );
    }

    #[test]
    fn keys_are_fresh_and_increasing() {
        let keys = Keys::new("s-");
        let (first, second) = (keys.next_key(), keys.next_key());
        assert!(first < second, "{first} < {second}");
        assert_eq!(first, "s-0000000000");
        let later = Keys::starting_at("r-", 7);
        assert_eq!(later.next_key(), "r-0000000007");
        let hot = Keys::cycling("r-", 3, 2);
        let seen: Vec<_> = (0..5).map(|_| hot.next_key()).collect();
        assert_eq!(
            seen,
            [
                "r-0000000003",
                "r-0000000004",
                "r-0000000003",
                "r-0000000004",
                "r-0000000003"
            ]
        );
    }
}
