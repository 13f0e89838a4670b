//! The app of the rolling-upgrade lab test (`tests/tests/lab_upgrade.rs`), which starts it
//! inside each lab host (a network namespace, where that host's gateway API is) as the
//! `ferry-lab-app` binary. It writes and reads through its gateway's HTTP API until told to
//! stop, then settles what it does not know, settles and sends again a few old-era writes,
//! and ends. Every call is one JSON line in its output file, which the test reads to check the
//! whole history.

// A test's app: a panic here fails the rolling-upgrade test, with its log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::blocking::Client;
use reqwest::Method;
use serde_json::{json, Value};

/// The variable that carries the app's settings (JSON: label, home, vaults, out, stop).
pub const SETTINGS_VAR: &str = "FERRY_LAB_UPGRADE_APP";

/// The pause between two writes of an app (each also followed by a read).
pub const PACE: Duration = Duration::from_millis(15);

/// `X-Ferry-Timeout` of every write and read, in seconds.
pub const CALL_TIMEOUT_S: &str = "2";

/// One write in ten, to each vault, is a compare-and-swap on a fresh key expecting this
/// revision: its right answer is the owner's `conflict` (a refusal crossing versions).
pub const CAS_EVERY: u64 = 10;
pub const CAS_EXPECTS: u64 = 1_000_000;

/// Every so many writes an app sends a settle probe (a request id never sent, see the app).
pub const PROBE_EVERY: u64 = 8;

/// An app also reads back a key it wrote at least this long ago: older than the read cache's
/// freshness (1 s by default), so the owner (or a replica) is asked.
pub const READ_OLDER_THAN_MS: u64 = 1_500;

/// Old-era writes per vault and app that are settled and sent again at the end.
pub const OLD_ERA_SAMPLE: usize = 3;

/// The app's name (`X-Ferry-App`) on every host.
pub const APP: &str = "upgrade";

/// A settle probe's `what` in the history.
pub const PROBE: &str = "settle probe";

/// The longest an app runs, whatever happens to the test that started it.
pub const DRIVER_LIFETIME: Duration = Duration::from_secs(300);

/// Wall-clock milliseconds: the apps (other processes) and the test stamp events alike.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How one HTTP call went.
enum Call {
    /// The gateway answered.
    Answered {
        status: u16,
        headers: reqwest::header::HeaderMap,
        body: Vec<u8>,
    },
    /// No connection to the local gateway: not a byte left (no `api.addr`, refused).
    NotSent(String),
    /// The request may have left and no whole answer came back.
    Broke(String),
}

struct App {
    home: PathBuf,
    label: String,
    client: Client,
    out: File,
}

/// A write as it went out, for the settle and repeat phases.
#[derive(Clone)]
struct Sent {
    id: String,
    vault: String,
    key: String,
    value: String,
    if_match: Option<u64>,
    sent_ms: u64,
    code: String,
    revision: Option<u64>,
}

impl App {
    fn log(&mut self, line: Value) {
        crate::lab_api::append_line(&mut self.out, &line);
    }

    fn call(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<Vec<u8>>,
    ) -> Call {
        let addr = match std::fs::read_to_string(self.home.join("api.addr")) {
            Ok(addr) if addr.ends_with('\n') => addr.trim().to_string(),
            _ => return Call::NotSent("no api.addr: the gateway is not running".into()),
        };
        let token = std::fs::read_to_string(self.home.join("local-token")).unwrap_or_default();
        let mut request = self
            .client
            .request(method, format!("http://{addr}{path}"))
            .header("authorization", format!("Bearer {}", token.trim()))
            .header("x-ferry-app", APP)
            .header("x-ferry-timeout", CALL_TIMEOUT_S);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        match request.send() {
            Err(err) if err.is_connect() => Call::NotSent(err.to_string()),
            Err(err) => Call::Broke(err.to_string()),
            Ok(response) => {
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                match response.bytes() {
                    Ok(body) => Call::Answered {
                        status,
                        headers,
                        body: body.to_vec(),
                    },
                    Err(err) => Call::Broke(err.to_string()),
                }
            }
        }
    }

