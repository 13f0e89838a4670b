//! `ferry-bench`: measures Ferry against what the same libraries can do with nothing on top.
//!
//! `cargo run --release -p ferry-bench -- writes` runs, in one process and one run: the SQLite
//! floor, a bare relay (hyper -> one pooled quinn connection -> group-committed SQLite) in each
//! layout, and two real `ferry serve` processes, and prints a markdown report.
//! `--quick` runs a few hundred writes per system, for smoke tests. See `docs/performance.md`.
//!
//! - `writes`: orchestration and options; `load`: the load generator and percentiles;
//!   `bare_relay`: the yardstick; `ferry_procs`: the gateways; `sqlite`: durable SQLite and the
//!   floor; `cpu`: CPU per side from `/proc`; `report`: the tables.

mod bare_relay;
mod cpu;
mod ferry_procs;
mod load;
mod report;
mod sqlite;
mod writes;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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

#[derive(Debug, Subcommand)]
enum Bench {
    /// Durable writes through Ferry (b -> QUIC -> a) against a bare relay and the SQLite floor.
    Writes {
        /// A short run (a few hundred writes per system) for smoke tests.
        #[arg(long)]
        quick: bool,
        /// Bare relay layouts to run; the first is the one the targets compare against.
        #[arg(long, value_delimiter = ',', default_value = "split,per-process")]
        layouts: Vec<Layout>,
        /// The ferry binary to run (default: the workspace's target/release/ferry).
        #[arg(long)]
        ferry_bin: Option<PathBuf>,
        /// Do not run `cargo build --release -p ferry-gateway` first.
        #[arg(long)]
        no_build: bool,
    },
}

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let Bench::Writes {
        quick,
        layouts,
        ferry_bin,
        no_build,
    } = Cli::parse().command;
    let options = writes::Options {
        plan: if quick {
            writes::Plan::quick()
        } else {
            writes::Plan::full()
        },
        layouts,
        build: !no_build && ferry_bin.is_none(),
        ferry_binary: ferry_bin,
    };
    let report = writes::run(&options)?;
    print!("{}", report.render());
    // Figures are printed either way; a run where Ferry failed writes is not a clean one.
    Ok(if report.ferry_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
