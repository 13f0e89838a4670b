//! Real `ferry serve` processes for the benchmark, set up the way the multi-process tests do
//! it (`tests/tests/harness/mod.rs`): each gateway in its own temporary home, the API and QUIC
//! on loopback ports the kernel picks, no mDNS, the two trusting each other, a vault on the
//! owner.
//!
//! A [`Gateway`] kills its process when it drops, so a panic or an early return leaves nothing
//! running; [`Gateway::stop`] asks for the ordered stop first. Every wait is bounded.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::cpu::Sides;
use crate::load::{request_once, LoadError, Target};

/// How long a gateway may take to start listening, and a CLI command to finish.
const START_BOUND: Duration = Duration::from_secs(15);
const CLI_BOUND: Duration = Duration::from_secs(30);
const STOP_BOUND: Duration = Duration::from_secs(15);
/// A release build from scratch on two shared cores takes minutes.
const BUILD_BOUND: Duration = Duration::from_secs(30 * 60);
const POLL: Duration = Duration::from_millis(10);

/// Why the gateways could not be set up or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("cannot run {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    #[error("{what} did not finish within {bound:?}; it was killed")]
    TimedOut { what: String, bound: Duration },
    #[error("{what} failed ({status}): {stderr}")]
    Failed {
        what: String,
        status: ExitStatus,
        stderr: String,
    },
    #[error("gateway {label} exited while starting ({status}); its log:\n{log}")]
    Exited {
        label: String,
        status: ExitStatus,
        log: String,
    },
    #[error("gateway {label}: {detail}")]
    Setup { label: String, detail: String },
    #[error("cannot make a temporary home: {0}")]
    Home(std::io::Error),
    #[error(transparent)]
    Http(#[from] LoadError),
}

/// The workspace this benchmark was built in: two levels above this crate, which lives at
/// `tests/bench`.
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .unwrap_or(manifest)
        .to_path_buf()
}

/// Where `cargo build --release -p ferry-gateway` puts the binary.
pub fn default_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("release").join("ferry")
}

/// The `ferry` binary to run: `given`, or the workspace's release build, built first when
/// `build` is set (before anything is timed). Returns its path and, when Ferry cannot run, why:
/// the caller still measures the bare systems and reports the reason.
pub fn prepare_binary(given: Option<PathBuf>, build: bool) -> (PathBuf, Result<(), String>) {
    let binary = given.unwrap_or_else(default_binary);
    let built = if build {
        crate::progress("building the release ferry binary");
        build_release().map_err(|err| format!("the build failed: {err}"))
    } else {
        Ok(())
    };
    let ready = built.and_then(|()| {
        if binary.is_file() {
            Ok(())
        } else {
            Err(format!(
                "no ferry binary at {}; build it with `cargo build --release -p ferry-gateway` or \
                 pass --ferry-bin",
                binary.display()
            ))
        }
    });
    (binary, ready)
}

/// Builds the release `ferry` binary, so the benchmark measures the code in the work tree.
pub fn build_release() -> Result<(), ProcError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let what = "cargo build --release -p ferry-gateway --bin ferry".to_string();
    let child = Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "build",
            "--release",
            "-p",
            "ferry-gateway",
            "--bin",
            "ferry",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| ProcError::Spawn {
            what: what.clone(),
            source,
        })?;
    let (status, _) = wait_bounded(child, &what, BUILD_BOUND)?;
    if !status.success() {
        return Err(ProcError::Failed {
            what,
            status,
            stderr: "see the compiler's output above".into(),
        });
    }
    Ok(())
}

/// Waits for `child` at most `bound`, killing it after; returns its status and its stderr if
/// it was piped.
fn wait_bounded(
    mut child: Child,
    what: &str,
    bound: Duration,
) -> Result<(ExitStatus, String), ProcError> {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                return Ok((status, stderr));
            }
            Ok(None) if started.elapsed() < bound => std::thread::sleep(POLL),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProcError::TimedOut {
                    what: what.to_string(),
                    bound,
                });
            }
        }
    }
}

