//! The app of the failover lab test (`tests/tests/lab_failover.rs`), run inside a lab host as
//! `ferry-lab-app` with `"mode": "steady"`: a steady stream of calls through its gateway's
//! HTTP API while the test cuts links and kills processes. One thread writes a fresh key every
//! `pace_ms`, another reads back the newest key written, every `pace_ms` too (apart, so a
//! write waiting on a dead path does not hold the reads up). When told to stop it settles
//! every write whose outcome it does not know, and ends. Every call is one JSON line in its
//! output file, stamped with wall-clock milliseconds, which the test lines up with the faults.

// A test's app: a panic here fails the failover test, with its log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::lab_api::{Api, NoAnswer};
use crate::lab_app::{now_ms, DRIVER_LIFETIME};

/// The app's name (`X-Ferry-App`).
pub const APP: &str = "steady";

/// `X-Ferry-Timeout` of every call, in seconds.
pub const CALL_TIMEOUT_S: &str = "2";

/// How long a settle at the end may wait for its answer, in seconds.
const SETTLE_WAIT_S: &str = "5";

/// What the app was started with.
struct Settings {
    label: String,
    home: PathBuf,
    vault: String,
    stop: PathBuf,
    pace: Duration,
}

/// One line of output, shared by the two threads.
#[derive(Clone)]
struct Out(Arc<Mutex<File>>);

impl Out {
    fn log(&self, line: &Value) {
        let mut file = self.0.lock().unwrap_or_else(|p| p.into_inner());
        crate::lab_api::append_line(&mut *file, line);
    }
}

fn write_loop(
    settings: &Settings,
    api: &Api,
    out: &Out,
    newest: &Mutex<Option<String>>,
) -> Vec<(String, String)> {
    let started = Instant::now();
    let mut unknown = Vec::new();
    let mut n = 0u64;
    while !settings.stop.exists() {
        assert!(
            started.elapsed() < DRIVER_LIFETIME,
            "{} was never told to stop",
            settings.label
        );
        n += 1;
        let key = format!("{}-{n}", settings.label);
        let id = uuid::Uuid::now_v7().to_string();
        let value = format!("{key} by {}", settings.label);
        let sent_ms = now_ms();
        let path = format!("/v1/vaults/{}/records/{key}", settings.vault);
        let answer = api.call(
            reqwest::Method::PUT,
            &path,
            &[("x-ferry-request-id", id.clone())],
            Some(value.clone()),
        );
        let answered_ms = now_ms();
        let (status, code, revision, detail) = match answer {
            Ok(a) if a.status == 200 => (
                Some(a.status),
                "done".to_string(),
                a.body["revision"].as_u64(),
                Value::Null,
            ),
            Ok(a) => (
                Some(a.status),
                a.body["error"].as_str().unwrap_or("unreadable").to_string(),
                None,
                a.body["detail"].clone(),
            ),
            Err(NoAnswer {
                detail,
                sent: false,
            }) => (None, "local_gateway_down".into(), None, json!(detail)),
            Err(NoAnswer { detail, sent: true }) => {
                (None, "app_unknown".into(), None, json!(detail))
            }
        };
        if code == "done" {
            *newest.lock().unwrap_or_else(|p| p.into_inner()) = Some(key.clone());
        }
        if code == "outcome_unknown" || code == "app_unknown" {
            unknown.push((id.clone(), key.clone()));
        }
        out.log(&json!({
            "kind": "write", "id": id, "key": key, "value": value,
            "sent_ms": sent_ms, "answered_ms": answered_ms,
            "status": status, "code": code, "revision": revision, "detail": detail,
        }));
        std::thread::sleep(settings.pace);
    }
    unknown
}

fn read_loop(settings: &Settings, api: &Api, out: &Out, newest: &Mutex<Option<String>>) {
    while !settings.stop.exists() {
        let key = newest.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(key) = key {
            let sent_ms = now_ms();
            let path = format!("/v1/vaults/{}/records/{key}", settings.vault);
            let line = match api.call(reqwest::Method::GET, &path, &[], None) {
                Ok(a) if a.status == 200 => json!({
                    "code": "found", "source": a.source, "stale": a.stale, "revision": a.revision,
                }),
                Ok(a) => {
                    json!({"code": a.body["error"].as_str().unwrap_or("unreadable"), "detail": a.body["detail"]})
                }
                Err(no) => json!({"code": "read_broke", "detail": no.detail}),
            };
            let mut line = line;
            line["kind"] = json!("read");
            line["key"] = json!(key);
            line["sent_ms"] = json!(sent_ms);
            line["answered_ms"] = json!(now_ms());
            out.log(&line);
        }
        std::thread::sleep(settings.pace);
    }
}

/// Runs the app (see the module docs) with `settings`: `label`, `home`, `vault`, `out`,
/// `stop` and `pace_ms`.
pub fn run(settings: &Value) {
    let text = |field: &str| crate::lab_api::setting(settings, field);
    let settings = Settings {
        label: text("label"),
        home: PathBuf::from(text("home")),
        vault: text("vault"),
        stop: PathBuf::from(text("stop")),
        pace: Duration::from_millis(settings["pace_ms"].as_u64().unwrap_or(10)),
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(Path::new(&text("out")))
        .expect("open the app's output");
    let out = Out(Arc::new(Mutex::new(file)));
    let api = Api::new(
        settings.home.clone(),
        APP,
        CALL_TIMEOUT_S,
        Duration::from_secs(8),
    );
    let newest = Mutex::new(None);
    let unknown = std::thread::scope(|scope| {
        scope.spawn(|| read_loop(&settings, &api, &out, &newest));
        write_loop(&settings, &api, &out, &newest)
    });
    // Every write whose outcome the app does not know is settled by request id.
    for (id, key) in unknown {
        let path = format!(
            "/v1/calls/{id}?vault={}&wait={SETTLE_WAIT_S}",
            settings.vault
        );
        let (status, body) = match api.call(reqwest::Method::GET, &path, &[], None) {
            Ok(a) => (Some(a.status), a.body),
            Err(no) => (None, json!({"detail": no.detail})),
        };
        out.log(&json!({"kind": "settle", "id": id, "key": key, "status": status, "body": body}));
    }
}
