//! One app of the fault campaign, run inside a lab host as `ferry-lab-app` with
//! `"mode": "campaign"`: it calls its own gateway's HTTP API, one call at a time, until told to
//! stop, drawing each call from its seed. Writes are puts and deletes of keys every app shares
//! (`hot-N`, so apps on different machines race for them), compare-and-swaps on those keys
//! against the revision the app last saw, and puts of fresh keys of its own; reads are of shared
//! keys and of its own recent keys. Every write carries a fresh UUIDv7 request id and its value
//! is that id, so what an owner holds names the write that put it there.
//!
//! When told to stop (the campaign has healed every fault and restarted every gateway), it
//! settles every write whose outcome it does not know, by request id through its gateway,
//! asking again while the owner cannot say yet, and ends with an `end` line. Every call is one
//! JSON line in its output file, stamped with wall-clock milliseconds.

// A test's app: a panic here fails the campaign, with its log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::lab_api::{Api, NoAnswer};
use crate::lab_app::now_ms;
use ferry_core::rng::Rng;

/// Keys every app shares, per vault.
pub const HOT_KEYS: u64 = 8;

/// `X-Ferry-Timeout` of every call, in seconds.
pub const CALL_TIMEOUT_S: &str = "2";

/// The app's own bound on a call: a frozen gateway answers nothing, and the app moves on (and
/// settles the write later).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(4);

/// How long an app keeps asking about one write whose owner cannot say yet.
const SETTLE_BOUND: Duration = Duration::from_secs(120);

/// The pause after a call that found no gateway to talk to.
const GATEWAY_DOWN_PAUSE: Duration = Duration::from_millis(50);

/// How often a running app asks about one write it does not know the outcome of.
const SETTLE_EVERY: Duration = Duration::from_millis(500);

/// The longest an app runs, whatever happens to the campaign that started it.
const LIFETIME: Duration = Duration::from_secs(6 * 3600);

/// What the app was started with.
struct Settings {
    /// The host's label and the app's own name (`X-Ferry-App`).
    host: String,
    app: String,
    home: PathBuf,
    vaults: Vec<String>,
    stop: PathBuf,
    pace: Duration,
    seed: u64,
}

struct App {
    settings: Settings,
    api: Api,
    out: File,
    rng: Rng,
    /// The live revision this app last saw of each (vault, key): its compare-and-swaps expect it.
    seen: HashMap<(String, String), u64>,
    /// Its own keys told done, newest last, by vault: what it reads back.
    own: HashMap<String, Vec<String>>,
    /// Writes it does not know the outcome of: (request id, vault), oldest first.
    unknown: Vec<(String, String)>,
    /// When it last asked about one of them while running.
    last_settle: Instant,
    written: u64,
}

impl App {
    fn log(&mut self, line: &Value) {
        crate::lab_api::append_line(&mut self.out, line);
    }

