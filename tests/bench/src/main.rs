//! `ferry-bench`: measures Ferry against what the same libraries can do with nothing on top.
//!
//! `cargo run --release -p ferry-bench -- writes` runs, in one process and one run: the SQLite
//! floor, a bare relay (hyper -> one pooled quinn connection -> group-committed SQLite) in each
//! layout, and two real `ferry serve` processes, and prints a markdown report.
//! `cargo run --release -p ferry-bench -- reads` does the same for reads: cache hits on the
//! calling gateway against a hyper server answering from memory, and reads from the owner
//! against a bare relay whose owner answers from memory.
//! `cargo run --release -p ferry-bench -- overload` measures the owner's capacity budget under
//! overload: five `ferry serve` processes, offered loads past the peak, a background flood, a
//! greedy app, a replica catching up.
//! `cargo run --release -p ferry-bench -- liveness` measures what liveness costs: one gateway
//! trusting 100 peers (real `ferry serve` processes on loopback), idle and with some in use,
//! against bare quinn connections kept alive at the same intervals.
//! `cargo run --release -p ferry-bench -- rest` measures two gateways at rest: one following a
//! vault (then twenty) of the other, idle after a burst, against a bare quinn connection.
//! `cargo run --release -p ferry-bench -- scale` measures Ferry as it grows: an idle gateway's
//! memory, a vault of 10 million records beside one of 10,000 (reads, writes, pages, start-up,
//! a replica's sync and catch-up, memory), and one gateway trusting 100 peers.
//! `cargo run --release -p ferry-bench -- slowloris` measures an app's writes while a local
//! process without the token holds 2,000 half-sent requests to its gateway's local API.
//! `--quick` runs a few hundred requests per system, for smoke tests. `--json` prints one JSON
//! object instead of the markdown: the same figures, and every target with its judgement. See
//! `docs/performance.md`.
//!
//! - `writes`, `reads`: orchestration and options; `load`: the load generator and percentiles;
//!   `overload`: the overload benchmark, with its own traffic, gateways and report;
//!   `scale`: the scale benchmark, with its report; `memory`: resident memory from `/proc`;
//!   `liveness`: the cost of heartbeats to many peers, with its floor and report; `rest`: a
//!   pair at rest;
//!   `slowloris`: an app beside a stranger holding the local API's connections, with its report;
//!   `bare_relay`: the yardsticks; `ferry_procs`: the binary to measure and the gateways (`ferry_harness`, as the tests start them); `sqlite`: durable SQLite and the
//!   floor; `cpu`: CPU per side from `/proc`; `report`, `reads_report`: the tables, with `figures`
//!   formatting them for people; `targets`: the targets, judged once for both outputs; `json`:
//!   the reports as JSON.

// A benchmark measures real time by design, so `clippy.toml`'s ban on reading a clock outside
// the clock modules is lifted here.
#![allow(clippy::disallowed_methods)]

mod bare_relay;
mod cpu;
mod cpu_quota;
mod ferry_procs;
mod figures;
#[cfg(test)]
mod fixtures;
mod json;
mod liveness;
mod load;
mod memory;
mod overload;
mod placement;
mod propagation;
mod reads;
mod reads_report;
mod report;
mod rest;
mod scale;
mod slowloris;
mod sqlite;
mod targets;
mod udp_drops;
mod writes;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use bare_relay::Layout;

#[derive(Debug, Parser)]
#[command(
    name = "ferry-bench",
    about = "Benchmarks of Ferry against a bare relay"
)]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

/// `ferry-bench overload --shape`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ShapeChoice {
    Quota,
    Shared,
    Both,
}

