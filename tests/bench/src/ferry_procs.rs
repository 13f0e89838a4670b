//! The gateways the benchmarks run: `ferry_harness`'s [`Gateway`] (the tests' and the lab's
//! too), started on loopback with the shipped logging and no mDNS unless asked, of the binary
//! the benchmark is given ([`prepare_binary`]; by default the workspace's release `ferry`,
//! never the test build with its fault points). Here: finding and building that binary, the
//! owner-and-caller [`Pair`], and what the reports say of the layout.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub use ferry_harness::{Gateway, GatewayError, Log, Options, Place};

use crate::cpu::Sides;
use crate::load::Target;

/// A release build from scratch on two shared cores takes minutes.
const BUILD_BOUND: Duration = Duration::from_secs(30 * 60);

/// How the benchmarks start a gateway of `binary`: the shipped defaults (its log level
/// included, whatever the caller's environment says), no mDNS unless a benchmark asks.
pub fn options(binary: &Path) -> Options {
    Options::new().binary(binary).log(Log::Shipped).mdns(false)
}

/// Starts `ferry serve` of `binary` labelled `label` on loopback (see [`options`]), with
/// `config` as its `config.toml`.
pub fn start(binary: &Path, label: &str, config: Option<&str>) -> Result<Gateway, GatewayError> {
    let mut with = options(binary);
    with.config_toml = config.map(str::to_string);
    Gateway::launch(Place::Loopback, label, with)
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
pub fn build_release() -> Result<(), GatewayError> {
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
        .map_err(|source| GatewayError::Spawn {
            what: what.clone(),
            source,
        })?;
    let status = ferry_harness::process::wait_bounded(child, &what, BUILD_BOUND)?.status;
    if !status.success() {
        return Err(GatewayError::Failed {
            what,
            status,
            stderr: "see the compiler's output above".into(),
        });
    }
    Ok(())
}

/// Whether `hub` holds an `up` route to every one of `peers` (`ferry routes`), and if not,
/// how many it does.
pub fn routes_up(hub: &Gateway, peers: &[Gateway]) -> Result<(), String> {
    let text = hub
        .cli_stdout(&["--json", "routes"])
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
    pub fn start(binary: &Path, vault: &str) -> Result<Self, GatewayError> {
        let owner = start(binary, "a", Some(PATH_OWNER_CONFIG))?;
        let caller = start(binary, "b", None)?;
        owner.try_trust_each_other(&caller)?;
        owner.cli_stdout(&["vault", "create", vault])?;
        Ok(Self { owner, caller })
    }

    /// What the load generator calls: the caller's local API, as `app`, on `vault`.
    pub fn target(&self, app: &str, vault: &str) -> Target {
        Target {
            api: self.caller.api_addr(),
            token: self.caller.token.clone(),
            app: app.into(),
            vault: vault.into(),
        }
    }

    /// Both processes, for CPU accounting (unknown if either has exited).
    pub fn sides(&self) -> Option<Sides> {
        self.caller
            .process_id()
            .zip(self.owner.process_id())
            .map(|(caller, owner)| Sides::Processes { caller, owner })
    }

    /// Stops both, the caller first; both are stopped (or killed) whatever happens.
    pub fn stop(mut self) -> Result<(), GatewayError> {
        let caller = self.caller.stop_cleanly();
        let owner = self.owner.stop_cleanly();
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