    /// PUT; returns (status, code, revision, detail). Codes: `done`, the API's error
    /// code, `local_gateway_down` (nothing sent) or `app_unknown` (the app's call broke
    /// after it was sent, or its answer could not be read: settle it).
    fn put(&self, sent: &Sent) -> (Option<u16>, String, Option<u64>, String) {
        let mut headers = vec![("x-ferry-request-id", sent.id.clone())];
        if let Some(revision) = sent.if_match {
            headers.push(("if-match", revision.to_string()));
        }
        let path = format!("/v1/vaults/{}/records/{}", sent.vault, sent.key);
        match self.call(
            Method::PUT,
            &path,
            &headers,
            Some(sent.value.clone().into_bytes()),
        ) {
            Call::NotSent(detail) => (None, "local_gateway_down".into(), None, detail),
            Call::Broke(detail) => (None, "app_unknown".into(), None, detail),
            Call::Answered { status, body, .. } => {
                let text = String::from_utf8_lossy(&body).into_owned();
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let code = match (status, body["revision"].as_u64(), body["error"].as_str()) {
                    (200, Some(_), _) => "done",
                    (200, None, _) | (_, _, None) => "app_unknown",
                    (_, _, Some(code)) => code,
                };
                let detail = match body["detail"].as_str() {
                    Some(detail) => detail.to_string(),
                    None => format!("an answer without detail: {text:?}"),
                };
                (
                    Some(status),
                    code.to_string(),
                    body["revision"].as_u64(),
                    detail,
                )
            }
        }
    }

    fn read(&mut self, vault: &str, key: &str) {
        let sent_ms = now_ms();
        let path = format!("/v1/vaults/{vault}/records/{key}");
        let line = match self.call(Method::GET, &path, &[], None) {
            Call::NotSent(detail) => {
                json!({"code": "local_gateway_down", "detail": detail})
            }
            Call::Broke(detail) => json!({"code": "read_broke", "detail": detail}),
            Call::Answered {
                status,
                headers,
                body,
            } => {
                let header = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                };
                if status == 200 {
                    json!({
                        "status": status,
                        "code": "found",
                        "revision": header("x-ferry-revision").and_then(|r| r.parse::<u64>().ok()),
                        "source": header("x-ferry-source"),
                        "stale": header("x-ferry-stale").as_deref() == Some("true"),
                        "value": String::from_utf8_lossy(&body),
                    })
                } else {
                    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    json!({
                        "status": status,
                        "code": body["error"].as_str().unwrap_or("unreadable"),
                        "detail": body["detail"],
                    })
                }
            }
        };
        let mut line = line;
        line["kind"] = json!("read");
        line["vault"] = json!(vault);
        line["key"] = json!(key);
        line["sent_ms"] = json!(sent_ms);
        line["answered_ms"] = json!(now_ms());
        self.log(line);
    }

    /// GET /v1/calls/{id}?vault=V (`wait` seconds): status and body.
    fn settle(&self, id: &str, vault: &str, wait: &str) -> (Option<u16>, Value) {
        let path = format!("/v1/calls/{id}?vault={vault}&wait={wait}");
        match self.call(Method::GET, &path, &[], None) {
            Call::Answered { status, body, .. } => (
                Some(status),
                serde_json::from_slice(&body).unwrap_or(Value::Null),
            ),
            Call::NotSent(detail) | Call::Broke(detail) => (None, json!({"detail": detail})),
        }
    }
}

