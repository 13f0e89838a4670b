//! One running `ferry serve` ([`Gateway`]), started with [`Options`] at a [`Place`]: the
//! fallible core every user shares. The tests' panicking conveniences are in `convenient.rs`,
//! their HTTP helpers in `api.rs`, their views of the database in `db.rs`, the pairs of
//! gateways most tests begin with in `pairs.rs`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::GatewayError;
use crate::place::Place;
use crate::process::{wait_bounded, wait_until_listening};
use crate::{describe, ferry_bin, http, CLI_BOUND, STOP_BOUND};

/// What a gateway logs under [`Log::Debug`]: enough to tell from its log what it did.
const DEBUG_LOG: &str = "info,ferry_peer=debug,ferry_gateway=debug";

/// What the gateway logs (its `RUST_LOG`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Log {
    /// Info, and debug for the peer and gateway crates: what tests read to explain a failure.
    #[default]
    Debug,
    /// The shipped default, whatever the caller's environment says: what the benchmarks
    /// measure.
    Shipped,
}

/// How to start a gateway; the default is `ferry serve` of [`ferry_bin`] in a fresh temporary
/// home, logging at [`Log::Debug`], mDNS as its [`Place`] has it.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The `ferry` binary (whose CLI then also runs this gateway's commands); `None`:
    /// [`ferry_bin`], the build under test.
    pub binary: Option<PathBuf>,
    /// Written to `config.toml` in the home before the first start.
    pub config_toml: Option<String>,
    /// The state directory; `None`: a fresh temporary one, removed when the handle drops.
    pub home: Option<PathBuf>,
    /// The QUIC address of the first start; `None`: the place's ([`Place::Loopback`]: a port
    /// the kernel picks).
    pub listen: Option<String>,
    /// Arguments after `serve --api ... --listen ... --label ...`.
    pub args: Vec<String>,
    /// Extra environment, kept across restarts unless [`Gateway::restart_with`] replaces it.
    pub env: Vec<(String, String)>,
    /// A program the gateway runs under (`prlimit ... --`, `strace -o LOG`); signals and kills
    /// reach the wrapper.
    pub wrapper: Vec<String>,
    /// Whether to announce and browse on mDNS; `None`: as the place has it.
    pub mdns: Option<bool>,
    /// What it logs.
    pub log: Log,
}

fn owned(strings: &[&str]) -> Vec<String> {
    strings.iter().map(|s| s.to_string()).collect()
}