    /// One write: a put (`value` given) or a delete, with a compare-and-swap's expected
    /// revision when `if_match` is given.
    /// Returns whether the call reached the gateway.
    fn write(
        &mut self,
        vault: &str,
        key: &str,
        what: &str,
        put: bool,
        if_match: Option<u64>,
    ) -> bool {
        let id = uuid::Uuid::now_v7().to_string();
        let mut headers = vec![("x-ferry-request-id", id.clone())];
        if let Some(revision) = if_match {
            headers.push(("if-match", revision.to_string()));
        }
        let path = format!("/v1/vaults/{vault}/records/{key}");
        let sent_ms = now_ms();
        let answer = if put {
            self.api
                .call(Method::PUT, &path, &headers, Some(id.clone()))
        } else {
            self.api.call(Method::DELETE, &path, &headers, None)
        };
        let answered_ms = now_ms();
        let mut current = None;
        let (status, code, revision, detail) = match answer {
            Ok(a) => {
                current = a.body["current_revision"].as_u64();
                let code = match (
                    a.status,
                    a.body["revision"].as_u64(),
                    a.body["error"].as_str(),
                ) {
                    (200, Some(_), _) => "done".to_string(),
                    (_, _, Some(code)) => code.to_string(),
                    // An answer this app cannot read: it does not know what happened.
                    _ => "app_unknown".to_string(),
                };
                let detail = match (a.status, a.body.get("detail")) {
                    (_, Some(detail)) => detail.clone(),
                    (200, None) => Value::Null,
                    (_, None) => json!(a.text),
                };
                (Some(a.status), code, a.body["revision"].as_u64(), detail)
            }
            Err(NoAnswer {
                detail,
                sent: false,
            }) => (None, "local_gateway_down".into(), None, json!(detail)),
            Err(NoAnswer { detail, sent: true }) => {
                (None, "app_unknown".into(), None, json!(detail))
            }
        };
        let seen = (vault.to_string(), key.to_string());
        match code.as_str() {
            "done" => {
                let revision = revision.unwrap_or(0);
                self.seen.insert(seen, if put { revision } else { 0 });
            }
            "conflict" => {
                // The owner says which revision is live: the next compare-and-swap expects it.
                if let Some(current) = current {
                    self.seen.insert(seen, current);
                }
            }
            "outcome_unknown" | "app_unknown" => self.unknown.push((id.clone(), vault.into())),
            _ => {}
        }
        if code == "done" && put && key.starts_with(&self.settings.app) {
            self.own
                .entry(vault.to_string())
                .or_default()
                .push(key.to_string());
        }
        self.written += 1;
        self.log(&json!({
            "kind": "write", "what": what, "id": id, "vault": vault, "key": key,
            "put": put, "if_match": if_match, "sent_ms": sent_ms, "answered_ms": answered_ms,
            "status": status, "code": code, "revision": revision, "detail": detail,
        }));
        code != "local_gateway_down"
    }

    /// Returns whether the call reached the gateway.
    fn read(&mut self, vault: &str, key: &str) -> bool {
        let sent_ms = now_ms();
        let path = format!("/v1/vaults/{vault}/records/{key}");
        let mut line = match self.api.call(Method::GET, &path, &[], None) {
            Ok(a) if a.status == 200 => {
                if let Some(revision) = a.revision {
                    self.seen
                        .insert((vault.to_string(), key.to_string()), revision);
                }
                json!({
                    "code": "found", "source": a.source, "stale": a.stale,
                    "revision": a.revision, "value": a.text,
                })
            }
            Ok(a) => json!({
                "code": a.body["error"].as_str().unwrap_or("unreadable"),
                "status": a.status, "detail": a.body["detail"], "source": a.source,
                "stale": a.stale, "revision": a.revision,
            }),
            Err(NoAnswer {
                detail,
                sent: false,
            }) => {
                json!({"code": "local_gateway_down", "detail": detail})
            }
            Err(NoAnswer { detail, sent: true }) => json!({"code": "read_broke", "detail": detail}),
        };
        if line["code"] == "not_found" {
            self.seen.insert((vault.to_string(), key.to_string()), 0);
        }
        line["kind"] = json!("read");
        line["vault"] = json!(vault);
        line["key"] = json!(key);
        line["sent_ms"] = json!(sent_ms);
        line["answered_ms"] = json!(now_ms());
        let reached = line["code"] != "local_gateway_down";
        self.log(&line);
        reached
    }

    /// One call drawn from the seed; whether it reached the gateway.
    fn step(&mut self) -> bool {
        let vault = self.settings.vaults
            [self.rng.below(self.settings.vaults.len() as u64) as usize]
            .clone();
        let hot = format!("hot-{}", self.rng.below(HOT_KEYS));
        let roll = self.rng.below(100);
        if roll < 30 {
            let key = format!("{}-{}", self.settings.app, self.written);
            self.write(&vault, &key, "put", true, None)
        } else if roll < 45 {
            self.write(&vault, &hot, "put", true, None)
        } else if roll < 57 {
            let expected = self
                .seen
                .get(&(vault.clone(), hot.clone()))
                .copied()
                .unwrap_or(0);
            self.write(&vault, &hot, "cas", true, Some(expected))
        } else if roll < 64 {
            self.write(&vault, &hot, "delete", false, None)
        } else if roll < 82 {
            self.read(&vault, &hot)
        } else {
            let own = self.own.get(&vault).map(Vec::as_slice).unwrap_or(&[]);
            let recent = own.len().saturating_sub(20);
            let key = match own.get(recent + self.rng.below((own.len() - recent) as u64) as usize) {
                Some(key) => key.clone(),
                None => hot,
            };
            self.read(&vault, &key)
        }
    }