pub fn run(settings: &Value) {
    let text = |field: &str| crate::lab_api::setting(settings, field);
    let vaults: Vec<String> = settings["vaults"]
        .as_array()
        .expect("vaults")
        .iter()
        .map(|v| v.as_str().expect("a vault name").to_string())
        .collect();
    let stop = PathBuf::from(text("stop"));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(text("out"))
        .expect("open the app's output");
    let client = Client::builder()
        .no_proxy()
        // Each call on a new connection: the API's port changes at every restart.
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(8))
        .build()
        .expect("an HTTP client");
    let mut app = App {
        home: PathBuf::from(text("home")),
        label: text("label"),
        client,
        out,
    };
    let started = Instant::now();
    let mut sent_writes: Vec<Sent> = Vec::new();
    // The newest key this app was told `done` for, by vault: what it reads back.
    // The keys this app was told `done` for, with when, by vault: what it reads back.
    let mut done: Vec<Vec<(u64, String)>> = vec![Vec::new(); vaults.len()];
    // Settle probes that did not settle at once: settled again at the end.
    let mut unsettled_probes: Vec<(String, String)> = Vec::new();
    let mut n: u64 = 0;
    while !stop.exists() {
        assert!(
            started.elapsed() < DRIVER_LIFETIME,
            "the app on {} ran for {DRIVER_LIFETIME:?} and was never told to stop",
            app.label
        );
        let v = (n as usize) % vaults.len();
        // Writes alternate between the vaults: pairs of them are compare-and-swaps.
        let cas = (n / 2) % CAS_EVERY == CAS_EVERY - 1;
        let key = format!("{}-{}{n}", app.label, if cas { "cas-" } else { "" });
        let mut sent = Sent {
            id: uuid::Uuid::now_v7().to_string(),
            vault: vaults[v].clone(),
            value: format!("{key} by {}", app.label),
            key,
            if_match: cas.then_some(CAS_EXPECTS),
            sent_ms: now_ms(),
            code: String::new(),
            revision: None,
        };
        let (status, code, revision, detail) = app.put(&sent);
        app.log(json!({
            "kind": "write",
            "id": sent.id,
            "vault": sent.vault,
            "key": sent.key,
            "value": sent.value,
            "if_match": sent.if_match,
            "sent_ms": sent.sent_ms,
            "answered_ms": now_ms(),
            "status": status,
            "code": code,
            "revision": revision,
            "detail": detail,
        }));
        if code == "done" {
            done[v].push((now_ms(), sent.key.clone()));
        }
        sent.code = code;
        sent.revision = revision;
        sent_writes.push(sent);
        // Read back this app's newest write to the other vault (from the cache, mostly),
        // and one older than the cache's freshness (the owner is asked, or a replica).
        let other = (v + 1) % vaults.len();
        if let Some((_, key)) = done[other].last().cloned() {
            app.read(&vaults[other], &key);
        }
        let old_enough = now_ms().saturating_sub(READ_OLDER_THAN_MS);
        if let Some((_, key)) = done[other]
            .iter()
            .rev()
            .find(|(at, _)| *at < old_enough)
            .cloned()
        {
            app.read(&vaults[other], &key);
        }
        // A settle probe: a request id never sent, settled naming a vault. Its owner is
        // asked (peer to peer unless this host owns it), fences the id and answers
        // `not_carried_out`: settling crosses versions while nothing is unknown.
        if n % PROBE_EVERY == PROBE_EVERY - 1 {
            let id = uuid::Uuid::now_v7().to_string();
            let vault = vaults[((n / PROBE_EVERY) as usize) % vaults.len()].clone();
            let sent_ms = now_ms();
            let (status, body) = app.settle(&id, &vault, "0");
            if !matches!(body["state"].as_str(), Some("done" | "not_carried_out")) {
                unsettled_probes.push((id.clone(), vault.clone()));
            }
            app.log(json!({
                "kind": "probe", "id": id, "vault": vault, "sent_ms": sent_ms,
                "answered_ms": now_ms(), "status": status, "body": body,
            }));
        }
        std::thread::sleep(PACE);
        n += 1;
    }
    let told: Value = std::fs::read_to_string(&stop)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let old_era_before = told["old_era_before_ms"].as_u64().unwrap_or(0);
    let settle_bound = Duration::from_secs(told["settle_bound_s"].as_u64().unwrap_or(60));

    // Every write whose outcome this app does not know, and every probe that did not
    // settle, settled on its own gateway.
    let unknown: Vec<(String, String)> = sent_writes
        .iter()
        .filter(|s| s.code == "outcome_unknown" || s.code == "app_unknown")
        .map(|s| (s.id.clone(), s.vault.clone()))
        .chain(unsettled_probes)
        .collect();
    for (id, vault) in &unknown {
        let asked = Instant::now();
        let (status, body) = loop {
            let (status, body) = app.settle(id, vault, "5");
            let settled = matches!(body["state"].as_str(), Some("done" | "not_carried_out"))
                || body["error"] == "unknown_call";
            if settled || asked.elapsed() > settle_bound {
                break (status, body);
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        app.log(
            json!({"kind": "settle", "id": id, "vault": vault, "status": status, "body": body}),
        );
    }

    // Old-era writes (answered by the previous release): settled and sent again by id
    // through this build. Each must answer as it did then, and run no second time.
    let mut sample: Vec<Sent> = Vec::new();
    for vault in &vaults {
        let old: Vec<&Sent> = sent_writes
            .iter()
            .filter(|s| &s.vault == vault && s.sent_ms < old_era_before)
            .collect();
        sample.extend(
            old.iter()
                .filter(|s| s.if_match.is_none() && s.code == "done")
                .take(OLD_ERA_SAMPLE)
                .map(|s| (*s).clone()),
        );
        sample.extend(
            old.iter()
                .filter(|s| s.if_match.is_some() && s.code == "conflict")
                .take(1)
                .map(|s| (*s).clone()),
        );
    }
    for sent in &sample {
        let (status, body) = app.settle(&sent.id, &sent.vault, "0");
        app.log(json!({"kind": "settle_old", "id": sent.id, "vault": sent.vault, "status": status, "body": body}));
        let (status, code, revision, detail) = app.put(sent);
        app.log(json!({
            "kind": "repeat", "id": sent.id, "vault": sent.vault, "key": sent.key,
            "status": status, "code": code, "revision": revision, "detail": detail,
        }));
    }
    app.log(json!({"kind": "finished", "writes": sent_writes.len()}));
}