pub(crate) fn owned_env(env: &[(&str, &str)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Options {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs the `ferry` binary at `path`.
    pub fn binary(mut self, path: &Path) -> Self {
        self.binary = Some(path.to_path_buf());
        self
    }

    /// Starts with `toml` as the home's `config.toml`.
    pub fn config(mut self, toml: &str) -> Self {
        self.config_toml = Some(toml.to_string());
        self
    }

    /// Runs in `home` (made if absent), which outlives the handle.
    pub fn home(mut self, home: &Path) -> Self {
        self.home = Some(home.to_path_buf());
        self
    }

    /// Listens for QUIC on `addr` on the first start.
    pub fn listen(mut self, addr: &str) -> Self {
        self.listen = Some(addr.to_string());
        self
    }

    /// Adds arguments after `serve ...`.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(owned(args));
        self
    }

    /// Adds environment.
    pub fn env(mut self, env: &[(&str, &str)]) -> Self {
        self.env.extend(owned_env(env));
        self
    }

    /// Runs the gateway under `wrapper`.
    pub fn wrapper(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = owned(wrapper);
        self
    }

    /// mDNS on or off.
    pub fn mdns(mut self, on: bool) -> Self {
        self.mdns = Some(on);
        self
    }

    /// Logs as `log` says.
    pub fn log(mut self, log: Log) -> Self {
        self.log = log;
        self
    }
}

/// One running `ferry serve`. Dropping the handle kills the process (and removes a temporary
/// home).
#[derive(Debug)]
pub struct Gateway {
    pub label: String,
    pub home: PathBuf,
    /// Its local API's address (on loopback inside its place).
    pub api: String,
    pub token: String,
    pub node_id: String,
    /// Its QUIC address: the kernel-picked one on loopback, the LAN one in a lab host.
    pub quic: String,
    api_addr: SocketAddr,
    pub(crate) place: Place,
    /// The `ferry` binary it runs, and whose CLI [`Gateway::cli`] runs.
    pub(crate) bin: PathBuf,
    /// How it was started; a restart starts it the same way (but on its QUIC address).
    pub(crate) options: Options,
    pub(crate) child: Option<Child>,
    /// Made on first use, by the tests' HTTP helpers only (see `http.rs` for why).
    pub(crate) http: OnceLock<reqwest::blocking::Client>,
    /// Declared last: removed after the process is gone.
    _dir: Option<tempfile::TempDir>,
}

impl Gateway {
    /// Starts `ferry serve` labelled `label` at `place` as `options` say, waits (bounded) until
    /// it listens, and reads its token, node id and QUIC address.
    pub fn launch(place: Place, label: &str, mut options: Options) -> Result<Self, GatewayError> {
        let who = place.name(label);
        let home_error = |path: &Path| {
            let (who, path) = (who.clone(), path.to_path_buf());
            move |source| GatewayError::Home { who, path, source }
        };
        let (home, dir) = match (place.default_home(), options.home.take()) {
            (Some(home), _) => (home, None),
            (None, Some(home)) => (home, None),
            (None, None) => {
                let dir = tempfile::Builder::new()
                    .prefix(&format!("ferry-{label}-"))
                    .tempdir()
                    .map_err(home_error(&std::env::temp_dir()))?;
                (dir.path().to_path_buf(), Some(dir))
            }
        };
        std::fs::create_dir_all(&home).map_err(home_error(&home))?;
        if let Some(config) = options.config_toml.take() {
            let path = home.join("config.toml");
            std::fs::write(&path, config).map_err(home_error(&path))?;
        }
        let listen = options
            .listen
            .take()
            .unwrap_or_else(|| place.first_listen());
        let mut gateway = Self {
            label: label.to_string(),
            home,
            api: String::new(),
            token: String::new(),
            node_id: String::new(),
            quic: String::new(),
            api_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            bin: options
                .binary
                .take()
                .unwrap_or_else(|| PathBuf::from(ferry_bin())),
            place,
            options,
            child: None,
            http: OnceLock::new(),
            _dir: dir,
        };
        // If anything below fails, dropping `gateway` kills the process.
        gateway.spawn(&listen)?;
        gateway.identify()?;
        Ok(gateway)
    }

    /// Takes on `child`, a `ferry serve` of the build at `bin` just spawned on loopback in
    /// `home` (however its command line was written, e.g. by the README's tour) with its
    /// standard error going to `serve.log` there: waits, bounded, until it listens, then reads
    /// its token, node id and QUIC address.
    pub fn try_adopt(
        bin: &Path,
        child: Child,
        label: &str,
        home: &Path,
    ) -> Result<Self, GatewayError> {
        let mut gateway = Self {
            label: label.to_string(),
            home: home.to_path_buf(),
            api: String::new(),
            token: String::new(),
            node_id: String::new(),
            quic: String::new(),
            api_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            place: Place::Loopback,
            bin: bin.to_path_buf(),
            options: Options::default(),
            child: Some(child),
            http: OnceLock::new(),
            _dir: None,
        };
        gateway.listening()?;
        gateway.identify()?;
        Ok(gateway)
    }

    /// `ferry serve` in this gateway's home, QUIC on `listen`, its log appended to
    /// `serve.log`; returns once it listens.
    fn spawn(&mut self, listen: &str) -> Result<(), GatewayError> {
        let who = self.who();
        let _ = std::fs::remove_file(self.home.join("api.addr"));
        let log_path = self.home.join("serve.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|source| GatewayError::Home {
                who: who.clone(),
                path: log_path,
                source,
            })?;
        let mut command = self.place.command_under(&self.options.wrapper, &self.bin);
        if self.place.default_home().is_none() {
            command.arg("--home").arg(&self.home);
        }
        command
            .args(["serve", "--api", "127.0.0.1:0", "--listen", listen])
            .args(["--label", &self.label]);
        if !self
            .options
            .mdns
            .unwrap_or_else(|| self.place.mdns_by_default())
        {
            command.arg("--no-mdns");
        }
        command.args(&self.options.args);
        match self.options.log {
            Log::Debug => command.env("RUST_LOG", DEBUG_LOG),
            Log::Shipped => command.env_remove("RUST_LOG"),
        };
        let child = command
            .env_remove("FERRY_HOME")
            .env_remove("FERRY_DANGEROUS_FAULT")
            .envs(self.options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|source| GatewayError::Spawn {
                what: format!("{} serve for {who}", self.bin.display()),
                source,
            })?;
        self.child = Some(child);
        self.listening()
    }

    /// Waits (bounded) until the process listens; reads its API address and token.
    fn listening(&mut self) -> Result<(), GatewayError> {
        let who = self.who();
        let child = self
            .child
            .as_mut()
            .ok_or_else(|| GatewayError::NotRunning { who: who.clone() })?;
        let api = wait_until_listening(child, &self.home, &who);
        if api.is_err() {
            // It exited or was killed: nothing is left to signal or stop.
            self.child = None;
        }
        let api = api?.trim().to_string();
        self.api_addr = api.parse().map_err(|err| GatewayError::Answer {
            who: who.clone(),
            detail: format!("api.addr {api:?}: {err}"),
        })?;
        self.api = api;
        let path = self.home.join("local-token");
        self.token = std::fs::read_to_string(&path)
            .map_err(|source| GatewayError::Home { who, path, source })?
            .trim()
            .to_string();
        Ok(())
    }

    /// Reads its node id and QUIC address: from `/v1/status` on loopback (and under Wine),
    /// from `ferry id` inside a lab host (whose API the tests cannot reach from outside).
    fn identify(&mut self) -> Result<(), GatewayError> {
        let text = |field: &Value| field.as_str().map(str::to_string);
        match &self.place {
            Place::Loopback | Place::Wine(_) => {
                let status = self.try_status()?;
                self.node_id = text(&status["node_id"])
                    .ok_or_else(|| self.answer(format!("/v1/status has no node_id: {status}")))?;
                self.quic = text(&status["addresses"][0])
                    .ok_or_else(|| self.answer(format!("/v1/status has no address: {status}")))?;
            }
            Place::Lab(host) => {
                let quic = host.lan_addr.clone();
                let out = self.try_cli(&["--json", "id"])?;
                let id: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
                self.node_id = text(&id["node_id"])
                    .ok_or_else(|| self.answer(format!("ferry id: {}", describe(&out))))?;
                self.quic = quic;
            }
        }
        Ok(())
    }

    pub(crate) fn who(&self) -> String {
        self.place.name(&self.label)
    }

    fn answer(&self, detail: String) -> GatewayError {
        GatewayError::Answer {
            who: self.who(),
            detail,
        }
    }

    /// Where it runs.
    pub fn place(&self) -> &Place {
        &self.place
    }

    /// The `ferry` binary it runs.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// Its local API's address.
    pub fn api_addr(&self) -> SocketAddr {
        self.api_addr
    }

    /// The process id, while it runs.
    pub fn process_id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running (not exited or reaped).
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().ok().flatten().is_none(),
            None => false,
        }
    }

    /// `GET /v1/status`, as JSON (loopback only).
    pub fn try_status(&self) -> Result<Value, GatewayError> {
        let (code, body) = http::get(self.api_addr, "/v1/status", &self.token)
            .map_err(|err| self.answer(format!("GET /v1/status: {err}")))?;
        serde_json::from_slice(&body)
            .map_err(|err| self.answer(format!("/v1/status ({code}) is not JSON: {err}")))
    }

    /// `/metrics` as text (loopback only).
    pub fn try_metrics(&self) -> Result<String, GatewayError> {
        let (code, body) = http::get(self.api_addr, "/metrics", &self.token)
            .map_err(|err| self.answer(format!("GET /metrics: {err}")))?;
        if code != 200 {
            return Err(self.answer(format!("/metrics answered {code}")));
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// One series of `/metrics` (a name with its labels, as printed), as a number; `None` when
    /// there is no such series.
    pub fn try_metric(&self, series: &str) -> Result<Option<f64>, GatewayError> {
        Ok(self.try_metrics()?.lines().find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        }))
    }

    /// A handle that runs this gateway's CLI (of the binary it runs now) from any thread.
    pub fn cli_handle(&self) -> Cli {
        self.cli_handle_of(&self.bin)
    }

    pub(crate) fn cli_handle_of(&self, bin: &Path) -> Cli {
        Cli {
            place: self.place.clone(),
            home: self.home.clone(),
            bin: bin.to_path_buf(),
        }
    }

    /// Runs `ferry --home HOME ARGS` (its own build's CLI, in its place), bounded.
    pub fn try_cli(&self, args: &[&str]) -> Result<Output, GatewayError> {
        self.cli_handle().output(args)
    }

    /// [`Gateway::try_cli`], which must succeed; returns its standard output.
    pub fn cli_stdout(&self, args: &[&str]) -> Result<String, GatewayError> {
        let output = self.try_cli(args)?;
        if !output.status.success() {
            return Err(GatewayError::Failed {
                what: format!("ferry {} on {}", args.join(" "), self.who()),
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// This gateway trusts `other` under its label, with its QUIC address as the route.
    pub fn try_trust(&self, other: &Gateway) -> Result<(), GatewayError> {
        self.cli_stdout(&[
            "trust",
            &other.node_id,
            "--label",
            &other.label,
            "--addr",
            &other.quic,
        ])
        .map(drop)
    }

    /// This gateway and `other` trust each other, with their QUIC addresses as routes.
    pub fn try_trust_each_other(&self, other: &Gateway) -> Result<(), GatewayError> {
        self.try_trust(other)?;
        other.try_trust(self)
    }

    /// Starts the gateway again in the same home, place and QUIC address (so peers' routes
    /// still lead to it), the same way it was started; a running process is killed first.
    /// Returns how long it took from the spawn to its answering.
    pub fn try_restart(&mut self) -> Result<Duration, GatewayError> {
        self.kill();
        let listen = match &self.place {
            Place::Loopback | Place::Wine(_) if !self.quic.is_empty() => self.quic.clone(),
            place => place.first_listen(),
        };
        let started = Instant::now();
        self.spawn(&listen)?;
        self.identify()?;
        Ok(started.elapsed())
    }

    /// The ordered stop with the CLI of `bin` (another build's, say: an operator who has just
    /// installed a new release stops the running old gateway with the new CLI), then a bounded
    /// wait for the process to exit (killed after it); its exit code. `Ok(None)` at once when
    /// it is not running.
    pub fn try_stop_with_cli(&mut self, bin: &Path) -> Result<Option<i32>, GatewayError> {
        let Some(child) = self.child.take() else {
            return Ok(None);
        };
        let what = format!("{} exiting after `ferry stop`", self.who());
        let asked = self.cli_handle_of(bin).output(&["stop"]);
        let asked = match asked {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => Err(GatewayError::Failed {
                what: format!("ferry stop ({}) on {}", bin.display(), self.who()),
                status: out.status,
                stderr: describe(&out),
            }),
            Err(err) => Err(err),
        };
        if let Err(err) = asked {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            return Err(err);
        }
        Ok(wait_bounded(child, &what, STOP_BOUND)?.status.code())
    }

    /// [`Gateway::try_stop_with_cli`] with its own CLI.
    pub fn try_stop(&mut self) -> Result<Option<i32>, GatewayError> {
        let bin = self.bin.clone();
        self.try_stop_with_cli(&bin)
    }

    /// The ordered stop, which must end in exit code 0 (else an error with its log); nothing
    /// to do when it is not running.
    pub fn stop_cleanly(&mut self) -> Result<(), GatewayError> {
        let who = self.who();
        match self.try_stop()? {
            None | Some(0) => Ok(()),
            Some(code) => Err(GatewayError::Answer {
                who,
                detail: format!(
                    "exited with {code} after `ferry stop`; its log:\n{}",
                    self.log()
                ),
            }),
        }
    }

    /// Waits (at most `bound`) for the process to exit by itself; returns its exit code.
    pub fn try_wait_exit(&mut self, bound: Duration) -> Result<Option<i32>, GatewayError> {
        let who = self.who();
        let child = self
            .child
            .take()
            .ok_or_else(|| GatewayError::NotRunning { who: who.clone() })?;
        Ok(wait_bounded(child, &format!("{who} to exit"), bound)?
            .status
            .code())
    }

    /// SIGKILL, and reaps the process: it is gone when this returns.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The gateway's log so far (standard error of every run in this home).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.join("serve.log")).unwrap_or_default()
    }

    /// The last `lines` lines of the gateway's log so far.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A gateway's CLI, runnable from any thread (see [`Gateway::cli_handle`]).
#[derive(Debug, Clone)]
pub struct Cli {
    place: Place,
    home: PathBuf,
    bin: PathBuf,
}

impl Cli {
    /// Runs `ferry --home HOME ARGS` in the gateway's place (without `--home` where the place
    /// runs gateways in their default home), bounded by [`CLI_BOUND`].
    pub fn output(&self, args: &[&str]) -> Result<Output, GatewayError> {
        let what = format!("ferry {}", args.join(" "));
        let mut command = self.place.command(&self.bin);
        if self.place.default_home().is_none() {
            command.arg("--home").arg(&self.home);
        }
        let child = command
            .args(args)
            .env_remove("FERRY_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| GatewayError::Spawn {
                what: what.clone(),
                source,
            })?;
        wait_bounded(child, &what, CLI_BOUND)
    }

    /// Runs `ferry ARGS`; returns the exit code and the parsed JSON output (`Value::Null` when
    /// it printed none). Panics if it cannot run or runs past its bound.
    pub fn run(&self, args: &[&str]) -> (i32, Value) {
        let output = self.output(args).unwrap_or_else(|err| panic!("{err}"));
        let value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (output.status.code().unwrap_or(-1), value)
    }
}