/// Whether a gateway advertises and browses on mDNS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discovery {
    /// `--no-mdns`: the benchmarks' default, so gateways on one machine find each other only
    /// by the routes they are given.
    Off,
    /// The shipped default.
    On,
}

/// One running `ferry serve`.
#[derive(Debug)]
pub struct Gateway {
    pub label: String,
    pub api: SocketAddr,
    pub token: String,
    pub node_id: String,
    pub quic: String,
    binary: PathBuf,
    discovery: Discovery,
    child: Option<Child>,
    /// Declared last: removed only after the process is gone.
    home: tempfile::TempDir,
}

impl Gateway {
    /// Starts `ferry serve` labelled `label` in a fresh temporary home and waits (bounded) for
    /// its API, then reads its node id and QUIC address from `/v1/status`.
    pub fn start(binary: &Path, label: &str) -> Result<Self, ProcError> {
        Self::start_with_config(binary, label, None)
    }

    /// [`Gateway::start`] with `config` as the home's `config.toml` (read once, at start).
    pub fn start_with_config(
        binary: &Path,
        label: &str,
        config: Option<&str>,
    ) -> Result<Self, ProcError> {
        Self::start_with(binary, label, config, Discovery::Off)
    }

    /// [`Gateway::start_with_config`], with mDNS on or off.
    pub fn start_with(
        binary: &Path,
        label: &str,
        config: Option<&str>,
        discovery: Discovery,
    ) -> Result<Self, ProcError> {
        let home = tempfile::Builder::new()
            .prefix(&format!("ferry-bench-{label}-"))
            .tempdir()
            .map_err(ProcError::Home)?;
        if let Some(config) = config {
            std::fs::write(home.path().join("config.toml"), config).map_err(ProcError::Home)?;
        }
        let mut gateway = Self {
            label: label.to_string(),
            api: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: String::new(),
            node_id: String::new(),
            quic: String::new(),
            binary: binary.to_path_buf(),
            discovery,
            child: None,
            home,
        };
        gateway.child = Some(gateway.spawn("127.0.0.1:0")?);
        gateway.api = gateway.wait_for_api()?;
        gateway.token = std::fs::read_to_string(gateway.home.path().join("local-token"))
            .map_err(|err| gateway.setup(format!("cannot read local-token: {err}")))?
            .trim()
            .to_string();
        let json = gateway.status()?;
        let text = |field: &serde_json::Value| field.as_str().map(str::to_string);
        gateway.node_id = text(&json["node_id"])
            .ok_or_else(|| gateway.setup(format!("/v1/status has no node_id: {json}")))?;
        gateway.quic = text(&json["addresses"][0])
            .ok_or_else(|| gateway.setup(format!("/v1/status has no address: {json}")))?;
        Ok(gateway)
    }

