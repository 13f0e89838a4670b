//! `ferry-bench`: measures Ferry against what the same libraries can do with nothing on top.
//!
//! `cargo run --release -p ferry-bench -- writes` runs, in one process and one run: the SQLite
//! floor, a bare relay (hyper -> one pooled quinn connection -> group-committed SQLite) in each
//! layout, and two real `ferry serve` processes, and prints a markdown report.
//! `cargo run --release -p ferry-bench -- reads` does the same for reads: cache hits on the
//! calling gateway against a hyper server answering from memory, and reads from the owner
//! against a bare relay whose owner answers from memory.
//! `--quick` runs a few hundred requests per system, for smoke tests. See `docs/performance.md`.
//!
//! - `writes`, `reads`: orchestration and options; `load`: the load generator and percentiles;
//!   `bare_relay`: the yardsticks; `ferry_procs`: the gateways; `sqlite`: durable SQLite and the
//!   floor; `cpu`: CPU per side from `/proc`; `report`, `reads_report`: the tables.

mod bare_relay;
mod cpu;
mod ferry_procs;
mod load;
mod reads;
mod reads_report;
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
    /// Reads on b of a vault a owns: cache hits against a hyper server answering from memory,
    /// reads from the owner (b -> QUIC -> a) against a bare relay.
    Reads {
        /// A short run (a few hundred reads per system) for smoke tests.
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
    },
}

/// A line of progress on standard error (the report goes to standard output).
pub fn progress(what: &str) {
    eprintln!("ferry-bench: {what}");
}

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Figures are printed either way; a run where Ferry failed requests is not a clean one.
    let clean = match Cli::parse().command {
        Bench::Writes {
            quick,
            layouts,
            ferry_bin,
            no_build,
        } => {
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
            report.ferry_clean()
        }
        Bench::Reads {
            quick,
            layouts,
            ferry_bin,
            no_build,
        } => {
            let options = reads::Options {
                plan: if quick {
                    reads::Plan::quick()
                } else {
                    reads::Plan::full()
                },
                layouts,
                build: !no_build && ferry_bin.is_none(),
                ferry_binary: ferry_bin,
            };
            let report = reads::run(&options)?;
            print!("{}", report.render());
            report.ferry_clean()
        }
    };
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
