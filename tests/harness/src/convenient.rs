//! The tests' conveniences over [`Gateway`]'s core: each panics, saying what failed, where the
//! core method returns an error.

use std::path::Path;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::gateway::{owned_env, Gateway, Options};
use crate::{describe, Place};

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
            Place::Loopback | Place::Wine(_) => {
                panic!("{} runs on loopback, not in a lab host", self.label)
            }
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