    /// Asks once about the oldest write whose outcome the app does not know (at most every
    /// [`SETTLE_EVERY`] while running, between its other calls), so the time an unknown takes
    /// to settle is measured while faults come and go; it stays unknown until the owner says.
    fn settle_some(&mut self) {
        if self.unknown.is_empty() || self.last_settle.elapsed() < SETTLE_EVERY {
            return;
        }
        self.last_settle = Instant::now();
        let (id, vault) = self.unknown[0].clone();
        if self.ask(&id, &vault, "0", false) {
            self.unknown.remove(0);
        }
    }

    /// Asks the gateway what became of write `id`; logs a `settle` line when it is settled
    /// (or, with `last`, whatever the answer); returns whether it is settled.
    fn ask(&mut self, id: &str, vault: &str, wait: &str, last: bool) -> bool {
        let path = format!("/v1/calls/{id}?vault={vault}&wait={wait}");
        let (status, body) = match self.api.call(Method::GET, &path, &[], None) {
            Ok(a) => (Some(a.status), a.body),
            Err(no) => (None, json!({"detail": no.detail})),
        };
        let settled = matches!(body["state"].as_str(), Some("done" | "not_carried_out"));
        if settled || last {
            self.log(&json!({
                "kind": "settle", "id": id, "vault": vault, "status": status,
                "body": body, "at_ms": now_ms(),
            }));
        }
        settled
    }

    /// Settles every write whose outcome the app still does not know, asking again (bounded)
    /// while its owner cannot say yet.
    fn settle_all(&mut self) {
        for (id, vault) in std::mem::take(&mut self.unknown) {
            let started = Instant::now();
            loop {
                let last = started.elapsed() > SETTLE_BOUND;
                if self.ask(&id, &vault, "5", last) || last {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Runs the app (see the module docs) with `settings`: `host`, `app`, `home`, `vaults`, `out`,
/// `stop`, `pace_ms` and `seed`.
pub fn run(settings: &Value) {
    let text = |field: &str| crate::lab_api::setting(settings, field);
    let parsed = Settings {
        host: text("host"),
        app: text("app"),
        home: PathBuf::from(text("home")),
        vaults: settings["vaults"]
            .as_array()
            .expect("vaults")
            .iter()
            .map(|v| v.as_str().expect("a vault name").to_string())
            .collect(),
        stop: PathBuf::from(text("stop")),
        pace: Duration::from_millis(settings["pace_ms"].as_u64().unwrap_or(5)),
        seed: settings["seed"].as_u64().unwrap_or(1),
    };
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(text("out"))
        .expect("open the app's output");
    let api = Api::new(
        parsed.home.clone(),
        &parsed.app,
        CALL_TIMEOUT_S,
        CLIENT_TIMEOUT,
    );
    let mut app = App {
        rng: Rng::new(parsed.seed),
        settings: parsed,
        api,
        out,
        seen: HashMap::new(),
        own: HashMap::new(),
        unknown: Vec::new(),
        last_settle: Instant::now(),
        written: 0,
    };
    let started = Instant::now();
    while !app.settings.stop.exists() {
        assert!(
            started.elapsed() < LIFETIME,
            "{} on {} was never told to stop",
            app.settings.app,
            app.settings.host
        );
        let reached = app.step();
        app.settle_some();
        // While its gateway is down (killed, stopping) the app waits a little longer: calls
        // that cannot reach it teach nothing, and would only pad the count.
        std::thread::sleep(if reached {
            app.settings.pace
        } else {
            GATEWAY_DOWN_PAUSE
        });
    }
    app.settle_all();
    app.log(&json!({"kind": "end", "at_ms": now_ms()}));
}
