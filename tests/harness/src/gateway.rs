//! One running `ferry serve` ([`Gateway`]), started with [`Options`] at a [`Place`], and the
//! pairs of gateways most tests begin with.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::place::Place;
use crate::process::{wait_bounded, wait_until_listening};
use crate::{describe, ferry_bin, http, CLI_BOUND, START_BOUND, STOP_BOUND};

/// What a gateway logs under [`Log::Debug`]: enough to tell from its log what it did.
const DEBUG_LOG: &str = "info,ferry_peer=debug,ferry_gateway=debug";

/// Why a gateway could not be started, asked, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A program could not be started at all (no such binary, say).
    #[error("cannot run {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    /// A program ran past its bound; it was killed.
    #[error("{what} did not finish within {bound:?}; it was killed")]
    TimedOut { what: String, bound: Duration },
    /// A command exited unsuccessfully.
    #[error("{what} failed ({status}): {stderr}")]
    Failed {
        what: String,
        status: ExitStatus,
        stderr: String,
    },
    /// `ferry serve` exited before it listened (a bad config, a home in use); its log says why.
    #[error("ferry serve for {who} exited with {status} before listening; its log:\n{log}")]
    Exited {
        who: String,
        status: ExitStatus,
        log: String,
    },
    /// `ferry serve` did not write `api.addr` in time; it was killed.
    #[error("gave up after {bound:?} waiting for {who} to write api.addr; its log:\n{log}")]
    NotListening {
        who: String,
        bound: Duration,
        log: String,
    },
    /// The gateway's state directory could not be made, written or read.
    #[error("{who}'s home {path}: {source}")]
    Home {
        who: String,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The gateway answered, but not as a gateway should (no node id, an unreadable status).
    #[error("gateway {who}: {detail}")]
    Answer { who: String, detail: String },
    /// The gateway's process is not running (it was stopped or killed, and not restarted).
    #[error("{who} is not running")]
    NotRunning { who: String },
}

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

