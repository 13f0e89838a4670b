//! A harness for tests with real `ferry` processes: each [`Gateway`] is `ferry serve` in its
//! own temporary state directory, on loopback ports the kernel picks, with no mDNS.
//!
//! Every wait is bounded and fails with a message saying what did not happen. A gateway's
//! process is killed when its handle drops, so a failing test leaves nothing running.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Not every test file uses every helper.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

// Shared with the other harness (tests/src/lib.rs); not every test file uses each.
#[allow(unused_imports)]
pub use ferry_tests::{wait_for, SIGCONT, SIGSTOP, START_BOUND};

/// The binary under test: this package's build, or the one `FERRY_UNDER_TEST` names (to run
/// these tests against another build, an older one say, to show a regression test failing).
pub fn ferry_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("FERRY_UNDER_TEST")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_ferry-under-test").to_string())
    })
}

/// How long a gateway may take to exit after `ferry stop` (as long as these tests have always
/// allowed; its drain is 5 s by default).
pub const STOP_BOUND: Duration = Duration::from_secs(10);

/// A fresh UUIDv7 in its text form, stamped with the current time.
pub fn fresh_request_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Two gateways that trust each other, with vault `notes` owned by `a`.
pub fn two_with_notes() -> (Gateway, Gateway) {
    pair_with_notes(Gateway::start("a"), Gateway::start("b"))
}