impl ShapeChoice {
    fn shapes(self) -> &'static [overload::Shape] {
        match self {
            Self::Quota => &[overload::Shape::Quota],
            Self::Shared => &[overload::Shape::Shared],
            Self::Both => &[overload::Shape::Quota, overload::Shape::Shared],
        }
    }
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Durable writes through Ferry (b -> QUIC -> a) against a bare relay and the SQLite floor.
    Writes {
        #[command(flatten)]
        flags: Flags,
    },
    /// Reads on b of a vault a owns: cache hits against a hyper server answering from memory,
    /// reads from the owner (b -> QUIC -> a) against a bare relay.
    Reads {
        #[command(flatten)]
        flags: Flags,
    },
    /// The owner's capacity budget under overload: offered load past the peak with the rules
    /// on and off, a background flood, a greedy app beside polite ones, a replica catching up.
    /// (`--layouts` is ignored.)
    Overload {
        #[command(flatten)]
        flags: Flags,
        /// `X-Ferry-Timeout` of interactive writes and of the offered load, in seconds
        /// (background writes: 30).
        #[arg(long, value_name = "SECONDS", default_value_t = 2.0,
              value_parser = overload::parse_timeout)]
        write_timeout: f64,
        /// The most writes of the offered load out at once; arrivals past it are skipped and
        /// counted. The default is what callers with cores of their own keep out: the owner's
        /// cap per app (4) times the offered load's 64 apps.
        #[arg(long, value_name = "N", default_value_t = overload::MAX_OUTSTANDING as u32,
              value_parser = clap::value_parser!(u32).range(1..=65_536))]
        max_outstanding: u32,
        /// Also write the markdown report to this file (with `--json`: both from one run).
        #[arg(long, value_name = "FILE")]
        markdown: Option<PathBuf>,
        /// The quota shape holds each owner to this many cores (a cgroup CPU quota; needs root).
        #[arg(long, value_name = "CORES", default_value_t = overload::OWNER_CORES,
              value_parser = overload::parse_cores)]
        owner_cores: f64,
        /// Which shapes to run: `quota` (the owners under a CPU quota; judged on every
        /// target), `shared` (everything sharing the cores; judged on the promise), or both.
        #[arg(long, value_enum, default_value_t = ShapeChoice::Both)]
        shape: ShapeChoice,
    },
    /// What liveness costs: a gateway trusting many peers (100; `--quick`: 10), all idle, then
    /// some in use, against bare quinn keep-alives at the same intervals. (`--layouts` is
    /// ignored.)
    Liveness {
        #[command(flatten)]
        flags: Flags,
    },
    /// What two gateways cost at rest: one following one vault (then twenty) of the other,
    /// idle 60 s (`--quick`: 10 s) after a burst of writes, an app's change feed open, against
    /// one bare quinn connection kept alive every 15 s. (`--layouts` is ignored.)
    Rest {
        #[command(flatten)]
        flags: Flags,
    },
    /// Ferry as it grows: an idle gateway's memory; a vault of 10 million records (`--quick`:
    /// 200,000) beside one of 10,000 (reads, writes, pages of keys, start-up, a fresh replica's
    /// sync and catch-up, memory); one gateway trusting 100 peers (`--quick`: 10). Needs about
    /// 6 GB of disk in the temporary directory. (`--layouts` is ignored.)
    Scale {
        #[command(flatten)]
        flags: Flags,
        /// Also write the markdown report to this file (with `--json`: both from one run).
        #[arg(long, value_name = "FILE")]
        markdown: Option<PathBuf>,
    },
    /// How fast a change reaches the replicas: an owner and 1 or 20 followers on loopback, an
    /// app long-polling each follower's change feed, and a frozen follower. (`--layouts` is
    /// ignored.)
    Propagation {
        #[command(flatten)]
        flags: Flags,
    },
    /// An app's writes while a local process without the token holds 2,000 half-sent requests
    /// to the gateway's local API: under the default connection bound, and over a bound of 500
    /// (the stranger reopening every connection closed). (`--layouts` is ignored.)
    Slowloris {
        #[command(flatten)]
        flags: Flags,
    },
}

// The flags every benchmark takes. (A plain comment: a doc comment would become the
// subcommands' help text.)
#[derive(Debug, Args)]
struct Flags {
    /// A short run (a few hundred requests per system) for smoke tests.
    #[arg(long)]
    quick: bool,
    /// Bare layouts to run; the first is the one the targets compare against.
    #[arg(long, value_delimiter = ',', default_value = "split,per-process")]
    layouts: Vec<Layout>,
    /// The ferry binary to run (default: the workspace's target/release/ferry).
    #[arg(long)]
    ferry_bin: Option<PathBuf>,
    /// Do not run `cargo build --release -p ferry-gateway` first.
    #[arg(long)]
    no_build: bool,
    /// Print one JSON object (the figures, and each target with `name`, `value`, `target`,
    /// `met`) instead of the markdown report. Progress stays on standard error.
    #[arg(long)]
    json: bool,
}