fn owned_env(env: &[(&str, &str)]) -> Vec<(String, String)> {
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
    place: Place,
    /// The `ferry` binary it runs, and whose CLI [`Gateway::cli`] runs.
    bin: PathBuf,
    /// How it was started; a restart starts it the same way (but on its QUIC address).
    options: Options,
    child: Option<Child>,
    /// Made on first use, by the tests' HTTP helpers only (see `http.rs` for why).
    http: OnceLock<reqwest::blocking::Client>,
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
        let (home, dir) = match options.home.take() {
            Some(home) => (home, None),
            None => {
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
        command
            .arg("--home")
            .arg(&self.home)
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

    /// Reads its node id and QUIC address: from `/v1/status` on loopback, from `ferry id`
    /// inside a lab host (whose API the tests cannot reach from outside).
    fn identify(&mut self) -> Result<(), GatewayError> {
        let text = |field: &Value| field.as_str().map(str::to_string);
        match &self.place {
            Place::Loopback => {
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

    fn who(&self) -> String {
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

    fn cli_handle_of(&self, bin: &Path) -> Cli {
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
            Place::Loopback if !self.quic.is_empty() => self.quic.clone(),
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
    /// Runs `ferry --home HOME ARGS` in the gateway's place, bounded by [`CLI_BOUND`].
    pub fn output(&self, args: &[&str]) -> Result<Output, GatewayError> {
        let what = format!("ferry {}", args.join(" "));
        let child = self
            .place
            .command(&self.bin)
            .arg("--home")
            .arg(&self.home)
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

/// The tests' conveniences: each panics, saying what failed, where the core method above
/// returns an error.
impl Gateway {
    /// Starts a gateway at `place` (see [`Gateway::launch`]); panics if it does not start.
    pub fn start_at(place: Place, label: &str, options: Options) -> Self {
        Self::launch(place, label, options).unwrap_or_else(|err| panic!("{err}"))
    }

    /// Starts a gateway labelled `label` on loopback in a fresh temporary home.
    pub fn start(label: &str) -> Self {
        Self::start_at(Place::Loopback, label, Options::new())
    }

    /// Starts a gateway on loopback in a fresh temporary home with a `config.toml` and extra
    /// environment.
    pub fn start_with(label: &str, config: &str, env: &[(&str, &str)]) -> Self {
        Self::start_at(
            Place::Loopback,
            label,
            Options::new().config(config).env(env),
        )
    }

    /// Starts a gateway on loopback in a fresh temporary home whose `config.toml` is `config`.
    pub fn start_with_config(label: &str, config: &str) -> Self {
        Self::start_at(Place::Loopback, label, Options::new().config(config))
    }

    /// Starts a gateway on loopback in a fresh temporary home with extra environment.
    pub fn start_with_env(label: &str, env: &[(&str, &str)]) -> Self {
        Self::start_at(Place::Loopback, label, Options::new().env(env))
    }

    /// Starts (or restarts) a gateway in `home`, its QUIC endpoint on `listen`, with extra
    /// environment (e.g. `FERRY_DANGEROUS_FAULT`).
    pub fn start_in(label: &str, home: &Path, listen: &str, env: &[(&str, &str)]) -> Self {
        let options = Options::new().home(home).listen(listen).env(env);
        Self::start_at(Place::Loopback, label, options)
    }

    /// Starts a gateway of another build, the `ferry` binary at `bin` (the previous release,
    /// say), on loopback in a fresh temporary home with extra environment. Its CLI is that
    /// build's too.
    pub fn start_built(bin: &Path, label: &str, env: &[(&str, &str)]) -> Self {
        Self::start_at(Place::Loopback, label, Options::new().binary(bin).env(env))
    }

    /// Starts a gateway on loopback in a fresh temporary home as `wrapper ... ferry serve ...`
    /// (e.g. `strace -o LOG`). The process signalled and killed is the wrapper's: stop it with
    /// [`Gateway::stop`].
    pub fn start_under(label: &str, wrapper: &[&str]) -> Self {
        Self::start_at(Place::Loopback, label, Options::new().wrapper(wrapper))
    }

    /// [`Gateway::try_adopt`], panicking with the log if the process does not listen.
    pub fn adopt(bin: &Path, child: Child, label: &str, home: &Path) -> Self {
        Self::try_adopt(bin, child, label, home).unwrap_or_else(|err| panic!("{err}"))
    }

    /// Restarts the gateway (see [`Gateway::try_restart`]).
    pub fn restart(&mut self) {
        if let Err(err) = self.try_restart() {
            panic!("restarting {}: {err}", self.who());
        }
    }

    /// Restarts with `env` as its extra environment from now on (none: `&[]`), on the same
    /// build.
    pub fn restart_with(&mut self, env: &[(&str, &str)]) {
        self.options.env = owned_env(env);
        self.restart();
    }

    /// Runs this gateway's home on the build at `bin` from now on, with `env` as its extra
    /// environment: an in-place upgrade (or downgrade). A running process is killed first;
    /// stop it with [`Gateway::stop`] before, for an orderly one. Fails, with the log, if the
    /// other build does not start on this home.
    pub fn restart_on(&mut self, bin: &Path, env: &[(&str, &str)]) {
        self.bin = bin.to_path_buf();
        self.restart_with(env);
    }

    /// The process id; panics when it is not running.
    pub fn pid(&self) -> u32 {
        self.process_id()
            .unwrap_or_else(|| panic!("{} is not running", self.who()))
    }

    /// Sends signal number `signal` to the gateway's process.
    pub fn signal(&self, signal: i32) {
        crate::send_signal(self.pid(), signal);
    }

    /// Waits (bounded) for the process to exit by itself and returns its exit code.
    pub fn wait_exit(&mut self, bound: Duration) -> Option<i32> {
        self.try_wait_exit(bound)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    /// `ferry stop`, which must succeed (else this fails with its output), then waits at most
    /// [`STOP_BOUND`] for the process to exit; returns its exit code.
    pub fn stop(&mut self) -> Option<i32> {
        let bin = self.bin.clone();
        self.stop_with_cli(&bin)
    }

    /// [`Gateway::stop`] with the `ferry stop` of another build's CLI.
    pub fn stop_with_cli(&mut self, bin: &Path) -> Option<i32> {
        assert!(self.child.is_some(), "{} is not running", self.who());
        self.try_stop_with_cli(bin)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    /// Runs the CLI (of the build this gateway runs) against this gateway, in its place.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_of(&self.bin, args)
    }

    /// Runs the CLI of `bin` (another build's, say) against this gateway, in its place.
    pub fn cli_of(&self, bin: &Path, args: &[&str]) -> Output {
        self.cli_handle_of(bin)
            .output(args)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    /// Runs the CLI with `--json` and parses standard output; also returns the exit code.
    pub fn cli_json(&self, args: &[&str]) -> (i32, Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let output = self.cli(&all);
        let value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
            panic!(
                "ferry {args:?} on {} printed no JSON: {}",
                self.who(),
                describe(&output)
            )
        });
        (output.status.code().unwrap_or(-1), value)
    }

    /// This gateway's routes to the peer labelled `peer`, from `ferry routes --json`.
    pub fn routes_to(&self, peer: &str) -> Vec<Value> {
        let (code, routes) = self.cli_json(&["routes"]);
        assert_eq!(code, 0, "ferry routes on {}: {routes}", self.who());
        routes
            .as_array()
            .map(|all| all.iter().filter(|r| r["peer"] == peer).cloned().collect())
            .unwrap_or_else(|| panic!("ferry routes on {} gave no list: {routes}", self.who()))
    }

    /// Makes this gateway and `other` trust each other, with their QUIC addresses as routes.
    pub fn trust_each_other(&self, other: &Gateway) {
        if let Err(err) = self.try_trust_each_other(other) {
            panic!(
                "{} and {} trusting each other: {err}",
                self.label, other.label
            );
        }
    }

    /// The lab host it runs in; panics on loopback.
    pub fn lab_host(&self) -> &crate::LabHost {
        match &self.place {
            Place::Lab(host) => host,
            Place::Loopback => panic!("{} runs on loopback, not in a lab host", self.label),
        }
    }

    /// Its QUIC address on its lab host's LAN, `10.77.0.I:PORT`.
    pub fn lan_addr(&self) -> &str {
        &self.lab_host().lan_addr
    }

    /// Its QUIC address on its lab host's tailnet, `100.77.0.I:PORT`.
    pub fn tailnet_addr(&self) -> &str {
        &self.lab_host().tailnet_addr
    }

    /// The number of the lab host it runs in.
    pub fn host(&self) -> usize {
        self.lab_host().number
    }

    /// Waits (bounded by `bound`) until one line of the log holds every one of `parts`, and
    /// returns it; fails with the lines that hold the first part.
    pub fn wait_for_log_line(&self, parts: &[&str], bound: Duration) -> String {
        let started = Instant::now();
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
                    self.who(),
                    parts.first(),
                    near.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A counter from `/metrics`, by its full name with labels (loopback only).
    pub fn metric(&self, series: &str) -> u64 {
        let text = self.try_metrics().unwrap_or_else(|err| panic!("{err}"));
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in /metrics"))
    }
}

/// The tests' HTTP helpers, on reqwest's blocking client (loopback only).
impl Gateway {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.api)
    }

    fn http(&self) -> &reqwest::blocking::Client {
        self.http.get_or_init(|| {
            reqwest::blocking::Client::builder()
                .no_proxy()
                .build()
                .unwrap_or_else(|err| panic!("an HTTP client: {err}"))
        })
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
        self.http()
            .request(method, self.url(path))
            .bearer_auth(&self.token)
            .header("x-ferry-app", app)
            .timeout(Duration::from_secs(60))
    }

    fn send(&self, request: reqwest::blocking::RequestBuilder) -> reqwest::blocking::Response {
        request
            .send()
            .unwrap_or_else(|err| panic!("a request to {}: {err}", self.label))
    }

    pub fn get_json(&self, path: &str) -> Value {
        let response = self.send(self.request(reqwest::Method::GET, path));
        assert!(
            response.status().is_success(),
            "GET {path}: {}",
            response.status()
        );
        response
            .json()
            .unwrap_or_else(|err| panic!("GET {path} on {}: {err}", self.label))
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
        let response = self.send(request);
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
        let response = self.send(request);
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
        let body = response
            .bytes()
            .unwrap_or_else(|err| panic!("GET {vault}/{key} on {}: {err}", self.label));
        (status, body.to_vec(), revision, source, stale)
    }

    /// GET /v1/calls/{id}: status and body.
    pub fn settle(&self, request_id: &str, wait_s: Option<u32>) -> (u16, Value) {
        let path = match wait_s {
            Some(wait) => format!("/v1/calls/{request_id}?wait={wait}"),
            None => format!("/v1/calls/{request_id}"),
        };
        let response = self.send(self.request(reqwest::Method::GET, &path));
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// GET /v1/calls/{id}?vault=VAULT: status and body.
    pub fn settle_in(&self, vault: &str, request_id: &str) -> (u16, Value) {
        let path = format!("/v1/calls/{request_id}?vault={vault}");
        let response = self.send(self.request(reqwest::Method::GET, &path));
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// This gateway's view of its route to `peer`, from `/v1/routes`.
    pub fn route_to(&self, peer: &str) -> Value {
        let routes = self.get_json("/v1/routes");
        routes
            .as_array()
            .and_then(|all| all.iter().find(|r| r["peer"] == peer).cloned())
            .unwrap_or(Value::Null)
    }
}

/// A record as [`Gateway::records`] reads it: key, revision, value (`None`: a tombstone).
pub type Record = (String, u64, Option<Vec<u8>>);

/// The tests' views of a gateway's database, opened read-only beside the running gateway (WAL
/// lets it be read meanwhile).
impl Gateway {
    /// This gateway's database, opened read-only.
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

    /// A request id's bytes, as the journal keys its rows.
    fn journal_key(request_id: &str) -> [u8; 16] {
        uuid::Uuid::try_parse(request_id)
            .map(|id| *id.as_bytes())
            .unwrap_or_else(|err| panic!("{request_id:?} is not a request id: {err}"))
    }

    /// The owner's journal row for `request_id` from any caller: `(state, reason)`.
    pub fn journal_row(&self, request_id: &str) -> Option<(String, Option<String>)> {
        self.db()
            .query_row(
                "SELECT state, reason FROM journal WHERE request_id = ?1",
                [&Self::journal_key(request_id)[..]],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .ok()
    }

    /// The vault the owner's journal row for `request_id` is filed under (`""`: none).
    pub fn journal_vault(&self, request_id: &str) -> Option<String> {
        self.db()
            .query_row(
                "SELECT vault FROM journal WHERE request_id = ?1",
                [&Self::journal_key(request_id)[..]],
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
    pub fn records(&self, vault: &str) -> Vec<Record> {
        let conn = self.db();
        let read = || -> rusqlite::Result<Vec<Record>> {
            let mut stmt = conn.prepare(
                "SELECT key, revision, value FROM records WHERE vault = ?1 ORDER BY key",
            )?;
            let rows = stmt.query_map([vault], |row| {
                Ok((row.get(0)?, row.get::<_, i64>(1)? as u64, row.get(2)?))
            })?;
            rows.collect()
        };
        read().unwrap_or_else(|err| panic!("the records of {vault} on {}: {err}", self.label))
    }

    /// The revision `vault` has in this gateway's database (0 if it has none).
    pub fn vault_revision(&self, vault: &str) -> u64 {
        crate::vault_revision(&self.db(), vault)
    }
}

/// Two gateways on loopback that trust each other, with vault `notes` owned by `a`.
pub fn two_with_notes() -> (Gateway, Gateway) {
    pair_with_notes(Gateway::start("a"), Gateway::start("b"))
}

/// `a` and `b` (both already started, e.g. with fault points or a config), trusting each
/// other, with vault `notes` owned by `a`.
pub fn pair_with_notes(a: Gateway, b: Gateway) -> (Gateway, Gateway) {
    a.trust_each_other(&b);
    if let Err(err) = a.cli_stdout(&["vault", "create", "notes"]) {
        panic!("{err}");
    }
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
    if let Err(err) = c.cli_stdout(&["vault", "follow", "notes", "--owner", "a"]) {
        panic!("{err}");
    }
    c
}

/// Runs `ferry serve` of the build at `bin` on `home`, on loopback ports of its own, which
/// must refuse to start: waits at most [`START_BOUND`] for it to exit and returns its exit
/// code and what it printed. A process that starts serving instead (it writes `api.addr` anew)
/// or hangs is killed and the test fails, naming `home_is` ("a home in use", say).
pub fn serve_refused(bin: &Path, home: &Path, home_is: &str) -> (Option<i32>, String) {
    let api_addr = home.join("api.addr");
    let api_addr_before = std::fs::read_to_string(&api_addr).ok();
    let out_dir = tempfile::tempdir().unwrap_or_else(|err| panic!("a temporary dir: {err}"));
    let out_path = out_dir.path().join("serve.out");
    let out = std::fs::File::create(&out_path)
        .and_then(|out| Ok((out.try_clone()?, out)))
        .unwrap_or_else(|err| panic!("{}: {err}", out_path.display()));
    let mut child = Command::new(bin)
        .arg("--home")
        .arg(home)
        .arg("serve")
        .args(["--api", "127.0.0.1:0", "--listen", "127.0.0.1:0"])
        .args(["--no-mdns", "--label", "refused"])
        .env("RUST_LOG", "info")
        .env_remove("FERRY_DANGEROUS_FAULT")
        .env_remove("FERRY_HOME")
        .stdin(Stdio::null())
        .stdout(out.0)
        .stderr(out.1)
        .spawn()
        .unwrap_or_else(|err| panic!("run {} serve: {err}", bin.display()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().ok().flatten() {
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