/// `a` and `b` (both already started, e.g. with fault points or a config), trusting each
/// other, with vault `notes` owned by `a`.
pub fn pair_with_notes(a: Gateway, b: Gateway) -> (Gateway, Gateway) {
    a.trust_each_other(&b);
    let out = a.cli(&["vault", "create", "notes"]);
    assert!(
        out.status.success(),
        "vault create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (a, b)
}

/// A third gateway `c` that trusts `a` and `b` and is trusted by them, replicating `notes`
/// (owned by `a`).
pub fn replica_of_notes(a: &Gateway, b: &Gateway) -> Gateway {
    follow_notes(Gateway::start("c"), a, b)
}

/// `c` (already started, of any build) made to trust `a` and `b` and be trusted by them, and to
/// replicate `notes` (owned by `a`).
pub fn follow_notes(c: Gateway, a: &Gateway, b: &Gateway) -> Gateway {
    a.trust_each_other(&c);
    b.trust_each_other(&c);
    let out = c.cli(&["vault", "follow", "notes", "--owner", "a"]);
    assert!(
        out.status.success(),
        "follow: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    c
}

/// One running `ferry serve`.
#[derive(Debug)]
pub struct Gateway {
    pub label: String,
    pub home: PathBuf,
    _dir: Option<tempfile::TempDir>,
    child: Option<Child>,
    pub api: String,
    pub token: String,
    pub node_id: String,
    pub quic: String,
    /// The `ferry` binary this gateway runs, and whose CLI [`Gateway::cli`] runs.
    bin: PathBuf,
    http: reqwest::blocking::Client,
}

impl Gateway {
    /// Starts a gateway labelled `label` in a fresh temporary home.
    pub fn start(label: &str) -> Self {
        Self::start_fresh(label, None, &[])
    }

    /// Starts a gateway in a fresh temporary home, with an optional `config.toml` and extra
    /// environment.
    fn start_fresh(label: &str, config: Option<&str>, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("ferry-{label}-"))
            .tempdir()
            .unwrap();
        let home = dir.path().to_path_buf();
        if let Some(config) = config {
            std::fs::write(home.join("config.toml"), config).unwrap();
        }
        let mut gateway = Self::start_in(label, &home, "127.0.0.1:0", env);
        gateway._dir = Some(dir);
        gateway
    }

    /// Starts a gateway in a fresh temporary home with a `config.toml` and extra environment.
    pub fn start_with(label: &str, config: &str, env: &[(&str, &str)]) -> Self {
        Self::start_fresh(label, Some(config), env)
    }

    /// Starts a gateway in a fresh temporary home whose `config.toml` is `config`.
    pub fn start_with_config(label: &str, config: &str) -> Self {
        Self::start_fresh(label, Some(config), &[])
    }

    /// Starts a gateway in a fresh temporary home with extra environment.
    pub fn start_with_env(label: &str, env: &[(&str, &str)]) -> Self {
        Self::start_fresh(label, None, env)
    }

    /// Starts (or restarts) a gateway in `home`, its QUIC endpoint on `listen`, with extra
    /// environment (e.g. `FERRY_DANGEROUS_FAULT`).
    pub fn start_in(label: &str, home: &Path, listen: &str, env: &[(&str, &str)]) -> Self {
        Self::start_in_under(Path::new(ferry_bin()), label, home, listen, env, &[])
    }

    /// Starts a gateway of another build, the `ferry` binary at `bin` (the previous release,
    /// say), in a fresh temporary home with extra environment. Its CLI is that build's too.
    pub fn start_built(bin: &Path, label: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("ferry-{label}-"))
            .tempdir()
            .unwrap();
        let home = dir.path().to_path_buf();
        let mut gateway = Self::start_in_under(bin, label, &home, "127.0.0.1:0", env, &[]);
        gateway._dir = Some(dir);
        gateway
    }

    /// Runs this gateway's home on the build at `bin` from now on, on the same QUIC address
    /// and with extra environment: an in-place upgrade (or downgrade). A running process is
    /// killed first; stop it with [`Gateway::stop`] before, for an orderly one. Fails, with the
    /// log, if the other build does not start on this home.
    pub fn restart_on(&mut self, bin: &Path, env: &[(&str, &str)]) {
        self.bin = bin.to_path_buf();
        self.restart_with(env);
    }

    /// The `ferry` binary this gateway runs.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// Starts a gateway in a fresh temporary home as `wrapper ... ferry serve ...` (e.g.
    /// `strace -o LOG`). The process signalled and killed is the wrapper's: stop it with
    /// [`Gateway::stop`].
    pub fn start_under(label: &str, wrapper: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("ferry-{label}-"))
            .tempdir()
            .unwrap();
        let home = dir.path().to_path_buf();
        let mut gateway = Self::start_in_under(
            Path::new(ferry_bin()),
            label,
            &home,
            "127.0.0.1:0",
            &[],
            wrapper,
        );
        gateway._dir = Some(dir);
        gateway
    }

    fn start_in_under(
        bin: &Path,
        label: &str,
        home: &Path,
        listen: &str,
        env: &[(&str, &str)],
        wrapper: &[&str],
    ) -> Self {
        std::fs::create_dir_all(home).unwrap();
        let _ = std::fs::remove_file(home.join("api.addr"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(home.join("serve.log"))
            .unwrap();
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(bin);
                command
            }
            None => Command::new(bin),
        };
        let child = command
            .args([
                "--home",
                home.to_str().unwrap(),
                "serve",
                "--api",
                "127.0.0.1:0",
                "--listen",
                listen,
                "--no-mdns",
                "--label",
                label,
            ])
            .env("RUST_LOG", "info,ferry_peer=debug,ferry_gateway=debug")
            .env_remove("FERRY_DANGEROUS_FAULT")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn ferry serve");
        Self::adopt(bin, child, label, home)
    }

    /// Takes on `child`, a `ferry serve` of the build at `bin` just spawned on `home` (however
    /// its command line was written, e.g. by the README's tour) with its standard error going
    /// to `serve.log` there: waits, bounded, until it listens, then reads its token, node id
    /// and QUIC address. Dropping the handle kills the process.
    pub fn adopt(bin: &Path, mut child: Child, label: &str, home: &Path) -> Self {
        // Bounded, and fails at once with the log if the process exits before it listens.
        let api = ferry_tests::wait_until_listening(&mut child, home, label)
            .trim()
            .to_string();
        let token = std::fs::read_to_string(home.join("local-token"))
            .unwrap()
            .trim()
            .to_string();
        let http = reqwest::blocking::Client::builder()
            .no_proxy()
            .build()
            .unwrap();
        let mut gateway = Self {
            label: label.into(),
            home: home.to_path_buf(),
            _dir: None,
            child: Some(child),
            api,
            token,
            node_id: String::new(),
            quic: String::new(),
            bin: bin.to_path_buf(),
            http,
        };
        let status = gateway.get_json("/v1/status");
        gateway.node_id = status["node_id"].as_str().unwrap().to_string();
        gateway.quic = status["addresses"][0].as_str().unwrap().to_string();
        gateway
    }

    /// Restarts the gateway in the same home and on the same QUIC address (after a stop or a
    /// kill), so peers' routes still lead to it.
    pub fn restart(&mut self) {
        self.restart_with(&[]);
    }

    /// Restarts with extra environment (see [`Gateway::start_in`]), on the same build.
    pub fn restart_with(&mut self, env: &[(&str, &str)]) {
        let dir = self._dir.take();
        self.kill();
        let label = self.label.clone();
        let mut fresh =
            Self::start_in_under(&self.bin, &label, &self.home, &self.quic.clone(), env, &[]);
        fresh._dir = dir;
        *self = fresh;
    }

    /// This gateway's database, opened read-only (WAL lets it be read beside the running
    /// gateway).
    pub fn db(&self) -> rusqlite::Connection {
        let path = self.home.join("ferry.db");
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap_or_else(|err| {
                panic!(
                    "open {}'s database {} read-only: {err}",
                    self.label,
                    path.display()
                )
            })
    }

    /// The owner's journal row for `request_id` from any caller: `(state, reason)`, read
    /// straight from its database (read-only; WAL lets it run beside the gateway).
    pub fn journal_row(&self, request_id: &str) -> Option<(String, Option<String>)> {
        let id = ferry_peer::wire::RequestId::parse(request_id).expect("a request id");
        self.db()
            .query_row(
                "SELECT state, reason FROM journal WHERE request_id = ?1",
                [&id.as_bytes()[..]],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .ok()
    }

    /// The vault the owner's journal row for `request_id` is filed under (`""`: none).
    pub fn journal_vault(&self, request_id: &str) -> Option<String> {
        let id = ferry_peer::wire::RequestId::parse(request_id).expect("a request id");
        self.db()
            .query_row(
                "SELECT vault FROM journal WHERE request_id = ?1",
                [&id.as_bytes()[..]],
                |row| row.get(0),
            )
            .ok()
    }

    /// A record's (value, revision) straight from this gateway's database, whatever its state.
    pub fn stored(&self, vault: &str, key: &str) -> Option<(Option<Vec<u8>>, u64)> {
        self.db()
            .query_row(
                "SELECT value, revision FROM records WHERE vault = ?1 AND key = ?2",
                [vault, key],
                |row| Ok((row.get(0)?, row.get::<_, i64>(1)? as u64)),
            )
            .ok()
    }

    /// Every record of `vault` in this gateway's database, by key: (key, revision, value or
    /// tombstone).
    pub fn records(&self, vault: &str) -> Vec<(String, u64, Option<Vec<u8>>)> {
        let conn = self.db();
        let mut stmt = conn
            .prepare("SELECT key, revision, value FROM records WHERE vault = ?1 ORDER BY key")
            .unwrap();
        stmt.query_map([vault], |row| {
            Ok((row.get(0)?, row.get::<_, i64>(1)? as u64, row.get(2)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    /// The revision `vault` has in this gateway's database (0 if it has none).
    pub fn vault_revision(&self, vault: &str) -> u64 {
        ferry_tests::vault_revision(&self.db(), vault)
    }

    /// This gateway's view of its route to `peer`, from `/v1/routes`.
    pub fn route_to(&self, peer: &str) -> Value {
        let routes = self.get_json("/v1/routes");
        routes
            .as_array()
            .and_then(|all| all.iter().find(|r| r["peer"] == peer).cloned())
            .unwrap_or(Value::Null)
    }

    /// GET /v1/calls/{id}: status and body.
    pub fn settle(&self, request_id: &str, wait_s: Option<u32>) -> (u16, Value) {
        let path = match wait_s {
            Some(wait) => format!("/v1/calls/{request_id}?wait={wait}"),
            None => format!("/v1/calls/{request_id}"),
        };
        let response = self.request(reqwest::Method::GET, &path).send().unwrap();
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// GET /v1/calls/{id}?vault=VAULT: status and body.
    pub fn settle_in(&self, vault: &str, request_id: &str) -> (u16, Value) {
        let path = format!("/v1/calls/{request_id}?vault={vault}");
        let response = self.request(reqwest::Method::GET, &path).send().unwrap();
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// Runs the CLI (of the build this gateway runs) against this gateway's home.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .arg("--home")
            .arg(&self.home)
            .args(args)
            .env_remove("FERRY_HOME")
            .stdin(Stdio::null())
            .output()
            .expect("run ferry")
    }

    /// Runs the CLI with `--json` and parses standard output; also returns the exit code.
    pub fn cli_json(&self, args: &[&str]) -> (i32, Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let output = self.cli(&all);
        let value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
            panic!(
                "ferry {args:?} printed no JSON; stdout {:?}, stderr {:?}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        });
        (output.status.code().unwrap_or(-1), value)
    }

    /// Makes this gateway and `other` trust each other, with their QUIC addresses as routes.
    pub fn trust_each_other(&self, other: &Gateway) {
        for (me, them) in [(self, other), (other, self)] {
            let out = me.cli(&[
                "trust",
                &them.node_id,
                "--label",
                &them.label,
                "--addr",
                &them.quic,
            ]);
            assert!(
                out.status.success(),
                "{} trusting {}: {}",
                me.label,
                them.label,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.api)
    }

    /// A request with the token and an app name.
    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::blocking::RequestBuilder {
        self.request_as("test-app", method, path)
    }

    /// A request with the token, calling as `app`.
    pub fn request_as(
        &self,
        app: &str,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::blocking::RequestBuilder {
        self.http
            .request(method, self.url(path))
            .bearer_auth(&self.token)
            .header("x-ferry-app", app)
            .timeout(Duration::from_secs(60))
    }

    pub fn get_json(&self, path: &str) -> Value {
        let response = self.request(reqwest::Method::GET, path).send().unwrap();
        assert!(
            response.status().is_success(),
            "GET {path}: {}",
            response.status()
        );
        response.json().unwrap()
    }

    /// PUT a record through the local API; returns status and JSON body.
    pub fn put(
        &self,
        vault: &str,
        key: &str,
        value: &[u8],
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut request = self
            .request(
                reqwest::Method::PUT,
                &format!("/v1/vaults/{vault}/records/{key}"),
            )
            .body(value.to_vec());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().unwrap();
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// GET a record: status, value, revision header, source header.
    pub fn get(&self, vault: &str, key: &str) -> (u16, Vec<u8>, Option<u64>, Option<String>) {
        let (status, value, revision, source, _) = self.get_with_staleness(vault, key);
        (status, value, revision, source)
    }

    /// GET a record: status, value, revision, source, and whether it is marked stale.
    pub fn get_with_staleness(
        &self,
        vault: &str,
        key: &str,
    ) -> (u16, Vec<u8>, Option<u64>, Option<String>, bool) {
        self.get_as("test-app", vault, key, &[])
    }

    /// GET a record as `app`, with extra headers: status, value, revision, source, stale.
    pub fn get_as(
        &self,
        app: &str,
        vault: &str,
        key: &str,
        headers: &[(&str, &str)],
    ) -> (u16, Vec<u8>, Option<u64>, Option<String>, bool) {
        let mut request = self.request_as(
            app,
            reqwest::Method::GET,
            &format!("/v1/vaults/{vault}/records/{key}"),
        );
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().unwrap();
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        };
        let revision = header("x-ferry-revision").and_then(|v| v.parse().ok());
        let source = header("x-ferry-source");
        let stale = header("x-ferry-stale").as_deref() == Some("true");
        (
            status,
            response.bytes().unwrap().to_vec(),
            revision,
            source,
            stale,
        )
    }

    /// A counter from `/metrics`, by its full name with labels.
    pub fn metric(&self, series: &str) -> u64 {
        let text = self
            .request(reqwest::Method::GET, "/metrics")
            .send()
            .unwrap()
            .text()
            .unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in /metrics"))
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("running")
    }

    /// Sends `signal` to the gateway's process.
    pub fn signal(&self, signal: i32) {
        ferry_tests::send_signal(self.pid(), signal);
    }

    /// Waits (bounded) for the process to exit and returns its exit code.
    pub fn wait_exit(&mut self, bound: Duration) -> Option<i32> {
        let child = self.child.as_mut().expect("running");
        let status = wait_for(&format!("{} to exit", self.label), bound, || {
            child.try_wait().ok().flatten()
        });
        self.child = None;
        status.code()
    }

    /// `ferry stop`, which must succeed (else this fails with its output), then waits at most
    /// [`STOP_BOUND`] for the process to exit; returns its exit code.
    pub fn stop(&mut self) -> Option<i32> {
        let out = self.cli(&["stop"]);
        assert!(
            out.status.success(),
            "ferry stop on {}: {}",
            self.label,
            ferry_tests::describe(&out)
        );
        self.wait_exit(STOP_BOUND)
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The gateway's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.join("serve.log")).unwrap_or_default()
    }

    /// Waits (bounded by `bound`) until one line of the log holds every one of `parts`, and
    /// returns it; fails with the lines that hold the first part.
    pub fn wait_for_log_line(&self, parts: &[&str], bound: Duration) -> String {
        let started = std::time::Instant::now();
        loop {
            let log = self.log();
            if let Some(line) = log
                .lines()
                .find(|line| parts.iter().all(|part| line.contains(part)))
            {
                return line.to_string();
            }
            if started.elapsed() >= bound {
                let near: Vec<&str> = log
                    .lines()
                    .filter(|line| parts.first().is_some_and(|first| line.contains(first)))
                    .collect();
                panic!(
                    "after {bound:?}, no line of {}'s log holds all of {parts:?}; the lines holding {:?}:\n{}",
                    self.label,
                    parts.first(),
                    near.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `ferry serve` of the build at `bin` on `home`, on ports of its own, which must refuse
/// to start: waits at most [`START_BOUND`] for it to exit and returns its exit code and what it
/// printed. A process that starts serving instead (it writes `api.addr` anew) or hangs is killed
/// and the test fails, naming `home_is` ("a home in use", say).
pub fn serve_refused(bin: &Path, home: &Path, home_is: &str) -> (Option<i32>, String) {
    let api_addr = home.join("api.addr");
    let api_addr_before = std::fs::read_to_string(&api_addr).ok();
    let out_dir = tempfile::tempdir().unwrap();
    let out_path = out_dir.path().join("serve.out");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new(bin)
        .args(["--home", home.to_str().unwrap(), "serve"])
        .args(["--api", "127.0.0.1:0", "--listen", "127.0.0.1:0"])
        .args(["--no-mdns", "--label", "refused"])
        .env("RUST_LOG", "info")
        .env_remove("FERRY_DANGEROUS_FAULT")
        .env_remove("FERRY_HOME")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let serving = std::fs::read_to_string(&api_addr).ok() != api_addr_before;
        if started.elapsed() > START_BOUND || serving {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the build at {} started on (or hung for {:?} over) {home_is}; it printed:\n{}",
                bin.display(),
                started.elapsed(),
                std::fs::read_to_string(&out_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (
        status.code(),
        std::fs::read_to_string(&out_path).unwrap_or_default(),
    )
}