impl Flags {
    /// The options of a run, with the `quick` or the `full` plan.
    fn options<P>(self, quick: fn() -> P, full: fn() -> P) -> Options<P> {
        Options {
            plan: if self.quick { quick() } else { full() },
            layouts: self.layouts,
            build: !self.no_build && self.ferry_bin.is_none(),
            ferry_binary: self.ferry_bin,
        }
    }
}

/// What a benchmark compares, with its plan (how much to run).
#[derive(Debug, Clone)]
pub struct Options<P> {
    pub plan: P,
    /// Bare layouts; the first is the one the targets compare against.
    pub layouts: Vec<Layout>,
    /// The `ferry` binary; the workspace's release build if not given.
    pub ferry_binary: Option<PathBuf>,
    /// Run `cargo build --release -p ferry-gateway` first.
    pub build: bool,
}

/// A line of progress on standard error (the report goes to standard output).
pub fn progress(what: &str) {
    eprintln!("ferry-bench: {what}");
}

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Figures are printed either way; a run where Ferry failed requests is not a clean one.
    let clean = match Cli::parse().command {
        Bench::Writes { flags } => {
            let as_json = flags.json;
            let report = writes::run(&flags.options(writes::Plan::quick, writes::Plan::full))?;
            if as_json {
                println!("{}", json::writes(&report)?);
            } else {
                print!("{}", report.render());
            }
            report.ferry_clean()
        }
        Bench::Reads { flags } => {
            let as_json = flags.json;
            let report = reads::run(&flags.options(reads::Plan::quick, reads::Plan::full))?;
            if as_json {
                println!("{}", json::reads(&report)?);
            } else {
                print!("{}", report.render());
            }
            report.ferry_clean()
        }
        Bench::Overload {
            flags,
            write_timeout,
            max_outstanding,
            markdown,
            owner_cores,
            shape,
        } => {
            let as_json = flags.json;
            let mut options = flags.options(overload::Plan::quick, overload::Plan::full);
            options.plan.timeout = std::time::Duration::from_secs_f64(write_timeout);
            options.plan.max_outstanding = max_outstanding as usize;
            options.plan.owner_cores = owner_cores;
            options.plan.shapes = shape.shapes();
            let report = overload::run(&options)?;
            if let Some(path) = markdown {
                std::fs::write(&path, report.render())?;
            }
            if as_json {
                println!("{}", json::overload(&report)?);
            } else {
                print!("{}", report.render());
            }
            report.clean
        }
        Bench::Liveness { flags } => {
            let as_json = flags.json;
            let report =
                liveness::run(&flags.options(liveness::Plan::quick, liveness::Plan::full))?;
            if as_json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.render());
            }
            report.clean()
        }
        Bench::Rest { flags } => {
            let as_json = flags.json;
            let report = rest::run(&flags.options(rest::Plan::quick, rest::Plan::full));
            if as_json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.render());
            }
            report.clean()
        }
        Bench::Scale { flags, markdown } => {
            let as_json = flags.json;
            let report = scale::run(&flags.options(scale::Plan::quick, scale::Plan::full))?;
            if let Some(path) = markdown {
                std::fs::write(&path, report.render())?;
            }
            if as_json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.render());
            }
            report.clean()
        }
        Bench::Propagation { flags } => {
            let as_json = flags.json;
            let report = propagation::run(
                &flags.options(propagation::Plan::quick, propagation::Plan::full),
            )?;
            if as_json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.render());
            }
            report.clean()
        }
        Bench::Slowloris { flags } => {
            let as_json = flags.json;
            let report =
                slowloris::run(&flags.options(slowloris::Plan::quick, slowloris::Plan::full))?;
            if as_json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.render());
            }
            report.clean()
        }
    };
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