    /// `ferry serve` in this gateway's home, QUIC on `listen`, its log appended to
    /// `serve.log`.
    fn spawn(&self, listen: &str) -> Result<Child, ProcError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.home.path().join("serve.log"))
            .map_err(ProcError::Home)?;
        let mut command = Command::new(&self.binary);
        command
            .arg("--home")
            .arg(self.home.path())
            .args(["serve", "--api", "127.0.0.1:0", "--listen", listen])
            .args(["--label", &self.label]);
        if self.discovery == Discovery::Off {
            command.arg("--no-mdns");
        }
        command
            // Measure the shipped defaults, whatever the caller's environment says.
            .env_remove("RUST_LOG")
            .env_remove("FERRY_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|source| ProcError::Spawn {
                what: format!("{} serve", self.binary.display()),
                source,
            })
    }

    /// `GET /v1/status`, as JSON.
    pub fn status(&self) -> Result<serde_json::Value, ProcError> {
        let (status, body) = request_once(self.api, "GET", "/v1/status", &self.token, None)?;
        serde_json::from_slice(&body)
            .map_err(|err| self.setup(format!("/v1/status ({status}) is not JSON: {err}")))
    }

    /// One series of `/metrics` (a name with its labels, as printed), as a number.
    pub fn metric(&self, series: &str) -> Result<Option<f64>, ProcError> {
        let (status, body) = request_once(self.api, "GET", "/metrics", &self.token, None)?;
        if status != 200 {
            return Err(self.setup(format!("/metrics answered {status}")));
        }
        Ok(String::from_utf8_lossy(&body).lines().find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        }))
    }

    /// Starts a stopped gateway again in the same home, on the same QUIC address (so peers'
    /// routes to it hold), and returns how long it took from the spawn to answering
    /// `/v1/status`.
    pub fn restart(&mut self) -> Result<Duration, ProcError> {
        if self.child.is_some() {
            return Err(self.setup("restarted while still running".into()));
        }
        // An ordered stop removes it; a killed gateway leaves the old one behind.
        let _ = std::fs::remove_file(self.home.path().join("api.addr"));
        let started = Instant::now();
        self.child = Some(self.spawn(&self.quic.clone())?);
        self.api = self.wait_for_api()?;
        self.status()?;
        Ok(started.elapsed())
    }

    fn setup(&self, detail: String) -> ProcError {
        ProcError::Setup {
            label: self.label.clone(),
            detail,
        }
    }

    fn wait_for_api(&mut self) -> Result<SocketAddr, ProcError> {
        let path = self.home.path().join("api.addr");
        let started = Instant::now();
        loop {
            // A whole line means the gateway finished writing it.
            if let Ok(text) = std::fs::read_to_string(&path) {
                if text.ends_with('\n') {
                    return text
                        .trim()
                        .parse()
                        .map_err(|err| self.setup(format!("api.addr {text:?}: {err}")));
                }
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(ProcError::Exited {
                        label: self.label.clone(),
                        status,
                        log: self.log(),
                    });
                }
            }
            if started.elapsed() >= START_BOUND {
                return Err(self.setup(format!(
                    "no api.addr within {START_BOUND:?}; its log:\n{}",
                    self.log()
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Runs `ferry --home <home> <args>` (bounded) and returns its standard output.
    pub fn cli(&self, args: &[&str]) -> Result<String, ProcError> {
        let what = format!("ferry {}", args.join(" "));
        let mut child = Command::new(&self.binary)
            .arg("--home")
            .arg(self.home.path())
            .args(args)
            .env_remove("FERRY_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| ProcError::Spawn {
                what: what.clone(),
                source,
            })?;
        // CLI output is small enough to wait in the pipe until the command exits.
        let pipe = child.stdout.take();
        let (status, stderr) = wait_bounded(child, &what, CLI_BOUND)?;
        if !status.success() {
            return Err(ProcError::Failed {
                what,
                status,
                stderr,
            });
        }
        let mut stdout = String::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_string(&mut stdout);
        }
        Ok(stdout)
    }

    /// Trusts `other` under its label, with its QUIC address as the route.
    pub fn trust(&self, other: &Gateway) -> Result<(), ProcError> {
        self.cli(&[
            "trust",
            &other.node_id,
            "--label",
            &other.label,
            "--addr",
            &other.quic,
        ])
        .map(drop)
    }

    /// The ordered stop (`ferry stop`), waiting for the process to exit; kills it if the stop
    /// does not finish within the bound.
    pub fn stop(&mut self) -> Result<(), ProcError> {
        let Some(child) = self.child.take() else {
            return Ok(());
        };
        let asked = self.cli(&["stop"]);
        let what = format!("gateway {} stopping", self.label);
        let (status, _) = wait_bounded(child, &what, STOP_BOUND)?;
        asked?;
        if !status.success() {
            return Err(ProcError::Failed {
                what,
                status,
                stderr: self.log(),
            });
        }
        Ok(())
    }

    /// Its state directory (a kit finds its API and token there).
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The gateway's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("serve.log")).unwrap_or_default()
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
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Whether `hub` holds an `up` route to every one of `peers` (`ferry routes`), and if not,
/// how many it does.
pub fn routes_up(hub: &Gateway, peers: &[Gateway]) -> Result<(), String> {
    let text = hub
        .cli(&["--json", "routes"])
        .map_err(|err| err.to_string())?;
    let routes: serde_json::Value = serde_json::from_str(&text)
        .map_err(|err| format!("`ferry routes --json` is not JSON: {err}"))?;
    let up = peers
        .iter()
        .filter(|peer| {
            routes
                .as_array()
                .into_iter()
                .flatten()
                .any(|route| route["peer"] == peer.label.as_str() && route["state"] == "up")
        })
        .count();
    if up == peers.len() {
        Ok(())
    } else {
        Err(format!(
            "{} has an up route to {up} of {} peers",
            hub.label,
            peers.len()
        ))
    }
}

/// How the gateways under test run, for the reports.
pub fn layout(binary: &Path) -> String {
    // The gateways inherit the benchmark's environment, so a thread count set for a run
    // (`FERRY_RUNTIME_THREADS=2 ferry-bench ...`) is the one they use.
    let threads = std::env::var("FERRY_RUNTIME_THREADS")
        .map(|n| format!("{n} (FERRY_RUNTIME_THREADS)"))
        .unwrap_or_else(|_| "1 (the default)".into());
    format!(
        "2 processes, each one tokio runtime of {threads} thread(s) + owner thread; binary {}",
        binary.display()
    )
}

/// Two gateways that trust each other, a vault on `owner`; writes go to `caller`'s API.
#[derive(Debug)]
pub struct Pair {
    pub owner: Gateway,
    pub caller: Gateway,
}

/// The owner's capacity rules in the writes and reads benchmarks: sized not to bind, since
/// they measure what the path costs with one app's 64 writers, which the shipped rules (4 writes
/// of one app at once) would hold back by design; the per-node cap goes with `per_caller` (four
/// times it), and `rate_per_minute = 0` keeps builds from before the rate limit was off by
/// default comparable. `ferry-bench overload` measures the rules themselves.
pub const PATH_OWNER_CONFIG: &str = "[capacity]\nper_caller = 4096\nrate_per_minute = 0\n";

impl Pair {
    pub fn start(binary: &Path, vault: &str) -> Result<Self, ProcError> {
        let owner = Gateway::start_with_config(binary, "a", Some(PATH_OWNER_CONFIG))?;
        let caller = Gateway::start(binary, "b")?;
        owner.trust(&caller)?;
        caller.trust(&owner)?;
        owner.cli(&["vault", "create", vault])?;
        Ok(Self { owner, caller })
    }

    /// What the load generator calls: the caller's local API, as `app`, on `vault`.
    pub fn target(&self, app: &str, vault: &str) -> Target {
        Target {
            api: self.caller.api,
            token: self.caller.token.clone(),
            app: app.into(),
            vault: vault.into(),
        }
    }

    /// Both processes, for CPU accounting (unknown if either has exited).
    pub fn sides(&self) -> Option<Sides> {
        self.caller
            .pid()
            .zip(self.owner.pid())
            .map(|(caller, owner)| Sides::Processes { caller, owner })
    }

    /// Stops both, the caller first; both are stopped (or killed) whatever happens.
    pub fn stop(mut self) -> Result<(), ProcError> {
        let caller = self.caller.stop();
        let owner = self.owner.stop();
        caller.and(owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_root_is_two_levels_up() {
        let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml"))
            .expect("a Cargo.toml at the workspace root");
        assert!(manifest.contains("[workspace]"), "{manifest}");
        assert!(default_binary().ends_with("release/ferry"));
    }
}
